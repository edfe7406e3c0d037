"""Pareto sets and hypervolume in the normalised objective space.

All functions take the **normalised** form of :func:`deepflow.search.objectives.normalise`
(larger is better, the reference point at the origin), so the hypervolume is the dominated
share of the unit box [0, 1]^k between the reference and the ideal point.

Plain numpy and Optuna (the core install), no torch: a search without a surrogate never
imports it. The tests check both against BoTorch's ``is_non_dominated`` and
``DominatedPartitioning`` where BoTorch is installed.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

__all__ = ["greedy_hypervolume_selection", "hypervolume", "pareto_mask"]

F = NDArray[np.float64]


def pareto_mask(points: F, feasible: NDArray[np.bool_] | None = None) -> NDArray[np.bool_]:
    """Non-dominated rows of (n, k) maximised points among the feasible, finite ones.

    Duplicates of a non-dominated point are all kept (BoTorch's ``deduplicate=False``).
    """
    pts = np.asarray(points, dtype=float)
    ok = np.isfinite(pts).all(axis=1)
    if feasible is not None:
        ok &= np.asarray(feasible, dtype=bool)
    mask = np.zeros(len(pts), dtype=bool)
    if ok.any():
        mask[np.flatnonzero(ok)] = _non_dominated(pts[ok])
    return mask


def _non_dominated(pts: F) -> NDArray[np.bool_]:
    """Rows no other row dominates (>= in every coordinate, > in one).

    In descending lexicographic order a row can only be dominated by an earlier one, and
    dominance is transitive, so each row is checked against the non-dominated rows met so
    far: O(n · front) instead of O(n²).
    """
    n = len(pts)
    out = np.zeros(n, dtype=bool)
    order = np.lexsort(-pts.T[::-1])  # first coordinate descending, then the next, ...
    front = np.empty_like(pts)
    size = 0
    for i in order:
        p = pts[i]
        f = front[:size]
        if size and bool(np.any(np.all(f >= p, axis=1) & np.any(f > p, axis=1))):
            continue
        front[size] = p
        size += 1
        out[i] = True
    return out


def hypervolume(points: F, feasible: NDArray[np.bool_] | None = None) -> float:
    """Hypervolume of (n, k) normalised points w.r.t. the origin (points below it count 0)."""
    from optuna._hypervolume import compute_hypervolume

    pts = np.asarray(points, dtype=float)
    ok = np.isfinite(pts).all(axis=1) & (pts > 0).all(axis=1)
    if feasible is not None:
        ok &= np.asarray(feasible, dtype=bool)
    if not ok.any():
        return 0.0
    front = pts[ok][pareto_mask(pts[ok])]
    k = pts.shape[1]
    if k == 1:
        return float(front.max())
    # Optuna's exact hypervolume (WFG for k >= 3) minimises: negate the points and the origin.
    return float(compute_hypervolume(-front, np.zeros(k), assume_pareto=True))


def greedy_hypervolume_selection(
    candidates: F, front: F, q: int, *, num_samples: int = 32768, seed: int = 0
) -> list[int]:
    """Pick up to ``q`` rows of ``candidates`` that add the most hypervolume to ``front``.

    Greedy: each step takes the candidate with the largest hypervolume improvement over the
    front plus the candidates already taken. Improvements are estimated on one fixed set of
    ``num_samples`` uniform points in the box spanned by the origin and the largest
    coordinates (vectorised: thousands of candidates per second; exact computation per
    candidate costs milliseconds each). When nothing improves the front any more, the
    remaining picks are the candidates with the largest smallest coordinate, so a batch is
    always filled.
    """
    cand = np.asarray(candidates, dtype=float)
    k = cand.shape[1]
    base = np.asarray(front, dtype=float).reshape(-1, k)
    base = base[np.isfinite(base).all(axis=1)]
    alive = np.isfinite(cand).all(axis=1)
    improving = alive & (cand > 0).all(axis=1)
    if improving.sum() > 1:  # only candidates on the joint front can add hypervolume first
        joint = np.vstack([base, cand[improving]])
        on_front = pareto_mask(joint)[len(base) :]
        keep = np.flatnonzero(improving)
        improving[keep[~on_front]] = False
    chosen: list[int] = []
    if improving.any():
        top = np.maximum(cand[improving].max(axis=0), base.max(axis=0) if len(base) else 0)
        rng = np.random.default_rng(seed)
        samples = rng.random((num_samples, k)) * top
        covered = np.zeros(num_samples, dtype=bool)
        for p in base:
            covered |= (samples <= p).all(axis=1)
        idx = np.flatnonzero(improving)
        # (candidates, samples) dominance, in blocks to bound memory.
        dominated = np.zeros((idx.size, num_samples), dtype=bool)
        for start in range(0, idx.size, 256):
            block = cand[idx[start : start + 256]]
            dominated[start : start + 256] = (samples[None, :, :] <= block[:, None, :]).all(axis=2)
        for _ in range(min(q, idx.size)):
            gain = (dominated & ~covered).sum(axis=1)
            j = int(gain.argmax())
            if gain[j] == 0:
                break
            chosen.append(int(idx[j]))
            covered |= dominated[j]
            alive[idx[j]] = False
    if len(chosen) < q and alive.any():
        rest = np.flatnonzero(alive)
        score = cand[rest].min(axis=1)
        for i in rest[np.argsort(-score, kind="stable")][: q - len(chosen)]:
            chosen.append(int(i))
    return chosen
