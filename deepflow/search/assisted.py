"""Surrogate-assisted search: search on a fitted surrogate, verify on the oracle, refit.

Each round (one batch of oracle evaluations):

1. (Re)fit the surrogate on every oracle-labelled design available: the optional dataset
   (``surrogate.num_samples`` rows or a DataFrame given by the caller) plus this search's
   evaluations (``refit: false`` keeps the first fit, e.g. a model from ``deepflow fit``).
2. Run ``surrogate.inner_strategy`` (nsga2, tpe, gp or random) on the surrogate for
   ``surrogate.inner_budget`` evaluations, in memory, and score a pool of
   ``surrogate.pool_size`` designs (half uniform, half mutations of the current oracle
   front) in one vectorised prediction.
3. Keep the candidates predicted feasible and not yet evaluated, and take the batch that
   adds the most predicted hypervolume to the oracle front (greedy).

The surrogate's predictions for each proposed design are stored with its trial, so the
surrogate-vs-oracle error on the final front is reported.
"""

from __future__ import annotations

import time
import warnings
from typing import Any

import numpy as np
from numpy.typing import NDArray

from deepflow.search.objectives import Objective, constraint_matrix, normalise
from deepflow.search.pareto import greedy_hypervolume_selection
from deepflow.search.problem import Problem, SurrogateProblem
from deepflow.search.searchers import History, mutate

__all__ = ["SurrogateSearcher"]

F = NDArray[np.float64]


class SurrogateSearcher:
    """Proposes each batch from a surrogate's predicted Pareto front.

    Args:
        problem: the oracle problem (its inputs and search space).
        config: the search configuration (:class:`~deepflow.search.engine.SearchConfig`).
        model: a fitted SurrogateModel to start from (else fitted on the data).
        dataset: oracle-labelled rows (DataFrame with the dataset's columns) to train on.
    """

    uses_sampler = False

    def __init__(
        self, problem: Problem, config: Any, *, model: Any = None, dataset: Any = None
    ) -> None:
        self.problem = problem
        self.config = config
        self.settings = config.surrogate
        self.model = model
        self.dataset = dataset
        self.fitted_on = -1
        self.round = 0
        self.report: dict[str, Any] | None = None
        self.timings = {"fit": 0.0, "inner": 0.0}

    @property
    def targets(self) -> list[str]:
        names = [o.column for o in self.config.objectives]
        names += [b.column for b in self.config.bounds if b.column not in names]
        return names

    # ------------------------------------------------------------------ fitting
    def _training_frame(self, history_rows: Any) -> Any:
        import pandas as pd

        frames = [f for f in (self.dataset, history_rows) if f is not None and len(f)]
        df = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0].copy()
        df.attrs = self.problem.frame_attrs()
        return df

    def _fit(self, history_rows: Any) -> None:
        from deepflow.surrogate import fit_surrogate

        df = self._training_frame(history_rows)
        start = time.perf_counter()
        first = self.report is None
        from threadpoolctl import threadpool_limits

        # One BLAS/OpenMP thread: histogram boosting and torch oversubscribe 2 shared cores
        # badly (toolchain.md §5.1; a 2k-row boosting fit took minutes under load).
        with warnings.catch_warnings(), threadpool_limits(1):
            warnings.simplefilter("ignore")
            model, report = fit_surrogate(
                df,
                self.settings.model,
                targets=self.targets,
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

    # ------------------------------------------------------------------ proposing
    def propose(
        self, n: int, history: History, objectives: tuple[Objective, ...], rows: Any
    ) -> tuple[F, list[dict[str, Any]], int]:
        """The next ``n`` designs (native coordinates), their predictions, the round."""
        from threadpoolctl import threadpool_limits

        self.round += 1
        need_fit = self.model is None or (self.settings.refit and self.fitted_on != history.num)
        if need_fit:
            self._fit(rows if len(rows) else None)
            self.fitted_on = history.num
        start = time.perf_counter()
        rng = np.random.default_rng(
            np.random.SeedSequence([self.config.search.seed, history.num, 0xA551])
        )
        with threadpool_limits(1):
            candidates = self._candidates(rng, history)
        surrogate = SurrogateProblem(self.problem, self.model)
        with threadpool_limits(1):
            pred = surrogate.evaluate(self.problem.search_space.to_unit(candidates))
        values = np.stack([pred[o.column].to_numpy(dtype=float) for o in objectives], axis=1)
        _names, c = constraint_matrix(
            {k: pred[k].to_numpy(dtype=float) for k in pred.columns if k.startswith(("c_", "y_"))},
            ["infeasible_probability"],
            self.config.bounds,
        )
        ok = (c <= 0).all(axis=1)
        seen = {tuple(np.round(z, 9)) for z in history.z}
        fresh = np.array([tuple(np.round(z, 9)) not in seen for z in candidates], dtype=bool)
        keep = np.flatnonzero(ok & fresh)
        if keep.size == 0:  # nothing predicted feasible: the least infeasible fresh ones
            keep = np.flatnonzero(fresh)[np.argsort(c[fresh].max(axis=1))][: max(n, 1)]
        norm = normalise(values[keep], objectives)
        front = history.normalised[history.feasible]
        chosen = greedy_hypervolume_selection(norm, front, n)
        picks = keep[chosen]
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
        return z, info, self.round

    def _candidates(self, rng: np.random.Generator, history: History) -> F:
        ss = self.problem.search_space
        s = self.settings
        parts = []
        if s.inner_budget > 0:
            parts.append(self._inner_search(rng))
        pool = s.pool_size
        if pool > 0:
            parts.append(ss.from_unit(rng.random((pool - pool // 2, ss.num_dims))))
            front = history.z[history.feasible] if history.feasible.any() else history.z
            if len(front):
                parts.append(mutate(front, ss, rng, count=pool // 2))
        if not parts:
            parts.append(ss.from_unit(rng.random((1, ss.num_dims))))
        return np.vstack(parts)

    def _inner_search(self, rng: np.random.Generator) -> F:
        """Run the inner strategy on the surrogate (in memory); returns every point it tried."""
        from deepflow.search.engine import SearchConfig, run_inner

        s = self.config.search
        inner = SearchConfig(
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
        return run_inner(SurrogateProblem(self.problem, self.model), inner)

    def summary(self) -> dict[str, Any] | None:
        if self.report is None:
            return None
        return {
            "kind": self.settings.model,
            "held_out": self.report.get("metrics", {}),
            "num_train": self.report.get("num_train"),
            "num_dataset_rows": 0 if self.dataset is None else len(self.dataset),
            "timings_s": dict(self.timings),
        }
