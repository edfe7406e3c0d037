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
    from search.test_contract import config
    from deepflow.search.base import run_search

    class Slow(ToyProblem):
        def evaluate(self, u):
            time.sleep(0.3)
            return super().evaluate(u)

    run_search(Slow(), config({strategy!r}, budget={budget}), storage={storage!r})
""")

#: (strategy, budget, stored trials to wait for before the kill, seconds more): kills
#: between and inside batches (the worker evaluates for 0.3 s after reserving a batch).
_KILLS = [
    ("random", 40, 12, 0.0), ("random", 40, 12, 0.45), ("nsga2", 40, 12, 0.15),
    ("tpe", 24, 12, 0.3), ("surrogate", 16, 10, 0.2),
    # Fitting a GP per ask: > 20 s each on 2 shared cores.
    pytest.param("gp", 12, 9, 0.1, marks=pytest.mark.slow),
    pytest.param("botorch", 16, 10, 0.2, marks=pytest.mark.slow),
]  # fmt: skip


@pytest.mark.parametrize(("strategy", "budget", "after", "delay"), _KILLS)
def test_kill_9_then_resume_equals_the_uninterrupted_search(
    tmp_path: Path, strategy: str, budget: int, after: int, delay: float
) -> None:
    import optuna

    from .test_contract import config as contract_config

    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    script = _KILLED.format(tests=str(HERE.parent), strategy=strategy, storage=storage,
                            budget=budget)  # fmt: skip
    proc = subprocess.Popen([sys.executable, "-c", script], env=dict(os.environ))
    plain = optuna.storages.RDBStorage(storage)
    deadline = time.monotonic() + 300
    stored = 0
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
            try:
                stored = len(optuna.load_study(study_name="toy", storage=plain).trials)
            except KeyError:
                continue
            if stored >= after:
                time.sleep(delay)
                break
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        plain.engine.dispose()
    assert after <= stored < budget, "the run was not interrupted mid-way"
    cfg = contract_config(strategy, budget=budget)
    result = run_search(ToyProblem(), cfg, storage=storage)
    straight = run_search(ToyProblem(), cfg, storage=str(tmp_path / "straight.journal"))
    assert result.rows["trial"].tolist() == list(range(budget))
    assert np.array_equal(result.z, straight.z)
    assert result.hypervolume == straight.hypervolume


class _Tiny(ToyProblem):
    """Only the toy's integer and categorical dims: 15 distinct designs."""

    def __init__(self) -> None:
        super().__init__()
        from deepflow.search.space import SearchSpace

        self.full = ToyProblem()
        self.search_space = SearchSpace.from_dims(self.search_space.dims[2:])

    def _full(self, u: np.ndarray) -> np.ndarray:
        u = np.atleast_2d(u)
        return np.column_stack([np.full(len(u), 0.5), np.full(len(u), 0.5), u])

    def inputs(self, u: np.ndarray) -> object:
        return self.full.inputs(self._full(u))

    def evaluate(self, u: np.ndarray) -> object:
        return self.full.evaluate(self._full(u))


def test_a_space_smaller_than_the_budget_repeats_designs_only_when_exhausted() -> None:
    result = run_search(_Tiny(), config("random", budget=20), storage=None)
    z = [tuple(row) for row in result.z]
    assert len(z) == 20 and len(set(z)) >= 14
    # Repeats only once the space is nearly exhausted (unfiltered random draws of 15
    # designs repeat after about 5).
    first_repeat = next(i for i in range(len(z)) if z[i] in z[:i])
    assert first_repeat >= 12
