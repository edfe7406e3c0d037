"""Samplers: ranges, chunk independence, Latin strata, grids, simplex sums and bounds."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deepflow.datasets.samplers import (
    BLOCK_ROWS,
    _permute,
    decode_continuous,
    decode_index,
    decode_integer,
    decode_simplex,
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
