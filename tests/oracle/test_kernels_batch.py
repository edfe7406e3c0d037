"""The GEMM tile search in blocks of rows: bit-for-bit the same times whatever the batch, the
block boundaries and the output detail (the fast path takes shortcuts that must be exact)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from deepflow.config import load_device
from deepflow.oracle import kernels
from deepflow.oracle.hardware import DeviceCaps, device_caps
from deepflow.oracle.kernels import TILE_SHAPES, gemm

FIELDS = [f.name for f in dataclasses.fields(DeviceCaps) if f.type in ("float", float)]


def _devices(n: int, seed: int = 0) -> dict[str, np.ndarray]:
    """n devices around A100/H100 at bf16 and fp32, every field varied per row."""
    rng = np.random.default_rng(seed)
    base = [device_caps(load_device(d), p) for d in ("a100-sxm4-80gb", "h100-sxm5-80gb")
            for p in ("bf16", "fp32")]  # fmt: skip
    pick = rng.integers(0, len(base), n)
    table = {f: np.array([getattr(b, f) for b in base])[pick] * rng.uniform(0.3, 3, n)
             for f in FIELDS}  # fmt: skip
    table["num_sms"] = np.round(table["num_sms"])
    table["warp_tile_m"] = rng.choice([32.0, 64.0, 128.0], n)
    table["warp_tile_n"] = rng.choice([32.0, 64.0, 256.0], n)
    table["cluster_size"] = rng.choice([1.0, 2.0], n)
    table["bytes_per_element"] = rng.choice([1.0, 2.0, 4.0], n)
    return table


def _shapes(n: int, seed: int = 1) -> tuple[np.ndarray, ...]:
    """Shapes from 1 to 2**17 per side (log-uniform: small ones fit in L2, large ones not)."""
    rng = np.random.default_rng(seed)
    m, nn, k = (np.floor(np.exp(rng.uniform(0, np.log(2**17), n))) for _ in range(3))
    return m, nn, k, rng.choice([1.0, 3.0, 96.0], n)


def test_time_only_path_equals_the_detailed_search() -> None:
    n = 3 * kernels._BLOCK_ROWS + 5
    caps = _devices(n)
    shapes = _shapes(n)
    fast = gemm(caps, *shapes, detail=False)["time_s"]
    full = gemm(caps, *shapes)["time_s"]
    assert np.array_equal(fast, full)
    one = device_caps(load_device("h100-sxm5-80gb"), "bf16")
    assert np.array_equal(gemm(one, *shapes, detail=False)["time_s"], gemm(one, *shapes)["time_s"])


def test_batch_equals_each_row_alone_bit_for_bit() -> None:
    n = kernels._BLOCK_ROWS + 7  # two blocks
    caps = _devices(n, seed=2)
    m, nn, k, b = _shapes(n, seed=3)
    batch = gemm(caps, m, nn, k, b)
    for i in [0, 1, kernels._BLOCK_ROWS - 1, kernels._BLOCK_ROWS, n - 1]:
        alone = gemm({f: v[i] for f, v in caps.items()}, m[i], nn[i], k[i], b[i])
        for name, value in alone.items():
            assert np.array_equal(value, batch[name][i]), (name, i)


@pytest.mark.parametrize("field", ["hbm_bandwidth_Bps", "l1_bandwidth_Bps", "num_sms",
                                   "kernel_launch_s", "warp_tile_n"])  # fmt: skip
def test_one_field_per_row_broadcasts_like_the_others(field: str) -> None:
    a100 = device_caps(load_device("a100-sxm4-80gb"), "bf16")
    values = getattr(a100, field) * np.array([0.5, 1.0, 2.0])
    caps = {**{f: getattr(a100, f) for f in FIELDS}, field: values}
    batch = gemm(caps, 8192, 4096, 2048, detail=False)["time_s"]
    assert batch.shape == (3,)
    for i, v in enumerate(values):
        alone = dataclasses.replace(a100, **{field: float(v)})
        assert batch[i] == gemm(alone, 8192, 4096, 2048, detail=False)["time_s"]


def test_the_shortcuts_rest_on_power_of_two_tiles() -> None:
    # m / T_M as m × (1 / T_M), and one HBM estimate per group of tiles whose wave covers
    # the same output area, are exact because every factor is a power of two.
    sides = np.array([s for t in TILE_SHAPES for s in t], dtype=float)
    assert np.array_equal(2.0 ** np.round(np.log2(sides)), sides)
    area = kernels._WAVE_AREA
    assert np.array_equal(2.0 ** np.round(np.log2(area)), area)
    for g, start in enumerate(kernels._GROUP_STARTS):
        assert np.all(area[kernels._GROUP_OF_TILE == g] == area[start])
