"""Ask/tell searchers. Each proposes designs in the native coordinates of a SearchSpace.

- ``random``: uniform over the unit cube (the space's own distribution: valid mappings only),
  seeded per batch so that a resumed run proposes what an uninterrupted one would.
- ``nsga2``, ``tpe``, ``gp``: Optuna's samplers; they read the history from the Optuna study
  (the engine keeps every evaluation there), so ``ask`` creates the trials itself.
- ``botorch``: ParEGO's noisy expected improvement (``qLogNParEGO``, one random
  scalarisation of the objectives per batch member) on a GP of the normalised objectives and
  scaled constraints (float64, inputs encoded in [0, 1]: the mapping by its degrees,
  categorical dims one-hot), maximised over a generated pool of candidates (see
  :class:`BotorchSearcher`).
- ``surrogate``: see :mod:`deepflow.search.assisted`.

Every searcher follows :class:`~deepflow.search.base.Searcher` (``ask(n)`` /
``tell(proposals, results)``) and is built from a :class:`~deepflow.search.base.SearchContext`;
the names are registered in :mod:`deepflow.search.registry`. Each ask is seeded from the
seed and the number of evaluations told so far, and the Optuna samplers are rebuilt for each
ask, so what a searcher proposes depends only on what it was told: a search resumed from its
storage proposes what an uninterrupted one would.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from deepflow.search.space import SearchSpace

if TYPE_CHECKING:
    from deepflow.search.base import Proposals, Results, SearchContext

__all__ = [
    "BotorchSearcher",
    "GPSearcher",
    "History",
    "HistorySearcher",
    "NSGA2Searcher",
    "OptunaSearcher",
    "RandomSearcher",
    "TPESearcher",
    "encode_features",
    "level_sweeps",
    "local_moves",
    "make_sampler",
    "mutate",
    "scaled_constraints",
]

F = NDArray[np.float64]
_EDGE = 1e-9  # local moves stay this far inside the unit cube


@dataclass
class History:
    """Every evaluation so far, in evaluation order (the engine appends to it).

    Attributes:
        z: (n, d) native coordinates.
        normalised: (n, k) normalised objectives (larger is better, reference at 0).
        constraints: (n, m) constraints in their units (<= 0 feasible).
        constraint_names: the m names (``c_`` column names without the prefix, user bounds).
        feasible: (n,) bool.
    """

    z: F
    normalised: F
    constraints: F
    constraint_names: list[str]
    feasible: NDArray[np.bool_]
    info: list[dict[str, Any]] = field(default_factory=list)

    @property
    def num(self) -> int:
        return int(self.z.shape[0])


def _batch_rng(seed: int, start: int, salt: int = 0) -> np.random.Generator:
    """A generator that depends only on the seed, the evaluations told so far and the asks
    since (0 unless another worker took a proposal)."""
    entropy = [seed, start, 0x5EA2C4] + ([salt] if salt else [])
    return np.random.default_rng(np.random.SeedSequence(entropy))


class HistorySearcher:
    """Keeps what it was told as a :class:`History` (the base of proposal strategies).

    Args:
        context: the problem, the configuration and what the strategy starts from.
    """

    def __init__(self, context: SearchContext) -> None:
        self.context = context
        self.search_space: SearchSpace = context.problem.search_space
        self.seed = context.config.search.seed
        self.objectives = context.config.objectives
        self._z: list[F] = []
        self._values: list[F] = []
        self._constraints: list[F] = []
        self._feasible: list[NDArray[np.bool_]] = []
        self._rows: list[Any] = []
        self._names: list[str] = []
        self._info: list[dict[str, Any]] = []
        self.num_told = 0
        self.batches_told: list[Proposals] = []
        self.salt = 0  # asks since the last tell
        self.prescreen_record: dict[str, Any] | None = None

    def tell(self, proposals: Proposals, results: Results) -> None:
        self._z.append(np.asarray(proposals.z, dtype=float))
        self._values.append(np.asarray(results.values, dtype=float))
        self._constraints.append(np.asarray(results.constraints, dtype=float))
        self._feasible.append(np.asarray(results.feasible, dtype=bool))
        self._rows.append(results.rows)
        self._names = list(results.constraint_names)
        self._info.extend(proposals.info)
        self.objectives = results.objectives
        self.num_told += len(proposals)
        self.batches_told.append(proposals)
        self.salt = 0

    def prescreen(self) -> Proposals | None:
        """The designs to store before the budget's (None: no prescreen).

        With ``search.prescreen_evaluations`` >= ``search.prescreen_population``: a
        vectorised MOEA/D run on the problem itself
        (:func:`~deepflow.search.evolution.prescreen`: one oracle call a generation, about
        10^4 designs a second on the default study), its Pareto designs thinned to at most
        ``search.prescreen_points``. The loop stores and evaluates them as one batch of
        trials (source ``prescreen``) outside the budget, once per study, so the strategy
        starts from that front; the run is seeded by the search's seed only.
        """
        from deepflow.search.base import Proposals
        from deepflow.search.evolution import prescreen

        s = self.context.config.search
        evaluations = int(getattr(s, "prescreen_evaluations", 0))
        population = int(getattr(s, "prescreen_population", 1000))
        out = prescreen(
            self.context.problem,
            self.context.config.objectives,
            self.context.config.bounds,
            evaluations=evaluations,
            population=population,
            points=int(getattr(s, "prescreen_points", 1024)),
            seed=s.seed,
        )
        if out is None:
            return None
        z, self.prescreen_record = out
        return Proposals(z, info=[{"prescreen": True} for _ in range(len(z))], source="prescreen")

    def next_salt(self) -> int:
        """The salt of this ask (0 for the first ask after a tell)."""
        salt = self.salt
        self.salt += 1
        return salt

    def history(self) -> History:
        """Everything told so far (objectives normalised by the latest references)."""
        from deepflow.search.base import references_known
        from deepflow.search.objectives import normalise

        d, k = self.search_space.num_dims, len(self.objectives)
        if not self._z:
            return History(
                np.empty((0, d)), np.empty((0, k)), np.empty((0, 0)), [],
                np.empty(0, dtype=bool),
            )  # fmt: skip
        values = np.vstack(self._values)
        normalised = (
            normalise(values, self.objectives)
            if references_known(self.objectives)
            else np.zeros_like(values)
        )
        m = len(self._names)
        return History(
            np.vstack(self._z),
            normalised,
            np.vstack([c.reshape(len(z), m) for c, z in zip(self._constraints, self._z,
                                                               strict=True)]),
            list(self._names),
            np.concatenate(self._feasible),
            list(self._info),
        )  # fmt: skip

    def rows(self) -> Any:
        """The told rows (a DataFrame; empty without any)."""
        import pandas as pd

        if not self._rows:
            return pd.DataFrame()
        return pd.concat(self._rows, ignore_index=True)


class RandomSearcher(HistorySearcher):
    """Uniform random designs (the baseline)."""

    def ask(self, n: int) -> Proposals:
        from deepflow.search.base import Proposals

        u = _batch_rng(self.seed, self.num_told, self.next_salt()).random(
            (n, self.search_space.num_dims)
        )
        return Proposals(self.search_space.from_unit(u))


def make_sampler(strategy: str, *, seed: int, batch_size: int, initial_points: int) -> Any:
    """The Optuna sampler of a strategy (proposal strategies get a seeded RandomSampler,
    which only runs if a trial was not enqueued)."""
    import optuna

    if strategy == "nsga2":
        # A population of one batch: the default 50 is a single random generation on small
        # budgets (measured: see README).
        return optuna.samplers.NSGAIISampler(population_size=max(batch_size, 2), seed=seed)
    if strategy == "tpe":
        return optuna.samplers.TPESampler(n_startup_trials=max(initial_points, 1), seed=seed)
    if strategy == "gp":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return optuna.samplers.GPSampler(
                seed=seed, n_startup_trials=max(initial_points, 1), deterministic_objective=True
            )
    return optuna.samplers.RandomSampler(seed=seed)


def _known_relative_space(sampler: Any, distributions: dict[str, Any]) -> None:
    """Give a fresh NSGA-II or GP sampler the relative search space it would infer.

    Both infer it as the intersection of every finished trial's distributions, recomputed over
    all trials at each ask when the sampler is new (Optuna's cache lives in the sampler):
    O(trials) per ask, ≈70 s of a 1,000-trial inner search. Every trial of the searcher's
    study has exactly ``distributions``, so the intersection is known: the same dict, sorted
    by name, without single-valued ones, and empty until a trial has finished.
    """
    import optuna

    if not isinstance(sampler, optuna.samplers.NSGAIISampler | optuna.samplers.GPSampler):
        return
    space = {k: d for k, d in sorted(distributions.items()) if not d.single()}
    finished = [False]

    def infer(study: Any, trial: Any) -> dict[str, Any]:
        if not finished[0]:
            finished[0] = any(t.state.is_finished() for t in study.get_trials(deepcopy=False))
        return dict(space) if finished[0] else {}

    sampler.infer_relative_search_space = infer  # type: ignore[method-assign]


class OptunaSearcher:
    """An Optuna sampler (NSGA-II, TPE, GP) on an in-memory study of what it was told.

    Each ask builds the sampler afresh, seeded from the seed and the number of trials told,
    so it proposes the same after a resume; the sampler's own trial attributes (NSGA-II's
    generation) travel with the proposals and are told back.
    """

    strategy = ""

    def __init__(self, context: SearchContext) -> None:
        import optuna

        cfg = context.config
        self.search_space: SearchSpace = context.problem.search_space
        self.settings = cfg.search
        self.distributions = self.search_space.distributions()
        directions: Any = [o.direction for o in cfg.objectives]
        self.live = optuna.create_study(directions=directions)
        self.pending: dict[tuple[float, ...], Any] = {}
        self.resumable = context.resumable
        self.num_told = 0
        self.salt = 0

    def ask(self, n: int) -> Proposals:
        from deepflow.search.base import Proposals, batch_seed

        if self.pending and self.resumable:
            self._forget_untold()
        s = self.settings
        seed = int(batch_seed(s.seed, self.num_told, self.salt, 0x0B7).generate_state(1)[0])
        self.salt += 1
        self.live.sampler = make_sampler(
            self.strategy, seed=seed, batch_size=s.batch_size, initial_points=s.initial_points
        )
        _known_relative_space(self.live.sampler, self.distributions)
        # GPSampler proposes one point at a time and ignores pending trials: batch of one.
        count = 1 if self.strategy == "gp" else n
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # "greenlet unavailable" (GPSampler)
            trials = [self.live.ask(self.distributions) for _ in range(count)]
        z = np.array([self.search_space.from_params(t.params) for t in trials])
        sampler = []
        for trial, row in zip(trials, z, strict=True):
            self.pending[_key(row)] = trial
            attrs = self.live._storage.get_trial_system_attrs(trial._trial_id)
            sampler.append({k: v for k, v in attrs.items() if not k.startswith("constraints")})
        return Proposals(z, sampler=sampler)

    def _forget_untold(self) -> None:
        """Drop the trials asked and never told back (by the next ask, every proposal the
        store kept has been told): the store left them out (stored already, or past the
        budget), and a worker resumed after a kill never asked them, so they must not stay
        in the live study as running trials (TPE, NSGA-II and GP propose differently with
        one there; marking them failed is not enough for NSGA-II). Optuna cannot delete a
        trial: the told ones move to a fresh study, in order. Only after a dropped proposal
        of a resumable search (an in-memory one, e.g. an inner search where drops are
        frequent, cannot be resumed and keeps them)."""
        import optuna

        told = [t for t in self.live.get_trials(deepcopy=False) if t.state.is_finished()]
        self.live = optuna.create_study(directions=self.live.directions)
        self.live.add_trials(told)
        self.pending.clear()

    def tell(self, proposals: Proposals, results: Results) -> None:
        import optuna

        from deepflow.search.storage import finite

        for i, z in enumerate(proposals.z):
            values = finite([float(v) for v in results.values[i]])
            constraints = {
                n: float(np.clip(v, -1e300, 1e300))
                for n, v in zip(results.constraint_names, results.constraints[i], strict=True)
            }
            trial = self.pending.pop(_key(z), None)
            if trial is not None:
                for name, value in constraints.items():
                    trial.set_constraint(name, value)
                self.live.tell(trial, values)
            else:  # evaluated by another worker, or before a restart
                self.live.add_trial(
                    optuna.trial.create_trial(
                        params=self.search_space.to_params(z),
                        distributions=self.distributions,
                        values=values,
                        constraints=constraints,
                        system_attrs=dict(proposals.sampler[i]),
                    )
                )
        self.num_told += len(proposals)
        self.salt = 0


def _key(z: Any) -> tuple[float, ...]:
    return tuple(round(float(v), 9) for v in z)


class NSGA2Searcher(OptunaSearcher):
    """Optuna's NSGA-II (a population of one batch)."""

    strategy = "nsga2"


class TPESearcher(OptunaSearcher):
    """Optuna's multi-objective TPE."""

    strategy = "tpe"


class GPSearcher(OptunaSearcher):
    """Optuna's GP sampler (one design per ask)."""

    strategy = "gp"


def scaled_constraints(constraints: F, names: list[str]) -> F:
    """Constraints for a model: divided by their typical size, then a signed log, so a
    GP sees violations of bytes and watts alike and the sign (feasibility) is kept."""
    from deepflow.search.objectives import constraint_scale

    c = np.asarray(constraints, dtype=float)
    scale = np.array([constraint_scale(n) for n in names]) if names else np.ones(0)
    x = np.where(np.isfinite(c), c, 1e6) / scale
    return np.sign(x) * np.log1p(np.abs(x))


class BotorchSearcher(HistorySearcher):
    """qLogNParEGO with outcome constraints on a GP, maximised over a generated candidate pool.

    The GP (float64, outcomes standardised) sees each design in a smooth encoding
    (:func:`encode_features`): continuous coordinates as they are, ordered integer dims by
    their meaning (the mapping index by log2 of its parallel degrees, so TP 4 -> 8 is one
    step however the 113 valid mappings are numbered), categorical dims one-hot. A batch of n
    is picked greedily over :attr:`pool_size` candidates: each pick maximises ParEGO's noisy
    expected improvement of an augmented Chebyshev scalarisation with its own weights drawn
    from the simplex (Knowles 2006; Daulton et al., NeurIPS 2020, §5: one scalarisation per
    batch member; ``botorch.acquisition.multi_objective.parego.qLogNParEGO``), the picks so
    far pending. The pool: a quarter uniform, up to a quarter level sweeps of the feasible
    Pareto designs (the nearest mappings, every other level of the other discrete dims) and
    the rest trust-region moves around them (:func:`~deepflow.search.assisted.trust_radius`),
    the candidates of the surrogate strategy. qLogNEHVI over the same pool
    (``optimize_acqf_discrete``) reached the same hypervolume on the default study but spent
    most of each batch partitioning the Pareto front of every posterior sample: 15 s a batch
    at 48 designs, 88 s at 232 (README, Search efficiency); mixed-integer optimisation over
    the 113-level index (``optimize_acqf_mixed_alternating``) about 85 s a batch.

    Args:
        context: the problem and configuration (seeds torch and the pool for each batch
            with the number of evaluations told).

    Attributes:
        pool_size, mc_samples: candidates scored per batch; quasi-MC samples of the
            acquisition.
    """

    pool_size = 512
    mc_samples = 16
    fit_iterations = 50
    #: Nearest mappings of a Pareto design swept in the pool.
    near_mappings = 8

    def ask(self, n: int) -> Proposals:
        import torch

        from deepflow.search.base import Proposals, batch_seed

        torch.set_num_threads(1)  # more threads oversubscribe 2 cores (measured)
        history = self.history()
        if history.num < 2:
            u = _batch_rng(self.seed, history.num, self.next_salt()).random(
                (n, self.search_space.num_dims)
            )
            return Proposals(self.search_space.from_unit(u))
        seed = batch_seed(self.seed, history.num, self.next_salt())
        torch.manual_seed(int(seed.generate_state(1)[0]))
        rng = np.random.default_rng(seed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # jitter / fitting warnings
            return Proposals(self._ask(n, history, rng))

    def _pool(self, history: History, rng: np.random.Generator) -> F:
        """Candidates not evaluated yet (see the class docstring)."""
        from deepflow.search.assisted import trust_radius
        from deepflow.search.pareto import hypervolume, pareto_mask

        ss = self.search_space
        count = self.pool_size
        parts = [ss.from_unit(rng.random((count // 4, ss.num_dims)))]
        ok = history.feasible & np.isfinite(history.normalised).all(axis=1)
        if ok.any():
            idx = np.flatnonzero(ok)
            parents = history.z[idx[pareto_mask(history.normalised[idx])]]
        else:
            worst = np.where(np.isfinite(history.constraints), history.constraints, np.inf)
            score = worst.max(axis=1) if worst.shape[1] else np.zeros(history.num)
            parents = history.z[np.argsort(score)[:8]]
        sweeps = level_sweeps(parents, ss, nearest=self.near_mappings)
        if len(sweeps) > count // 4:
            sweeps = sweeps[rng.choice(len(sweeps), size=count // 4, replace=False)]
        parts.append(sweeps)
        ends = range(2, history.num + 1, 8)
        radius = trust_radius([hypervolume(history.normalised[:e], history.feasible[:e])
                               for e in ends])  # fmt: skip
        rest = count - sum(len(p) for p in parts)
        parts.append(local_moves(parents, ss, rng, count=rest, radius=radius))
        pool = np.vstack(parts)
        from deepflow.search.storage import design_keys

        seen = set(design_keys(list(history.z)))
        keys = design_keys(list(pool))
        fresh, taken = [], set()
        for i, key in enumerate(keys):
            if key not in seen and key not in taken:
                fresh.append(i)
                taken.add(key)
        return pool[np.asarray(fresh, dtype=np.int64)]

    def _ask(self, n: int, history: History, rng: np.random.Generator) -> F:
        import torch
        from botorch.acquisition.multi_objective.objective import (
            IdentityMCMultiOutputObjective,
        )
        from botorch.acquisition.multi_objective.parego import qLogNParEGO
        from botorch.fit import fit_gpytorch_mll
        from botorch.models import SingleTaskGP
        from botorch.models.transforms.outcome import Standardize
        from botorch.sampling.normal import SobolQMCNormalSampler
        from botorch.utils.sampling import sample_simplex
        from gpytorch.mlls import ExactMarginalLogLikelihood

        ss = self.search_space
        dtype = torch.float64
        X = torch.as_tensor(encode_features(history.z, ss), dtype=dtype)
        # Objectives: normalised (larger is better, reference at 0); far-below-reference
        # values clipped so that one terrible design does not flatten the GP.
        Y = np.clip(history.normalised, -1.0, 2.0)
        Y = np.where(np.isfinite(Y), Y, -1.0)
        k = Y.shape[1]
        C = scaled_constraints(history.constraints, history.constraint_names)
        # Constraints never violated in the data carry no information for the model.
        active = [j for j in range(C.shape[1]) if (C[:, j] > 0).any() and np.ptp(C[:, j]) > 0]
        outcomes = np.hstack([Y, C[:, active]]) if active else Y
        train_Y = torch.as_tensor(outcomes, dtype=dtype)
        model = SingleTaskGP(X, train_Y, outcome_transform=Standardize(m=train_Y.shape[1]))
        # L-BFGS-B capped at fit_iterations: the uncapped fit took 17 s at 128 designs.
        fit_gpytorch_mll(
            ExactMarginalLogLikelihood(model.likelihood, model),
            optimizer_kwargs={"options": {"maxiter": self.fit_iterations}},
        )
        constraints: list[Any] = [(lambda Z, i=k + j: Z[..., i]) for j in range(len(active))]
        pool = self._pool(history, rng)
        if len(pool) <= n:
            return pool
        choices = torch.as_tensor(encode_features(pool, ss), dtype=dtype)
        picked: list[int] = []
        for _ in range(n):
            acqf = qLogNParEGO(
                model=model,
                X_baseline=X,
                scalarization_weights=sample_simplex(k, dtype=dtype).squeeze(0),
                sampler=SobolQMCNormalSampler(torch.Size([self.mc_samples])),
                objective=IdentityMCMultiOutputObjective(outcomes=list(range(k))),
                constraints=constraints or None,
                X_pending=choices[picked] if picked else None,
                prune_baseline=True,
            )
            with torch.no_grad():
                values = acqf(choices.unsqueeze(1))
            values[picked] = -torch.inf
            picked.append(int(values.argmax()))
        return pool[np.asarray(picked, dtype=np.int64)]


def encode_features(z: F, search_space: SearchSpace) -> F:
    """A model's inputs for (n, d) native coordinates, each column in [0, 1]: continuous
    dims as they are, integer dims by their level's coordinates (:attr:`Dim.coords`: the
    mapping by log2 of its degrees; others their cube values), categorical dims one-hot."""
    z = np.atleast_2d(np.asarray(z, dtype=float))
    cols: list[F] = []
    for j, dim in enumerate(search_space.dims):
        if dim.kind == "continuous":
            cols.append(z[:, j : j + 1])
            continue
        level = np.clip(np.rint(z[:, j]), 0, max(dim.num_levels - 1, 0)).astype(np.int64)
        if dim.kind == "categorical":
            cols.append(np.eye(dim.num_levels)[level])
            continue
        coords = np.asarray(dim.coords, dtype=float).reshape(dim.num_levels, -1)
        if coords.shape[1] == 0:
            coords = np.asarray(dim.levels_u, dtype=float)[:, None]
        cols.append(coords[level])  # in [0, 1] already, a doubling one step in every degree
    return np.hstack(cols) if cols else np.empty((len(z), 0))


def local_moves(
    parents: F, search_space: SearchSpace, rng: np.random.Generator, *, count: int, radius: float
) -> F:
    """``count`` moves within ``radius`` of rows of ``parents`` (a trust region's candidates).

    Each move copies a random parent and changes a random subset of its dims (each dim with
    one probability per move, drawn log-uniformly between 1/d and 1, so both one-dim and
    all-dim moves occur; at least one dim changes):

    - continuous: a Gaussian step of standard deviation ``radius`` (unit cube), clipped to
      [1e-9, 1 - 1e-9];
    - integer dims: the level nearest to the parent's coordinates (:attr:`Dim.coords`, else
      its unit-cube value) plus a Gaussian step of ``radius``, among the other levels (a
      small radius gives a neighbouring level: one mapping degree doubled or halved);
    - categorical dims: a random other level.

    Args:
        parents: (p, d) native coordinates (p >= 1; none gives an empty result).
        search_space: the typed dims.
        rng: the generator.
        count: moves to make.
        radius: step size in unit-cube units (> 0).

    Returns:
        (count, d) native coordinates.
    """
    d = search_space.num_dims
    if len(parents) == 0 or count == 0:
        return np.empty((0, d))
    picked = np.asarray(parents, dtype=float)[rng.integers(0, len(parents), size=count)]
    return mutate(picked, search_space, rng, radius=radius)


def mutate(
    points: F, search_space: SearchSpace, rng: np.random.Generator, *, radius: float | F
) -> F:
    """Each row of ``points`` (n, d, native coordinates) moved within ``radius`` as
    :func:`local_moves` moves its parents; returns a new (n, d) array.

    ``radius`` is a number or an (n,) array (one radius per row).
    """
    out = np.array(points, dtype=float)
    count, d = out.shape
    if count == 0:
        return out
    radius_rows = np.broadcast_to(np.asarray(radius, dtype=float), (count,))
    prob = np.exp(rng.uniform(math.log(1.0 / d), 0.0, size=count))
    change = rng.random((count, d)) < prob[:, None]
    change[np.arange(count), rng.integers(0, d, size=count)] = True
    for j, dim in enumerate(search_space.dims):
        rows = np.flatnonzero(change[:, j])
        if rows.size == 0:
            continue
        r = radius_rows[rows]
        if dim.kind == "continuous":
            step = r * rng.standard_normal(rows.size)
            # Clipped into the open cube: steps past an edge land on it (where optima of
            # budgets often lie), but not exactly on 0, which a log-encoded input rejects.
            out[rows, j] = np.clip(out[rows, j] + step, _EDGE, 1.0 - _EDGE)
            continue
        if dim.num_levels < 2:
            continue
        level = np.clip(np.rint(out[rows, j]), 0, dim.num_levels - 1).astype(np.int64)
        coords = np.asarray(dim.coords, dtype=float).reshape(dim.num_levels, -1)
        if dim.kind == "integer" and coords.shape[1] == 0:  # ordered: by its cube values
            coords = np.asarray(dim.levels_u, dtype=float)[:, None]
        if coords.shape[1]:
            target = coords[level] + r[:, None] * rng.standard_normal((rows.size, coords.shape[1]))
            dist = ((target[:, None, :] - coords[None, :, :]) ** 2).sum(axis=2)
            dist[np.arange(rows.size), level] = np.inf  # always another level
            out[rows, j] = dist.argmin(axis=1)
        else:
            other = rng.integers(0, dim.num_levels - 1, size=rows.size)
            out[rows, j] = other + (other >= level)
    return out


def level_sweeps(parents: F, search_space: SearchSpace, *, nearest: int | None = None) -> F:
    """Every single-dim change of a discrete dim of each parent: each row of ``parents``
    with one integer or categorical dim set to each of its other levels (a coordinate
    sweep: e.g. every valid mapping of a good design, which local steps reach slowly).

    Args:
        parents: (p, d) native coordinates.
        search_space: the typed dims.
        nearest: only the ``nearest`` other levels of an integer dim with coordinates
            (:attr:`Dim.coords`: the mappings whose degrees are closest), by distance;
            None: every level.

    Returns:
        (p × Σ (levels - 1), d) native coordinates (fewer with ``nearest``), parent by parent.
    """
    parents = np.asarray(parents, dtype=float).reshape(-1, search_space.num_dims)
    blocks: list[F] = []
    for row in parents:
        for j, dim in enumerate(search_space.dims):
            if dim.kind == "continuous" or dim.num_levels < 2:
                continue
            current = int(np.clip(np.rint(row[j]), 0, dim.num_levels - 1))
            others = np.delete(np.arange(dim.num_levels, dtype=float), current)
            coords = np.asarray(dim.coords, dtype=float).reshape(dim.num_levels, -1)
            if nearest is not None and coords.shape[1] and len(others) > nearest:
                dist = ((coords[others.astype(np.int64)] - coords[current]) ** 2).sum(axis=1)
                others = others[np.sort(np.argsort(dist, kind="stable")[:nearest])]
            block = np.repeat(row[None, :], others.size, axis=0)
            block[:, j] = others
            blocks.append(block)
    return np.vstack(blocks) if blocks else np.empty((0, search_space.num_dims))
