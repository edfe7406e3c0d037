"""The search engine on a toy problem with a known Pareto front: every strategy, seeds,
constraints, persistence and resume (including kill -9)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from deepflow.errors import ConfigError
from deepflow.search.base import SearchConfig, run_search
from deepflow.search.study import SearchSettings, SurrogateSettings

from .toy import OBJECTIVES, ToyProblem, true_hypervolume

HERE = Path(__file__).resolve().parent


def config(strategy: str, *, budget: int = 24, seed: int = 0, name: str = "toy") -> SearchConfig:
    return SearchConfig(
        name=name,
        objectives=OBJECTIVES,
        search=SearchSettings(strategy=strategy, budget=budget, batch_size=4,
                              initial_points=8, seed=seed),
        surrogate=SurrogateSettings(model="gbt", inner_budget=100, pool_size=1000),
    )  # fmt: skip


@pytest.mark.parametrize(
    ("strategy", "budget"),
    [("random", 24), ("nsga2", 24), ("tpe", 24), ("botorch", 12), ("gp", 12),
     ("surrogate", 16)],
)  # fmt: skip
def test_every_strategy_stays_below_the_true_front(strategy: str, budget: int) -> None:
    result = run_search(ToyProblem(), config(strategy, budget=budget), storage=None)
    rows = result.rows
    assert len(rows) == budget
    assert rows["evaluation"].tolist() == list(range(budget))
    front = rows[rows["pareto"]]
    assert len(front) >= 1
    assert (front["c_limit"] <= 0).all(), "an infeasible design on the front"
    hv = [h["hypervolume"] for h in result.hypervolume_history]
    assert hv == sorted(hv) and hv[-1] > 0
    # No set of real designs can dominate more than the true front does.
    assert result.hypervolume <= true_hypervolume() + 1e-9
    # Every front design is on or above the true front f1² + f2² >= 1.
    assert (np.hypot(front["y_f1"], front["y_f2"]) >= 1 - 1e-9).all()


def test_a_model_based_strategy_approaches_the_known_front() -> None:
    result = run_search(ToyProblem(), config("tpe", budget=40), storage=None)
    assert result.hypervolume >= 0.8 * true_hypervolume()


def test_same_seed_same_trials_different_seed_different() -> None:
    for strategy in ("random", "nsga2", "surrogate"):
        a = run_search(ToyProblem(), config(strategy, budget=16), storage=None)
        b = run_search(ToyProblem(), config(strategy, budget=16), storage=None)
        c = run_search(ToyProblem(), config(strategy, budget=16, seed=1), storage=None)
        assert np.array_equal(a.z, b.z), strategy
        assert not np.array_equal(a.z, c.z), strategy


def test_resume_continues_to_a_larger_budget_exactly(tmp_path: Path) -> None:
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    run_search(ToyProblem(), config("random", budget=12), storage=storage)
    problem = ToyProblem()
    resumed = run_search(problem, config("random", budget=20), storage=storage)
    straight = run_search(ToyProblem(), config("random", budget=20), storage=None)
    assert problem.calls == 2  # only the two new batches were evaluated
    assert np.array_equal(resumed.z, straight.z)
    assert resumed.rows["trial"].tolist() == list(range(20))


def test_resume_refuses_other_settings(tmp_path: Path) -> None:
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    run_search(ToyProblem(), config("random", budget=8), storage=storage)
    with pytest.raises(ConfigError) as err:
        run_search(ToyProblem(), config("random", budget=8, seed=3), storage=storage)
    assert str(err.value) == (
        f"{storage}: study 'toy' was run with different settings (seed); resume it with the "
        "same study, or use a new result folder or --storage."
    )


_KILLED = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, {tests!r})
    from search.toy import ToyProblem
    from search.test_engine import config
    from deepflow.search.base import run_search

    class Slow(ToyProblem):
        def evaluate(self, u):
            time.sleep(0.3)
            return super().evaluate(u)

    run_search(Slow(), config({strategy!r}, budget=40), storage={storage!r})
""")


@pytest.mark.parametrize("strategy", ["random", "nsga2"])
def test_kill_9_then_resume_loses_and_repeats_nothing(tmp_path: Path, strategy: str) -> None:
    import optuna

    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    script = _KILLED.format(tests=str(HERE.parent), strategy=strategy, storage=storage)
    proc = subprocess.Popen([sys.executable, "-c", script], env=dict(os.environ))
    deadline = time.monotonic() + 120
    stored = 0
    while time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
        try:
            stored = len(optuna.load_study(study_name="toy", storage=storage).trials)
        except KeyError:
            continue
        if stored >= 12:
            break
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert 12 <= stored < 40, "the run was not interrupted mid-way"
    result = run_search(ToyProblem(), config(strategy, budget=40), storage=storage)
    assert result.rows["trial"].tolist() == list(range(40))
    assert len({tuple(z) for z in result.z}) == 40 or strategy != "random"
    if strategy == "random":  # proposal strategies: identical to an uninterrupted run
        straight = run_search(ToyProblem(), config(strategy, budget=40), storage=None)
        assert np.array_equal(result.z, straight.z)
