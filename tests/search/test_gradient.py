"""The gradient strategy: budget coordinates (box and simplex parts), the projected descent
direction, chains that descend, and the paper's LSTM budget study (feasible designs)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from deepflow.search.base import SearchConfig, run_search
from deepflow.search.problem import OracleProblem
from deepflow.search.space import Budgets
from deepflow.search.study import SearchSettings, load_study

from .toy import OBJECTIVES, ToyProblem, true_hypervolume


@pytest.fixture(scope="module")
def default_space() -> OracleProblem:
    return OracleProblem(load_study("default").space)


def test_budget_coordinates_are_the_continuous_values_and_the_simplex_parts(
    default_space: OracleProblem,
) -> None:
    ss = default_space.search_space
    budgets = Budgets(ss)
    # die area and TDP, then 8 area, 8 power and 4 perimeter parts
    assert [(kind, len(lo)) for kind, _, lo, _ in budgets.blocks] == [
        ("box", 1), ("box", 1), ("simplex", 8), ("simplex", 8), ("simplex", 4)]  # fmt: skip
    assert budgets.width == 22
    z = ss.from_unit(np.random.default_rng(0).random((50, ss.num_dims)))
    theta = budgets.theta(z)
    rows = default_space.inputs(ss.to_unit(z))
    np.testing.assert_allclose(theta[:, 2:10], rows.filter(like="x_area_split_").to_numpy())
    np.testing.assert_allclose(theta[:, 2:10].sum(axis=1), 1.0)
    back = budgets.to_z(theta, z)
    np.testing.assert_allclose(budgets.theta(back), theta, atol=1e-12)
    discrete = [j for j in range(ss.num_dims) if j not in budgets.columns]
    np.testing.assert_array_equal(back[:, discrete], z[:, discrete])  # the family is kept


def test_the_descent_direction_keeps_the_parts_summing_to_one(
    default_space: OracleProblem,
) -> None:
    budgets = Budgets(default_space.search_space)
    gradient = np.random.default_rng(1).normal(size=budgets.width)
    delta = budgets.descent(gradient)
    for s in (slice(2, 10), slice(10, 18), slice(18, 22)):
        assert abs(delta[s].sum()) < 1e-12
    assert delta @ gradient < 0  # downhill
    assert np.linalg.norm(delta / budgets.scales()) == pytest.approx(1.0)
    assert not budgets.descent(np.zeros(budgets.width)).any()
    dirs = budgets.directions()  # the probe directions sum to each simplex's projector
    np.testing.assert_allclose(dirs[2:10, 2:10].T @ dirs[2:10, 2:10],
                               np.eye(8) - np.full((8, 8), 1 / 8), atol=1e-12)  # fmt: skip


def test_chains_approach_the_toy_front() -> None:
    cfg = SearchConfig("toy", OBJECTIVES, search=SearchSettings(
        strategy="gradient", budget=400, batch_size=10, initial_points=8, seed=0))  # fmt: skip
    result = run_search(ToyProblem(), cfg, storage=None)
    assert result.hypervolume >= 0.85 * true_hypervolume()  # 0.903 measured (seeds 1, 2: 0.98)
    stages = {i.get("gradient", {}).get("stage") for i in result.info}
    assert {"sweep", "probe", "line"} <= stages


def test_it_finds_feasible_designs_on_the_paper_lstm_budget_study() -> None:
    study = load_study("lstm-paper")
    search = dataclasses.replace(study.search, budget=400)
    config = SearchConfig(study.name, study.objectives, study.bounds, search, study.surrogate)
    result = run_search(OracleProblem(study.space), config, storage=None)
    initial = result.feasible[: search.initial_points]
    later = result.feasible[search.initial_points :]
    assert later.mean() > max(initial.mean(), 0.5)  # the descent stays among feasible designs
    front = result.rows[result.pareto]
    assert len(front) >= 1 and front["feasible"].all()
    assert result.hypervolume > result.hypervolume_history[0]["hypervolume"]
