"""Samplers: ranges, chunk independence, Latin strata, grids, simplex sums and bounds."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deepflow.datasets.samplers import (
    _SIMPLEX_ITERATIONS,
    BLOCK_ROWS,
    _median_parts,
    _permute,
    _sum_parts,
    decode_continuous,
    decode_index,
    decode_integer,
    decode_simplex,
    encode_simplex,
    project_simplex,
    simplex_dims,
    unit_cube,
)


@pytest.mark.parametrize("sampler", ["sobol", "lhs", "uniform"])
def test_chunks_of_any_size_give_the_same_points(sampler: str) -> None:
    n = BLOCK_ROWS + 1000  # crosses a random-stream block
    whole = unit_cube(sampler, seed=3, start=0, stop=n, num_samples=n, dims=5)
    cuts = [0, 1, 700, BLOCK_ROWS - 1, BLOCK_ROWS + 17, n]
    parts = [unit_cube(sampler, seed=3, start=a, stop=b, num_samples=n, dims=5)
             for a, b in itertools.pairwise(cuts)]  # fmt: skip
    assert np.array_equal(np.concatenate(parts), whole)
    assert whole.shape == (n, 5) and whole.min() >= 0 and whole.max() < 1
    other = unit_cube(sampler, seed=4, start=0, stop=n, num_samples=n, dims=5)
    assert not np.array_equal(other, whole)


def test_lhs_hits_every_stratum_once_per_dimension() -> None:
    n = 1000  # not a power of two: the permutation walks cycles
    u = unit_cube("lhs", seed=11, start=0, stop=n, num_samples=n, dims=4)
    for j in range(4):
        assert np.array_equal(np.sort(np.floor(u[:, j] * n)), np.arange(n))


@pytest.mark.parametrize("n", [1, 2, 3, 7, 64, 1000, 4099])
def test_feistel_permutation_is_a_bijection(n: int) -> None:
    keys = np.array([1, 2, 3, 4], dtype=np.uint64)
    assert np.array_equal(np.sort(_permute(np.arange(n), n, keys)), np.arange(n))


def test_sobol_prefix_of_a_power_of_two_is_balanced() -> None:
    u = unit_cube("sobol", seed=0, start=0, stop=256, num_samples=256, dims=3)
    for j in range(3):  # each of 16 equal bins holds 16 points (a (t, m, s)-net property)
        assert np.array_equal(np.bincount(np.floor(u[:, j] * 16).astype(int)), np.full(16, 16))


def test_grid_is_the_full_factorial_in_c_order() -> None:
    u = unit_cube("grid", seed=0, start=0, stop=6, num_samples=6, dims=2, levels=[2, 3],
                  endpoints=[True, False])  # fmt: skip
    assert np.allclose(u[:, 0], [0, 0, 0, 1, 1, 1])
    assert np.allclose(u[:, 1], [1 / 6, 3 / 6, 5 / 6] * 2)
    tail = unit_cube("grid", seed=0, start=4, stop=6, num_samples=6, dims=2, levels=[2, 3],
                     endpoints=[True, False])  # fmt: skip
    assert np.array_equal(tail, u[4:])


def test_decoders_stay_in_range() -> None:
    u = np.linspace(0, 1, 1001)
    x = decode_continuous(u, 2.0, 8.0, log=True)
    assert x[0] == pytest.approx(2.0) and x[-1] == pytest.approx(8.0)
    assert x[500] == pytest.approx(4.0)  # geometric middle
    assert decode_continuous(u, -1.0, 1.0)[500] == pytest.approx(0.0)
    ints = decode_integer((np.arange(700) + 0.5) / 700, 3, 9)
    assert np.array_equal(np.bincount(ints)[3:], np.full(7, 100))  # each value equally often
    logs = decode_integer(u, 1, 64, log=True)
    assert logs.min() == 1 and logs.max() == 64
    assert np.array_equal(decode_index(np.array([0.0, 0.49, 0.5, 1.0]), 2), [0, 0, 1, 1])
    assert np.array_equal(decode_index(np.array([0.9, 0.9]), np.array([2, 10])), [1, 9])


@st.composite
def _bounds(draw: st.DrawFn) -> tuple[list[float], list[float]]:
    k = draw(st.integers(2, 8))
    low = [draw(st.floats(0, 1.0 / k)) for _ in range(k)]
    high = [lo + draw(st.floats(0, 1)) for lo in low]
    high = [min(h, 1.0) for h in high]
    if sum(high) < 1:
        high[-1] = min(1.0, high[-1] + 1 - sum(high))
    if sum(high) < 1:
        high = [1.0] * k
    return low, high


@settings(max_examples=150, deadline=None)
@given(bounds=_bounds(), seed=st.integers(0, 2**16))
def test_simplex_parts_sum_to_one_within_bounds(bounds: tuple[list[float], list[float]],
                                               seed: int) -> None:  # fmt: skip
    low, high = bounds
    dims = simplex_dims(low, high)
    u = np.random.default_rng(seed).random((64, dims))
    u[0] = 0.0
    u[1] = 1.0
    x = decode_simplex(u, low, high)
    assert np.allclose(x.sum(axis=1), 1.0, atol=1e-12)
    assert (x >= np.array(low) - 1e-12).all() and (x <= np.array(high) + 1e-12).all()
    # a row's value does not depend on the rest of its batch
    assert np.array_equal(decode_simplex(u[5:6], low, high), x[5:6])


@settings(max_examples=100, deadline=None)
@given(bounds=_bounds(), seed=st.integers(0, 2**16))
def test_encode_simplex_inverts_decode(bounds: tuple[list[float], list[float]],
                                       seed: int) -> None:  # fmt: skip
    low, high = bounds
    u = np.random.default_rng(seed).random((32, simplex_dims(low, high)))
    x = decode_simplex(u, low, high)
    np.testing.assert_allclose(decode_simplex(encode_simplex(x, low, high), low, high), x,
                               atol=1e-12)  # fmt: skip


@settings(max_examples=100, deadline=None)
@given(bounds=_bounds(), seed=st.integers(0, 2**16))
def test_project_simplex_is_the_nearest_point_of_the_polytope(
    bounds: tuple[list[float], list[float]], seed: int
) -> None:
    low, high = bounds
    rng = np.random.default_rng(seed)
    feasible = decode_simplex(rng.random((32, simplex_dims(low, high))), low, high)
    y = feasible + rng.normal(0.0, 0.3, feasible.shape)
    p = project_simplex(y, low, high)
    assert np.allclose(p.sum(axis=1), 1.0, atol=1e-12)
    assert (p >= np.array(low)).all() and (p <= np.array(high)).all()
    np.testing.assert_allclose(project_simplex(feasible, low, high), feasible, atol=1e-12)
    # The projection's optimality condition: (y - p)·(x - p) <= 0 for every feasible x.
    for x in feasible:
        assert (((y - p) * (x - p)).sum(axis=1) <= 1e-9).all()


def test_unbounded_simplex_is_uniform() -> None:
    # Dirichlet(1, 1, 1, 1): each part has mean 1/4 and P(part < 0.1) = 1 - 0.9**3.
    low, high = [0.0] * 4, [1.0] * 4
    assert simplex_dims(low, high) == 3
    u = unit_cube("sobol", seed=1, start=0, stop=2**14, num_samples=2**14, dims=3)
    x = decode_simplex(u, low, high)
    assert np.allclose(x.mean(axis=0), 0.25, atol=2e-3)
    assert np.allclose((x < 0.1).mean(axis=0), 1 - 0.9**3, atol=5e-3)


def test_bounded_simplex_spreads_every_part_over_its_range() -> None:
    low = [0.4, 0.02, 0.005, 0.0]
    high = [0.8, 0.15, 0.03, 0.1]
    assert simplex_dims(low, high) == 4  # caps bind: the symmetric logit-shift map
    u = unit_cube("sobol", seed=2, start=0, stop=4096, num_samples=4096, dims=4)
    x = decode_simplex(u, low, high)
    for j in range(4):  # no part piles up at a bound
        span = high[j] - low[j]
        inner = (x[:, j] > low[j] + 0.05 * span) & (x[:, j] < high[j] - 0.05 * span)
        assert inner.mean() > 0.5


def _bounded_simplex_reference(u: np.ndarray, low: list[float], high: list[float]) -> np.ndarray:
    """The logit-shift map as first written: rows × parts, every Newton step on every row."""
    lo = np.asarray(low, dtype=float)
    cap = np.asarray(high, dtype=float) - lo
    total = 1.0 - lo.sum()
    z = np.clip(u, 1e-12, 1.0 - 1e-12)
    odds = z / (1.0 - z)
    logit = np.log(odds)
    mean_share = min(max(total / cap.sum(), 1e-12), 1.0 - 1e-12)
    centre = np.log(mean_share) - np.log1p(-mean_share)
    lo_shift = centre - logit.max(axis=1)
    hi_shift = centre - logit.min(axis=1)
    shift = centre - np.median(logit, axis=1)
    for _ in range(_SIMPLEX_ITERATIONS):
        q = odds * np.exp(shift)[:, None]
        p = q / (1.0 + q)
        excess = (cap * p).sum(axis=1) - total
        slope = (cap * p * (1.0 - p)).sum(axis=1)
        lo_shift = np.where(excess < 0, shift, lo_shift)
        hi_shift = np.where(excess < 0, hi_shift, shift)
        newton = shift - np.divide(excess, slope, out=np.zeros(len(u)), where=slope > 0)
        inside = (newton >= lo_shift) & (newton <= hi_shift) & (slope > 0)
        shift = np.where(inside, newton, 0.5 * (lo_shift + hi_shift))
    q = odds * np.exp(shift)[:, None]
    free = cap * q / (1.0 + q)
    mass = free.sum(axis=1, keepdims=True)
    free = np.minimum(free * np.divide(total, mass, out=np.ones_like(mass), where=mass > 0), cap)
    short = total - free.sum(axis=1, keepdims=True)
    room = cap - free
    share = np.divide(short, room.sum(axis=1, keepdims=True), out=np.zeros_like(short),
                      where=(short > 0) & (room.sum(axis=1, keepdims=True) > 0))  # fmt: skip
    return lo + free + room * share


@pytest.mark.parametrize("bounds", [
    ([0.40, 0.02, 0.02, 0.02, 0.05, 0.005, 0.001, 0.0],
     [0.80, 0.15, 0.10, 0.10, 0.18, 0.03, 0.01, 0.10]),  # configs/spaces/llm-pathfinding.yaml
    ([0.1, 0.2, 0.3], [0.2, 0.5, 0.9]),
    ([0.3, 0.3], [0.7, 0.7]),
    ([0.01 * i for i in range(11)], [0.01 * i + 0.15 for i in range(11)]),
])  # fmt: skip
def test_bounded_simplex_equals_every_step_on_every_row(bounds: tuple[list[float], list[float]],
                                                        ) -> None:  # fmt: skip
    # Rows leave the Newton loop at their fixed point and the parts run along the first
    # axis: the same floats as the plain loop.
    low, high = bounds
    assert simplex_dims(low, high) == len(low)
    u = np.random.default_rng(7).random((5000, len(low)))
    u[:3] = [[0.0], [1.0], [0.5]]
    assert np.array_equal(decode_simplex(u, low, high), _bounded_simplex_reference(u, low, high))


@pytest.mark.parametrize("k", [*range(1, 20), 64, 127, 128, 129, 300])
def test_sum_over_parts_adds_in_numpys_order(k: int) -> None:
    rng = np.random.default_rng(k)
    x = rng.normal(size=(2000, k)) * np.exp(rng.normal(0, 8, (2000, k)))
    x[:5] = 0.0
    assert np.array_equal(_sum_parts(np.ascontiguousarray(x.T)), x.sum(axis=1))


@pytest.mark.parametrize("k", [1, 2, 3, 8, 9])
def test_median_over_parts_is_numpys(k: int) -> None:
    x = np.random.default_rng(k).normal(size=(500, k))
    x[0, 0] = np.nan
    assert np.array_equal(_median_parts(np.ascontiguousarray(x.T)), np.median(x, axis=1),
                          equal_nan=True)  # fmt: skip
