"""The search loop: ask -> evaluate on the oracle (vectorised) -> tell, persisted in Optuna.

Every oracle evaluation becomes a completed Optuna trial in the study's storage (SQLite in
the result folder by default, any RDB URL with ``storage=``) with its parameters, objective
values, constraints and the full row of the dataset's columns (a user attribute). Batches
are stored whole, after they are evaluated (``add_trials``), so a killed search restarted on
the same storage reads back every completed evaluation and proposes the batch in flight
again: no evaluation is lost or stored twice. Proposal strategies (random, botorch,
surrogate) are seeded per batch from the seed and the number of evaluations so far, so a
resumed run proposes exactly what an uninterrupted one would have; Optuna's samplers are
rebuilt from the stored trials.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from numpy.typing import NDArray

from deepflow.errors import ConfigError
from deepflow.search.objectives import Bound, Objective, constraint_matrix, normalise
from deepflow.search.pareto import hypervolume, pareto_mask
from deepflow.search.problem import Problem
from deepflow.search.searchers import (
    BotorchSearcher,
    History,
    OptunaSearcher,
    RandomSearcher,
    make_sampler,
)
from deepflow.search.study import SearchSettings, SurrogateSettings

__all__ = ["SearchConfig", "SearchResult", "infer_references", "run_search"]

F = NDArray[np.float64]
_BIG = 1e300
_ROW_ATTR = "row"


@dataclass(frozen=True)
class SearchConfig:
    """Everything a search needs besides the problem."""

    name: str
    objectives: tuple[Objective, ...]
    bounds: tuple[Bound, ...] = ()
    search: SearchSettings = field(default_factory=SearchSettings)
    surrogate: SurrogateSettings = field(default_factory=SurrogateSettings)

    def key(self, problem: Problem) -> dict[str, Any]:
        """What must match for a stored study to be resumed (the budget may grow)."""
        s = self.search
        return {
            "objectives": [[o.name, o.direction] for o in self.objectives],
            "bounds": [[b.name, _num(b.min), _num(b.max)] for b in self.bounds],
            "strategy": s.strategy,
            "seed": s.seed,
            "batch_size": s.batch_size,
            "initial_points": s.initial_points,
            "dims": [d.name for d in problem.search_space.dims],
        }


def _num(x: float) -> float | None:
    return None if not math.isfinite(x) else float(x)


@dataclass
class SearchResult:
    """What a search produced (all oracle values)."""

    config: SearchConfig
    objectives: tuple[Objective, ...]  # with references and ideals filled in
    rows: Any  # DataFrame: one row per evaluation (trials.parquet's columns)
    history: History
    hypervolume_history: list[dict[str, float]]
    pareto: NDArray[np.bool_]
    timings_s: dict[str, float]
    surrogate: dict[str, Any] | None = None

    @property
    def z(self) -> F:
        """(n, d) native coordinates of every evaluation, in order."""
        return self.history.z

    @property
    def hypervolume(self) -> float:
        return self.hypervolume_history[-1]["hypervolume"] if self.hypervolume_history else 0.0


# ------------------------------------------------------------------------------ helpers
def infer_references(
    objectives: Sequence[Objective], values: F, feasible: NDArray[np.bool_]
) -> tuple[Objective, ...]:
    """Fill in missing references (worst) and ideals (best) from evaluated designs.

    Over the feasible designs (all, if none is feasible): the reference lies 10 % of the
    observed range beyond the worst value and the ideal 10 % beyond the best (a factor 1.1
    in log scale), so that every observed design counts in the hypervolume.
    """
    rows = values[feasible] if feasible.any() else values
    out = []
    for j, o in enumerate(objectives):
        v = rows[:, j][np.isfinite(rows[:, j])]
        if o.scale == "log":
            v = v[v > 0]
        if v.size == 0:
            v = np.array([1.0])
        worst, best = (v.max(), v.min()) if o.direction == "minimize" else (v.min(), v.max())
        if o.scale == "log":
            factor = 1.1 if o.direction == "minimize" else 1 / 1.1
            ref, ideal = worst * factor, best / factor
        else:
            span = max(abs(worst - best), 1e-9 * max(abs(worst), 1.0))
            step = 0.1 * span * o.sign
            ref, ideal = worst + step, best - step
        out.append(
            replace(
                o,
                reference=o.reference if math.isfinite(o.reference) else ref,
                ideal=o.ideal if math.isfinite(o.ideal) else ideal,
            )
        )
    return tuple(out)


def _objective_values(rows: Any, objectives: Sequence[Objective]) -> F:
    return np.stack([rows[o.column].to_numpy(dtype=float) for o in objectives], axis=1)


def _constraints(rows: Any, problem: Problem, bounds: Sequence[Bound]) -> tuple[list[str], F]:
    cols = {c: rows[c].to_numpy(dtype=float) for c in rows.columns if c.startswith(("c_", "y_"))}
    names, m = constraint_matrix(cols, problem.constraint_names, bounds)
    return names, m.reshape(len(rows), len(names))


def _feasible(rows: Any, constraints: F) -> NDArray[np.bool_]:
    ok = rows["feasible"].to_numpy(dtype=bool).copy()
    if constraints.size:
        ok &= (constraints <= 0).all(axis=1)
    return ok


def _plain(value: Any) -> Any:
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


# ------------------------------------------------------------------------------ storage
def _open_study(config: SearchConfig, problem: Problem, storage: str | None) -> Any:
    """The persistent study (every completed evaluation), checked against the settings."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    directions = _directions(config)
    study = optuna.create_study(
        study_name=config.name,
        storage=storage,
        directions=directions,
        sampler=optuna.samplers.RandomSampler(seed=0),
        load_if_exists=True,
    )
    key = config.key(problem)
    stored = study.user_attrs.get("deepflow_key")
    if stored is None:
        study.set_user_attr("deepflow_key", key)
    elif stored != key:
        diff = [k for k in key if stored.get(k) != key[k]]
        raise ConfigError(
            f"{storage}: study '{config.name}' was run with different settings "
            f"({', '.join(diff)}); resume it with the same study, or use a new result folder "
            f"or --storage."
        )
    return study


def _directions(config: SearchConfig) -> Any:
    """Optuna's study directions (typed as its literals)."""
    return [o.direction for o in config.objectives]


def _safe(values: Sequence[float]) -> list[float]:
    return [float(np.clip(v, -_BIG, _BIG)) if not math.isnan(v) else _BIG for v in values]


# ------------------------------------------------------------------------------ the loop
class _Run:
    """One search: ``store`` is the persistent study (completed evaluations only, written
    one batch at a time with ``add_trials``: a batch in flight when the run is killed is
    simply proposed again); ``live`` is an in-memory study driving Optuna's samplers."""

    def __init__(
        self,
        problem: Problem,
        config: SearchConfig,
        store: Any,
        searcher: Any,
        progress: Callable[[int, int], None] | None,
    ) -> None:
        import optuna
        import pandas as pd

        self.pd = pd
        self.optuna = optuna
        self.problem = problem
        self.config = config
        self.store = store
        self.searcher = searcher
        self.progress = progress
        self.ss = problem.search_space
        self.distributions = self.ss.distributions()
        self.records: list[dict[str, Any]] = []  # one per evaluation: the stored row
        self.next_number = 0  # the Optuna number of the next stored trial (set by load)
        self.objectives = config.objectives
        self.timings = {"evaluate": 0.0, "ask": 0.0, "store": 0.0}
        self.live = None
        if getattr(searcher, "uses_sampler", False):
            s = config.search
            self.live = optuna.create_study(
                directions=_directions(config),
                sampler=make_sampler(
                    s.strategy,
                    seed=s.seed,
                    batch_size=s.batch_size,
                    initial_points=s.initial_points,
                ),
            )

    # --- history -------------------------------------------------------------------
    def load(self) -> None:
        """Read the completed evaluations of an earlier (killed or finished) run."""
        states = self.optuna.trial.TrialState
        stored = self.store.get_trials(deepcopy=False)
        self.next_number = len(stored)  # trials are numbered 0, 1, ... as they are added
        done = [t for t in stored if t.state == states.COMPLETE and _ROW_ATTR in t.user_attrs]
        for t in sorted(done, key=lambda t: t.number):
            self.records.append(dict(t.user_attrs[_ROW_ATTR], trial=t.number))
        if self.live is not None and done:
            self.live.add_trials(
                [self._frozen(t.params, t.values, t.constraints, {}) for t in done]
            )

    def _frozen(
        self,
        params: dict[str, Any],
        values: Sequence[float],
        constraints: dict[str, float],
        user_attrs: dict[str, Any],
    ) -> Any:
        return self.optuna.trial.create_trial(
            params=params,
            distributions=self.distributions,
            values=_safe(values),
            constraints=constraints,
            user_attrs=user_attrs,
        )

    def frame(self) -> Any:
        return self.pd.DataFrame(self.records)

    def history(self) -> History:
        ss = self.ss
        if not self.records:
            d = ss.num_dims
            return History(
                np.empty((0, d)),
                np.empty((0, len(self.objectives))),
                np.empty((0, 0)),
                [],
                np.empty(0, dtype=bool),
            )
        rows = self.frame()
        z = np.array([r["z"] for r in self.records], dtype=float)
        names, c = _constraints(rows, self.problem, self.config.bounds)
        values = _objective_values(rows, self.objectives)
        feasible = _feasible(rows, c)
        normalised = (
            normalise(values, self.objectives)
            if self._references_known()
            else np.zeros_like(values)
        )
        info = [r.get("info") or {} for r in self.records]
        return History(z, normalised, c, names, feasible, info)

    def _references_known(self) -> bool:
        return all(math.isfinite(o.reference) and math.isfinite(o.ideal) for o in self.objectives)

    def fix_references(self) -> None:
        """Fill in missing references/ideals once (stored with the study for resumes)."""
        if self._references_known() or not self.records:
            return
        stored = self.store.user_attrs.get("deepflow_references")
        if stored:
            self.objectives = tuple(
                replace(o, reference=r, ideal=i)
                for o, (r, i) in zip(self.objectives, stored, strict=True)
            )
            return
        rows = self.frame()
        _names, c = _constraints(rows, self.problem, self.config.bounds)
        self.objectives = infer_references(
            self.objectives, _objective_values(rows, self.objectives), _feasible(rows, c)
        )
        self.store.set_user_attr(
            "deepflow_references", [[o.reference, o.ideal] for o in self.objectives]
        )

    # --- one batch -----------------------------------------------------------------
    def evaluate(
        self,
        z: F,
        source: str,
        info: list[dict[str, Any]],
        round_: int,
        live_trials: list[Any] | None = None,
    ) -> None:
        start = time.perf_counter()
        rows = self.problem.evaluate(self.ss.to_unit(z))
        self.timings["evaluate"] += time.perf_counter() - start
        names, c = _constraints(rows, self.problem, self.config.bounds)
        values = _objective_values(rows, self.config.objectives)
        frozen, records = [], []
        for i in range(len(z)):
            record = {k: _plain(v) for k, v in rows.iloc[i].items()}
            record.update(
                z=[float(x) for x in z[i]],
                source=source,
                round=round_,
                strategy=self.config.search.strategy,
                info=info[i],
            )
            constraints = {
                n: float(np.clip(v, -_BIG, _BIG)) for n, v in zip(names, c[i], strict=True)
            }
            frozen.append(
                self._frozen(self.ss.to_params(z[i]), values[i], constraints, {_ROW_ATTR: record})
            )
            records.append(record)
            if live_trials is not None:
                for n_, v in constraints.items():
                    live_trials[i].set_constraint(n_, v)
                self.live.tell(live_trials[i], _safe(values[i]))  # type: ignore[union-attr]
            elif self.live is not None:
                self.live.add_trial(
                    self._frozen(self.ss.to_params(z[i]), values[i], constraints, {})
                )
        start = time.perf_counter()
        self.store.add_trials(frozen)
        self.timings["store"] += time.perf_counter() - start
        for record in records:
            self.records.append(dict(record, trial=self.next_number))
            self.next_number += 1
        if self.progress is not None:
            self.progress(len(self.records), self.config.search.budget)

    def run(self) -> None:
        from deepflow.datasets.samplers import unit_cube

        s = self.config.search
        while len(self.records) < s.budget:
            done = len(self.records)
            n = min(s.batch_size, s.budget - done)
            if done < s.initial_points:
                n = min(n, s.initial_points - done)
                u = unit_cube(
                    "sobol",
                    seed=s.seed,
                    start=done,
                    stop=done + n,
                    num_samples=s.initial_points,
                    dims=self.ss.num_dims,
                )
                z = self.ss.from_unit(u)
                self.evaluate(z, "initial", [{} for _ in z], 0)
                continue
            self.fix_references()
            start = time.perf_counter()
            live_trials = None
            if self.live is not None:
                live_trials = self.searcher.ask_trials(n, self.live)
                z = np.array([self.ss.from_params(t.params) for t in live_trials])
                info: list[dict[str, Any]] = [{} for _ in live_trials]
                round_ = 0
            else:
                z, info, round_ = self._propose(n)
            self.timings["ask"] += time.perf_counter() - start
            self.evaluate(z, "search", info, round_, live_trials)

    def _propose(self, n: int) -> tuple[F, list[dict[str, Any]], int]:
        history = self.history()
        if hasattr(self.searcher, "propose"):
            z, info, round_ = self.searcher.propose(n, history, self.objectives, self.frame())
            return np.asarray(z, dtype=float), info, round_
        z = self.searcher.ask(n, history)
        return np.asarray(z, dtype=float), [{} for _ in range(len(z))], 0


def _make_searcher(
    problem: Problem, config: SearchConfig, surrogate_model: Any, dataset: Any
) -> Any:
    s = config.search
    ss = problem.search_space
    if s.strategy == "random":
        return RandomSearcher(ss, seed=s.seed)
    if s.strategy == "botorch":
        return BotorchSearcher(ss, seed=s.seed)
    if s.strategy == "surrogate":
        from deepflow.search.assisted import SurrogateSearcher

        return SurrogateSearcher(problem, config, model=surrogate_model, dataset=dataset)
    return OptunaSearcher(ss, s.strategy)


def hypervolume_history(
    normalised: F, feasible: NDArray[np.bool_], checkpoints: Sequence[int]
) -> list[dict[str, float]]:
    """Hypervolume of the first n evaluations, for each n in ``checkpoints``."""
    out = []
    for n in checkpoints:
        out.append(
            {"evaluations": int(n), "hypervolume": hypervolume(normalised[:n], feasible[:n])}
        )
    return out


def run_search(
    problem: Problem,
    config: SearchConfig,
    *,
    storage: str | None,
    progress: Callable[[int, int], None] | None = None,
    surrogate_model: Any = None,
    dataset: Any = None,
) -> SearchResult:
    """Run (or resume) a search to its budget; every evaluation is on the oracle.

    Args:
        problem: what to evaluate (:class:`~deepflow.search.problem.OracleProblem`).
        config: objectives, bounds and settings.
        storage: an Optuna storage URL (``sqlite:///path/optuna.db``, ``postgresql://...``);
            None keeps the study in memory.
        progress: called with (evaluations done, budget) after every batch.
        surrogate_model: for strategy ``surrogate``: a fitted SurrogateModel to start from.
        dataset: for strategy ``surrogate``: oracle-labelled designs (a DataFrame) to train on.

    Raises:
        ConfigError: the storage holds this study run with other settings.
    """
    start = time.perf_counter()
    study = _open_study(config, problem, storage)
    searcher = _make_searcher(problem, config, surrogate_model, dataset)
    run = _Run(problem, config, study, searcher, progress)
    run.load()
    run.run()
    run.fix_references()
    history = run.history()
    rows = run.frame()
    pareto = pareto_mask(history.normalised, history.feasible)
    rows["pareto"] = pareto
    rows.insert(0, "evaluation", np.arange(len(rows)))
    batch = config.search.batch_size
    checkpoints = sorted({*range(batch, len(rows), batch), len(rows)} - {0})
    hv = hypervolume_history(history.normalised, history.feasible, checkpoints)
    timings = dict(run.timings, total=time.perf_counter() - start)
    surrogate = getattr(searcher, "summary", lambda: None)()
    return SearchResult(
        config=config,
        objectives=run.objectives,
        rows=rows,
        history=history,
        hypervolume_history=hv,
        pareto=pareto,
        timings_s=timings,
        surrogate=surrogate,
    )


def run_inner(problem: Problem, config: SearchConfig) -> F:
    """A quick in-memory search (no storage, no records) on a cheap problem, e.g. a
    surrogate; returns the native coordinates of every design it evaluated."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    s = config.search
    ss = problem.search_space
    rng = np.random.default_rng(s.seed)
    if s.strategy == "random" or s.budget == 0:
        return ss.from_unit(rng.random((s.budget, ss.num_dims)))
    sampler = make_sampler(
        s.strategy, seed=s.seed, batch_size=s.batch_size, initial_points=s.initial_points
    )
    study = optuna.create_study(sampler=sampler, directions=_directions(config))
    searcher = OptunaSearcher(ss, s.strategy)
    out: list[F] = []
    done = 0
    while done < s.budget:
        trials = searcher.ask_trials(min(s.batch_size, s.budget - done), study)
        z = np.array([ss.from_params(t.params) for t in trials])
        rows = problem.evaluate(ss.to_unit(z))
        names, c = _constraints(rows, problem, config.bounds)
        values = _objective_values(rows, config.objectives)
        for i, trial in enumerate(trials):
            for name, value in zip(names, c[i], strict=True):
                trial.set_constraint(name, float(np.clip(value, -_BIG, _BIG)))
            study.tell(trial, [float(np.clip(v, -_BIG, _BIG)) for v in values[i]])
        out.append(z)
        done += len(trials)
    return np.vstack(out)


def dumps(data: Any) -> str:
    """JSON with NaN/inf as null."""

    def clean(x: Any) -> Any:
        if isinstance(x, dict):
            return {str(k): clean(v) for k, v in x.items()}
        if isinstance(x, list | tuple):
            return [clean(v) for v in x]
        return _plain(x)

    return json.dumps(clean(data), indent=2)
