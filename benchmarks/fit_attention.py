"""Fit each family's fused-attention query-block overhead to attention kernels timed across lengths.

Run: .venv/bin/python benchmarks/fit_attention.py [--write]

``attention_block_overhead`` (c0) is the fixed work of one query block of a causal fused-attention
kernel beside its loop over key blocks, in key-block iterations: the block's time goes as
c0 + n for the n key blocks it visits, so the kernel's rate falls over short sequences and rises
over long ones from the rate the family's efficiency states at 8k tokens (docs/model.md §C6.2,
:func:`deepflow.oracle.workloads.transformer.layer.attention_length_factor`). One constant per
family, never per case: the value on a grid (0 ... 20 by 0.05) that minimises the squared log
error of the modelled rate relative to the same series at 8,192 tokens over the family's
``attention_microbenchmark`` cases (groups ``cudnn_frontend_sdpa_hopper`` and
``cudnn_frontend_sdpa_blackwell``: NVIDIA cudnn-frontend's SDPA benchmark, cuDNN and
FlashAttention-2, bf16, causal, head dimension 128, 2k-32k tokens). Families without such cases
take Hopper's value (GPUs whose FlashAttention-class kernels share the structure), except the
TPU, whose kernels are not of it (0). Prints the fit and each case; --write updates
configs/calibration/kernels.yaml in place (comments kept).
"""

from __future__ import annotations

import argparse
import math
from typing import Any

import numpy as np
from fit_gemm import set_values  # benchmarks/ is the script's folder

from deepflow.config.loader import builtin_config_dir
from deepflow.validation import attention_microbenchmarks, score_attention_cases

GRID = np.round(np.arange(0.0, 20.0001, 0.05), 2)
#: The measured family whose value the GPU families without measurements take.
ANCHOR = "hopper"
#: GPU families without an attention sweep of their own (they take the anchor's value).
DERIVED = ("ampere", "volta", "generic")


def fit() -> dict[str, float]:
    """Family -> the fitted ``attention_block_overhead`` (measured families), and the
    anchor's value for :data:`DERIVED`."""
    cases = attention_microbenchmarks()
    families = {row["family"] for row in score_attention_cases(cases)}
    fitted = {family: float(min(GRID, key=lambda c0, f=family: _loss(cases, f, c0)))
              for family in families}  # fmt: skip
    if ANCHOR in fitted:
        fitted.update({family: fitted[ANCHOR] for family in DERIVED})
    return fitted


def _loss(cases: list[dict[str, Any]], family: str, overhead: float) -> float:
    """Squared log error of the modelled over the measured rate ratios of ``family``'s cases
    with ``overhead`` as its ``attention_block_overhead``."""
    rows = score_attention_cases(cases, overhead_override={family: overhead})
    return sum(math.log(r["model"] / r["measured"]) ** 2 for r in rows if r["family"] == family)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="update kernels.yaml in place")
    args = parser.parse_args()
    fitted = fit()
    for family in sorted(fitted):
        how = "  (hopper's)" if family in DERIVED else ""
        print(f"{family:10s} attention_block_overhead = {fitted[family]:.2f}{how}")
    rows = score_attention_cases(overhead_override=fitted)
    print(f"\n{'case':56s} {'measured':>9s} {'model':>7s} {'error':>7s}")
    for r in rows:
        print(f"{r['id']:56s} {r['measured']:9.3f} {r['model']:7.3f} "
              f"{100 * r['error']:+6.1f}%")  # fmt: skip
    for family in sorted({r["family"] for r in rows}):
        errors = [abs(r["error"]) for r in rows if r["family"] == family]
        print(f"{family}: mean |error| {100 * sum(errors) / len(errors):.1f} % over "
              f"{len(errors)} cases")  # fmt: skip
    if args.write:
        path = builtin_config_dir() / "calibration" / "kernels.yaml"
        set_values(path, {(family, "attention_block_overhead"): v
                          for family, v in fitted.items()},
                   indent=4, key="attention_block_overhead", fmt=".2f")  # fmt: skip
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
