"""Kernel times over the memory hierarchy: GEMMs (plain and batched) and memory-bound ops.

A multi-level roofline that fixes the original's bugs (crossflow-reference §8 items 1–5):

* memory-bound work is charged at the level it streams from (HBM, L2, L1), not at the
  register file;
* output writes are counted;
* per-SM parallelism is counted once: L1 traffic is compared with the aggregate L1
  bandwidth of all SMs;
* tiles respect divisibility: a partial CTA tile costs a full tile (tile quantisation), and
  tiles run in waves over the SMs (wave quantisation) — NVIDIA "Matrix Multiplication
  Background" user guide §2.3 and §3.1 (llm-training-model §6.1);
* the search is over a handful of CTA tile shapes (cuBLAS-like), vectorised, instead of
  48,000 random candidates.

Every function is vectorised over shapes and devices (numpy broadcasting); the device is a
:class:`~deepflow.oracle.hardware.DeviceCaps` or a mapping of its field names to arrays.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from deepflow.oracle.hardware import DeviceCaps

__all__ = ["BOUND_LEVELS", "TILE_SHAPES", "gemm", "gemm_one", "memory_op_time_s"]

F = NDArray[np.float64]

#: CTA output tile shapes (T_M, T_N) searched per GEMM: cuBLAS-style tiles from 256×128 down
#: to narrow tiles for skinny GEMMs (NVIDIA Matrix Multiplication Background guide §3.1 lists
#: 256×128, 128×256, 128×128, 64×128; the narrow ones stand for split/skinny kernels).
TILE_SHAPES: tuple[tuple[int, int], ...] = (
    (256, 256), (256, 128), (128, 256), (128, 128), (256, 64), (64, 256), (128, 64), (64, 128),
    (64, 64), (256, 32), (32, 256), (128, 32), (32, 128), (256, 16), (16, 256),
    (256, 8), (8, 256),
)  # fmt: skip
_TM = np.array([t[0] for t in TILE_SHAPES], dtype=float)
_TN = np.array([t[1] for t in TILE_SHAPES], dtype=float)
#: A 128×128 CTA tile keeps one SM's tensor cores busy; smaller tiles co-reside (up to 8 per
#: SM) so that an SM still holds 128×128 outputs' worth of work (est., following the guide's
#: point that small tiles trade reuse for parallelism).
_FULL_SM_TILE = 128.0 * 128.0
_MAX_CTAS_PER_SM = 8.0

#: Order of the levels in ``bound`` (the index of the slowest level).
BOUND_LEVELS = ("compute", "l1", "l2", "hbm")


def _get(caps: DeviceCaps | Mapping[str, Any], name: str) -> F:
    value = caps[name] if isinstance(caps, Mapping) else getattr(caps, name)
    return np.asarray(value, dtype=float)


def gemm(
    caps: DeviceCaps | Mapping[str, Any],
    m: ArrayLike,
    n: ArrayLike,
    k: ArrayLike,
    batch: ArrayLike = 1,
    *,
    detail: bool = True,
) -> dict[str, F]:
    """Time of ``batch`` independent GEMMs C[m, n] = A[m, k] · B[k, n] on one device.

    Args:
        caps: device capabilities (scalars, or arrays broadcastable with the shapes).
        m, n, k: GEMM dimensions (elements), arrays of the same shape or scalars.
        batch: number of independent GEMMs of that shape (batched GEMM, e.g. attention).
        detail: False returns only ``time_s`` (faster; for the workload models).

    Returns:
        ``time_s`` (launch overhead included), ``flops``, per-level times ``compute_s``,
        ``l1_s``, ``l2_s``, ``hbm_s``, byte counts ``hbm_bytes``, ``l2_bytes``,
        ``l1_bytes``, the chosen tile ``tile_m``/``tile_n`` and ``bound`` (index into
        :data:`BOUND_LEVELS`), each with the broadcast shape of the inputs.
    """
    m_, n_, k_, b_ = (np.asarray(x, dtype=float)[..., None] for x in (m, n, k, batch))
    p = _get(caps, "bytes_per_element")[..., None]
    sms = _get(caps, "num_sms")[..., None]
    peak = _get(caps, "peak_flops")[..., None] * _get(caps, "gemm_efficiency")[..., None]
    l1_bw = _get(caps, "l1_bandwidth_Bps")[..., None]
    l2_bw = _get(caps, "l2_bandwidth_Bps")[..., None]
    l2_cap = _get(caps, "l2_capacity_B")[..., None]
    hbm_bw = _get(caps, "hbm_bandwidth_Bps")[..., None] * _get(caps, "hbm_efficiency")[..., None]
    hbm_lat = _get(caps, "hbm_latency_s")[..., None]
    warp_m = _get(caps, "warp_tile_m")[..., None]
    warp_n = _get(caps, "warp_tile_n")[..., None]
    cluster = _get(caps, "cluster_size")[..., None]
    # (Per-row factors are formed on the row axis first and meet the tile axis once, so each
    # line below costs one or two operations on the (rows, tiles) grid.)

    # Tile and wave quantisation: partial tiles cost full tiles; tiles run in waves over the
    # SMs; a wave of small tiles keeps ctas_per_sm of them on each SM.
    tiles = b_ * np.ceil(m_ / _TM) * np.ceil(n_ / _TN)
    ctas_per_sm = np.clip(_FULL_SM_TILE / (_TM * _TN), 1.0, _MAX_CTAS_PER_SM)
    slots = sms * ctas_per_sm
    waves = np.ceil(tiles / slots)
    compute_s = waves * ((k_ * sms / peak) * (2.0 * ctas_per_sm * _TM * _TN))

    # Shared memory -> matrix units: each MMA issuer (warp / warpgroup) of tile warp_m × warp_n
    # reads its A fragment once per warp_n columns and B once per warp_m rows; compared with
    # the L1 bandwidth of all SMs together (SM parallelism counted once).
    l1_per_tile = _TM * _TN * (1.0 / np.minimum(_TN, warp_n) + 1.0 / np.minimum(_TM, warp_m))
    l1_s = tiles * ((k_ * p / l1_bw) * l1_per_tile)
    # L2 -> SMs: each CTA streams its A panel (T_M × k) and B panel (k × T_N), shared by the
    # CTAs of a cluster through multicast; C is written once.
    c_bytes = m_ * n_ * p
    l2_s = tiles * ((k_ * p / (cluster * l2_bw)) * (_TM + _TN)) + c_bytes * b_ / l2_bw
    # HBM: compulsory A, B, C. When one operand fits in half of L2 it stays resident while the
    # other streams once; when neither does, operands are re-read once per block of output
    # that one wave keeps resident (a square-ish block of slots × tile area).
    a_bytes = m_ * k_ * p
    b_bytes = k_ * n_ * p
    fits = ((a_bytes + b_bytes) <= l2_cap) | (np.minimum(a_bytes, b_bytes) <= l2_cap / 2)
    compulsory = b_ * (a_bytes + b_bytes + c_bytes)
    if np.all(fits):
        hbm_bytes = np.broadcast_to(compulsory, np.broadcast_shapes(compulsory.shape, _TM.shape))
    else:
        block_area = slots * (_TM * _TN)
        m_blk = np.minimum(m_, np.sqrt(block_area))
        n_blk = np.minimum(n_, block_area / m_blk)
        reread = a_bytes * np.maximum(1.0, n_ / n_blk) + b_bytes * np.maximum(1.0, m_ / m_blk)
        hbm_bytes = np.where(fits, compulsory, b_ * (reread + c_bytes))
    hbm_s = hbm_bytes / hbm_bw + hbm_lat
    compute_b, l1_b, l2_b, hbm_b = np.broadcast_arrays(compute_s, l1_s, l2_s, hbm_s)
    kernel_s = np.maximum(np.maximum(compute_b, l1_b), np.maximum(l2_b, hbm_b))
    best = np.argmin(kernel_s, axis=-1)[..., None]

    def pick(x: F) -> F:
        full = np.broadcast_to(x, kernel_s.shape)
        return np.take_along_axis(full, best, axis=-1)[..., 0]

    launch = _get(caps, "kernel_launch_s")
    if not detail:
        return {"time_s": np.asarray(pick(kernel_s) + launch, dtype=float)}
    picked = [pick(level) for level in (compute_b, l1_b, l2_b, hbm_b)]
    out = {
        "time_s": pick(kernel_s) + launch,
        "flops": (2.0 * b_ * m_ * n_ * k_)[..., 0],
        "compute_s": picked[0],
        "l1_s": picked[1],
        "l2_s": picked[2],
        "hbm_s": picked[3],
        "l1_bytes": pick(l1_s * l1_bw),
        "l2_bytes": pick(l2_s * l2_bw),
        "hbm_bytes": pick(hbm_bytes),
        "tile_m": pick(np.broadcast_to(_TM, kernel_s.shape)),
        "tile_n": pick(np.broadcast_to(_TN, kernel_s.shape)),
        "bound": np.argmax(np.stack(picked), axis=0).astype(float),
    }
    return {name: np.asarray(v, dtype=float) for name, v in out.items()}


@lru_cache(maxsize=65536)
def gemm_one(caps: DeviceCaps, m: int, n: int, k: int, batch: int = 1) -> float:
    """Seconds for one (batched) GEMM on one device; memoised per (device, shape)."""
    return float(gemm(caps, m, n, k, batch, detail=False)["time_s"])


def memory_op_time_s(
    caps: DeviceCaps | Mapping[str, Any],
    bytes_moved: ArrayLike,
    flops: ArrayLike = 0.0,
    *,
    l2_resident: ArrayLike = False,
    launches: ArrayLike = 1,
) -> F:
    """Time of an elementwise or reduction kernel (norm, softmax, activation, optimizer, ...).

    Streams ``bytes_moved`` from HBM at the family's achievable fraction of peak
    (llm-training-model §6.3), or from L2 when ``l2_resident`` and the bytes fit in L2;
    ``flops`` run on the vector units (non-matrix FP32 rate); one launch per kernel.
    """
    nbytes = np.asarray(bytes_moved, dtype=float)
    in_l2 = np.asarray(l2_resident, dtype=bool) & (nbytes <= _get(caps, "l2_capacity_B"))
    hbm_bw = _get(caps, "hbm_bandwidth_Bps") * _get(caps, "hbm_efficiency")
    bandwidth = np.where(in_l2, _get(caps, "l2_bandwidth_Bps"), hbm_bw)
    stream_s = nbytes / bandwidth + np.where(in_l2, 0.0, _get(caps, "hbm_latency_s"))
    compute_s = np.asarray(flops, dtype=float) / _get(caps, "vector_flops")
    launch_s = np.asarray(launches, dtype=float) * _get(caps, "kernel_launch_s")
    return np.asarray(np.maximum(stream_s, compute_s) + launch_s, dtype=float)
