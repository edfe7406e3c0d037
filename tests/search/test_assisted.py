"""Surrogate-assisted search: level coordinates, trust-region moves, the radius rule, the
constraint models, and the strategy on the toy problem."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from deepflow.datasets.space import STRUCTURAL
from deepflow.search.assisted import (
    RADIUS_MAX,
    RADIUS_MIN,
    RADIUS_START,
    SurrogateSearcher,
    constraint_targets,
    trust_radius,
)
from deepflow.search.base import SearchConfig, SearchContext, run_search
from deepflow.search.searchers import History, level_sweeps, local_moves
from deepflow.search.space import Dim, SearchSpace
from deepflow.search.study import SearchSettings, SurrogateSettings, load_study

from .toy import OBJECTIVES, ToyProblem, true_hypervolume


@pytest.fixture(scope="module")
def llm_space() -> SearchSpace:
    return SearchSpace(load_study("default").space)


def _mapping(ss: SearchSpace) -> tuple[int, Dim, np.ndarray]:
    j = [d.name for d in ss.dims].index("mapping")
    table = next(iter(ss.space.mapping_tables.values()))
    return j, ss.dims[j], table


def _row(table: np.ndarray, **degrees: int) -> int:
    mask = np.ones(len(table), dtype=bool)
    for name, value in degrees.items():
        mask &= table[:, STRUCTURAL.index(name)] == value
    (idx,) = np.flatnonzero(mask)
    return int(idx)


# ------------------------------------------------------------------ level coordinates
def test_mapping_levels_are_placed_by_their_degrees_in_log2(llm_space: SearchSpace) -> None:
    _, dim, table = _mapping(llm_space)
    coords = np.asarray(dim.coords)
    assert coords.shape == (len(table), 4)  # tensor, pipeline, data parallel, micro-batch
    # data parallel spans 1..512, nine doublings: the widest degree, scaled to [0, 1]
    assert coords.min() == 0 and coords.max() == 1
    a = _row(table, tensor_parallel=2, pipeline_parallel=1, micro_batch_size=1)
    b = _row(table, tensor_parallel=4, pipeline_parallel=1, micro_batch_size=1)
    c = _row(table, tensor_parallel=2, pipeline_parallel=2, micro_batch_size=1)
    assert b - a > 10  # far apart by index ...
    # ... but one doubling and one halving apart by meaning (tp x2, dp /2)
    assert np.linalg.norm(coords[a] - coords[b]) == pytest.approx(np.sqrt(2) / 9)
    assert np.linalg.norm(coords[a] - coords[c]) == pytest.approx(np.sqrt(2) / 9)


def test_integer_levels_carry_their_cube_values_and_categoricals_none(
    llm_space: SearchSpace,
) -> None:
    dims = {d.name: d for d in llm_space.dims}
    stacks = dims["hbm_num_stacks"]
    assert [c[0] for c in stacks.coords] == pytest.approx(stacks.levels_u)
    assert dims["technology"].coords == ()
    assert dims["die_area_mm2"].coords == ()


# ------------------------------------------------------------------ local moves
def _toy_space() -> SearchSpace:
    return ToyProblem().search_space


def test_local_moves_change_at_least_one_dim_and_stay_in_range() -> None:
    ss = _toy_space()
    parents = np.array([[0.5, 0.5, 2.0, 1.0], [0.02, 0.97, 0.0, 2.0]])
    moves = local_moves(parents, ss, np.random.default_rng(0), count=2000, radius=0.3)
    assert moves.shape == (2000, 4)
    assert ((moves[:, :2] > 0) & (moves[:, :2] < 1)).all()  # inside the open cube
    assert set(np.unique(moves[:, 2])) == set(range(5))
    assert set(np.unique(moves[:, 3])) == set(range(3))
    one = local_moves(parents[:1], ss, np.random.default_rng(0), count=2000, radius=0.3)
    assert ((one != parents[0]).sum(axis=1) >= 1).all()  # every move changes something


def test_local_moves_mix_one_dim_and_many_dim_moves() -> None:
    ss = _toy_space()
    parent = np.array([[0.5, 0.5, 2.0, 1.0]])
    moves = local_moves(parent, ss, np.random.default_rng(1), count=4000, radius=0.1)
    changed = (moves != parent).sum(axis=1)
    assert (changed == 1).mean() > 0.1
    assert (changed == 4).mean() > 0.05


def test_local_moves_scale_continuous_steps_with_the_radius() -> None:
    ss = _toy_space()
    parent = np.array([[0.5, 0.5, 2.0, 1.0]])
    for radius in (0.02, 0.1):
        moves = local_moves(parent, ss, np.random.default_rng(2), count=4000, radius=radius)
        step = moves[:, 0] - 0.5
        assert np.std(step[step != 0]) == pytest.approx(radius, rel=0.1)


def test_a_small_radius_moves_ordered_levels_to_neighbours_and_categoricals_anywhere() -> None:
    ss = _toy_space()
    parent = np.array([[0.5, 0.5, 2.0, 1.0]])
    moves = local_moves(parent, ss, np.random.default_rng(3), count=4000, radius=0.01)
    k = moves[:, 2][moves[:, 2] != 2]
    assert set(np.unique(k)) == {1.0, 3.0}  # the integer: next level down or up
    cat = moves[:, 3][moves[:, 3] != 1]
    assert set(np.unique(cat)) == {0.0, 2.0}  # the categorical: any other choice


def test_a_small_radius_moves_the_mapping_one_degree_at_a_time(llm_space: SearchSpace) -> None:
    j, dim, table = _mapping(llm_space)
    coords = np.asarray(dim.coords)
    start = _row(table, tensor_parallel=2, pipeline_parallel=1, micro_batch_size=1)
    parent = llm_space.from_unit(np.full((1, llm_space.num_dims), 0.5))
    parent[0, j] = start
    moves = local_moves(parent, llm_space, np.random.default_rng(4), count=3000, radius=0.01)
    moved = moves[:, j][moves[:, j] != start].astype(int)
    assert moved.size > 50
    dist = np.linalg.norm(coords[moved] - coords[start], axis=1)
    others = np.delete(np.linalg.norm(coords - coords[start], axis=1), start)
    assert np.allclose(dist, others.min())  # only the nearest mappings
    reached = {tuple(table[m, [0, 1, 5]]) for m in moved}
    # one degree doubled, another halved; the micro-batch kept (2 does not divide 1536 / 512)
    assert reached == {(4, 1, 1), (2, 2, 1), (1, 2, 1)}


def test_local_moves_are_seeded_and_empty_without_parents() -> None:
    ss = _toy_space()
    parent = np.array([[0.5, 0.5, 2.0, 1.0]])
    a = local_moves(parent, ss, np.random.default_rng(5), count=50, radius=0.2)
    b = local_moves(parent, ss, np.random.default_rng(5), count=50, radius=0.2)
    assert np.array_equal(a, b)
    empty = local_moves(np.empty((0, 4)), ss, np.random.default_rng(5), count=50, radius=0.2)
    assert empty.shape == (0, 4)


def test_level_sweeps_set_each_discrete_dim_to_each_other_level() -> None:
    ss = _toy_space()
    parents = np.array([[0.3, 0.6, 2.0, 1.0], [0.1, 0.2, 0.0, 0.0]])
    sweeps = level_sweeps(parents, ss)
    assert sweeps.shape == (2 * (4 + 2), 4)  # k: 4 other levels, cat: 2
    first = sweeps[:6]
    assert (first[:, :2] == [0.3, 0.6]).all()  # continuous dims untouched
    assert ((first != parents[0]).sum(axis=1) == 1).all()  # one dim at a time
    assert sorted(first[:4, 2]) == [0, 1, 3, 4] and sorted(first[4:, 3]) == [0, 2]
    assert level_sweeps(np.empty((0, 4)), ss).shape == (0, 4)


# ------------------------------------------------------------------ the radius rule
def test_trust_radius_halves_after_three_failures_and_doubles_after_two_successes() -> None:
    assert trust_radius([1.0]) == RADIUS_START
    assert trust_radius([1.0, 1.0, 1.0]) == RADIUS_START  # two failures: not yet
    assert trust_radius([1.0, 1.0, 1.0, 1.0]) == RADIUS_START / 2
    assert trust_radius([1.0, 1.1, 1.2]) == 2 * RADIUS_START
    assert trust_radius([1.0, 1.1, 1.1, 1.2]) == RADIUS_START  # the run was broken
    assert trust_radius([1.0, 1.0 + 1e-5, 1.0 + 2e-5, 1.0 + 3e-5]) == RADIUS_START / 2  # < rtol


def test_trust_radius_is_capped_and_resets_when_small() -> None:
    rising = list(np.cumsum(np.ones(20)))
    assert trust_radius(rising) == RADIUS_MAX
    halvings = 0
    radius = RADIUS_START
    while radius >= RADIUS_MIN:
        radius /= 2
        halvings += 1
    flat = [1.0] * (3 * halvings + 1)
    assert trust_radius(flat) == RADIUS_START  # went below the minimum: back to the start
    assert trust_radius(flat[:-3]) == RADIUS_START / 2 ** (halvings - 1)


# ------------------------------------------------------------------ constraint models
def test_constraint_targets_model_memory_as_a_log_ratio_and_others_scaled() -> None:
    rows = pd.DataFrame({
        "y_memory_per_device_B": [40e9, 100e9, 60e9],
        "y_memory_capacity_B": [80e9, 80e9, 80e9],
        "c_memory_excess_B": [-40e9, 20e9, -20e9],
        "c_power_excess_W": [-5.0, 3.0, -1.0],
        "c_area_excess_mm2": [-1.0, -2.0, 0.0],  # never violated: left out
    })  # fmt: skip
    names = ["memory_excess_B", "power_excess_W", "area_excess_mm2"]
    out = constraint_targets(rows, names)
    assert list(out) == ["c_memory_excess_B__log_ratio", "c_power_excess_W__scaled"]
    assert out["c_memory_excess_B__log_ratio"] == pytest.approx(np.log([0.5, 1.25, 0.75]))
    for values, column in zip(out.values(), ("c_memory_excess_B", "c_power_excess_W"),
                              strict=True):  # fmt: skip
        assert ((values <= 0) == (rows[column] <= 0)).all()  # the sign is feasibility
    # Without the two memory outputs the memory constraint is scaled like any other.
    plain = constraint_targets(rows.drop(columns=["y_memory_capacity_B"]), names)
    assert "c_memory_excess_B__scaled" in plain


def _toy_config(model: str, budget: int, seed: int = 0) -> SearchConfig:
    return SearchConfig(
        name="toy",
        objectives=OBJECTIVES,
        search=SearchSettings(strategy="surrogate", budget=budget, batch_size=4,
                              initial_points=8, seed=seed),
        surrogate=SurrogateSettings(model=model, inner_budget=0, pool_size=1000),
    )  # fmt: skip


def test_the_searcher_models_violated_constraints_and_classifies_only_the_unexplained() -> None:
    problem = ToyProblem()
    searcher = SurrogateSearcher(SearchContext(problem, _toy_config("gbt", 8)))
    rows = problem.evaluate(np.random.default_rng(0).random((40, 4)))
    assert (rows["c_limit"] > 0).any()
    searcher._training_frame(rows)
    assert searcher.modelled == ["c_limit__scaled"]
    assert not searcher.classify  # every infeasible row violates c_limit
    rows.loc[rows.index[:3], "c_limit"] = -1.0
    rows.loc[rows.index[:3], "feasible"] = False  # infeasible for a reason no column gives
    searcher._training_frame(rows)
    assert searcher.classify
    assert "infeasible_probability" in searcher.surrogate_problem().constraint_names


class _UnsureModel:
    """Predicts every design at f1 = f2 = 1.2, but choice 'a' at 1.4 with a wide interval."""

    targets = ("y_f1", "y_f2")

    def predict(self, x: pd.DataFrame, level: float = 0.95) -> pd.DataFrame:
        unsure = (x["x_cat"] == "a").to_numpy()
        mean = np.where(unsure, 1.4, 1.2)
        out = {}
        for t in self.targets:
            out[t], out[f"{t}_std"] = mean, np.where(unsure, 0.5, 0.01)
            out[f"{t}_lo"], out[f"{t}_hi"] = np.where(unsure, 0.1, 1.19), mean + 0.01
        return pd.DataFrame(out, index=x.index)


def test_a_quarter_of_the_batch_goes_to_optimistic_predictions() -> None:
    problem = ToyProblem()
    config = _toy_config("gbt", 8)
    config = type(config)(
        name="toy", objectives=OBJECTIVES, search=config.search,
        surrogate=SurrogateSettings(model="gbt", inner_budget=0, pool_size=400, refit=False),
    )  # fmt: skip
    searcher = SurrogateSearcher(SearchContext(problem, config, model=_UnsureModel()))
    ss = problem.search_space
    z = ss.from_unit(np.random.default_rng(0).random((4, 4)))
    rows = problem.evaluate(ss.to_unit(z))
    values = rows[["y_f1", "y_f2"]].to_numpy()
    normalised = (1.5 - values) / 1.5
    history = History(z, normalised, rows[["c_limit"]].to_numpy(), ["limit"],
                      rows["c_limit"].to_numpy() <= 0)  # fmt: skip
    picks, info = searcher.propose(4, history, OBJECTIVES, rows)
    cats = picks[:, 3].astype(int).tolist()
    assert 0 not in cats[:3]  # by the medians, 'a' (index 0) is worse everywhere
    assert cats[3] == 0  # but its optimistic end could beat them all
    assert info[3]["surrogate"]["f1"]["mean"] == pytest.approx(1.4)


def test_the_surrogate_strategy_with_a_gp_nears_the_toy_front() -> None:
    result = run_search(ToyProblem(), _toy_config("gp", 32), storage=None)
    assert result.hypervolume >= 0.8 * true_hypervolume()
    front = result.rows[result.rows["pareto"]]
    assert (front["c_limit"] <= 0).all()


# ------------------------------------------------------------------ prescreen
def _prescreen_config(budget: int, *, evaluations: int, points: int = 16) -> SearchConfig:
    return SearchConfig(
        name="toy",
        objectives=OBJECTIVES,
        search=SearchSettings(strategy="surrogate", budget=budget, batch_size=4,
                              initial_points=4, seed=0, prescreen_evaluations=evaluations,
                              prescreen_population=50, prescreen_points=points),
        surrogate=SurrogateSettings(model="gbt", inner_budget=0, pool_size=200),
    )  # fmt: skip


def test_a_prescreen_is_stored_as_trials_outside_the_budget() -> None:
    problem = ToyProblem()
    result = run_search(problem, _prescreen_config(8, evaluations=1000, points=16),
                        storage=None)  # fmt: skip
    sources = result.rows["source"].tolist()
    kept = sources.count("prescreen")
    assert 0 < kept <= 16  # the evolution's front, thinned
    assert sources[:kept] == ["prescreen"] * kept  # stored first, as one batch
    # the budget is the search's own: the Sobol start, then the surrogate's rounds
    assert sources.count("initial") == 4 and sources.count("search") == 4
    # 20 generations of 50 in one oracle call each, then the loop's evaluations
    assert problem.calls >= 20
    assert result.surrogate is not None
    assert result.surrogate["prescreen_evaluations"] == 1000
    assert result.hypervolume_history[0]["evaluations"] == kept  # its own checkpoint
    # The evolution's front is near the toy's true front before any surrogate round.
    assert result.hypervolume_history[0]["hypervolume"] >= 0.85 * true_hypervolume()


def test_no_prescreen_below_one_population() -> None:
    result = run_search(ToyProblem(), _prescreen_config(8, evaluations=49), storage=None)
    assert "prescreen" not in set(result.rows["source"])
    assert len(result.rows) == 8
    assert result.surrogate is not None and result.surrogate["prescreen"] is None


def test_a_resumed_search_does_not_prescreen_again(tmp_path: Any) -> None:
    storage = str(tmp_path / "journal.log")
    first = run_search(ToyProblem(), _prescreen_config(4, evaluations=500), storage=storage)
    again = run_search(ToyProblem(), _prescreen_config(8, evaluations=500), storage=storage)
    kept = first.rows["source"].tolist().count("prescreen")
    assert again.rows["source"].tolist().count("prescreen") == kept
    assert len(again.rows) == kept + 8


# ------------------------------------------------------------------ BoTorch's encoding
def test_encode_features_places_mappings_by_their_degrees(llm_space: SearchSpace) -> None:
    from deepflow.search.searchers import encode_features

    j, _, table = _mapping(llm_space)
    z = llm_space.from_unit(np.random.default_rng(0).random((2, llm_space.num_dims)))
    a = _row(table, tensor_parallel=2, pipeline_parallel=1, micro_batch_size=1)
    b = _row(table, tensor_parallel=4, pipeline_parallel=1, micro_batch_size=1)
    z[:, j] = [a, b]
    z[1] = np.where(np.arange(llm_space.num_dims) == j, z[1], z[0])
    x = encode_features(z, llm_space)
    # 22 continuous, 2 ordered integers, 4 mapping degrees, one-hot 3 + 2 + 3 + 2
    assert x.shape == (2, 22 + 2 + 4 + 10)
    assert x.min() >= 0 and x.max() <= 1
    diff = np.flatnonzero(x[0] != x[1])
    assert len(diff) == 2  # tp doubled, dp halved: two degree columns, nothing else
    assert np.linalg.norm(x[0] - x[1]) == pytest.approx(np.sqrt(2) / 9)


@pytest.mark.parametrize("refit", [True, False])
def test_a_resumed_surrogate_search_fits_as_the_uninterrupted_one(
    tmp_path: Path, refit: bool
) -> None:
    # 56 initial rows: the first fit holds 20 % out for its report (>= 50 rows). A worker
    # resumed after that fit must fit as the uninterrupted one did at each ask: not split the
    # rows of now because it has not fitted yet, and with refit false keep the first fit's
    # model, made on what was told before the first search batch
    def cfg(budget: int) -> SearchConfig:
        return SearchConfig(
            name="toy",
            objectives=OBJECTIVES,
            search=SearchSettings(strategy="surrogate", budget=budget, batch_size=4,
                                  initial_points=56, seed=0),
            surrogate=SurrogateSettings(model="gbt", inner_budget=0, pool_size=200,
                                        refit=refit),
        )  # fmt: skip

    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    run_search(ToyProblem(), cfg(60), storage=storage)
    resumed = run_search(ToyProblem(), cfg(68), storage=storage)
    straight = run_search(ToyProblem(), cfg(68), storage=str(tmp_path / "straight.journal"))
    assert np.array_equal(resumed.z, straight.z)
    assert resumed.surrogate is not None and straight.surrogate is not None
    for key in ("held_out", "num_train"):  # the first fit's report, made again on resume
        assert resumed.surrogate[key] == straight.surrogate[key], key
