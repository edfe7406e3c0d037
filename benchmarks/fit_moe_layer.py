"""Fit Blackwell's grouped-GEMM matrix rates to TensorRT-LLM's fused-MoE microbenchmarks on B200.

Run: .venv/bin/python benchmarks/fit_moe_layer.py [--write]

The serving model runs an MoE layer's experts as two grouped GEMMs (the gated up projection,
N = 2F, K = h; the down projection, N = h, K = F) over the experts that got rows, beside the
routing copies and the gated activation's bytes (docs/model.md §D1), the grouped GEMMs' matrix
units at ``grouped_gemm_efficiency`` of the dense rate (``grouped_gemm_efficiency_fp4`` for
FP4 weights). The data: ai-dynamo/aiconfigurator's TensorRT-LLM 1.2.0rc5 tables of the fused
MoE module on B200 (CUTLASS backend, balanced routing, no tensor or expert parallelism; 729
rows: bf16, per-tensor fp8 and nvfp4, nine model shapes from Qwen3-30B-A3B's 2048 x 768 x 128
experts to Mixtral-class 6144 x 16384 x 8, 1 ... 16384 tokens), in
benchmarks/data/aiconfigurator_moe_b200.json with their source.

A matrix rate is measured where the matrix units bind: each precision's efficiency is fitted
(least squares in log time, a grid 0.30 ... 1.50 by 0.005) over the rows whose modelled GEMMs
are FLOP-bound at the dense rate (FLOP seconds >= byte seconds), the model at a
microbenchmark's clocks without launch latencies (the table is timed in a CUDA graph). bf16 and
fp8 share ``grouped_gemm_efficiency``, fp4 has its own; a fit above 1 is written as 1 (a grouped
GEMM does not outrun the dense best-shape rate the family's ``gemm_efficiency`` states). Prints
each fit, its error over the FLOP-bound rows and over all rows, and the median ratio per shape;
``--write`` updates blackwell's two values in configs/calibration/kernels.yaml in place
(comments kept).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections import defaultdict
from pathlib import Path

import numpy as np
from fit_gemm import fit_main  # benchmarks/ is the script's folder

from deepflow.config.loader import load_device
from deepflow.oracle.hardware import DeviceCaps, device_caps
from deepflow.oracle.workloads.inference import serving_gemm_time_s

#: The microbenchmark table (committed extract with its source).
DATA = Path(__file__).resolve().parent / "data" / "aiconfigurator_moe_b200.json"
#: The table's dtype -> the device precision whose rate it runs at.
PRECISIONS = {"bfloat16": "bf16", "fp8": "fp8", "nvfp4": "fp4"}
#: Precision -> the calibration key of its grouped-GEMM rate.
KEYS = {"bf16": "grouped_gemm_efficiency", "fp8": "grouped_gemm_efficiency",
        "fp4": "grouped_gemm_efficiency_fp4"}  # fmt: skip
EFFICIENCIES = np.round(np.arange(0.30, 1.5001, 0.005), 3)
ACTIVATION_BYTES = 2.0  # the module's hidden states and expert rows are 16-bit


def rows() -> list[dict]:
    """The table's rows as dicts of its columns."""
    doc = json.loads(DATA.read_text())
    return [dict(zip(doc["columns"], row, strict=True)) for row in doc["rows"]]


def moe_time_s(caps: DeviceCaps, table: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The modelled seconds of each row's fused-MoE forward (docs/model.md §D1: the two grouped
    GEMMs over the used experts, each padded to the MMA tile; the routing copies, 2(k + 1)·T·h,
    and the gated activation, read 2F write F per routed row, at 16 bits through HBM) and
    whether its GEMMs are FLOP-bound at ``caps``' rates; ``table``: the rows' columns."""
    tokens, h, f, experts, k = (table[c] for c in ("tokens", "hidden", "inter", "experts", "topk"))
    used = experts * -np.expm1(tokens * np.log1p(-k / experts))
    per_expert = tokens * k / used

    def gemms(c: DeviceCaps) -> np.ndarray:
        up = serving_gemm_time_s(c, per_expert, 2 * f, h, used, sustained=False, launch=False)
        down = serving_gemm_time_s(c, per_expert, h, f, used, sustained=False, launch=False)
        return np.asarray(up + down, dtype=float)

    flops_s = gemms(dataclasses.replace(caps, hbm_bandwidth_Bps=math.inf))
    bytes_s = gemms(dataclasses.replace(caps, peak_flops=math.inf))
    moved = (2 * (k + 1) * tokens * h + 3 * tokens * k * f) * ACTIVATION_BYTES
    elementwise = moved / (caps.hbm_bandwidth_Bps * caps.hbm_efficiency)
    return gemms(caps) + elementwise, flops_s >= bytes_s


def _model(parts: list[tuple], eta: float) -> tuple[np.ndarray, np.ndarray]:
    """The modelled seconds and FLOP-boundness of every row of ``parts`` (per precision: its
    capabilities, the rows' columns, ...) at grouped-GEMM efficiency ``eta``."""
    pairs = [moe_time_s(dataclasses.replace(caps, grouped_gemm_efficiency=float(eta)), table)
             for caps, table, *_ in parts]  # fmt: skip
    return np.concatenate([p[0] for p in pairs]), np.concatenate([p[1] for p in pairs])


def fit() -> dict[str, dict]:
    """Calibration key -> its fitted value (capped at 1), the raw fit, the FLOP-bound rows'
    and all rows' mean |error| and per-shape median model/measured."""
    data = rows()
    device = load_device(json.loads(DATA.read_text())["device"])
    by_key: dict[str, dict[str, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for row in data:
        precision = PRECISIONS[row["dtype"]]
        by_key[KEYS[precision]][precision].append(row)
    out = {}
    for key, groups in sorted(by_key.items()):
        parts = []  # (caps, the rows' columns, measured seconds, rows) per precision
        for precision, group in sorted(groups.items()):
            table = {c: np.array([float(r[c]) for r in group]) for c in group[0] if c != "dtype"}
            parts.append((device_caps(device, precision), table, table["latency_ms"] * 1e-3, group))

        measured = np.concatenate([m for _, _, m, _ in parts])
        group = [r for *_, g in parts for r in g]
        bound = _model(parts, 1.0)[1]
        losses = [float(np.mean(np.log(_model(parts, e)[0][bound] / measured[bound]) ** 2))
                  for e in EFFICIENCIES]  # fmt: skip
        raw = float(EFFICIENCIES[int(np.argmin(losses))])
        value = min(raw, 1.0)
        ratio = _model(parts, value)[0] / measured
        shapes: dict[str, list[float]] = defaultdict(list)
        for r, q in zip(group, ratio, strict=True):
            shape = f"{r['hidden']}x{r['inter']} E{r['experts']} k{r['topk']}"
            shapes[f"{r['dtype']} {shape}"].append(q)
        out[key] = {
            "value": value,
            "raw": raw,
            "rows": len(group),
            "bound_rows": int(bound.sum()),
            "bound_error": float(np.mean(np.abs(ratio[bound] - 1))),
            "all_error": float(np.mean(np.abs(ratio - 1))),
            "shapes": {s: float(np.median(v)) for s, v in sorted(shapes.items())},
        }
    return out


def report(fits: dict[str, dict]) -> None:
    """Print each fit, its errors and the median model/measured per shape."""
    for key, f in fits.items():
        print(f"blackwell {key}: {f['value']:.3f} (fit {f['raw']:.3f}) over {f['bound_rows']} "
              f"FLOP-bound rows of {f['rows']}: mean |error| {100 * f['bound_error']:.1f} % "
              f"(all rows {100 * f['all_error']:.1f} %)")  # fmt: skip
        for shape, median in f["shapes"].items():
            print(f"    {shape:<28} median model/measured {median:.2f}")


def main() -> None:
    fit_main(__doc__, fit, report,
             lambda fits: {("blackwell", k): f["value"] for k, f in fits.items()},
             key="grouped_gemm_efficiency(?:_fp4)?")  # fmt: skip


if __name__ == "__main__":
    main()
