"""Kernel times over the memory hierarchy: GEMMs (plain and batched) and memory-bound ops.

A multi-level roofline that fixes the original's bugs (docs/model.md §B8 items 1–5):

* memory-bound work is charged at the level it streams from (HBM, L2, L1), not at the
  register file;
* output writes are counted;
* per-SM parallelism is counted once: L1 traffic is compared with the aggregate L1
  bandwidth of all SMs;
* tiles respect divisibility: a partial CTA tile costs a full tile (tile quantisation), and
  tiles run in waves over the SMs (wave quantisation) — NVIDIA "Matrix Multiplication
  Background" user guide §2.3 and §3.1 (docs/model.md §C6.1);
* the search is over a handful of CTA tile shapes (cuBLAS-like), vectorised, instead of
  48,000 random candidates;
* the on-chip SRAM sizes the tiles (docs/model.md §C6.1a): a CTA's double-buffered A/B
  k-slices must fit the shared memory (L1) of its SM and its fp32 accumulators the register
  file; the capacities cap how many CTAs co-reside on an SM (occupancy) and rule out tiles
  that do not fit (hence less reuse: more L2 traffic); MMA operands are read from the
  register file at its bandwidth.

Every function is vectorised over shapes and devices (numpy broadcasting); the device is a
:class:`~deepflow.oracle.hardware.DeviceCaps` or a mapping of its field names to arrays.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from deepflow.oracle.hardware import DeviceCaps

__all__ = [
    "BOUND_LEVELS",
    "GEMM_CAPS_FIELDS",
    "TILE_SHAPES",
    "gemm",
    "gemm_one",
    "memory_op_time_s",
    "sram_excess_B",
]

F = NDArray[np.float64]

#: CTA output tile shapes (T_M, T_N) searched per GEMM: cuBLAS-style tiles from 256×128 down
#: to narrow tiles for skinny GEMMs (NVIDIA Matrix Multiplication Background guide §3.1 lists
#: 256×128, 128×256, 128×128, 64×128; the narrow ones stand for split/skinny kernels), and a
#: 512×512 block for matrix units whose accumulators live in a large scratchpad (a TPU
#: TensorCore's VMEM: the JAX Pallas TPU matmul guide's blocks of 512 × 1024 reach 92 % of a
#: v5e's peak where 128 × 128 blocks reach 6 %; docs/model.md §C6.1a). Where the register file
#: cannot hold its 1 MiB of fp32 accumulators (every shipped GPU) it runs in passes, never best.
TILE_SHAPES: tuple[tuple[int, int], ...] = (
    (512, 512),
    (256, 256),
    (256, 128),
    (128, 256),
    (128, 128),
    (256, 64),
    (64, 256),
    (128, 64),
    (64, 128),
    (64, 64),
    (256, 32),
    (32, 256),
    (128, 32),
    (32, 128),
    (256, 16),
    (16, 256),
    (256, 8),
    (8, 256),
)
_TM = np.array([t[0] for t in TILE_SHAPES], dtype=float)
_TN = np.array([t[1] for t in TILE_SHAPES], dtype=float)
#: A 128×128 CTA tile keeps one SM's tensor cores busy; smaller tiles co-reside (up to 8 per
#: SM) so that an SM still holds 128×128 outputs' worth of work (est., following the guide's
#: point that small tiles trade reuse for parallelism).
_FULL_SM_TILE = 128.0 * 128.0
_MAX_CTAS_PER_SM = 8.0

#: Order of the levels in ``bound`` (the index of the slowest level).
BOUND_LEVELS = ("compute", "l1", "l2", "hbm", "register_file")

#: K-slice of a CTA's main loop (elements) and the pipeline stages held in shared memory:
#: CUTLASS's default fp16 tensor-core tiles take k = 32 per stage (``GemmShape<128, 128, 32>``)
#: and double-buffer (2 stages) as the minimum for overlapping loads with MMAs (CUTLASS
#: docs/efficient_gemm.md "Pipelining"; docs/model.md §C6.1a).
_K_SLICE = 32.0
_SMEM_STAGES = 2.0
#: Accumulators are fp32 (4 B) for every 16-bit and 8-bit input type (PTX ISA ``mma`` .f32
#: accumulator; fp64 GEMMs accumulate in 8 B).
_ACC_BYTES = 4.0
#: MMA operand traffic from the register file: one ``mma.m16n8k16`` reads an A fragment of
#: 16×16 and a B fragment of 16×8 elements for 16×8 outputs (PTX ISA 9.7.13 "Matrix shape"),
#: so a T_M × T_N × k tile reads T_M·T_N·k·(1/8 + 1/16) operand elements (docs/model.md
#: §C6.1a; accumulators stay in the MMA datapath across an instruction chain, not counted).
_RF_OPERANDS_PER_OUTPUT_K = 1.0 / 8.0 + 1.0 / 16.0

# The search runs on a (tiles, rows) grid: tile constants are (tiles, 1) columns and per-row
# values (rows,) vectors, so each operation is a few long contiguous loops; the rows go in
# blocks that stay in cache.
_CTAS = np.clip(_FULL_SM_TILE / (_TM * _TN), 1.0, _MAX_CTAS_PER_SM)
_TM_C, _TN_C, _CTAS_C = _TM[:, None], _TN[:, None], _CTAS[:, None]
# Tile sides are powers of two: m / T_M is m × (1 / T_M) exactly, formed once per distinct side.
_SIDES, _TM_SIDE = np.unique(_TM, return_inverse=True)
_TN_SIDE = np.searchsorted(_SIDES, _TN)
_INV_SIDES = (1.0 / _SIDES)[:, None]
_COMPUTE_TILE = (2.0 * _CTAS * _TM * _TN)[:, None]
_L2_TILE = (_TM + _TN)[:, None]
#: Tiles whose wave holds the same output area (ctas_per_sm × T_M × T_N, a power of two like
#: each factor, so the block area below is the same float for any SM count) share their HBM
#: traffic; consecutive tiles of equal area form one group, evaluated once.
_WAVE_AREA = _CTAS * _TM * _TN
_GROUP_STARTS = np.flatnonzero(np.r_[True, _WAVE_AREA[1:] != _WAVE_AREA[:-1]])
_GROUP_OF_TILE = np.repeat(np.arange(len(_GROUP_STARTS)), np.diff(np.r_[_GROUP_STARTS, len(_TM)]))
_GROUP_CTAS = _CTAS[_GROUP_STARTS][:, None]
_GROUP_AREA = (_TM * _TN)[_GROUP_STARTS][:, None]
#: Rows per block: (tiles, rows) float arrays of at most 120 KiB stay in cache and under glibc's
#: 128 KiB mmap threshold (larger temporaries are mapped and page-faulted afresh each time:
#: blocks of 1,500 rows took twice as long as blocks of 900).
_BLOCK_ROWS = 120 * 1024 // (8 * len(TILE_SHAPES))
#: The per-GEMM detail columns of :func:`gemm` (``detail=True``), after ``time_s``/``flops``.
_DETAIL = ("compute_s", "l1_s", "l2_s", "hbm_s", "register_file_s", "l1_bytes", "l2_bytes",
           "hbm_bytes", "register_file_bytes", "tile_m", "tile_n", "ctas_per_sm",
           "bound")  # fmt: skip
#: DeviceCaps fields the GEMM tile model reads.
GEMM_CAPS_FIELDS = (
    "bytes_per_element",
    "num_sms",
    "peak_flops",
    "gemm_efficiency",
    "l1_bandwidth_Bps",
    "l2_bandwidth_Bps",
    "l2_capacity_B",
    "hbm_bandwidth_Bps",
    "hbm_efficiency",
    "hbm_latency_s",
    "warp_tile_m",
    "warp_tile_n",
    "cluster_size",
    "l1_capacity_per_sm_B",
    "register_file_capacity_per_sm_B",
    "register_file_bandwidth_Bps",
    "accumulators_in_l1",
)


def _get(caps: DeviceCaps | Mapping[str, Any], name: str) -> F:
    return _fields(caps, (name,))[0]


def _fields(caps: DeviceCaps | Mapping[str, Any], names: tuple[str, ...]) -> list[F]:
    """Device fields as float arrays, from a DeviceCaps or a mapping of field names."""
    fetch = caps.__getitem__ if isinstance(caps, Mapping) else caps.__getattribute__
    return [np.asarray(fetch(name), dtype=float) for name in names]


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
    dims = [np.asarray(x, dtype=float) for x in (m, n, k, batch)]
    device = dict(zip(GEMM_CAPS_FIELDS, _fields(caps, GEMM_CAPS_FIELDS), strict=True))
    shape = np.broadcast(*dims, *device.values()).shape
    size = math.prod(shape)

    def flat(x: F) -> F:  # per-row values on one axis; scalars stay scalars
        if x.ndim == 0 or x.shape == (size,):
            return x
        return np.broadcast_to(x, shape).reshape(-1)

    flat_dims = [flat(x) for x in dims]
    flat_device = {name: flat(x) for name, x in device.items()}
    names = ("time_s", *(_DETAIL if detail else ()))
    out = {name: np.empty(size) for name in names}
    for lo in range(0, max(size, 1), _BLOCK_ROWS):  # blocks of rows: small arrays, in cache
        hi = min(lo + _BLOCK_ROWS, size)
        m_, n_, k_, b_ = (x[lo:hi] if x.ndim else x for x in flat_dims)
        block = {name: x[lo:hi] if x.ndim else x for name, x in flat_device.items()}
        terms = _row_terms(m_, n_, k_, b_, block)
        for name, value in _tile_search(terms, detail).items():
            out[name][lo:hi] = value
    final = {name: v.reshape(shape) for name, v in out.items()}
    final["time_s"] = np.asarray(final["time_s"] + _get(caps, "kernel_launch_s"), dtype=float)
    if detail:
        m_, n_, k_, b_ = dims
        final["flops"] = np.asarray(2.0 * b_ * m_ * n_ * k_, dtype=float)
        final = {name: final[name] for name in ("time_s", "flops", *_DETAIL)}
    return final


def _row_terms(m_: F, n_: F, k_: F, b_: F, d: Mapping[str, F]) -> dict[str, F]:
    """What the tile search needs of each row: shapes, per-row factors of the level times,
    and the HBM time, which depends on the tile only through its group (tiles first)."""
    p = d["bytes_per_element"]
    sms = d["num_sms"]
    peak = d["peak_flops"] * d["gemm_efficiency"]
    l1_bw = d["l1_bandwidth_Bps"]
    l2_bw = d["l2_bandwidth_Bps"]
    l2_cap = d["l2_capacity_B"]
    hbm_bw = d["hbm_bandwidth_Bps"] * d["hbm_efficiency"]
    warp_m, warp_n = d["warp_tile_m"], d["warp_tile_n"]
    # Shared memory -> matrix units: each MMA issuer (warp / warpgroup) of tile warp_m × warp_n
    # reads its A fragment once per warp_n columns and B once per warp_m rows; compared with
    # the L1 bandwidth of all SMs together (SM parallelism counted once).
    l1_per_tile = (
        _TM_C * _TN_C * (1.0 / np.minimum(_TN_C, warp_n) + 1.0 / np.minimum(_TM_C, warp_m))
    )
    # L2 -> SMs: each CTA streams its A panel (T_M × k) and B panel (k × T_N), shared by the
    # CTAs of a cluster through multicast; C is written once.
    c_bytes = m_ * n_ * p
    # HBM: compulsory A, B, C. When one operand fits in half of L2 it stays resident while the
    # other streams once; when neither does, operands are re-read once per block of output
    # that one wave keeps resident (a square-ish block of slots × tile area: one per group).
    a_bytes = m_ * k_ * p
    b_bytes = k_ * n_ * p
    fits = ((a_bytes + b_bytes) <= l2_cap) | (np.minimum(a_bytes, b_bytes) <= l2_cap / 2)
    compulsory = b_ * (a_bytes + b_bytes + c_bytes)
    if fits.all():
        hbm_bytes = compulsory * np.ones((1, 1))
    else:
        block_area = (sms * _GROUP_CTAS) * _GROUP_AREA
        # The wave shares its operand panels through L2 only as far as L2 holds their
        # in-flight k-slices (a block side of l2_cap / (2·k-slice·stages·p), at least one
        # tile: without L2 every CTA streams its own panels from HBM; docs/model.md §C6.1a).
        side = np.maximum(l2_cap / (2.0 * _K_SLICE * _SMEM_STAGES * p), np.sqrt(_GROUP_AREA))
        m_blk = np.minimum(m_, np.minimum(np.sqrt(block_area), side))
        n_blk = np.minimum(n_, np.minimum(block_area / m_blk, side))
        reread = a_bytes * np.maximum(1.0, n_ / n_blk) + b_bytes * np.maximum(1.0, m_ / m_blk)
        hbm_bytes = np.where(fits, compulsory, b_ * (reread + c_bytes))
    # Register file -> MMA units: operand fragments per instruction (_RF_OPERANDS_PER_OUTPUT_K
    # elements per output per k); a register file without bandwidth never finishes.
    rf_bw = d["register_file_bandwidth_Bps"]
    rf_tile_bytes = k_ * p * _RF_OPERANDS_PER_OUTPUT_K
    with np.errstate(divide="ignore"):
        rf_per_tile = np.where(rf_bw > 0, rf_tile_bytes / np.where(rf_bw > 0, rf_bw, 1.0), np.inf)
    return {
        "m": m_,
        "n": n_,
        "b": b_,
        "sms": sms,
        "compute_per_tile": k_ * sms / peak,
        "l1_per_tile": l1_per_tile,
        "l1_per_byte": k_ * p / l1_bw,
        "l2_per_byte": k_ * p / (d["cluster_size"] * l2_bw),
        "l2_c": c_bytes * b_ / l2_bw,
        "l1_bw": l1_bw,
        "l2_bw": l2_bw,
        "rf_per_tile": rf_per_tile,
        "rf_tile_bytes": rf_tile_bytes,
        "occupancy": _occupancy(
            p,
            d["accumulators_in_l1"],
            d["l1_capacity_per_sm_B"],
            d["register_file_capacity_per_sm_B"],
        ),
        "hbm_bytes": hbm_bytes,
        "hbm_s": hbm_bytes / hbm_bw + d["hbm_latency_s"],
    }


#: Per-tile SRAM needs of one CTA: shared-memory elements (double-buffered A and B k-slices)
#: and accumulator outputs (docs/model.md §C6.1a).
_SMEM_ELEMS = ((_TM + _TN) * _K_SLICE * _SMEM_STAGES)[:, None]
_ACC_ELEMS = (_TM * _TN)[:, None]


def _sram_needs(p: F, acc_in_l1: F) -> tuple[F, F]:
    """Bytes one CTA of each tile shape needs (tiles, rows) in L1 (shared memory: A/B
    k-slices, plus the accumulators where they live in L1) and in the register file."""
    acc = _ACC_ELEMS * np.maximum(_ACC_BYTES, p)
    return _SMEM_ELEMS * p + acc_in_l1 * acc, (1.0 - acc_in_l1) * acc


def _occupancy(p: F, acc_in_l1: F, l1_per_sm_B: F, rf_per_sm_B: F) -> tuple[F, F]:
    """CTAs of each tile shape that co-reside on one SM, and the passes one CTA needs (both
    (tiles, rows)).

    The CTAs: the nominal count (``_CTAS``) capped by what the shared memory and the register
    file hold, at least 1. The passes: 1 where one CTA fits; otherwise its SRAM need over the
    capacity (at least one fp32 word): a CTA whose k-slices or accumulators do not fit runs
    its output in that many sequential passes, each re-streaming its operands, so every level
    time scales by it (docs/model.md §C6.1a). Less SRAM never makes a tile faster.
    """
    l1_need, rf_need = _sram_needs(p, acc_in_l1)
    by_l1 = l1_per_sm_B / l1_need
    has_rf = rf_need > 0
    by_rf = np.where(has_rf, rf_per_sm_B / np.where(has_rf, rf_need, 1.0), np.inf)
    ctas = np.maximum(np.minimum(_CTAS_C, np.floor(np.minimum(by_l1, by_rf))), 1.0)
    floor = _ACC_BYTES
    passes = np.maximum(
        np.maximum(1.0, l1_need / np.maximum(l1_per_sm_B, floor)),
        rf_need / np.maximum(rf_per_sm_B, floor),
    )
    return ctas, passes


def sram_excess_B(caps: DeviceCaps | Mapping[str, Any]) -> F:
    """How far the on-chip SRAM falls short of the smallest GEMM tile (≤ 0 feasible).

    For each tile shape of :data:`TILE_SHAPES`, the larger of the shared-memory shortfall
    (one CTA's double-buffered A/B k-slices vs the L1 per SM) and the register-file shortfall
    (its fp32 accumulators vs the register file per SM); the minimum over the shapes, in
    bytes. A device with no register file or an L1 too small for any tile cannot run a GEMM
    (docs/model.md §C6.1a).
    """
    fields = ("bytes_per_element", "accumulators_in_l1", "l1_capacity_per_sm_B",
              "register_file_capacity_per_sm_B")  # fmt: skip
    values = _fields(caps, fields)
    if all(v.ndim == 0 for v in values):  # one device: memoised
        return np.asarray(_sram_excess_one(*(float(v) for v in values)))
    shape = np.broadcast(*values).shape
    p, in_l1, l1, rf = (np.broadcast_to(x, shape).reshape(-1) for x in values)
    l1_need, rf_need = _sram_needs(p, in_l1)
    excess = np.maximum(l1_need - l1, rf_need - rf)
    return np.asarray(np.min(excess, axis=0).reshape(shape), dtype=float)


@lru_cache(maxsize=4096)
def _sram_excess_one(p: float, in_l1: float, l1: float, rf: float) -> float:
    l1_need, rf_need = _sram_needs(np.array([p]), np.array([in_l1]))
    return float(np.min(np.maximum(l1_need - l1, rf_need - rf)))


def _tile_search(t: Mapping[str, F], detail: bool) -> dict[str, F]:
    """The tile search for one block of rows, given their :func:`_row_terms`."""
    # (Per-row factors are formed on the row axis first and meet the tile axis once, so each
    # line below costs one or two operations on the (tiles, rows) grid.)

    # Tile and wave quantisation: partial tiles cost full tiles; tiles run in waves over the
    # SMs; a wave of small tiles keeps ctas_per_sm of them on each SM.
    tiles_m = np.ceil(t["m"] * _INV_SIDES)[_TM_SIDE]
    tiles_n = np.ceil(t["n"] * _INV_SIDES)[_TN_SIDE]
    b_ = t["b"]
    tiles = (tiles_m if b_.ndim == 0 and b_ == 1.0 else b_ * tiles_m) * tiles_n  # (× 1: same)
    # Occupancy: the CTAs that fit the SM's shared memory and register file; a wave of fewer
    # co-resident small tiles leaves the SM's matrix units partly idle for as long as a full
    # wave. A tile whose CTA does not fit at all runs in ``passes`` (every level time × it).
    ctas, passes = t["occupancy"]
    waves = np.ceil(tiles / (t["sms"] * ctas))
    compute_s = waves * (t["compute_per_tile"] * _COMPUTE_TILE)
    l1_s = tiles * (t["l1_per_byte"] * t["l1_per_tile"])
    l2_s = tiles * (t["l2_per_byte"] * _L2_TILE) + t["l2_c"]
    rf_s = tiles * (t["rf_per_tile"] * _ACC_ELEMS)
    hbm_s, hbm_bytes = t["hbm_s"], t["hbm_bytes"]
    split = bool((passes > 1.0).any())
    if split:  # some tile does not fit: level times per tile, scaled by its passes
        if hbm_s.shape[0] > 1:
            hbm_s, hbm_bytes = hbm_s[_GROUP_OF_TILE], hbm_bytes[_GROUP_OF_TILE]
        compute_s, l1_s, l2_s, rf_s, hbm_s, hbm_bytes = (
            x * passes for x in (compute_s, l1_s, l2_s, rf_s, hbm_s, hbm_bytes)
        )

    if not detail:
        inner = np.maximum(np.maximum(compute_s, l1_s), np.maximum(l2_s, rf_s))
        if split:
            return {"time_s": np.minimum.reduce(np.maximum(inner, hbm_s), axis=0)}
        # min over tiles of max(compute, L1, L2, RF, HBM) = min over groups of max(HBM of the
        # group, min over its tiles of max(compute, L1, L2, RF)): equal, as min and max round
        # nothing.
        per_group = np.minimum.reduceat(inner, _GROUP_STARTS, axis=0)  # groups: consecutive tiles
        return {"time_s": np.minimum.reduce(np.maximum(per_group, hbm_s), axis=0)}
    if not split and hbm_s.shape[0] > 1:
        hbm_s, hbm_bytes = hbm_s[_GROUP_OF_TILE], hbm_bytes[_GROUP_OF_TILE]
    compute_b, l1_b, l2_b, hbm_b, rf_b = np.broadcast_arrays(compute_s, l1_s, l2_s, hbm_s, rf_s)
    kernel_s = np.maximum(np.maximum(compute_b, l1_b), np.maximum(l2_b, np.maximum(hbm_b, rf_b)))
    choice = np.argmin(kernel_s, axis=0)[None]

    def pick(x: F) -> F:
        full = np.broadcast_to(x, kernel_s.shape)
        return np.take_along_axis(full, choice, axis=0)[0]

    picked = [pick(level) for level in (compute_b, l1_b, l2_b, hbm_b, rf_b)]
    return {
        "time_s": pick(kernel_s),
        "compute_s": picked[0],
        "l1_s": picked[1],
        "l2_s": picked[2],
        "hbm_s": picked[3],
        "register_file_s": picked[4],
        "l1_bytes": picked[1] * t["l1_bw"],
        "l2_bytes": picked[2] * t["l2_bw"],
        "hbm_bytes": pick(hbm_bytes),
        "register_file_bytes": pick(tiles * (t["rf_tile_bytes"] * _ACC_ELEMS) * passes),
        "tile_m": _TM[choice[0]],
        "tile_n": _TN[choice[0]],
        "ctas_per_sm": pick(ctas),
        "bound": np.argmax(np.stack(picked), axis=0).astype(float),
    }


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
    (docs/model.md §C6.3), or from L2 when ``l2_resident`` and the bytes fit in L2;
    ``flops`` run on the vector units (non-matrix FP32 rate); one launch per kernel.
    """
    l2_cap, l2_bw, hbm_bw, hbm_eff, hbm_lat, vector_flops, launch = _fields(
        caps,
        (
            "l2_capacity_B",
            "l2_bandwidth_Bps",
            "hbm_bandwidth_Bps",
            "hbm_efficiency",
            "hbm_latency_s",
            "vector_flops",
            "kernel_launch_s",
        ),
    )
    nbytes = np.asarray(bytes_moved, dtype=float)
    in_l2 = np.asarray(l2_resident, dtype=bool) & (nbytes <= l2_cap)
    bandwidth = np.where(in_l2, l2_bw, hbm_bw * hbm_eff)
    stream_s = nbytes / bandwidth + np.where(in_l2, 0.0, hbm_lat)
    compute_s = np.asarray(flops, dtype=float) / vector_flops
    launch_s = np.asarray(launches, dtype=float) * launch
    return np.asarray(np.maximum(stream_s, compute_s) + launch_s, dtype=float)
