"""Surrogate-assisted search: search on a fitted surrogate, verify on the oracle, refit.

Optionally first a **prescreen** (``search.prescreen_evaluations``,
:meth:`~deepflow.search.searchers.HistorySearcher.prescreen`): a vectorised MOEA/D run on
the oracle itself, whose thinned Pareto designs the loop stores as trials outside the
budget. On the default study it holds 99.1 % of the best-known hypervolume after 600,000
evaluations (about 30 s on one loaded core), where the surrogate's 96 rounds alone reached
87.6 %; a front of 96 designs cannot hold 99 % (the best 96 points of the best-known front
hold 98.8 %).

Each round (one batch of oracle evaluations):

1. (Re)fit the surrogate on every oracle-labelled design available: the optional dataset
   (``surrogate.num_samples`` rows or a DataFrame given by the caller) plus this search's
   evaluations (``refit: false`` keeps the first fit, e.g. a model from ``deepflow fit``).
   Besides the objectives it models each oracle constraint that the data ever violated, as
   a regression whose sign is feasibility (see :func:`constraint_targets`); a classifier of
   the ``feasible`` column only stands in when no constraint explains the infeasible rows.
2. Run ``surrogate.inner_strategy`` (nsga2, tpe, gp or random) on the surrogate for
   ``surrogate.inner_budget`` evaluations, in memory (0 skips it), and score a pool of
   ``surrogate.pool_size`` designs in one vectorised prediction, all around the current
   oracle Pareto designs but the first quarter:

   - a quarter uniform over the space;
   - up to a quarter **level sweeps**: each Pareto design with one discrete dim set to each
     of its other levels (:func:`~deepflow.search.searchers.level_sweeps`: every valid
     mapping of a good chip, which steps reach slowly);
   - the rest **trust-region moves** (:func:`~deepflow.search.searchers.local_moves`:
     continuous steps, neighbouring levels of ordered dims such as the mapping by what the
     levels mean, random levels of categorical ones). The region's radius follows the
     search like TuRBO's [Eriksson et al. 2019]: doubled after two batches in a row that
     raised the hypervolume, halved after three that did not, reset when it gets small
     (:func:`trust_radius`, replayed from the history, so a resumed run proposes what an
     uninterrupted one would).
3. Keep the candidates predicted feasible and not yet evaluated; take three quarters of
   the batch greedily by the hypervolume their medians add to the oracle front, and the
   last quarter by the hypervolume their **optimistic** predictions (the better end of
   the central 68 % interval) add on top of that: designs the model is unsure of but could
   be good, as an upper-confidence-bound acquisition would pick them.

On the default study (25 dims, a 113-level mapping index, only its own evaluations to
learn from) the GP surrogate with these candidates reaches 95 % of the reference
hypervolume in about 100 evaluations, where NSGA-II needs about 1,500
(``benchmarks/search_efficiency.py``); without the level sweeps, the optimistic quarter,
the trust region (plain mutations instead), or the constraint models it needed more or
stalled on some seeds.

The surrogate's predictions for each proposed design are stored with its trial, so the
surrogate-vs-oracle error on the final front is reported.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import time
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from deepflow.search.objectives import Objective, constraint_matrix, normalise
from deepflow.search.pareto import greedy_hypervolume_selection, hypervolume, pareto_mask
from deepflow.search.problem import Problem
from deepflow.search.searchers import (
    History,
    HistorySearcher,
    level_sweeps,
    local_moves,
    scaled_constraints,
)

if TYPE_CHECKING:
    from deepflow.search.base import Proposals, SearchContext

__all__ = ["SurrogateSearcher", "constraint_targets", "trust_radius"]

F = NDArray[np.float64]

#: Oracle constraints of the form need - have: modelled as log(need / have), smooth in the
#: log-encoded inputs (memory need is a product of mapping degrees, the capacity of stacks).
_RATIO_CONSTRAINTS = {"memory_excess_B": ("y_memory_per_device_B", "y_memory_capacity_B")}
_LOG_RATIO = "__log_ratio"
_SCALED = "__scaled"

#: Trust region (unit-cube units): start, smallest before a reset, largest.
RADIUS_START, RADIUS_MIN, RADIUS_MAX = 0.2, 0.0125, 0.8
#: Batches in a row that raise (lower) the hypervolume before the radius doubles (halves).
SUCCESS_BATCHES, FAILURE_BATCHES = 2, 3
#: Share of the scored pool drawn uniformly; at most SWEEP_SHARE of level sweeps (every
#: level of each discrete dim of each Pareto design); the rest trust-region moves.
UNIFORM_SHARE = 0.25
SWEEP_SHARE = 0.25
#: Share of each batch picked on optimistic predictions (the end of the central
#: OPTIMISM_LEVEL interval that is better for each objective), the rest on the medians.
EXPLORE_SHARE = 0.25
OPTIMISM_LEVEL = 0.68


def trust_radius(hypervolumes: Sequence[float], *, rtol: float = 1e-3) -> float:
    """The trust region's radius after a sequence of batches (TuRBO's rule).

    Args:
        hypervolumes: the hypervolume after the start and after each batch since, in order.
        rtol: a batch succeeds when it raises the hypervolume by more than this share.

    Returns:
        The radius: :data:`RADIUS_START`, doubled after :data:`SUCCESS_BATCHES` successes in
        a row (at most :data:`RADIUS_MAX`), halved after :data:`FAILURE_BATCHES` failures in a
        row, and back to the start when it falls below :data:`RADIUS_MIN`.
    """
    radius, wins, losses = RADIUS_START, 0, 0
    for before, after in itertools.pairwise(hypervolumes):
        if after > before * (1.0 + rtol) + 1e-12:
            wins, losses = wins + 1, 0
        else:
            wins, losses = 0, losses + 1
        if wins >= SUCCESS_BATCHES:
            radius, wins = min(2.0 * radius, RADIUS_MAX), 0
        if losses >= FAILURE_BATCHES:
            radius, losses = radius / 2.0, 0
            if radius < RADIUS_MIN:
                radius = RADIUS_START
    return radius


def constraint_targets(rows: Any, constraint_names: Sequence[str]) -> dict[str, F]:
    """Regression targets for the oracle constraints the data ever violated (<= 0 feasible).

    A need-minus-have constraint whose two outputs are in ``rows`` (memory) becomes
    ``log(need / have)``; any other a signed log of the violation over its typical size
    (:func:`~deepflow.search.searchers.scaled_constraints`). Constraints never violated in
    ``rows`` carry no information and are left out.

    Args:
        rows: a DataFrame with the ``c_*`` (and ``y_*``) columns of labelled designs.
        constraint_names: the oracle's constraints (``c_`` column names without the prefix).

    Returns:
        ``c_<name>__log_ratio`` or ``c_<name>__scaled`` column name -> (n,) values.
    """
    out: dict[str, F] = {}
    for name in constraint_names:
        column = f"c_{name}"
        if column not in rows:
            continue
        c = rows[column].to_numpy(dtype=float)
        if not (c > 0).any():
            continue
        need, have = _RATIO_CONSTRAINTS.get(name, ("", ""))
        if need in rows and have in rows:
            a, b = rows[need].to_numpy(dtype=float), rows[have].to_numpy(dtype=float)
            if (a > 0).all() and (b > 0).all():
                out[f"{column}{_LOG_RATIO}"] = np.log(a / b)
                continue
        out[f"{column}{_SCALED}"] = scaled_constraints(c[:, None], [name])[:, 0]
    return out


class _ModelProblem:
    """The fitted surrogate standing in for the oracle: objectives and bounds are its
    medians, each modelled constraint its predicted value (``c_<name>``, <= 0 feasible)."""

    def __init__(self, base: Problem, model: Any, modelled: Sequence[str], classify: bool):
        self.base = base
        self.model = model
        self.search_space = base.search_space
        self.modelled = list(modelled)  # target columns (c_<name>__log_ratio / __scaled)
        self.constraint_names = [_constraint_name(t) for t in self.modelled]
        self.classify = classify
        if classify:
            self.constraint_names.append("infeasible_probability")

    def inputs(self, u: F) -> Any:
        return self.base.inputs(u)

    def evaluate(self, u: F) -> Any:
        x = self.base.inputs(u)
        pred = self.model.predict(x, level=OPTIMISM_LEVEL)
        out = x.copy()
        for t in self.model.targets:
            for suffix in ("", "_std", "_lo", "_hi"):
                out[t + suffix] = pred[t + suffix].to_numpy()
        for t in self.modelled:
            out[f"c_{_constraint_name(t)}"] = pred[t].to_numpy()
        if self.classify:
            p = pred["p_feasible"].to_numpy() if "p_feasible" in pred else np.ones(len(x))
            out["c_infeasible_probability"] = 0.5 - p
        out["feasible"] = True  # the constraint columns decide
        return out

    def frame_attrs(self) -> dict[str, Any]:
        return self.base.frame_attrs()


def _constraint_name(target: str) -> str:
    name = target.removeprefix("c_")
    for suffix in (_LOG_RATIO, _SCALED):
        name = name.removesuffix(suffix)
    return name


class SurrogateSearcher(HistorySearcher):
    """Proposes each batch from a surrogate's predicted Pareto front.

    Args:
        context: the oracle problem (its inputs and search space), the search configuration,
            a fitted SurrogateModel to start from (``model``, else fitted on the data),
            oracle-labelled rows to train on (``dataset``) and the inner search to run on
            the surrogate (``inner``).
    """

    def __init__(self, context: SearchContext) -> None:
        super().__init__(context)
        self.problem: Problem = context.problem
        self.config = context.config
        self.settings = self.config.surrogate
        self.model = context.model
        self.dataset = context.dataset
        self.inner = context.inner
        self.fitted_on = -1
        self.report: dict[str, Any] | None = None
        self.timings = {"fit": 0.0, "inner": 0.0}
        self.modelled: list[str] = []
        self.classify = True  # a given model: its classifier decides feasibility

    @property
    def targets(self) -> list[str]:
        names = [o.column for o in self.config.objectives]
        names += [b.column for b in self.config.bounds if b.column not in names]
        return names

    def surrogate_problem(self) -> _ModelProblem:
        """The fitted surrogate as a problem (for the inner search and the pool)."""
        return _ModelProblem(self.problem, self.model, self.modelled, self.classify)

    # ------------------------------------------------------------------ fitting
    def _training_frame(self, history_rows: Any) -> Any:
        import pandas as pd

        frames = [f for f in (self.dataset, history_rows) if f is not None and len(f)]
        df = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0].copy()
        extra = constraint_targets(df, self.problem.constraint_names)
        if extra:
            df = df.assign(**extra)
        df.attrs = self.problem.frame_attrs()
        self.modelled = list(extra)
        # The classifier stands in only if some infeasible row violates no modelled constraint.
        names = [_constraint_name(t) for t in extra]
        explained = np.zeros(len(df), dtype=bool)
        for name in names:
            explained |= df[f"c_{name}"].to_numpy(dtype=float) > 0
        infeasible = ~df["feasible"].to_numpy(dtype=bool) if "feasible" in df else explained
        self.classify = bool((infeasible & ~explained).any())
        return df

    def _fit(self, history_rows: Any, *, first: bool) -> None:
        """Fit the surrogate on the dataset and ``history_rows``; the ``first`` fit holds 20 %
        out (from 50 rows) for the held-out report."""
        from deepflow.surrogate import fit_surrogate

        df = self._training_frame(history_rows)
        start = time.perf_counter()
        from threadpoolctl import threadpool_limits

        # One BLAS/OpenMP thread: histogram boosting and torch oversubscribe 2 shared cores
        # badly (thread oversubscription; a 2k-row boosting fit took minutes under load).
        with warnings.catch_warnings(), threadpool_limits(1):
            warnings.simplefilter("ignore")
            model, report = fit_surrogate(
                df,
                self.settings.model,
                targets=self.targets + self.modelled,
                test_fraction=0.2 if first and len(df) >= 50 else 0.0,
                random_state=self.config.search.seed,
                # Only the inputs the space declares log-scaled: a search reaches the edges
                # of the cube (0), which a data-driven log scale would reject.
                log_ratio=float("inf"),
            )
            if first:
                self.report = report  # held-out accuracy of the first fit (80/20 split)
        self.timings["fit"] += time.perf_counter() - start
        self.model = model

    def _ensure_fit(self, history: History, rows: Any) -> None:
        """Fit as an uninterrupted search does at this ask, whatever this process saw before.

        The first fit (at the first ask: on what was told before any search batch) holds rows
        out for its report; later ones (``refit``) fit every row told. A worker resumed after
        the first fit makes that fit again first, on the same rows, for the same report (and,
        without ``refit``, the same model): had it split the rows of now instead, its model,
        and so its proposals, would differ from the uninterrupted run's (docs/architecture.md).
        """
        refit = self.settings.refit
        if self.model is not None and not refit:
            return  # a given model, kept
        if self.report is None and any(p.source == "search" for p in self.batches_told):
            self._fit(self._rows_before_search(), first=True)
            self.fitted_on = -1 if refit else history.num
        if self.model is None or (refit and self.fitted_on != history.num):
            self._fit(rows if len(rows) else None, first=self.report is None)
            self.fitted_on = history.num

    def _rows_before_search(self) -> Any:
        """The rows told before the first search batch (prescreen and space-filling start)."""
        import pandas as pd

        parts = []
        for proposals, frame in zip(self.batches_told, self._rows, strict=True):
            if proposals.source == "search":
                break
            parts.append(frame)
        return pd.concat(parts, ignore_index=True) if parts else None

    # ------------------------------------------------------------------ proposing
    @property
    def round(self) -> int:
        """The round of the next proposal: one more than the search batches told."""
        return 1 + sum(p.source == "search" for p in self.batches_told)

    def ask(self, n: int) -> Proposals:
        """The next ``n`` designs (native coordinates) with their predictions."""
        from deepflow.search.base import Proposals

        z, info = self.propose(n, self.history(), self.objectives, self.rows())
        return Proposals(z, info=info, round=self.round)

    def propose(
        self, n: int, history: History, objectives: tuple[Objective, ...], rows: Any
    ) -> tuple[F, list[dict[str, Any]]]:
        """The next ``n`` designs (native coordinates) and their predictions."""
        from threadpoolctl import threadpool_limits

        from deepflow.search.base import batch_seed

        self._ensure_fit(history, rows)
        start = time.perf_counter()
        rng = np.random.default_rng(
            batch_seed(self.config.search.seed, history.num, self.next_salt(), 0xA551)
        )
        surrogate = self.surrogate_problem()
        with threadpool_limits(1):
            candidates = self._candidates(rng, history)
            pred = surrogate.evaluate(self.problem.search_space.to_unit(candidates))
        values = np.stack([pred[o.column].to_numpy(dtype=float) for o in objectives], axis=1)
        _names, c = constraint_matrix(
            {k: pred[k].to_numpy(dtype=float) for k in pred.columns if k.startswith(("c_", "y_"))},
            surrogate.constraint_names,
            self.config.bounds,
        )
        c = c.reshape(len(candidates), -1)  # none modelled: (n, 0), every candidate ok
        ok = (c <= 0).all(axis=1)
        seen = {tuple(np.round(z, 9)) for z in history.z}
        fresh = np.array([tuple(np.round(z, 9)) not in seen for z in candidates], dtype=bool)
        keep = np.flatnonzero(ok & fresh)
        if keep.size == 0:  # nothing predicted feasible: the least infeasible fresh ones
            keep = np.flatnonzero(fresh)[np.argsort(c[fresh].max(axis=1))][: max(n, 1)]
        norm = normalise(values[keep], objectives)
        front = history.normalised[history.feasible]
        explore = round(EXPLORE_SHARE * n)
        chosen = greedy_hypervolume_selection(norm, front, n - explore)
        if explore:
            # The rest of the batch on optimistic predictions (the lower end of a minimised
            # objective's interval), on top of what the first picks are predicted to add.
            optimistic = np.stack(
                [pred[o.column + ("_lo" if o.direction == "minimize" else "_hi")].to_numpy(float)
                 for o in objectives], axis=1,
            )[keep]  # fmt: skip
            opt = normalise(optimistic, objectives)
            rest = np.setdiff1d(np.arange(len(keep)), chosen)
            more = greedy_hypervolume_selection(
                opt[rest], np.vstack([front.reshape(-1, norm.shape[1]), norm[chosen]]), explore
            )
            chosen = [*chosen, *rest[more].tolist()]
        picks = keep[np.asarray(chosen, dtype=np.int64)]
        # Distinct designs only: duplicates among candidates would waste oracle calls.
        _, first = np.unique(np.round(candidates[picks], 9), axis=0, return_index=True)
        picks = picks[np.sort(first)]
        if len(picks) < n:
            extra = rng.random((n - len(picks), self.problem.search_space.num_dims))
            fill = self.problem.search_space.from_unit(extra)
            z = np.vstack([candidates[picks], fill])
        else:
            z = candidates[picks]
        info: list[dict[str, Any]] = []
        for i in range(len(z)):
            if i < len(picks):
                p = int(picks[i])
                info.append(
                    {
                        "surrogate": {
                            o.name: {
                                "mean": float(values[p, j]),
                                "std": float(pred[f"{o.column}_std"].iloc[p]),
                            }
                            for j, o in enumerate(objectives)
                        }
                    }
                )
            else:
                info.append({})
        self.timings["inner"] += time.perf_counter() - start
        return z, info

    def radius(self, history: History) -> float:
        """The trust region's radius, replayed from the hypervolume after each batch."""
        s = self.config.search
        before = sum(len(p) for p in self.batches_told if p.source != "search")
        start = min(max(s.initial_points, before, 1), history.num)
        ends = [*range(start, history.num, max(s.batch_size, 1)), history.num]
        hv = [hypervolume(history.normalised[:e], history.feasible[:e]) for e in ends]
        return trust_radius(hv)

    def _candidates(self, rng: np.random.Generator, history: History) -> F:
        ss = self.problem.search_space
        s = self.settings
        parts = [self._inner_search(rng)] if s.inner_budget > 0 else []
        pool = s.pool_size
        if pool > 0:
            uniform = math.ceil(UNIFORM_SHARE * pool)
            parts.append(ss.from_unit(rng.random((uniform, ss.num_dims))))
            parents = self._parents(history)
            sweeps = level_sweeps(parents, ss)
            limit = int(SWEEP_SHARE * pool)
            if len(sweeps) > limit:
                sweeps = sweeps[rng.choice(len(sweeps), size=limit, replace=False)]
            parts.append(sweeps)
            count = pool - uniform - len(sweeps)
            parts.append(local_moves(parents, ss, rng, count=count, radius=self.radius(history)))
        if not parts:
            parts.append(ss.from_unit(rng.random((1, ss.num_dims))))
        return np.vstack(parts)

    def _parents(self, history: History) -> F:
        """The oracle's feasible Pareto designs (none feasible yet: the least violating)."""
        feasible = history.feasible & np.isfinite(history.normalised).all(axis=1)
        if feasible.any():
            idx = np.flatnonzero(feasible)
            return history.z[idx[pareto_mask(history.normalised[idx])]]
        worst = np.where(np.isfinite(history.constraints), history.constraints, np.inf)
        order = np.argsort(worst.max(axis=1) if worst.shape[1] else np.zeros(history.num))
        return history.z[order[: max(1, self.config.search.batch_size)]]

    def _inner_search(self, rng: np.random.Generator) -> F:
        """Run the inner strategy on the surrogate (in memory); returns every point it tried."""
        s = self.config.search
        if self.inner is None:
            raise RuntimeError("SurrogateSearcher needs the context's inner search")
        inner = dataclasses.replace(
            self.config,
            name="inner",
            objectives=self.config.objectives,
            bounds=self.config.bounds,
            search=type(s)(
                strategy=self.settings.inner_strategy,
                budget=self.settings.inner_budget,
                batch_size=max(s.batch_size, 50),
                initial_points=min(self.settings.inner_budget, max(s.batch_size, 50)),
                seed=int(rng.integers(0, 2**31 - 1)),
            ),
        )
        return self.inner(self.surrogate_problem(), inner)

    def summary(self) -> dict[str, Any] | None:
        if self.report is None:
            return None
        metrics = self.report.get("metrics", {})
        return {
            "kind": self.settings.model,
            # the objectives' and bounds' scores (the constraint models are internal)
            "held_out": {t: m for t, m in metrics.items() if t in self.targets},
            "num_train": self.report.get("num_train"),
            "num_dataset_rows": 0 if self.dataset is None else len(self.dataset),
            "timings_s": dict(self.timings),
            "prescreen": self.prescreen_record,
            "prescreen_evaluations": (self.prescreen_record or {}).get("evaluations", 0),
        }
