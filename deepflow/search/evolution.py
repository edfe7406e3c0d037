"""A vectorised evolutionary search on the batched oracle: no per-trial storage, one oracle
call per generation.

MOEA/D [Zhang & Li 2007, "MOEA/D: a multiobjective evolutionary algorithm based on
decomposition"] with the modified Tchebycheff scalarisation [Qi et al. 2014, "MOEA/D with
adaptive weight vector adjustment"]: ``g(f | w) = max_j (z*_j - f_j) / w_j`` over the normalised
objectives ``f`` (larger is better) with the best values met ``z*``, whose minimiser lies on
the ray from ``z*`` along ``-w``, so weights spread uniformly on the simplex give designs
spread over the front. Each of the ``population`` slots holds one design and one weight
vector; every generation

1. makes one child per slot: a uniform crossover of the slot's design with a neighbouring
   slot's (its ``neighbours`` nearest weight vectors; a random slot with probability 0.1),
   then a mutation (:func:`~deepflow.search.searchers.mutate`: Gaussian steps of a radius
   that shrinks geometrically from :data:`RADIUS_START` to :data:`RADIUS_END` over the
   generations, neighbouring mapping degrees, other categorical levels);
2. labels all children in one oracle call;
3. lets each child compete for its own slot and one random neighbour's (at most two
   replacements per child, as MOEA/D-DE limits them [Li & Zhang 2009]): a feasible design
   beats an infeasible one, two infeasible designs compare their total scaled violation
   [Deb 2000, "An efficient constraint handling method for genetic algorithms"], two feasible
   ones their scalarisation.

A :class:`~deepflow.search.pareto.ParetoArchive` keeps every feasible non-dominated design
met; its hypervolume after each generation is the run's history. The same seed gives the
same run (the oracle is deterministic and every random draw comes from the seed).

Example:
    >>> from deepflow.search.study import load_study                     # doctest: +SKIP
    >>> from deepflow.search.problem import OracleProblem
    >>> study = load_study("default")
    >>> run = evolve(OracleProblem(study.space), study.objectives, study.bounds,
    ...              population=1000, generations=20)
    >>> run.history[-1]["hypervolume"]
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from deepflow.search.objectives import Bound, Objective, normalise, outcomes
from deepflow.search.pareto import ParetoArchive
from deepflow.search.problem import Problem
from deepflow.search.searchers import mutate, scaled_constraints

__all__ = ["EvolutionResult", "evolve", "prescreen", "weight_vectors"]

F = NDArray[np.float64]

#: Mutation radius (unit-cube units) at the first and the last generation.
RADIUS_START, RADIUS_END = 0.2, 0.01
#: Probability that a child's mate is a neighbour (else any slot), and that a child is a
#: crossover at all (else a mutated copy of its slot's design).
NEIGHBOUR_MATE, CROSSOVER = 0.9, 0.9
#: Smallest weight of an objective (no weight vector ignores an objective completely).
MIN_WEIGHT = 1e-3


@dataclass
class EvolutionResult:
    """What :func:`evolve` produced.

    Attributes:
        archive: the feasible non-dominated designs met: normalised ``points``, with
            ``data["values"]`` (objective values in their units) and ``data["z"]`` (native
            coordinates).
        objectives: the objectives with the references and ideals used.
        history: per generation (0 = the initial population): ``generation``,
            ``evaluations`` so far, ``seconds`` since the start and ``hypervolume`` of the
            archive.
    """

    archive: ParetoArchive
    objectives: tuple[Objective, ...]
    history: list[dict[str, float]] = field(default_factory=list)

    @property
    def hypervolume(self) -> float:
        return self.history[-1]["hypervolume"] if self.history else 0.0


def weight_vectors(count: int, k: int, *, seed: int, start: int = 0) -> F:
    """``count`` weight vectors spread uniformly on the k-simplex: points ``start`` ..
    ``start + count - 1`` of one scrambled Sobol sequence through the uniform stick-breaking
    map, each weight at least :data:`MIN_WEIGHT`."""
    from deepflow.datasets.samplers import decode_simplex, unit_cube

    if k == 1:
        return np.ones((count, 1))
    u = unit_cube("sobol", seed=seed, start=start, stop=start + count, num_samples=2**30,
                  dims=k - 1)  # fmt: skip
    w = decode_simplex(u, [0.0] * k, [1.0] * k)
    w = np.maximum(w, MIN_WEIGHT)
    return np.asarray(w / w.sum(axis=1, keepdims=True), dtype=float)


def _violation(constraints: F, names: Sequence[str], feasible: NDArray[np.bool_]) -> F:
    """Total scaled violation per design: 0 for feasible designs, > 0 otherwise."""
    if constraints.size:
        v = np.clip(scaled_constraints(constraints, list(names)), 0.0, None).sum(axis=1)
    else:
        v = np.zeros(len(feasible))
    return np.where(feasible, 0.0, np.maximum(v, 1e-9))


def _scalarised(points: F, weights: F, ideal: F) -> F:
    """Modified Tchebycheff value of each point under its row's weights (smaller is better);
    non-finite points get +inf."""
    g = ((ideal - points) / weights).max(axis=1)
    return np.where(np.isfinite(g), g, np.inf)


def _better(v_new: F, g_new: F, v_old: F, g_old: F) -> NDArray[np.bool_]:
    """Deb's rules: less violation wins; equal (both feasible) the smaller scalarisation."""
    return (v_new < v_old) | ((v_new == v_old) & (g_new < g_old))


def evolve(
    problem: Problem,
    objectives: Sequence[Objective],
    bounds: Sequence[Bound] = (),
    *,
    population: int = 10_000,
    generations: int = 100,
    seed: int = 0,
    neighbours: int = 20,
    max_evaluations: int | None = None,
    max_seconds: float = math.inf,
    on_generation: Callable[[dict[str, float]], None] | None = None,
) -> EvolutionResult:
    """Run the evolutionary search (see the module docstring).

    Args:
        problem: what to evaluate (:class:`~deepflow.search.problem.OracleProblem`).
        objectives: the objectives; missing references and ideals are inferred from the
            initial population (:func:`~deepflow.search.base.infer_references`).
        bounds: user bounds (constraints besides the oracle's).
        population: designs per generation (>= 2).
        generations: generations after the initial population (>= 0).
        seed: the seed of every random draw (initial Sobol points, weights, variation).
        neighbours: the neighbourhood size (nearest weight vectors, including its own).
        max_evaluations: stop before a generation that would exceed this many oracle
            evaluations (None: no limit).
        max_seconds: stop after the first generation that ends past this wall time.
        on_generation: called with each history record as it is made.

    Returns:
        An :class:`EvolutionResult`.

    Raises:
        ValueError: ``population`` < 2, ``generations`` < 0 or ``neighbours`` < 1.
    """
    from scipy.spatial import cKDTree

    from deepflow.datasets.samplers import unit_cube
    from deepflow.search.base import infer_references, references_known

    if population < 2 or generations < 0 or neighbours < 1:
        raise ValueError(
            f"evolve needs population >= 2, generations >= 0 and neighbours >= 1; got "
            f"{population}, {generations} and {neighbours}."
        )
    start = time.perf_counter()
    ss = problem.search_space
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0xE70]))
    n, d = population, ss.num_dims
    objectives = tuple(objectives)

    def label(z: F) -> tuple[F, F, F]:
        rows = problem.evaluate(ss.to_unit(z))
        values, names, c, ok = outcomes(rows, objectives, problem.constraint_names, bounds)
        return values, _violation(c, names, ok), ok.astype(float)

    z = ss.from_unit(unit_cube("sobol", seed=seed, start=0, stop=n, num_samples=n, dims=d))
    values, violation, _ = label(z)
    if not references_known(objectives):
        objectives = infer_references(objectives, values, violation == 0)
    weights = weight_vectors(n, len(objectives), seed=seed)
    near = cKDTree(weights).query(weights, k=min(neighbours, n))[1].reshape(n, -1)
    archive = ParetoArchive(len(objectives))
    norm = normalise(values, objectives)
    archive.add(norm, violation == 0, values=values, z=z)
    result = EvolutionResult(archive, objectives)
    evaluations = n

    def record(generation: int) -> None:
        entry = {
            "generation": float(generation),
            "evaluations": float(evaluations),
            "seconds": time.perf_counter() - start,
            "hypervolume": archive.hypervolume(),
        }
        result.history.append(entry)
        if on_generation is not None:
            on_generation(entry)

    record(0)
    slots = np.arange(n)
    for generation in range(1, generations + 1):
        if max_evaluations is not None and evaluations + n > max_evaluations:
            break
        if result.history[-1]["seconds"] > max_seconds:
            break
        fraction = (generation - 1) / max(generations - 1, 1)
        radius = RADIUS_START * (RADIUS_END / RADIUS_START) ** fraction
        local = near[slots, rng.integers(0, near.shape[1], size=n)]
        mates = np.where(rng.random(n) < NEIGHBOUR_MATE, local, rng.integers(0, n, size=n))
        cross = (rng.random((n, d)) < 0.5) & (rng.random(n) < CROSSOVER)[:, None]
        children = mutate(np.where(cross, z[mates], z), ss, rng, radius=radius)
        c_values, c_violation, _ = label(children)
        evaluations += n
        c_norm = normalise(c_values, objectives)
        archive.add(c_norm, c_violation == 0, values=c_values, z=children)
        feasible_points = archive.points if len(archive) else np.vstack([norm, c_norm])
        ideal = np.max(np.where(np.isfinite(feasible_points), feasible_points, -np.inf), axis=0)
        # Each child competes for its own slot and one random neighbour's.
        target = np.concatenate([slots, near[slots, rng.integers(0, near.shape[1], size=n)]])
        child = np.concatenate([slots, slots])
        g = _scalarised(c_norm[child], weights[target], ideal)
        v = c_violation[child]
        order = np.lexsort((g, v, target))  # by slot, then violation, then scalarisation
        first = np.ones(order.size, dtype=bool)
        first[1:] = target[order][1:] != target[order][:-1]
        best = order[first]
        slot, winner = target[best], child[best]
        wins = _better(
            v[best], g[best], violation[slot], _scalarised(norm[slot], weights[slot], ideal)
        )
        slot, winner = slot[wins], winner[wins]
        z[slot], values[slot] = children[winner], c_values[winner]
        norm[slot], violation[slot] = c_norm[winner], c_violation[winner]
        record(generation)
    return result


def prescreen(
    problem: Problem,
    objectives: Sequence[Objective],
    bounds: Sequence[Bound] = (),
    *,
    evaluations: int,
    population: int,
    points: int,
    seed: int = 0,
) -> tuple[F, dict[str, Any]] | None:
    """A searcher's start from the oracle's own batched search: :func:`evolve` for
    ``evaluations // population`` generations (the initial population included), its
    feasible Pareto designs thinned to at most ``points``
    (:func:`~deepflow.search.pareto.thin_front`).

    Returns:
        (m, d) native coordinates and a record (``evaluations``, ``seconds``,
        ``archive_size``, ``archive_hypervolume``, ``kept``); None when ``evaluations`` <
        ``population`` (no prescreen).
    """
    from deepflow.search.pareto import thin_front

    if evaluations < population:
        return None
    start = time.perf_counter()
    run = evolve(problem, objectives, bounds, population=population,
                 generations=evaluations // population - 1, seed=seed)  # fmt: skip
    if not len(run.archive):
        z = np.empty((0, problem.search_space.num_dims))
    else:
        keep, _ = thin_front(run.archive.points, points)
        z = run.archive.data["z"][keep]
    last = run.history[-1]
    record = {
        "evaluations": int(last["evaluations"]),
        "seconds": time.perf_counter() - start,
        "archive_size": len(run.archive),
        "archive_hypervolume": float(last["hypervolume"]),
        "kept": len(z),
    }
    return z, record
