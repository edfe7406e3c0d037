"""Pareto sets and hypervolume in the normalised objective space.

All functions take the **normalised** form of :func:`deepflow.search.objectives.normalise`
(larger is better, the reference point at the origin), so the hypervolume is the dominated
share of the unit box [0, 1]^k between the reference and the ideal point.

Plain numpy and Optuna (the core install), no torch: a search without a surrogate never
imports it. The tests check both against BoTorch's ``is_non_dominated`` and
``DominatedPartitioning`` where BoTorch is installed.

Two and three objectives use an exact sweep in O(n log n) (:func:`_hypervolume_3d`): the
reference fronts of large sweeps hold thousands of points, where Optuna's exact algorithm
(O(n²) for k = 3) takes 4 s for 5,000 points and 34 s for 20,000.
"""

from __future__ import annotations

import bisect
from typing import Any

import numpy as np
from numpy.typing import NDArray

__all__ = [
    "ParetoArchive",
    "greedy_hypervolume_selection",
    "hypervolume",
    "pareto_mask",
    "thin_front",
]

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
    """Rows no other row dominates (>= in every coordinate, > in one)."""
    if pts.shape[1] == 3:
        return _non_dominated_3d(pts)
    if pts.shape[1] == 2:
        return _non_dominated_3d(np.column_stack([pts, np.zeros(len(pts))]))
    return _non_dominated_any(pts)


def _non_dominated_3d(pts: F) -> NDArray[np.bool_]:
    """:func:`_non_dominated` for three coordinates in O(n log n) [Kung et al. 1975, "On
    finding the maxima of a set of vectors"].

    In descending lexicographic order every earlier row is >= in the first coordinate, so a
    row is dominated iff an earlier one is >= in the other two and differs somewhere. The
    earlier rows' last two coordinates are kept as a staircase (second ascending, third
    descending, each step with the largest first coordinate it was met with); the step at
    the first second-coordinate >= the row's has the largest third coordinate among them.
    """
    n = len(pts)
    out = np.zeros(n, dtype=bool)
    order = np.lexsort(-pts.T[::-1])
    xs_all, ys_all, zs_all = (pts[order, j].tolist() for j in range(3))
    ys: list[float] = []  # staircase: y ascending, z descending (strictly)
    zs: list[float] = []
    xs: list[float] = []  # the first (largest) x met at that exact (y, z)
    for i in range(n):
        x, y, z = xs_all[i], ys_all[i], zs_all[i]
        j = bisect.bisect_left(ys, y)
        if j < len(ys) and zs[j] >= z:
            if not (ys[j] == y and zs[j] == z and xs[j] == x):
                continue  # dominated by the row of step j
            out[order[i]] = True  # a duplicate of a non-dominated row
            continue
        out[order[i]] = True
        end = j + 1 if j < len(ys) and ys[j] == y else j  # step j: same y, lower z
        k = j
        while k > 0 and zs[k - 1] <= z:
            k -= 1
        del ys[k:end], zs[k:end], xs[k:end]
        ys.insert(k, y)
        zs.insert(k, z)
        xs.insert(k, x)
    return out


def _non_dominated_any(pts: F) -> NDArray[np.bool_]:
    """:func:`_non_dominated` for any number of coordinates.

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


class ParetoArchive:
    """The feasible non-dominated points of everything added so far, each with its data.

    Args:
        k: objectives per point.

    Attributes:
        points: (n, k) normalised points (larger is better), none dominated by another.
        data: per name, the (n, ...) rows added with the points (e.g. objective values in
            their units, native coordinates), in the same order.

    A point equal to one already kept is not added again. Example:
        >>> a = ParetoArchive(2)
        >>> a.add(np.array([[1.0, 0.0], [0.0, 1.0], [0.2, 0.2]]))
        >>> len(a)
        2
    """

    def __init__(self, k: int) -> None:
        self.points: F = np.empty((0, k))
        self.data: dict[str, NDArray[Any]] = {}

    def __len__(self) -> int:
        return len(self.points)

    def add(
        self, points: F, feasible: NDArray[np.bool_] | None = None, **data: NDArray[Any]
    ) -> None:
        """Add the feasible finite rows of ``points`` (n, k) that nothing dominates, with the
        same rows of each ``data`` array, and drop the points they dominate."""
        pts = np.asarray(points, dtype=float)
        keep = np.isfinite(pts).all(axis=1)
        if feasible is not None:
            keep &= np.asarray(feasible, dtype=bool)
        idx = np.flatnonzero(keep)
        for name, values in data.items():  # every name has rows, none kept or not
            self.data.setdefault(name, np.asarray(values)[:0])
        if idx.size == 0:
            return
        joint = np.vstack([self.points, pts[idx]])
        mask = pareto_mask(joint)
        # Equal points: the first one met stays (the archive's own before new ones).
        _, first = np.unique(joint, axis=0, return_index=True)
        unique = np.zeros(len(joint), dtype=bool)
        unique[first] = True
        mask &= unique
        old = len(self.points)
        stay, new = mask[:old], idx[mask[old:]]
        self.points = joint[mask]
        for name, values in data.items():
            self.data[name] = np.concatenate([self.data[name][stay], np.asarray(values)[new]])

    def hypervolume(self) -> float:
        """The hypervolume of the archive (:func:`hypervolume`)."""
        return hypervolume(self.points)


def hypervolume(points: F, feasible: NDArray[np.bool_] | None = None) -> float:
    """Hypervolume of (n, k) normalised points w.r.t. the origin (points below it count 0)."""
    from optuna._hypervolume import compute_hypervolume

    pts = np.asarray(points, dtype=float)
    ok = np.isfinite(pts).all(axis=1) & (pts > 0).all(axis=1)
    if feasible is not None:
        ok &= np.asarray(feasible, dtype=bool)
    if not ok.any():
        return 0.0
    k = pts.shape[1]
    if k == 1:
        return float(pts[ok].max())
    if k <= 3:
        return _hypervolume_3d(pts[ok] if k == 3 else np.column_stack([pts[ok], np.ones(ok.sum())]))
    front = pts[ok][pareto_mask(pts[ok])]
    # Optuna's exact hypervolume (WFG for k >= 3) minimises: negate the points and the origin.
    return float(compute_hypervolume(-front, np.zeros(k), assume_pareto=True))


def _hypervolume_3d(pts: F) -> float:
    """Exact hypervolume of (n, 3) positive maximised points w.r.t. the origin.

    A sweep down the third coordinate [Beume et al. 2009, "On the complexity of computing the
    hypervolume indicator", §3]: the volume is the sum over slabs between consecutive third
    coordinates of the slab's height times the area the points above it dominate in the first
    two. That area is kept as a staircase (first coordinate ascending, second descending)
    into which each point is inserted with a binary search, adding the area it newly covers
    and dropping the steps it dominates (each point enters and leaves once: O(n log n)).
    Dominated points add nothing, so no Pareto filter is needed first.
    """
    order = np.argsort(-pts[:, 2], kind="stable")
    xs_all, ys_all, zs = pts[order, 0].tolist(), pts[order, 1].tolist(), pts[order, 2].tolist()
    xs: list[float] = []  # staircase: x ascending, y descending
    ys: list[float] = []
    area = 0.0
    volume = 0.0
    n = len(zs)
    for i in range(n):
        px, py = xs_all[i], ys_all[i]
        j = bisect.bisect_left(xs, px)  # xs[j:] >= px
        if not (j < len(xs) and ys[j] >= py):  # not dominated in the first two coordinates
            # Steps before j with y <= py are dominated by p: a run ending at j - 1.
            k = j
            while k > 0 and ys[k - 1] <= py:
                k -= 1
            floor = ys[j] if j < len(xs) else 0.0
            gained = 0.0
            left = xs[k - 1] if k > 0 else 0.0
            for m in range(k, j):
                gained += (xs[m] - left) * (py - ys[m])
                left = xs[m]
            gained += (px - left) * (py - floor)
            area += gained
            del xs[k:j], ys[k:j]
            xs.insert(k, px)
            ys.insert(k, py)
        below = zs[i + 1] if i + 1 < n else 0.0
        volume += area * (zs[i] - below)
    return float(volume)


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


def thin_front(points: F, max_points: int) -> tuple[NDArray[np.int64], float]:
    """Indices (sorted) of at most ``max_points`` rows of a normalised front: one per cell of
    a grid, the row with the largest coordinate sum, the grid as fine as that allows
    (bisection on the cell size; the count of occupied cells falls as cells grow).

    The hypervolume lost is bounded by the cells' size: each dropped point lies in the cell
    of a kept one. A front of at most ``max_points`` rows is returned whole.

    Args:
        points: (n, k) normalised points (non-finite coordinates count as far below).
        max_points: the most rows to keep (>= 1).

    Returns:
        (m,) row indices (m <= max_points) and the cell size (0 when nothing was thinned).
    """
    norm = np.asarray(points, dtype=float)
    if len(norm) <= max_points:
        return np.arange(len(norm), dtype=np.int64), 0.0
    score = np.where(np.isfinite(norm), norm, -1e300).sum(axis=1)
    finite = np.where(np.isfinite(norm), norm, -1.0)
    lo, hi = 1e-6, 1.0
    keep = np.argsort(-score, kind="stable")[:max_points]
    for _ in range(40):
        size = float(np.sqrt(lo * hi))
        cells = np.floor(finite / size).astype(np.int64)
        order = np.lexsort((-score, *cells.T[::-1]))
        first = np.ones(len(order), dtype=bool)
        first[1:] = (np.diff(cells[order], axis=0) != 0).any(axis=1)
        if first.sum() > max_points:
            lo = size
        else:
            hi, keep = size, order[first]
    return np.sort(keep).astype(np.int64), hi
