"""Unit-cube samplers and the maps from the cube to variable values.

Every sampler returns the rows ``start..stop-1`` of one fixed sequence of ``num_samples``
points in ``[0, 1)^d``, so a sweep cut into chunks of any size, run by any number of workers
in any order, yields the same points:

- ``sobol``: scrambled Sobol' (scipy.stats.qmc.Sobol, seeded once), fast-forwarded to
  ``start``; balance properties hold for prefixes whose length is a power of two.
- ``lhs``: a Latin hypercube over all ``num_samples`` rows, like scipy.stats.qmc.LatinHypercube
  (stratum permutation plus jitter), but computed per row: each dimension's permutation of the
  strata is a keyed Feistel network (with cycle walking) so no chunk needs the whole design.
- ``uniform``: i.i.d. uniforms.
- ``grid``: the full factorial of each dimension's levels, in C order (first dimension
  slowest); continuous dimensions include both ends, discrete ones take cell centres.

Random streams come from ``numpy.random.SeedSequence([seed, block])`` for fixed blocks of
:data:`BLOCK_ROWS` rows, never from the chunk size or the worker.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

__all__ = [
    "BLOCK_ROWS",
    "SAMPLERS",
    "decode_continuous",
    "decode_index",
    "decode_integer",
    "decode_simplex",
    "encode_simplex",
    "grid_size",
    "project_simplex",
    "simplex_dims",
    "unit_cube",
]

F = NDArray[np.float64]
I64 = NDArray[np.int64]

SAMPLERS = ("sobol", "lhs", "uniform", "grid")
#: Rows per random-stream block: uniforms and LHS jitter for rows [k·B, (k+1)·B) come from
#: the stream (seed, k), so results do not depend on how the rows are chunked.
BLOCK_ROWS = 4096
#: Sobol' with scipy's default 30 bits has 2**30 points.
SOBOL_MAX_SAMPLES = 2**30
_TAG_UNIFORM = 0x5EED
_TAG_LHS = 0x1A7E
#: Newton steps of the bounded simplex map (converged to 1e-16 by 12 in tests).
_SIMPLEX_ITERATIONS = 16


def _block_uniforms(seed: int, tag: int, start: int, stop: int, dims: int) -> F:
    """i.i.d. uniforms for rows [start, stop) from per-block streams (seed, tag, block)."""
    out = np.empty((stop - start, dims))
    first, last = start // BLOCK_ROWS, (stop - 1) // BLOCK_ROWS
    for block in range(first, last + 1):
        rng = np.random.default_rng(np.random.SeedSequence([seed, tag, block]))
        values = rng.random((BLOCK_ROWS, dims))
        lo = max(start, block * BLOCK_ROWS)
        hi = min(stop, (block + 1) * BLOCK_ROWS)
        out[lo - start : hi - start] = values[lo - block * BLOCK_ROWS : hi - block * BLOCK_ROWS]
    return out


def _mix64(x: NDArray[np.uint64]) -> NDArray[np.uint64]:
    """splitmix64's finaliser: a bijective 64-bit mix (uint64 arithmetic wraps)."""
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def _feistel(x: NDArray[np.uint64], keys: NDArray[np.uint64], half_bits: int) -> NDArray[np.uint64]:
    """A keyed permutation of [0, 4**half_bits): a balanced Feistel network."""
    mask = np.uint64((1 << half_bits) - 1)
    shift = np.uint64(half_bits)
    left, right = x >> shift, x & mask
    for key in keys:
        left, right = right, left ^ (_mix64(right ^ key) & mask)
    return (left << shift) | right


def _permute(index: I64, n: int, keys: NDArray[np.uint64]) -> I64:
    """A pseudo-random permutation of [0, n) applied to ``index`` (cycle walking)."""
    half_bits = max(1, (max(n - 1, 1).bit_length() + 1) // 2)
    y = _feistel(index.astype(np.uint64), keys, half_bits)
    outside = y >= np.uint64(n)
    while outside.any():
        y[outside] = _feistel(y[outside], keys, half_bits)
        outside = y >= np.uint64(n)
    return y.astype(np.int64)


def _lhs(seed: int, start: int, stop: int, dims: int, num_samples: int) -> F:
    rows = np.arange(start, stop, dtype=np.int64)
    jitter = _block_uniforms(seed, _TAG_LHS, start, stop, dims)
    out = np.empty((stop - start, dims))
    for j in range(dims):
        state = np.random.SeedSequence([seed, _TAG_LHS, j]).generate_state(4, dtype=np.uint64)
        keys = np.asarray(state, dtype=np.uint64)
        strata = _permute(rows, num_samples, keys)
        out[:, j] = (strata + jitter[:, j]) / num_samples
    return out


def _sobol(seed: int, start: int, stop: int, dims: int) -> F:
    # Imported here: scipy.stats takes about a second to import, and the engine's worker
    # processes, given their points, never draw.
    from scipy.stats import qmc

    engine = qmc.Sobol(dims, scramble=True, rng=np.random.default_rng(seed))
    if start:
        engine.fast_forward(start)
    with warnings.catch_warnings():
        # "The balance properties of Sobol' points require n to be a power of 2": chunks are
        # slices of one sequence; the balance holds for the dataset's power-of-two prefixes.
        warnings.simplefilter("ignore", UserWarning)
        return np.asarray(engine.random(stop - start), dtype=float)


def grid_size(levels: Sequence[int]) -> int:
    """Number of points of the full factorial grid (Python int, exact)."""
    size = 1
    for n in levels:
        size *= int(n)
    return size


def _grid(start: int, stop: int, levels: Sequence[int], endpoints: Sequence[bool]) -> F:
    index = np.arange(start, stop, dtype=np.int64)
    out = np.empty((stop - start, len(levels)))
    for j in range(len(levels) - 1, -1, -1):  # C order: the last dimension varies fastest
        n = int(levels[j])
        digit = index % n
        index = index // n
        if endpoints[j]:
            out[:, j] = digit / (n - 1) if n > 1 else 0.5
        else:
            out[:, j] = (digit + 0.5) / n
    return out


def unit_cube(
    sampler: str,
    *,
    seed: int,
    start: int,
    stop: int,
    num_samples: int,
    dims: int,
    levels: Sequence[int] = (),
    endpoints: Sequence[bool] = (),
) -> F:
    """Rows ``start..stop-1`` of the sampler's sequence of ``num_samples`` points.

    Args:
        sampler: one of :data:`SAMPLERS`.
        seed: integer >= 0; the same seed gives the same points.
        start, stop: the row range, 0 <= start <= stop <= num_samples.
        num_samples: total points of the dataset (the LHS strata count).
        dims: cube dimensions d.
        levels, endpoints: per dimension, for ``grid`` only.

    Returns:
        Array of shape (stop - start, dims) in [0, 1].
    """
    if dims == 0 or stop <= start:
        return np.zeros((max(stop - start, 0), dims))
    if sampler == "sobol":
        return _sobol(seed, start, stop, dims)
    if sampler == "lhs":
        return _lhs(seed, start, stop, dims, num_samples)
    if sampler == "uniform":
        return _block_uniforms(seed, _TAG_UNIFORM, start, stop, dims)
    if sampler == "grid":
        return _grid(start, stop, levels, endpoints)
    raise ValueError(f"unknown sampler {sampler!r}")  # pragma: no cover - validated upstream


# ---------------------------------------------------------------------------- cube -> values
def decode_continuous(u: F, low: float, high: float, *, log: bool = False) -> F:
    """[0, 1] -> [low, high], linearly or in log space."""
    if log:
        return np.exp(np.log(low) + u * (np.log(high) - np.log(low)))
    return low + u * (high - low)


def decode_integer(u: F, low: int, high: int, *, log: bool = False) -> I64:
    """[0, 1] -> integers low..high, each equally likely (linear) or log-uniform (log)."""
    if log:
        value = np.floor(np.exp(np.log(low) + u * (np.log(high + 1.0) - np.log(low))))
    else:
        value = low + np.floor(u * (high - low + 1.0))
    return np.clip(value, low, high).astype(np.int64)


def decode_index(u: F, count: int | I64) -> I64:
    """[0, 1] -> an index 0..count-1 (count may vary per row)."""
    count_arr = np.asarray(count, dtype=np.int64)
    return np.minimum(np.floor(u * count_arr).astype(np.int64), count_arr - 1)


def simplex_dims(low: Sequence[float], high: Sequence[float]) -> int:
    """Cube dimensions :func:`decode_simplex` uses: k - 1 when no upper bound can bind
    (every cap high - low is at least the free mass 1 - sum(low)), else k."""
    lo = np.asarray(low, dtype=float)
    cap = np.asarray(high, dtype=float) - lo
    return lo.size - 1 if bool((cap >= 1.0 - lo.sum()).all()) else lo.size


def _median_parts(x: F) -> F:
    """``np.median`` over the first axis (the same floats, NaN included) by sorting the few
    parts, several times faster than median's partition."""
    s = np.sort(x, axis=0)
    half = x.shape[0] // 2
    mid = s[half] if x.shape[0] % 2 else (s[half - 1] + s[half]) / 2.0
    return np.where(np.isnan(s[-1]), np.nan, mid)


def _sum_parts(x: F) -> F:
    """Sum over the first axis, added in numpy's pairwise order, so equal bit for bit to
    ``x.T.sum(axis=1)`` (tested) but with k long vector additions instead of n short sums."""
    k = x.shape[0]
    if k < 8:
        total: F = np.zeros(x.shape[1:])
        for row in x:
            total = total + row
        return total
    if k > 128:  # numpy halves long rows at a multiple of 8
        half = k // 2 - (k // 2) % 8
        return _sum_parts(x[:half]) + _sum_parts(x[half:])
    acc = list(x[:8])
    i = 8
    while i < k - k % 8:
        acc = [a + row for a, row in zip(acc, x[i : i + 8], strict=True)]
        i += 8
    total = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]))
    for row in x[i:]:
        total = total + row
    return total


def decode_simplex(u: F, low: Sequence[float], high: Sequence[float]) -> F:
    """Cube coordinates -> (n, k) parts that sum to 1 within per-part bounds.

    With F = 1 - sum(low) the free mass and cap = high - low:

    - no cap can bind (cap_i >= F for every part; ``u`` has k - 1 columns): uniform on the
      simplex {x >= low, sum x = 1} (Dirichlet(1, ..., 1)) by stick breaking, part i taking
      the Beta(1, k-1-i) share 1 - u_i**(1/(k-1-i)) of the free mass left;
    - otherwise (``u`` has k columns): part i = low_i + cap_i·σ(logit u_i + λ), with one
      shift λ per row (safeguarded Newton, a fixed number of steps so that a row's value
      never depends on the other rows of its batch) that makes the parts sum to 1. Every part stays
      strictly inside its bounds, the map treats the parts symmetrically and reaches every
      interior point (λ = 0), but it is not uniform on the polytope.

    Requires sum(low) <= 1 <= sum(high) (checked when the space is loaded).
    """
    lo = np.asarray(low, dtype=float)
    cap = np.asarray(high, dtype=float) - lo
    k = lo.size
    n = u.shape[0]
    total = 1.0 - lo.sum()
    if u.shape[1] == k - 1:
        free = np.empty((n, k))
        rest = np.full(n, total)
        for i in range(k - 1):
            free[:, i] = rest * (1.0 - u[:, i] ** (1.0 / (k - 1 - i)))
            rest = rest - free[:, i]
        free[:, k - 1] = np.maximum(rest, 0.0)
        return lo + free
    # Parts run along the first axis (k, n): each operation is k long loops over the rows.
    z = np.clip(u.T, 1e-12, 1.0 - 1e-12)
    odds = z / (1.0 - z)  # σ(logit z + λ) = odds·t / (1 + odds·t) with t = exp(λ)
    # λ lies where every part's σ is at most (at least) the mean share F / sum(cap).
    logit = np.log(odds)
    mean_share = min(max(total / cap.sum(), 1e-12), 1.0 - 1e-12)
    centre = np.log(mean_share) - np.log1p(-mean_share)
    lo_shift = centre - logit.max(axis=0)
    hi_shift = centre - logit.min(axis=0)
    shift = centre - _median_parts(logit)
    cap_c, lo_c = cap[:, None], lo[:, None]
    # A row whose step leaves its shift unchanged has reached a fixed point (its bracket is
    # then unchanged too), so later steps are skipped for it: the same result, less work.
    rows = np.arange(n)
    s, lo_s, hi_s, odds_s = shift, lo_shift, hi_shift, odds
    for _ in range(_SIMPLEX_ITERATIONS):
        q = odds_s * np.exp(s)
        p = q / (1.0 + q)
        weighted = cap_c * p
        excess = _sum_parts(weighted) - total
        slope = _sum_parts(weighted * (1.0 - p))
        lo_s = np.where(excess < 0, s, lo_s)
        hi_s = np.where(excess < 0, hi_s, s)
        newton = s - np.divide(excess, slope, out=np.zeros(len(s)), where=slope > 0)
        inside = (newton >= lo_s) & (newton <= hi_s) & (slope > 0)
        step = np.where(inside, newton, 0.5 * (lo_s + hi_s))
        moving = step != s
        shift[rows] = step
        if not moving.all():
            rows, odds_s = rows[moving], odds_s[:, moving]
            s, lo_s, hi_s = step[moving], lo_s[moving], hi_s[moving]
            if not rows.size:
                break
        else:
            s = step
    q = odds * np.exp(shift)
    free = cap_c * q / (1.0 + q)
    mass = _sum_parts(free)
    free = np.minimum(free * np.divide(total, mass, out=np.ones_like(mass), where=mass > 0),
                      cap_c)  # fmt: skip
    short = total - _sum_parts(free)  # > 0 only where parts hit their caps
    room = cap_c - free
    room_total = _sum_parts(room)
    share = np.divide(short, room_total, out=np.zeros_like(short),
                      where=(short > 0) & (room_total > 0))  # fmt: skip
    return (lo_c + free + room * share).T


def encode_simplex(x: F, low: Sequence[float], high: Sequence[float]) -> F:
    """(n, k) parts within their bounds, summing to 1 -> the cube coordinates
    :func:`decode_simplex` maps back to them (to rounding).

    - stick breaking (k - 1 columns): u_i = (1 - free_i / rest_i)**(k-1-i), the inverse of
      each part's share of the free mass left;
    - bounded parts (k columns): u_i = (x_i - low_i) / cap_i, the point where the shift
      λ = 0 already makes the parts sum to 1.

    Requires sum(x) = 1 and low <= x <= high per row (e.g. from :func:`project_simplex`).
    """
    lo = np.asarray(low, dtype=float)
    hi = np.asarray(high, dtype=float)
    cap = hi - lo
    x = np.atleast_2d(np.asarray(x, dtype=float))
    k = lo.size
    if simplex_dims(low, high) == k - 1:
        free = np.maximum(x - lo, 0.0)
        rest = np.full(len(x), 1.0 - lo.sum())
        u = np.empty((len(x), k - 1))
        for i in range(k - 1):
            share = np.divide(free[:, i], rest, out=np.zeros(len(x)), where=rest > 0)
            u[:, i] = np.clip(1.0 - share, 0.0, 1.0) ** (k - 1 - i)
            rest = rest - free[:, i]
        return u
    safe = np.where(cap > 0, cap, 1.0)
    return np.clip((x - lo) / safe, 0.0, 1.0)


def project_simplex(y: F, low: Sequence[float], high: Sequence[float]) -> F:
    """Euclidean projection of rows of ``y`` (n, k) onto {low <= x <= high, sum x = 1}.

    The projection is ``clip(y - τ, low, high)`` for the one shift τ that makes the row sum
    to 1 [Held, Wolfe & Crowder 1974; Duchi et al. 2008, "Efficient projections onto the
    l1-ball", with box bounds]. The sum is piecewise linear and non-increasing in τ with
    breakpoints ``y - high`` and ``y - low``: it is evaluated at the sorted breakpoints of
    every row at once and τ interpolated on the segment that crosses 1 (exact, no
    iterations). Requires sum(low) <= 1 <= sum(high).
    """
    lo = np.asarray(low, dtype=float)
    hi = np.asarray(high, dtype=float)
    y = np.atleast_2d(np.asarray(y, dtype=float))
    n = len(y)
    if n == 0:
        return y.copy()
    points = np.sort(np.concatenate([y - hi, y - lo], axis=1), axis=1)  # (n, 2k) ascending
    sums = np.clip(y[:, None, :] - points[:, :, None], lo, hi).sum(axis=2)  # non-increasing
    # The last breakpoint whose sum is still >= 1 starts the segment (the first has sum(high)).
    j = np.clip((sums >= 1.0).sum(axis=1) - 1, 0, points.shape[1] - 2)
    rows = np.arange(n)
    t0, t1 = points[rows, j], points[rows, j + 1]
    s0, s1 = sums[rows, j], sums[rows, j + 1]
    slope = np.divide(s1 - s0, t1 - t0, out=np.zeros(n), where=t1 > t0)
    tau = np.where(slope < 0, t0 + np.divide(1.0 - s0, slope, out=np.zeros(n), where=slope < 0),
                   t0)  # fmt: skip
    return np.clip(y - tau[:, None], lo, hi)
