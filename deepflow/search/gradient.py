"""Gradient search (strategy ``gradient``): the DeepFlow paper's search, batched and
constrained.

DeepFlow co-optimised the area, power and perimeter splits of a chip by gradient descent
with finite differences, restarting per parallelism strategy (nanocad-lab/DeepFlow
``GD_search.py``; Ardalani et al. 2024, §5). Here several **chains** run side by side, each
on its own scalarisation of the objectives, and each move of every chain is one batch of
designs the loop evaluates in one vectorised oracle call:

- **budget coordinates** θ (:class:`~deepflow.search.space.Budgets`): a continuous
  variable's unit-cube coordinate (die area, TDP, ...) and the parts of each simplex
  variable themselves (area, power and perimeter shares), which stay on their bounded
  simplex {low <= x <= high, Σx = 1};
- a **probe** move evaluates the chain's best design and two probes per coordinate
  (2·dim(θ) + 1 designs): central differences along each box coordinate and each simplex
  part's direction e_i − 1/k (one-sided at a bound, or where a probe leaves the feasible set
  the centre is in), whose sum Σ_i (d_i·∇s) d_i is the gradient projected onto the
  simplex's plane; the descent direction is that gradient scaled by each coordinate's range
  (so a share spanning 0.4 and one spanning 0.009 move alike) and made to keep every
  simplex summing to 1;
- a **line search** move evaluates :data:`LENGTHS` steps along it at once, each projected
  (Euclidean) onto the box and the bounded simplices
  (:func:`~deepflow.datasets.samplers.project_simplex`); the best one that improves becomes
  the chain's design and its length the next step length, else shorter steps are tried
  until the length falls below :data:`ETA_MIN` (the descent has converged);
- a chain's value is the augmented modified Tchebycheff scalarisation
  ``max_j (z*_j − f_j) / w_j + 0.05 Σ_j (z*_j − f_j)`` of the normalised objectives f under
  its weights w (a Sobol sequence on the simplex, one point per chain started) with z* the
  best values met when it started, plus :data:`PENALTY` per unit of scaled constraint
  violation (and 1 for an infeasible design), so descents leave infeasible regions;
- **multi-start over technologies and mapping families**: a chain starts from the told
  design best for its weights (every other chain ignoring feasibility there: its sweep may
  repair it), then evaluates every single change of a discrete setting of that design
  (:func:`~deepflow.search.searchers.level_sweeps`: every other technology, memory, stack
  count, valid mapping, ...) in one batch and descends from the best; when its descent ends,
  a sweep around its design (the :data:`NEAR_MAPPINGS` nearest mappings, every level of the
  other discrete dims) either finds a better family to descend in again or ends the chain
  (at most :data:`MAX_SWEEPS` sweeps), and a new chain with the next weights starts, often
  from the end of an earlier chain with weights nearby (a continuation along the front).

The chains' state is rebuilt from what the searcher was told (designs are looked up by their
coordinates, in the order the loop tells them), so a search resumed from its storage
proposes what an uninterrupted one would, whatever batch size cut the moves. There are
``batch_size // (2·dim(θ) + 1)`` chains (at least one): with a batch that large every
chain's move is one oracle call; smaller batches hand a move out over several asks.

On the default study (22 budget coordinates, 45 designs a probe, 22 chains in batches of
1,024) the chains hold 95.1 % of the best-known hypervolume after 300,000 evaluations (median
of 3 seeds; 95 % reached at 176,128 and 282,624 evaluations on two of them,
``benchmarks/search_efficiency.py``); on the paper's LSTM study they find feasible and the
fastest designs but few of the low-power ones (power is flat at the TDP over most of the
splits, where finite differences see no slope): hypervolume 0.0986 after 2,000 evaluations
where NSGA-II reaches 0.6053.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from deepflow.search.objectives import normalise
from deepflow.search.searchers import level_sweeps, scaled_constraints
from deepflow.search.space import Budgets, SearchSpace
from deepflow.search.storage import design_keys

if TYPE_CHECKING:
    from deepflow.search.base import Proposals, Results, SearchContext

__all__ = ["GradientSearcher"]

F = NDArray[np.float64]

#: Step length of a chain's descent (in range units: a coordinate's full range is 1) at its
#: start, at most, and the length below which it has converged.
ETA_START, ETA_MAX, ETA_MIN = 0.1, 0.5, 1e-3
#: A line search's trial lengths, as multiples of the step length; after a line search that
#: found nothing better the next tries SHRINK times its shortest trial.
LENGTHS = (2.0, 1.0, 0.5, 0.25, 0.1)
SHRINK = 0.3
#: Finite-difference step, as a share of each coordinate's range.
PROBE = 0.01
#: Steps per descent, and discrete sweeps per chain (the start's and one per descent end).
MAX_STEPS, MAX_SWEEPS = 30, 4
#: Levels of an ordered dim with coordinates (the mapping) a sweep after a descent tries:
#: the nearest ones (a degree doubled or halved, ...).
NEAR_MAPPINGS = 8
#: Weight of the scaled constraint violation in a chain's value, and of the objectives' sum
#: (the augmented Tchebycheff scalarisation: a unique minimiser where terms tie).
PENALTY, AUGMENT = 10.0, 0.05
#: Scaled violation below which a design counts as on the feasible side for the descent (a
#: budget met exactly may exceed it by rounding, ~1e-13 W or mm²): no jump in the value there,
#: and a probe there still measures the slope.
TOLERANCE = 1e-6
#: Value of a design whose objectives are not finite (worse than any real design).
WORST = 1e6


@dataclass
class _Chain:
    """One descent: its weights, where it is and what it waits for."""

    number: int
    weights: F
    ideal: F
    stage: str = "sweep"  # sweep | probe | line | done
    best: F = field(default_factory=lambda: np.empty(0))  # native coordinates
    best_theta: F = field(default_factory=lambda: np.empty(0))  # its budget coordinates
    best_value: float = np.inf
    direction: F = field(default_factory=lambda: np.empty(0))  # descent direction in θ
    eta: float = ETA_START
    lengths: F = field(default_factory=lambda: np.empty(0))  # of the line search's trials
    steps: int = 0
    sweeps: int = 0
    #: the designs the next move needs, and their design keys
    needed: F = field(default_factory=lambda: np.empty((0, 0)))
    thetas: F = field(default_factory=lambda: np.empty((0, 0)))  # their budget coordinates
    keys: list[tuple[float, ...]] = field(default_factory=list)

    def wait_for(self, designs: F, thetas: F) -> None:
        self.needed = np.atleast_2d(designs)
        self.thetas = np.atleast_2d(thetas)
        self.keys = design_keys(self.needed)


class GradientSearcher:
    """Projected finite-difference gradient descent over the budgets (see the module
    docstring); the chains' count is one per 2·dim(θ) + 1 designs of a batch (at least 1).

    Args:
        context: the problem and configuration.
    """

    def __init__(self, context: SearchContext) -> None:
        cfg = context.config
        self.search_space: SearchSpace = context.problem.search_space
        self.seed = cfg.search.seed
        self.objectives = cfg.objectives
        self.budgets = Budgets(self.search_space)
        self.step_size = 2 * self.budgets.width + 1
        self.num_chains = max(1, cfg.search.batch_size // self.step_size)
        #: design key -> (normalised objectives, violation) of every design told
        self.known: dict[tuple[float, ...], tuple[F, float]] = {}
        self.z_told: list[F] = []
        self.first_told: list[int] = []  # per known design (in order), its index in z_told
        k = len(self.objectives)
        self.known_f: F = np.empty((0, k))  # per known design (in order), as in ``known``
        self.known_violation: F = np.empty(0)
        self.chains: list[_Chain] = []
        self.started = 0
        self.num_told = 0
        self.salt = 0

    # ------------------------------------------------------------------ values
    def _value(self, key: tuple[float, ...], chain: _Chain) -> float:
        f, violation = self.known[key]
        return self._score(f, violation, chain)

    @staticmethod
    def _score(f: F, violation: float, chain: _Chain) -> float:
        return float(GradientSearcher._scores(f[None, :], np.array([violation]), chain)[0])

    @staticmethod
    def _scores(f: F, violation: F, chain: _Chain) -> F:
        """A chain's values of designs with normalised objectives f (n, k) and violations
        (n,): the augmented Tchebycheff scalarisation plus the penalty."""
        gap = chain.ideal - f
        g = (gap / chain.weights).max(axis=1) + AUGMENT * gap.sum(axis=1)
        value = g + PENALTY * violation + (violation > TOLERANCE)
        return np.where(np.isfinite(f).all(axis=1), value, WORST)

    def _values(self, keys: list[tuple[float, ...]], chain: _Chain) -> F:
        return np.array([self._value(key, chain) for key in keys])

    def _known_keys(self, keys: list[tuple[float, ...]]) -> bool:
        return all(key in self.known for key in keys)

    # ------------------------------------------------------------------ tell
    def tell(self, proposals: Proposals, results: Results) -> None:
        from deepflow.search.base import references_known

        objectives = results.objectives
        norm = (normalise(results.values, objectives) if references_known(objectives)
                else np.zeros_like(results.values))  # fmt: skip
        c = results.constraints
        viol = np.clip(scaled_constraints(c, list(results.constraint_names)), 0.0, None).sum(
            axis=1) if c.size else np.zeros(len(proposals))  # fmt: skip
        fresh, fresh_v = [], []
        for i, (z, key) in enumerate(zip(proposals.z, design_keys(proposals.z), strict=True)):
            v = 0.0 if results.feasible[i] else max(float(viol[i]), 1e-9)
            if key not in self.known:
                self.known[key] = (norm[i], v)
                fresh.append(i)
                fresh_v.append(v)
                self.first_told.append(len(self.z_told))
            self.z_told.append(np.asarray(z, dtype=float))
        self.known_f = np.vstack([self.known_f, norm[fresh].reshape(-1, norm.shape[1])])
        self.known_violation = np.concatenate([self.known_violation, fresh_v])
        self.num_told += len(proposals)
        self.salt = 0
        self._advance()

    def _advance(self) -> None:
        """Move every chain whose designs are all known; start chains to keep the count."""
        moved = True
        while moved:
            moved = False
            for chain in self.chains:
                if chain.stage != "done" and self._known_keys(chain.keys):
                    self._move(chain)
                    moved = True
            self.chains = [c for c in self.chains if c.stage != "done"]
            while len(self.chains) < self.num_chains and self.z_told:
                self.chains.append(self._start())
                moved = True

    def _start(self) -> _Chain:
        """A chain on the next weights, from the told design best for them (often the end of
        an earlier chain with weights nearby: a continuation along the front)."""
        from deepflow.search.evolution import weight_vectors

        k = len(self.objectives)
        index = self.started
        weights = weight_vectors(1, k, seed=self.seed, start=index)[0]
        points = self.known_f
        finite = points[np.isfinite(points).all(axis=1)]
        ideal = finite.max(axis=0) if len(finite) else np.ones(k)
        chain = _Chain(number=index, weights=weights, ideal=ideal)
        # Every other chain starts where its scalarisation alone is best, feasible or not:
        # its first sweep (other stack counts, memories, mappings) may make it feasible, and
        # feasible designs alone can leave whole regions of the front unstarted.
        violation = self.known_violation if index % 2 == 0 else np.zeros(len(points))
        values = self._scores(points, violation, chain)
        start = self.z_told[self.first_told[int(np.argmin(values))]]
        self.started += 1
        self._begin_sweep(chain, start)
        return chain

    # ------------------------------------------------------------------ stages
    def _begin_sweep(self, chain: _Chain, base: F) -> None:
        from deepflow.search.base import batch_seed

        base = np.asarray(base, dtype=float)
        # The start sweeps every level; later ones (around a descent's end) only the nearest
        # mappings (:data:`NEAR_MAPPINGS`) besides every level of the other discrete dims.
        near = None if chain.sweeps == 0 else NEAR_MAPPINGS
        sweep = level_sweeps(base[None, :], self.search_space, nearest=near)
        # In a seeded order: a batch smaller than the sweep takes a random part of it first.
        rng = np.random.default_rng(batch_seed(self.seed, chain.number, chain.sweeps, 0x5EE9))
        chain.stage = "sweep"
        designs = np.vstack([base[None, :], sweep[rng.permutation(len(sweep))]])
        theta = chain.best_theta if chain.sweeps else self.budgets.theta(base)[0]
        chain.wait_for(designs, np.repeat(theta[None, :], len(designs), axis=0))
        chain.sweeps += 1

    def _begin_probe(self, chain: _Chain) -> None:
        """The best design and two probes per budget coordinate around it."""
        chain.stage = "probe"
        theta = chain.best_theta
        dirs = self.budgets.directions() * (PROBE * self.budgets.scales())[:, None]
        probes = self.budgets.project(np.vstack([theta + dirs, theta - dirs]))
        thetas = np.vstack([theta[None, :], probes])
        designs = self.budgets.to_z(probes, np.repeat(chain.best[None, :], len(probes), axis=0))
        chain.wait_for(np.vstack([chain.best[None, :], designs]), thetas)

    def _begin_line(self, chain: _Chain) -> None:
        """Trial steps of several lengths along the descent direction (one batch)."""
        chain.stage = "line"
        chain.lengths = chain.eta * np.asarray(LENGTHS)
        targets = self.budgets.project(chain.best_theta + chain.lengths[:, None] * chain.direction)
        base = np.repeat(chain.best[None, :], len(targets), axis=0)
        chain.wait_for(self.budgets.to_z(targets, base), targets)

    def _direction(self, chain: _Chain) -> F:
        """The descent direction at the best design from its probes: the projected gradient
        (central differences, one-sided where a probe is pinned at a bound or leaves the
        feasible set the centre is in), scaled by each coordinate's range and projected
        back onto the simplices' planes, of unit length in range units (zero: no descent)."""
        w = self.budgets.width
        dirs = self.budgets.directions()
        steps = PROBE * self.budgets.scales()
        theta = chain.best_theta
        t_plus, t_minus = chain.thetas[1 : w + 1], chain.thetas[w + 1 :]
        s0 = self._value(chain.keys[0], chain)
        feasible = self.known[chain.keys[0]][1] <= TOLERANCE
        grad = np.zeros(w)
        for j in range(w):
            d = dirs[j] * steps[j]
            norm2 = float(d @ d)
            a = float((t_plus[j] - theta) @ d) / norm2  # the probes' offsets along d
            b = float((theta - t_minus[j]) @ d) / norm2
            keys = (chain.keys[1 + j], chain.keys[1 + w + j])
            ok = [
                self._value(key, chain) < WORST
                and (not feasible or self.known[key][1] <= TOLERANCE)
                for key in keys
            ]
            ok[0] &= a > 1e-9
            ok[1] &= b > 1e-9
            s_plus, s_minus = self._value(keys[0], chain), self._value(keys[1], chain)
            if ok[0] and ok[1]:
                slope = (s_plus - s_minus) / (a + b)
            elif ok[0]:
                slope = (s_plus - s0) / a
            elif ok[1]:
                slope = (s0 - s_minus) / b
            else:
                continue
            grad += slope * dirs[j] / steps[j]  # slope per unit of θ along dirs[j]
        return self.budgets.descent(grad)

    def _end_descent(self, chain: _Chain) -> None:
        if chain.sweeps < MAX_SWEEPS:
            self._begin_sweep(chain, chain.best)
        else:
            chain.stage = "done"

    def _move(self, chain: _Chain) -> None:
        if chain.stage == "sweep":
            values = self._values(chain.keys, chain)
            i = int(np.argmin(values))
            if values[i] < chain.best_value:
                chain.best, chain.best_value = chain.needed[i], float(values[i])
                chain.best_theta = chain.thetas[i]
                chain.eta, chain.steps = ETA_START, 0
                if self.budgets.width:
                    self._begin_probe(chain)
                    return
            chain.stage = "done"
        elif chain.stage == "probe":
            chain.direction = self._direction(chain)
            if not chain.direction.any():
                self._end_descent(chain)
                return
            self._begin_line(chain)
        else:
            values = self._values(chain.keys, chain)
            i = int(np.argmin(values))
            if values[i] < chain.best_value - 1e-12 * abs(chain.best_value):
                chain.best, chain.best_value = chain.needed[i], float(values[i])
                chain.best_theta = chain.thetas[i]
                chain.eta = min(float(chain.lengths[i]), ETA_MAX)
                chain.steps += 1
                if chain.steps < MAX_STEPS:
                    self._begin_probe(chain)
                else:
                    self._end_descent(chain)
                return
            chain.eta = SHRINK * float(chain.lengths.min())
            if chain.eta < ETA_MIN:
                self._end_descent(chain)
            else:
                self._begin_line(chain)

    # ------------------------------------------------------------------ ask
    def ask(self, n: int) -> Proposals:
        from deepflow.search.base import Proposals, batch_seed

        salt, self.salt = self.salt, self.salt + 1
        wanted: list[F] = []
        info: list[dict[str, Any]] = []
        seen: set[tuple[float, ...]] = set()
        for chain in self.chains:
            for row, key in zip(chain.needed, chain.keys, strict=True):
                if key in self.known or key in seen:
                    continue
                seen.add(key)
                wanted.append(row)
                info.append({"gradient": {"chain": chain.number, "stage": chain.stage,
                                          "step": chain.steps}})  # fmt: skip
        # A repeated ask (another worker took the first designs) hands out the next ones.
        start = salt * n
        z = np.array(wanted[start : start + n]).reshape(-1, self.search_space.num_dims)
        if len(z):
            return Proposals(z, info=info[start : start + n])
        # Nothing told yet, or every chain waits for designs in flight: uniform designs.
        rng = np.random.default_rng(batch_seed(self.seed, self.num_told, salt, 0x96AD))
        return Proposals(self.search_space.from_unit(rng.random((n, self.search_space.num_dims))))
