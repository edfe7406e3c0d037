"""The searcher protocol and the one search loop: ask -> evaluate (vectorised) -> tell, over a
trial store shared by any number of workers.

A **searcher** proposes designs in the native coordinates of a
:class:`~deepflow.search.space.SearchSpace` and learns from evaluations:

- ``ask(n) -> Proposals``: up to n designs (an (n, d) array and what proposed each);
- ``tell(proposals, results)``: the evaluations of proposals, in the order they were stored.

Strategies are looked up by name in :mod:`deepflow.search.registry` and built from a
:class:`SearchContext`. A searcher's proposals depend only on the seed and on what it was
told (each batch is seeded from the seed and the number of evaluations told so far), so a
search rebuilt from its storage proposes exactly what an uninterrupted one would.

The **loop** (:func:`run_search`) owns everything else: the space-filling start (Sobol, by
trial number), the reference point (from the first trials, stored with the study), the
store (:mod:`deepflow.search.storage`): each batch is reserved then completed atomically,
and trials of other workers on the same storage are told to the searcher as they complete.
Several processes running :func:`run_search` on one storage share its budget.
"""

from __future__ import annotations

import importlib
import json
import math
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray

from deepflow.errors import ConfigError
from deepflow.search.objectives import Bound, Objective, normalise, outcomes
from deepflow.search.pareto import ParetoArchive, pareto_mask
from deepflow.search.problem import Problem
from deepflow.search.registry import REGISTRY
from deepflow.search.storage import Design, Slot, Store, design_key, finite, open_store, wait
from deepflow.search.study import SearchSettings, SurrogateSettings

__all__ = [
    "Proposals",
    "Results",
    "SearchConfig",
    "SearchContext",
    "SearchResult",
    "Searcher",
    "infer_references",
    "make_searcher",
    "run_search",
]

F = NDArray[np.float64]
_BIG = 1e300
#: Seconds between polls of a shared storage while other workers finish their batches.
POLL_S = 0.2
#: Asks in a row whose designs are all in the study already before repeats are allowed.
MAX_FRUITLESS_ASKS = 5


# ------------------------------------------------------------------------------ protocol
@dataclass
class Proposals:
    """Designs a searcher proposes.

    Attributes:
        z: (n, d) native coordinates.
        info: per design, what proposed it (JSON-ready; stored with the trial, e.g. a
            surrogate's predictions).
        round: the surrogate-assisted round (0 for other strategies).
        sampler: per design, the Optuna sampler's attributes (stored with the trial and told
            back, so a rebuilt sampler sees the trials it made).
        source: ``search``, or ``initial`` for the loop's space-filling start.
    """

    z: F
    info: list[dict[str, Any]] = field(default_factory=list)
    round: int = 0
    sampler: list[dict[str, Any]] = field(default_factory=list)
    source: str = "search"

    def __post_init__(self) -> None:
        self.z = np.atleast_2d(np.asarray(self.z, dtype=float))
        n = len(self.z)
        self.info = list(self.info) or [{} for _ in range(n)]
        self.sampler = list(self.sampler) or [{} for _ in range(n)]

    def __len__(self) -> int:
        return len(self.z)


@dataclass
class Results:
    """Evaluations of proposals (oracle values in their units).

    Attributes:
        values: (n, k) objective values.
        constraints: (n, m) constraints (<= 0 feasible): the oracle's, then user bounds.
        constraint_names: the m names.
        feasible: (n,) bool.
        rows: the dataset's columns of the n designs (a DataFrame).
        objectives: the objectives with the reference and ideal known so far.
    """

    values: F
    constraints: F
    constraint_names: list[str]
    feasible: NDArray[np.bool_]
    rows: Any
    objectives: tuple[Objective, ...]


class Searcher(Protocol):
    """What every strategy implements (see the module docstring)."""

    def ask(self, n: int) -> Proposals:
        """Up to ``n`` designs to evaluate next."""

    def tell(self, proposals: Proposals, results: Results) -> None:
        """The evaluations of ``proposals`` (the same designs, in the same order)."""


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


@dataclass(frozen=True)
class SearchContext:
    """What a strategy is built from.

    Attributes:
        problem: what is evaluated (its search space, constraint names).
        config: objectives, bounds and settings.
        model: strategy ``surrogate``: a fitted SurrogateModel to start from.
        dataset: strategy ``surrogate``: oracle-labelled rows (a DataFrame) to train on.
        inner: runs a quick in-memory search of a registered strategy on a cheap problem
            (e.g. a surrogate) and returns the coordinates of every design it evaluated
            (:func:`inner_search`).
        resumable: the trials live in a persistent store, so the search may be resumed
            after a kill or joined by other workers: a searcher must then propose from what
            it was told alone, never from what it asked and the store dropped.
    """

    problem: Problem
    config: SearchConfig
    model: Any = None
    dataset: Any = None
    inner: Callable[[Problem, SearchConfig], F] | None = None
    resumable: bool = False


def make_searcher(strategy: str, context: SearchContext) -> Searcher:
    """The registered searcher of a strategy.

    Raises:
        ConfigError: an unknown strategy (listing the registered ones).
    """
    if strategy not in REGISTRY:
        raise ConfigError(
            f"search.strategy must be one of: {', '.join(REGISTRY)}; got '{strategy}'."
        )
    module, name = REGISTRY[strategy].split(":")
    cls = getattr(importlib.import_module(module), name)
    searcher: Searcher = cls(context)
    return searcher


def batch_seed(seed: int, told: int, salt: int, *tag: int) -> np.random.SeedSequence:
    """The seed of one ask: the study's seed, the evaluations told so far, the asks since
    (0 unless a proposal was taken by another worker) and a strategy tag."""
    entropy = [seed, told, *tag]
    if salt:
        entropy.append(salt)
    return np.random.SeedSequence(entropy)


# ------------------------------------------------------------------------------ results
def _num(x: float) -> float | None:
    return None if not math.isfinite(x) else float(x)


@dataclass
class SearchResult:
    """What a search produced (all oracle values)."""

    config: SearchConfig
    objectives: tuple[Objective, ...]  # with references and ideals filled in
    rows: Any  # DataFrame: one row per evaluation (trials.parquet's columns)
    z: F  # (n, d) native coordinates, in trial order
    normalised: F
    feasible: NDArray[np.bool_]
    info: list[dict[str, Any]]
    hypervolume_history: list[dict[str, float]]
    pareto: NDArray[np.bool_]
    timings_s: dict[str, float]
    surrogate: dict[str, Any] | None = None

    @property
    def hypervolume(self) -> float:
        return self.hypervolume_history[-1]["hypervolume"] if self.hypervolume_history else 0.0


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


def references_known(objectives: Sequence[Objective]) -> bool:
    return all(math.isfinite(o.reference) and math.isfinite(o.ideal) for o in objectives)


def hypervolume_history(
    normalised: F, feasible: NDArray[np.bool_], checkpoints: Sequence[int]
) -> list[dict[str, float]]:
    """Hypervolume of the first n evaluations, for each n in ``checkpoints`` (ascending;
    one archive of the front so far, so each checkpoint adds only its new designs)."""
    archive = ParetoArchive(normalised.shape[1])
    out, done = [], 0
    for n in checkpoints:
        archive.add(normalised[done:n], feasible[done:n])
        done = max(done, int(n))
        out.append({"evaluations": int(n), "hypervolume": archive.hypervolume()})
    return out


def _plain(value: Any) -> Any:
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def dumps(data: Any) -> str:
    """JSON with NaN/inf as null."""

    def clean(x: Any) -> Any:
        if isinstance(x, dict):
            return {str(k): clean(v) for k, v in x.items()}
        if isinstance(x, list | tuple):
            return [clean(v) for v in x]
        return _plain(x)

    return json.dumps(clean(data), indent=2)


# ------------------------------------------------------------------------------ the loop
class _Loop:
    """One worker's search on a store (see :func:`run_search`)."""

    KEY_ATTR = "deepflow_key"
    REFERENCES_ATTR = "deepflow_references"

    def __init__(
        self,
        problem: Problem,
        config: SearchConfig,
        store: Store,
        searcher: Searcher,
        progress: Callable[[int, int], None] | None,
    ) -> None:
        self.problem = problem
        self.config = config
        self.store = store
        self.searcher = searcher
        self.progress = progress
        self.ss = problem.search_space
        self.objectives = config.objectives
        self.told: set[int] = set()
        self.frames: dict[int, Any] = {}  # this process's evaluated rows by batch
        self.row_at: dict[int, tuple[int, int]] = {}  # trial number -> (batch, row)
        self.timings = {"evaluate": 0.0, "ask": 0.0, "store": 0.0}
        if store.persistent:
            store.distributions = self.ss.param_distributions()

    # --- study --------------------------------------------------------------------
    def open(self, label: str) -> None:
        cfg = self.config
        self.store.open_study(
            cfg.name, [o.direction for o in cfg.objectives], [o.name for o in cfg.objectives]
        )
        key = json.loads(json.dumps(cfg.key(self.problem)))
        stored = self.store.get_attr(self.KEY_ATTR)
        if stored is None:
            self.store.set_attr(self.KEY_ATTR, key)
        elif stored != key:
            diff = [k for k in key if stored.get(k) != key[k]]
            raise ConfigError(
                f"{label}: study '{cfg.name}' was run with different settings "
                f"({', '.join(diff)}); resume it with the same study, or use a new result "
                f"folder or --storage."
            )

    # --- evaluations ------------------------------------------------------------------
    def _results(self, rows: Any) -> Results:
        values, names, c, ok = outcomes(
            rows, self.config.objectives, self.problem.constraint_names, self.config.bounds
        )
        return Results(values, c, names, ok, rows, self.objectives)

    def _rows_of(self, slots: Sequence[Slot]) -> Any:
        """The rows of trials: from their stored records (persistent stores: the same in a
        resumed run as in an uninterrupted one), else from this process's evaluations."""
        import pandas as pd

        if self.store.persistent:
            frame = pd.DataFrame([s.record for s in slots])
            return frame.drop(columns=["z", "info"], errors="ignore")
        parts: list[Any] = []
        current, idx = -1, list[int]()
        for s in slots:
            key, i = self.row_at[s.number]
            if key != current and idx:
                parts.append(self.frames[current].iloc[idx])
                idx = []
            current = key
            idx.append(i)
        if idx:
            parts.append(self.frames[current].iloc[idx])
        return (
            pd.concat(parts, ignore_index=True)
            if len(parts) > 1
            else parts[0].reset_index(drop=True)
        )

    def _fix_references(self, slots: Sequence[Slot], *, final: bool = False) -> None:
        """Fill in missing references from the first trials (the space-filling start, or
        the first batch), once they are all evaluated; stored with the study."""
        if references_known(self.objectives):
            return
        stored = self.store.get_attr(self.REFERENCES_ATTR)
        if stored:
            self.objectives = tuple(
                replace(o, reference=r, ideal=i)
                for o, (r, i) in zip(self.objectives, stored, strict=True)
            )
            return
        s = self.config.search
        count = min(s.initial_points or s.batch_size, s.budget)
        first = [x for x in slots if x.complete and x.number < count]
        if len(first) < count and not (final and first):
            return
        res = self._results(self._rows_of(first if len(first) >= count else slots))
        self.objectives = infer_references(self.objectives, res.values, res.feasible)
        self.store.set_attr(self.REFERENCES_ATTR, [[o.reference, o.ideal] for o in self.objectives])

    def _tell_new(self, slots: Sequence[Slot]) -> None:
        """Tell the searcher every completed trial it has not seen, batch by batch."""
        new = [s for s in slots if s.complete and s.number not in self.told]
        if not new:
            return
        self._fix_references(slots)
        batches: dict[int, list[Slot]] = {}
        for s in new:
            batches.setdefault(s.batch, []).append(s)
        for group in batches.values():
            rows = self._rows_of(group)
            p = group[0].proposal
            proposals = Proposals(
                z=np.array([g.z for g in group], dtype=float),
                info=[dict(g.proposal.get("info") or {}) for g in group],
                round=int(p.get("round", 0)),
                sampler=[dict(g.sampler) for g in group],
                source=str(p.get("source", "search")),
            )
            results = self._results(rows)
            results.objectives = self.objectives
            self.searcher.tell(proposals, results)
            self.told.update(g.number for g in group)

    def _propose(self, slots: Sequence[Slot], fruitless: int) -> Proposals:
        s = self.config.search
        done = len(slots) - self._outside_budget(slots)
        n = min(s.batch_size, s.budget - done)
        if done < s.initial_points:
            from deepflow.datasets.samplers import unit_cube

            n = min(n, s.initial_points - done)
            if fruitless:  # the Sobol points left are all stored (a small discrete space)
                rng = np.random.default_rng(batch_seed(s.seed, done, fruitless, 0x1417))
                return Proposals(
                    self.ss.from_unit(rng.random((n, self.ss.num_dims))), source="initial"
                )
            u = unit_cube(
                "sobol",
                seed=s.seed,
                start=done,
                stop=done + n,
                num_samples=s.initial_points,
                dims=self.ss.num_dims,
            )
            return Proposals(self.ss.from_unit(u), source="initial")
        start = time.perf_counter()
        proposals = self.searcher.ask(n)
        self.timings["ask"] += time.perf_counter() - start
        return proposals

    def _designs(self, proposals: Proposals) -> list[Design]:
        params: list[dict[str, Any]] = [{} for _ in range(len(proposals))]
        if self.store.persistent:
            u = self.ss.to_unit(proposals.z)
            params = self.ss.physical_params(proposals.z, self.problem.inputs(u))
        return [
            Design(
                z=[float(v) for v in proposals.z[i]],
                params=params[i],
                sampler=proposals.sampler[i],
                proposal={
                    "source": proposals.source,
                    "round": proposals.round,
                    "info": proposals.info[i],
                },
            )
            for i in range(len(proposals))
        ]

    def _evaluate(self, slots: Sequence[Slot]) -> None:
        z = np.array([s.z for s in slots], dtype=float)
        start = time.perf_counter()
        rows = self.problem.evaluate(self.ss.to_unit(z))
        self.timings["evaluate"] += time.perf_counter() - start
        res = self._results(rows)
        rows = rows.reset_index(drop=True)
        strategy = self.config.search.strategy
        records: list[dict[str, Any]] = []
        if self.store.persistent:
            for i, r in enumerate(rows.to_dict("records")):
                p = slots[i].proposal
                record = {k: _plain(v) for k, v in r.items()}
                record.update(
                    z=[float(x) for x in z[i]],
                    source=p.get("source", "search"),
                    round=int(p.get("round", 0)),
                    strategy=strategy,
                    info=p.get("info") or {},
                )
                records.append(record)
        else:
            records = [{} for _ in slots]
        if not self.store.persistent:
            p = slots[0].proposal
            self.frames[slots[0].number] = rows.assign(
                source=p.get("source", "search"), round=int(p.get("round", 0)), strategy=strategy
            )
            for i, s in enumerate(slots):
                self.row_at[s.number] = (slots[0].number, i)
        names = res.constraint_names
        clipped = np.clip(res.constraints, -_BIG, _BIG).reshape(len(slots), len(names))
        constraints = [dict(zip(names, c, strict=True)) for c in clipped.tolist()]
        start = time.perf_counter()
        self.store.complete(slots, [finite(v) for v in res.values], constraints, records)
        self.timings["store"] += time.perf_counter() - start
        for s, r in zip(slots, records, strict=True):
            s.complete = True
            s.record = r

    def _prescreen(self) -> None:
        """A searcher's own batched pre-search (``prescreen()``, e.g. the surrogate strategy's
        MOEA/D run on the oracle): its designs are stored and evaluated as one batch of
        trials (source ``prescreen``) before the budget's, once per study."""
        prescreen = getattr(self.searcher, "prescreen", None)
        if prescreen is None:
            return
        slots = self.store.slots()
        if any(s.proposal.get("source") == "prescreen" for s in slots):
            return
        start = time.perf_counter()
        proposals = prescreen()
        self.timings["prescreen"] = time.perf_counter() - start
        if proposals is None or not len(proposals):
            return
        designs = self._designs(proposals)
        start = time.perf_counter()
        mine = self.store.reserve(designs, budget=len(slots) + len(designs))
        self.timings["store"] += time.perf_counter() - start
        if mine:
            self._evaluate(mine)

    @staticmethod
    def _outside_budget(slots: Sequence[Slot]) -> int:
        """Trials that do not count against the budget (a prescreen's)."""
        return sum(s.proposal.get("source") == "prescreen" for s in slots)

    def run(self) -> None:
        self._prescreen()
        fruitless = 0  # asks in a row whose designs were all stored already
        stuck_at = 0  # how many trials the study had at the last fruitless ask
        while True:
            start = time.perf_counter()
            slots = self.store.slots()
            self.timings["store"] += time.perf_counter() - start
            if fruitless and len(slots) != stuck_at:
                fruitless = 0  # the study has grown since: not the same dead end
            self._tell_new(slots)
            outside = self._outside_budget(slots)
            budget = self.config.search.budget + outside  # in trials of the store
            done = sum(s.complete for s in slots)
            if self.progress is not None:
                self.progress(min(done, budget) - outside, budget - outside)
            if done >= budget:
                return
            start = time.perf_counter()
            mine = self.store.adopt(slots)
            self.timings["store"] += time.perf_counter() - start
            if not mine:
                if len(slots) >= budget:  # the rest is being evaluated by other workers
                    wait(POLL_S)
                    continue
                designs = self._designs(self._propose(slots, fruitless))
                start = time.perf_counter()
                # A strategy that keeps proposing stored designs (a small discrete space
                # nearly exhausted) may repeat them, as Optuna's samplers would.
                distinct = fruitless < MAX_FRUITLESS_ASKS
                mine = self.store.reserve(designs, budget=budget, distinct=distinct)
                self.timings["store"] += time.perf_counter() - start
                if not mine:
                    # Only designs stored before this ask count as fruitless: designs taken
                    # by another worker meanwhile (two workers told the same trials ask with
                    # the same seed) are a lost race, and counting those let a worker that
                    # lost five races store a design twice.
                    stored = {self.store.design_key(s) for s in slots}
                    if all(design_key(d.z) in stored for d in designs):
                        fruitless += 1
                        stuck_at = len(slots)
                    continue  # read again, ask again
                fruitless = 0
            self._evaluate(mine)

    # --- the outcome ----------------------------------------------------------------
    def result(self, start: float, surrogate: dict[str, Any] | None) -> SearchResult:
        import pandas as pd

        slots = [s for s in self.store.slots() if s.complete]
        self._fix_references(slots, final=True)
        rows = self._rows_of(slots) if slots else pd.DataFrame()
        info = [dict(s.proposal.get("info") or {}) for s in slots]
        rows["trial"] = [s.number for s in slots]
        z = np.array([s.z for s in slots], dtype=float).reshape(len(slots), self.ss.num_dims)
        if slots:
            res = self._results(rows)
            normalised = normalise(res.values, self.objectives)
            feasible = res.feasible
        else:
            normalised = np.empty((0, len(self.objectives)))
            feasible = np.empty(0, dtype=bool)
        pareto = pareto_mask(normalised, feasible)
        rows["pareto"] = pareto
        rows.insert(0, "evaluation", np.arange(len(rows)))
        batch = self.config.search.batch_size
        first = self._outside_budget(slots)  # a prescreen's trials: one checkpoint
        checkpoints = sorted({first, *range(first + batch, len(rows), batch), len(rows)} - {0})
        return SearchResult(
            config=self.config,
            objectives=self.objectives,
            rows=rows,
            z=z,
            normalised=normalised,
            feasible=feasible,
            info=info,
            hypervolume_history=hypervolume_history(normalised, feasible, checkpoints),
            pareto=pareto,
            timings_s=dict(self.timings, total=time.perf_counter() - start),
            surrogate=surrogate,
        )


def run_search(
    problem: Problem,
    config: SearchConfig,
    *,
    storage: str | Store | None,
    progress: Callable[[int, int], None] | None = None,
    surrogate_model: Any = None,
    dataset: Any = None,
    searcher: Searcher | None = None,
) -> SearchResult:
    """Run (or resume, or join) a search to its budget; every evaluation is on the problem.

    Args:
        problem: what to evaluate (:class:`~deepflow.search.problem.OracleProblem`).
        config: objectives, bounds and settings.
        storage: where the trials live: None (in memory), an Optuna storage URL
            (``sqlite:///path/optuna.db``, ``postgresql+psycopg://...``), the path of an
            Optuna journal file, or a :class:`~deepflow.search.storage.Store`. Other
            workers running the same study on the same storage share its budget.
        progress: called with (evaluations done, budget) after every batch.
        surrogate_model: strategy ``surrogate``: a fitted SurrogateModel to start from.
        dataset: strategy ``surrogate``: oracle-labelled designs (a DataFrame) to train on.
        searcher: a searcher to use instead of the registered one of the strategy.

    Raises:
        ConfigError: the storage holds this study run with other settings; a bad storage
            URL or credentials.
        StorageError: the storage failed.
    """
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    start = time.perf_counter()
    label = storage if isinstance(storage, str) else "<memory>"
    store = storage if isinstance(storage, Store) else open_store(storage)
    try:
        context = SearchContext(
            problem, config, surrogate_model, dataset, inner_search, resumable=store.persistent
        )
        searcher = searcher or make_searcher(config.search.strategy, context)
        loop = _Loop(problem, config, store, searcher, progress)
        loop.open(getattr(store, "label", label))
        with _heartbeat(store):
            loop.run()
        summary = getattr(searcher, "summary", lambda: None)()
        return loop.result(start, summary)
    finally:
        if not isinstance(storage, Store):
            store.close()


@contextmanager
def _heartbeat(store: Store) -> Iterator[None]:
    """Beat every HEARTBEAT_S seconds in a thread while the loop runs (a persistent store:
    workers on other machines see this one alive while it evaluates a batch)."""
    import threading

    from deepflow.search import storage as _storage

    if not store.persistent:
        yield
        return
    stop = threading.Event()

    def beat() -> None:
        while True:
            try:
                store.beat()
            except Exception:
                pass
            if stop.wait(_storage.HEARTBEAT_S):
                return

    thread = threading.Thread(target=beat, name="deepflow-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def inner_search(problem: Problem, config: SearchConfig) -> F:
    """A quick in-memory search (no storage, no result table) on a cheap problem, e.g. a
    surrogate; returns the native coordinates of every design it evaluated, in order."""
    store = open_store(None)
    context = SearchContext(problem, config, inner=inner_search)
    searcher = make_searcher(config.search.strategy, context)
    _Loop(problem, config, store, searcher, None).run()
    z = [s.z for s in store.slots() if s.complete]
    return np.array(z, dtype=float).reshape(len(z), problem.search_space.num_dims)
