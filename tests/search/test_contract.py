"""The searcher contract, for every registered strategy (deepflow.search.registry), on the toy
problem: shapes and bounds, seeds both ways, tell changes the next ask, constraints, and a
resumed search equals an uninterrupted one."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from deepflow.datasets.samplers import unit_cube
from deepflow.search.base import (
    Proposals,
    Results,
    SearchConfig,
    SearchContext,
    inner_search,
    make_searcher,
    run_search,
)
from deepflow.search.objectives import Bound, constraint_matrix
from deepflow.search.registry import REGISTRY
from deepflow.search.study import SearchSettings, SurrogateSettings

from .toy import OBJECTIVES, ToyProblem

STRATEGIES = sorted(REGISTRY)
#: BoTorch fits a GP per ask: its cases that ask several times take > 20 s on 2 cores.
SLOW_AS_WELL = [
    pytest.param(s, marks=pytest.mark.slow) if s == "botorch" else s for s in STRATEGIES
]


def config(strategy: str, *, seed: int = 0, budget: int = 16) -> SearchConfig:
    return SearchConfig(
        name="toy",
        objectives=OBJECTIVES,
        search=SearchSettings(strategy=strategy, budget=budget, batch_size=4,
                              initial_points=8, seed=seed),
        surrogate=SurrogateSettings(model="gbt", inner_budget=60, pool_size=400),
    )  # fmt: skip


def results_of(problem: ToyProblem, z: np.ndarray) -> Results:
    rows = problem.evaluate(problem.search_space.to_unit(z))
    cols = {c: rows[c].to_numpy(dtype=float) for c in rows.columns if c.startswith(("c_", "y_"))}
    names, c = constraint_matrix(cols, problem.constraint_names, ())
    values = rows[["y_f1", "y_f2"]].to_numpy(dtype=float)
    return Results(values, c, names, (c <= 0).all(axis=1), rows, OBJECTIVES)


def told(
    strategy: str, *, seed: int = 0, start: int = 0, resumable: bool = False
) -> tuple[ToyProblem, object]:
    """A searcher told 8 space-filling designs (a different set for another ``start``)."""
    problem = ToyProblem()
    context = SearchContext(
        problem, config(strategy, seed=seed), inner=inner_search, resumable=resumable
    )
    searcher = make_searcher(strategy, context)
    u = unit_cube("sobol", seed=start, start=0, stop=8, num_samples=8, dims=4)
    z = problem.search_space.from_unit(u)
    searcher.tell(Proposals(z, source="initial"), results_of(problem, z))
    return problem, searcher


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_proposals_have_the_space_shape_and_stay_in_bounds(strategy: str) -> None:
    problem, searcher = told(strategy)
    proposals = searcher.ask(4)
    ss = problem.search_space
    assert isinstance(proposals, Proposals)
    assert 1 <= len(proposals) <= 4 and proposals.z.shape == (len(proposals), ss.num_dims)
    assert len(proposals.info) == len(proposals.sampler) == len(proposals)
    low, high = ss.bounds()
    assert (proposals.z >= low).all() and (proposals.z <= high).all()
    for j, dim in enumerate(ss.dims):
        if dim.kind != "continuous":
            assert np.array_equal(proposals.z[:, j], np.rint(proposals.z[:, j])), dim.name


@pytest.mark.parametrize("strategy", SLOW_AS_WELL)
def test_same_seed_same_proposals_other_seed_other(strategy: str) -> None:
    a = told(strategy)[1].ask(4).z
    b = told(strategy)[1].ask(4).z
    c = told(strategy, seed=1)[1].ask(4).z
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c)


@pytest.mark.parametrize("strategy", SLOW_AS_WELL)
def test_tell_changes_the_next_ask(strategy: str) -> None:
    problem, searcher = told(strategy)
    first = searcher.ask(4)
    again = told(strategy)[1].ask(4)
    assert np.array_equal(first.z, again.z)  # asking alone does not move a fresh searcher
    searcher.tell(first, results_of(problem, first.z))
    after = searcher.ask(4)
    assert not np.array_equal(after.z, first.z)


def _subset(p: Proposals, keep: slice) -> Proposals:
    return Proposals(p.z[keep], info=p.info[keep], round=p.round, sampler=p.sampler[keep],
                     source=p.source)  # fmt: skip


@pytest.mark.parametrize("strategy", SLOW_AS_WELL)
def test_a_design_the_store_dropped_leaves_no_trace(strategy: str) -> None:
    # The store drops a proposal already stored (or past the budget); a worker resumed after
    # a kill never asked it, so the searcher that did must propose as if it had not either.
    problem, searcher = told(strategy, resumable=True)
    asked = searcher.ask(4)
    kept = _subset(asked, slice(0, len(asked) - 1))
    searcher.tell(kept, results_of(problem, kept.z))
    fresh = told(strategy, resumable=True)[1]
    fresh.tell(kept, results_of(problem, kept.z))
    assert np.array_equal(searcher.ask(4).z, fresh.ask(4).z)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_constraints_are_respected_on_the_front(strategy: str) -> None:
    bound = Bound("f2", max=1.4)
    cfg = config(strategy, budget=12)
    cfg = SearchConfig(cfg.name, cfg.objectives, (bound,), cfg.search, cfg.surrogate)
    result = run_search(ToyProblem(), cfg, storage=None)
    front = result.rows[result.rows["pareto"]]
    assert len(result.rows) == 12 and len(front) >= 1
    assert (front["c_limit"] <= 0).all() and (front["y_f2"] <= 1.4).all()


@pytest.mark.parametrize("strategy", SLOW_AS_WELL)
def test_resume_equals_the_uninterrupted_search(strategy: str, tmp_path: Path) -> None:
    first = f"sqlite:///{tmp_path / 'resumed.db'}"
    run_search(ToyProblem(), config(strategy, budget=12), storage=first)
    problem = _Counting()
    resumed = run_search(problem, config(strategy, budget=16), storage=first)
    straight = run_search(ToyProblem(), config(strategy, budget=16),
                          storage=str(tmp_path / "straight.journal"))  # fmt: skip
    assert problem.rows == 4  # only the new designs were evaluated
    assert np.array_equal(resumed.z, straight.z)
    assert resumed.rows["trial"].tolist() == list(range(16))


class _Counting(ToyProblem):
    def __init__(self) -> None:
        super().__init__()
        self.rows = 0

    def evaluate(self, u: np.ndarray) -> object:
        self.rows += len(np.atleast_2d(u))
        return super().evaluate(u)
