"""Fit TensorRT-LLM's context attention (serving prefill) per device family to its microbenchmarks.

Run: .venv/bin/python benchmarks/fit_serving_attention.py [--write]

The serving model runs a prompt's causal attention at ``attention_efficiency_trtllm`` of the
16-bit peak where the framework runs TensorRT-LLM's own kernels, and, as training's fused
attention (docs/model.md §C6.2), each query block of the kernel does a fixed amount of work
beside its loop over the key blocks, ``attention_block_overhead_trtllm`` key-block iterations'
worth, so the rate stated at 8k tokens falls over shorter prompts and rises over longer ones
(``attention_length_factor``; docs/model.md §D1). The data: ai-dynamo/aiconfigurator's tables of
TensorRT-LLM's attention op on context batches (A100 SXM 80GB with TensorRT-LLM 1.0.0; H100 SXM,
H200 SXM and B200 with 1.2.0rc5; bf16, head dim 128, no window, 1-256 prompts of 16-16384
tokens, 1-96 query heads), in benchmarks/data/aiconfigurator_context_attention.json with their
source.

Per family, the two constants minimise the squared log error of the modelled time (the FLOPs
of the causal blocks the kernel runs, ``4·b·s²·causal(s)·H·d``, at the efficiency times the
length factor) over the rows that fill the GPU the way a serving prefill does: at least 8,192
tokens in the batch (TensorRT-LLM's default ``max_num_tokens``), prompts of 512 tokens or more
and 8 or more query heads (a grid search over the overhead, 0 ... 12 by 0.01, each with the
efficiency's closed-form log fit rounded to 0.001; the kernel at a microbenchmark's clocks, the
serving model applying the family's sustained fraction). Prints each fit and its per-length
error; ``--write`` updates the two values of each family in configs/calibration/kernels.yaml in
place (comments kept).
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import numpy as np
from fit_gemm import fit_main  # benchmarks/ is the script's folder

from deepflow.config.loader import load_device
from deepflow.oracle.hardware import device_caps
from deepflow.oracle.workloads.transformer.layer import (
    attention_length_factor,
    causal_executed_fraction,
)

#: The microbenchmark tables (committed extract with their source).
DATA = Path(__file__).resolve().parent / "data" / "aiconfigurator_context_attention.json"
#: The calibration keys fitted per family.
KEYS = ("attention_efficiency_trtllm", "attention_block_overhead_trtllm")
#: The rows that fill a GPU as a serving prefill does.
MIN_BATCH_TOKENS, MIN_PROMPT, MIN_HEADS = 8192, 512, 8
OVERHEADS = np.round(np.arange(0.0, 12.0001, 0.01), 2)
HEAD_DIM = 128.0


def tables() -> dict[str, dict[str, np.ndarray]]:
    """Device family -> the kept rows' columns (batch, isl, heads, latency_s) and each row's
    16-bit peak FLOP/s, over every device of the family with a table."""
    doc = json.loads(DATA.read_text())
    columns = doc["columns"]
    out: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for table in doc["tables"]:
        device = load_device(table["device"])
        caps, family = device_caps(device, "bf16"), device.family
        for row in table["rows"]:
            r = dict(zip(columns, row, strict=True))
            if (r["batch"] * r["isl"] < MIN_BATCH_TOKENS or r["isl"] < MIN_PROMPT
                    or r["heads"] < MIN_HEADS):  # fmt: skip
                continue
            for c in ("batch", "isl", "heads"):
                out[family][c].append(float(r[c]))
            out[family]["latency_s"].append(r["latency_ms"] * 1e-3)
            out[family]["peak"].append(caps.peak_flops)
    return {f: {c: np.array(v) for c, v in cols.items()} for f, cols in out.items()}


def seconds_per_flop(t: dict[str, np.ndarray]) -> np.ndarray:
    """Measured seconds per FLOP-at-peak of each row: time × peak / the FLOPs of the causal
    blocks the kernel runs (the model's time at efficiency 1 and overhead 0 is 1)."""
    s = t["isl"]
    flops = 4 * t["batch"] * s * s * causal_executed_fraction(s) * t["heads"] * HEAD_DIM
    return t["latency_s"] * t["peak"] / flops


def fit() -> dict[str, dict]:
    """Family -> the fitted efficiency at 8k tokens and query-block overhead, the rows' mean
    |error| and the median error per prompt length."""
    out = {}
    for family, t in sorted(tables().items()):
        measured = seconds_per_flop(t)
        best = None
        for overhead in OVERHEADS:
            length = attention_length_factor(t["isl"], overhead)
            # at a given overhead the efficiency's least-squares log fit is closed-form
            eta = round(float(np.exp(np.mean(np.log(length / measured)))), 3)
            loss = float(np.mean(np.log(length / eta / measured) ** 2))
            if best is None or loss < best[0]:
                best = (loss, eta, float(overhead))
        _, eta, overhead = best
        error = attention_length_factor(t["isl"], overhead) / eta / measured - 1
        lengths = {int(s): float(np.median(error[t["isl"] == s])) for s in np.unique(t["isl"])}
        out[family] = {"attention_efficiency_trtllm": eta,
                       "attention_block_overhead_trtllm": overhead, "rows": len(measured),
                       "error": float(np.mean(np.abs(error))), "lengths": lengths}  # fmt: skip
    return out


def report(fits: dict[str, dict]) -> None:
    """Print each family's fit and its median error by prompt length."""
    for family, f in fits.items():
        print(f"{family:<10} attention_efficiency_trtllm {f['attention_efficiency_trtllm']:.3f}, "
              f"attention_block_overhead_trtllm {f['attention_block_overhead_trtllm']:.2f} over "
              f"{f['rows']} rows: mean |error| {100 * f['error']:.1f} %")  # fmt: skip
        print("    median error by prompt length: " + ", ".join(
            f"{s} {100 * e:+.0f} %" for s, e in f["lengths"].items()))  # fmt: skip


def main() -> None:
    fit_main(__doc__, fit, report,
             lambda fits: {(family, key): f[key] for family, f in fits.items() for key in KEYS},
             key="attention_(?:efficiency|block_overhead)_trtllm")  # fmt: skip


if __name__ == "__main__":
    main()
