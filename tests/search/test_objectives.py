"""Objective directions, sign flips (round trips), normalisation, Pareto and hypervolume."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deepflow.search.objectives import (
    Bound,
    Objective,
    constraint_matrix,
    from_botorch,
    from_minimization,
    normalise,
    to_botorch,
    to_minimization,
)
from deepflow.search.pareto import greedy_hypervolume_selection, hypervolume, pareto_mask

OBJS = (
    Objective("step_time_s", "minimize", reference=100.0, ideal=10.0, scale="log"),
    Objective("mfu", "maximize", reference=0.2, ideal=0.6),
)

values = st.lists(st.tuples(st.floats(1e-3, 1e3), st.floats(-5, 5)), min_size=1, max_size=20).map(
    np.array
)


@settings(max_examples=50, deadline=None)
@given(values)
def test_sign_flips_round_trip(v: np.ndarray) -> None:
    assert np.allclose(from_botorch(to_botorch(v, OBJS), OBJS), v)
    assert np.allclose(from_minimization(to_minimization(v, OBJS), OBJS), v)
    # BoTorch maximises what Optuna's minimisation form minimises.
    assert np.allclose(to_botorch(v, OBJS), -to_minimization(v, OBJS))


def test_directions_in_each_form() -> None:
    v = np.array([[20.0, 0.5]])
    assert to_minimization(v, OBJS).tolist() == [[20.0, -0.5]]
    assert to_botorch(v, OBJS).tolist() == [[-20.0, 0.5]]


def test_normalise_maps_reference_to_zero_and_ideal_to_one() -> None:
    v = np.array([[100.0, 0.2], [10.0, 0.6], [math.sqrt(1000.0), 0.4], [-1.0, np.nan]])
    n = normalise(v, OBJS)
    assert np.allclose(n[:3], [[0, 0], [1, 1], [0.5, 0.5]])  # log scale: geometric middle
    assert n[3].tolist() == [-np.inf, -np.inf]  # non-positive on a log scale, NaN: invalid


def test_constraint_matrix_user_bounds_are_relative() -> None:
    out = {"c_memory_excess_B": np.array([-1.0, 2.0]), "y_energy_J": np.array([50.0, 200.0])}
    names, m = constraint_matrix(out, ["memory_excess_B"], [Bound("energy_J", max=100.0)])
    assert names == ["memory_excess_B", "energy_J_max"]
    assert m.tolist() == [[-1.0, -0.5], [2.0, 1.0]]


def test_pareto_mask_and_feasibility() -> None:
    pts = np.array([[0.5, 0.5], [0.4, 0.4], [0.9, 0.1], [1.0, 1.0]])
    assert pareto_mask(pts).tolist() == [False, False, False, True]
    feasible = np.array([True, True, True, False])
    assert pareto_mask(pts, feasible).tolist() == [True, False, True, False]


def test_hypervolume_hand_computed() -> None:
    assert hypervolume(np.array([[0.5, 0.5]])) == pytest.approx(0.25)
    # Two boxes overlapping in [0, 0.2] x [0, 0.5]: 0.5*0.5 + 0.2*0.8 - 0.2*0.5
    assert hypervolume(np.array([[0.5, 0.5], [0.2, 0.8]])) == pytest.approx(0.31)
    assert hypervolume(np.array([[-0.1, 0.9]])) == 0.0  # worse than the reference
    cube = hypervolume(np.array([[0.5, 0.5, 0.5]]))
    assert cube == pytest.approx(0.125)


def test_greedy_selection_takes_the_largest_improvement_first() -> None:
    front = np.array([[0.5, 0.5]])
    cand = np.array([[0.4, 0.4], [0.6, 0.6], [0.9, 0.1]])
    picks = greedy_hypervolume_selection(cand, front, 2)
    assert picks[0] == 1  # 0.36 - 0.25 = 0.11 beats 0.9*0.1 - 0.5*0.1 = 0.04
    assert set(picks) == {1, 2}
    assert len(greedy_hypervolume_selection(cand, front, 3)) == 3  # always fills the batch
