"""Pareto sets and hypervolume (BoTorch utilities) in the normalised objective space.

All functions take the **normalised** form of :func:`deepflow.search.objectives.normalise`
(larger is better, the reference point at the origin), so the hypervolume is the dominated
share of the unit box [0, 1]^k between the reference and the ideal point.
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
    import torch
    from botorch.utils.multi_objective.pareto import is_non_dominated

    pts = np.asarray(points, dtype=float)
    ok = np.isfinite(pts).all(axis=1)
    if feasible is not None:
        ok &= np.asarray(feasible, dtype=bool)
    mask = np.zeros(len(pts), dtype=bool)
    if ok.any():
        sub = torch.as_tensor(pts[ok], dtype=torch.float64)
        mask[np.flatnonzero(ok)] = is_non_dominated(sub, deduplicate=False).numpy()
    return mask


def hypervolume(points: F, feasible: NDArray[np.bool_] | None = None) -> float:
    """Hypervolume of (n, k) normalised points w.r.t. the origin (points below it count 0)."""
    import torch
    from botorch.utils.multi_objective.box_decompositions.dominated import (
        DominatedPartitioning,
    )

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
    part = DominatedPartitioning(
        ref_point=torch.zeros(k, dtype=torch.float64),
        Y=torch.as_tensor(front, dtype=torch.float64),
    )
    return float(part.compute_hypervolume())


def greedy_hypervolume_selection(candidates: F, front: F, q: int) -> list[int]:
    """Pick up to ``q`` rows of ``candidates`` that add the most hypervolume to ``front``.

    Greedy: each step takes the candidate with the largest hypervolume improvement over the
    front plus the candidates already taken; stops early when nothing improves it (then the
    remaining picks are the candidates closest to the front, so a batch is always filled).
    """
    cand = np.asarray(candidates, dtype=float)
    base = np.asarray(front, dtype=float).reshape(-1, cand.shape[1])
    chosen: list[int] = []
    current = hypervolume(base) if len(base) else 0.0
    alive = np.isfinite(cand).all(axis=1)
    # Only candidates the front does not dominate can add hypervolume.
    improving = alive & (cand > 0).all(axis=1)
    if len(base) and improving.any():
        improving &= pareto_mask(np.vstack([base, cand]))[len(base) :]
    for _ in range(min(q, int(alive.sum()))):
        best, best_gain = -1, 0.0
        for i in np.flatnonzero(alive & improving):
            gain = hypervolume(np.vstack([base, cand[i : i + 1]])) - current
            if gain > best_gain:
                best, best_gain = int(i), gain
        if best < 0:
            break
        chosen.append(best)
        alive[best] = False
        base = np.vstack([base, cand[best : best + 1]])
        current += best_gain
    if len(chosen) < q and alive.any():
        # No more improvement: the candidates nearest to dominating the front (largest min
        # coordinate surplus over the best front point they are compared with).
        rest = np.flatnonzero(alive)
        score = cand[rest].min(axis=1)
        for i in rest[np.argsort(-score)][: q - len(chosen)]:
            chosen.append(int(i))
    return chosen
