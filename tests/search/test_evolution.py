"""The vectorised evolutionary search on the toy problem: seeds, constraints, limits, the
known front, and its error message."""

from __future__ import annotations

import numpy as np
import pytest

from deepflow.search.evolution import evolve, weight_vectors
from deepflow.search.objectives import Bound

from .toy import OBJECTIVES, ToyProblem, true_hypervolume


def test_same_seed_same_run_other_seed_other() -> None:
    a = evolve(ToyProblem(), OBJECTIVES, population=40, generations=6, seed=0)
    b = evolve(ToyProblem(), OBJECTIVES, population=40, generations=6, seed=0)
    c = evolve(ToyProblem(), OBJECTIVES, population=40, generations=6, seed=1)
    np.testing.assert_array_equal(a.archive.data["z"], b.archive.data["z"])
    assert [h["hypervolume"] for h in a.history] == [h["hypervolume"] for h in b.history]
    assert not np.array_equal(a.archive.data["z"], c.archive.data["z"])


def test_it_approaches_the_known_front_with_one_oracle_call_per_generation() -> None:
    problem = ToyProblem()
    run = evolve(problem, OBJECTIVES, population=60, generations=60, seed=0)
    assert problem.calls == 61  # the initial population and one call per generation
    hv = [h["hypervolume"] for h in run.history]
    assert hv == sorted(hv)  # the archive never loses ground
    assert [h["evaluations"] for h in run.history] == [60.0 * (g + 1) for g in range(61)]
    assert hv[-1] > hv[0] and hv[-1] >= 0.9 * true_hypervolume()
    assert hv[-1] <= true_hypervolume() + 1e-9
    values = run.archive.data["values"]
    assert (values[:, 0] <= 0.9).all()  # the toy's constraint f1 <= 0.9 holds on the front
    assert (np.hypot(values[:, 0], values[:, 1]) >= 1 - 1e-9).all()


def test_user_bounds_and_limits() -> None:
    run = evolve(ToyProblem(), OBJECTIVES, (Bound("f2", max=1.2),), population=30,
                 generations=50, seed=2, max_evaluations=100)  # fmt: skip
    assert run.history[-1]["evaluations"] == 90  # a fourth generation would pass 100
    assert len(run.archive) > 0 and (run.archive.data["values"][:, 1] <= 1.2).all()


def test_weights_cover_the_simplex() -> None:
    w = weight_vectors(256, 3, seed=0)
    assert w.shape == (256, 3) and np.allclose(w.sum(axis=1), 1.0) and (w > 0).all()
    assert np.allclose(w.mean(axis=0), 1 / 3, atol=0.02)
    np.testing.assert_array_equal(weight_vectors(4, 3, seed=0, start=10), w[10:14])


def test_bad_sizes_are_refused_with_a_message() -> None:
    with pytest.raises(ValueError) as err:
        evolve(ToyProblem(), OBJECTIVES, population=1, generations=3)
    assert str(err.value) == (
        "evolve needs population >= 2, generations >= 0 and neighbours >= 1; got 1, 3 and 20."
    )


def test_prescreen_keeps_the_thinned_front_and_needs_one_population() -> None:
    from deepflow.search.evolution import prescreen

    problem = ToyProblem()
    assert prescreen(problem, OBJECTIVES, evaluations=49, population=50, points=8) is None
    out = prescreen(problem, OBJECTIVES, evaluations=1000, population=50, points=8, seed=3)
    assert out is not None
    z, record = out
    assert 0 < len(z) <= 8 and record["kept"] == len(z)
    assert record["evaluations"] == 1000  # 20 generations of 50, the first included
    assert record["archive_size"] >= len(z)
    again, _ = prescreen(ToyProblem(), OBJECTIVES, evaluations=1000, population=50, points=8,
                         seed=3)  # fmt: skip
    np.testing.assert_array_equal(z, again)  # seeded


def test_any_history_strategy_starts_from_a_prescreen() -> None:
    from deepflow.search.base import SearchConfig, run_search
    from deepflow.search.study import SearchSettings

    config = SearchConfig(
        name="toy",
        objectives=OBJECTIVES,
        search=SearchSettings(strategy="random", budget=8, batch_size=4, initial_points=0,
                              prescreen_evaluations=1000, prescreen_population=50,
                              prescreen_points=12),
    )  # fmt: skip
    result = run_search(ToyProblem(), config, storage=None)
    sources = result.rows["source"].tolist()
    assert 0 < sources.count("prescreen") <= 12 and sources.count("search") == 8
    plain = run_search(ToyProblem(), SearchConfig(name="toy", objectives=OBJECTIVES,
                       search=SearchSettings(strategy="random", budget=8, batch_size=4,
                                             initial_points=0)), storage=None)  # fmt: skip
    assert result.hypervolume > plain.hypervolume
