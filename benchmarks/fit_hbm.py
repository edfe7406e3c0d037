"""Derive per-family HBM efficiency from one streaming benchmark run on every family.

Run: .venv/bin/python benchmarks/fit_hbm.py [--write]

``hbm_efficiency`` is the fraction of peak HBM bandwidth the oracle's memory-bound kernels
stream at (docs/model.md §C6.3). Hopper's value is the anchor (an estimate the public serving
runs bear out); every other family with measurements takes Hopper's value times the ratio of
its measured fraction of peak to Hopper's, both measured by the same benchmark (the public
group ``opencl_benchmark_hbm``: ProjectPhysX/OpenCL-Benchmark's coalesced streams). The
fraction is the geometric mean of measured / stated peak over the family's *read* rows: the
traffic the oracle times as memory-bound is mostly reads (a decode step's weights and KV
cache, a norm's or cast's input). The write rows are printed and scored, not fitted.
``--write`` updates those families' hbm_efficiency in configs/calibration/kernels.yaml in
place (comments kept).
"""

from __future__ import annotations

import argparse
import math
from collections import defaultdict

from fit_gemm import set_values  # benchmarks/ is the script's folder

from deepflow.config.calibration import current_calibration
from deepflow.config.loader import builtin_config_dir
from deepflow.validation import (
    hbm_stream_case_caps,
    hbm_stream_microbenchmarks,
    score_hbm_stream_cases,
)

#: The family whose (estimated) efficiency the others are scaled from.
ANCHOR = "hopper"


def measured_fractions(access: str = "read") -> dict[str, float]:
    """Per family: geometric mean of measured / stated peak over its ``access`` rows."""
    ratios: dict[str, list[float]] = defaultdict(list)
    for case in hbm_stream_microbenchmarks():
        if case["memory"]["access"] != f"coalesced {access}":
            continue
        caps = hbm_stream_case_caps(case)
        ratios[caps.family].append(case["measured"]["GBps"] * 1e9 / caps.hbm_bandwidth_Bps)
    return {family: math.exp(sum(map(math.log, r)) / len(r)) for family, r in ratios.items()}


def fit(reads: dict[str, float], anchor: float) -> dict[str, float]:
    """hbm_efficiency per measured family other than the anchor: the anchor's ``anchor``
    scaled by the family's measured read fraction (``reads``) over the anchor's."""
    return {family: anchor * value / reads[ANCHOR]
            for family, value in reads.items() if family != ANCHOR}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="update kernels.yaml in place")
    args = parser.parse_args()
    reads, writes = measured_fractions("read"), measured_fractions("write")
    anchor = current_calibration().kernel(ANCHOR).hbm_efficiency
    print(f"measured fraction of peak (geometric mean per family); anchor {ANCHOR} "
          f"hbm_efficiency {anchor:.3f}:")  # fmt: skip
    fitted = fit(reads, anchor)
    for family in sorted(reads):
        value = fitted.get(family, anchor)
        write = writes.get(family, float("nan"))
        print(f"  {family:10s} read {reads[family]:.3f}  write {write:.3f}  -> hbm_efficiency "
              f"{value:.3f}{'  (anchor)' if family == ANCHOR else ''}")  # fmt: skip
    rows = score_hbm_stream_cases(efficiency_override=fitted)
    print(f"\n{'case':36s} {'peak':>7s} {'measured':>9s} {'model':>8s} {'error':>7s}")
    for r in rows:
        print(f"{r['id']:36s} {r['peak_GBps']:7.0f} {r['measured_GBps']:9.1f} "
              f"{r['model_GBps']:8.1f} {100 * r['error']:+6.1f}%")  # fmt: skip
    mean = sum(abs(r["error"]) for r in rows) / len(rows)
    print(f"\nmean |error| {100 * mean:.1f} % over {len(rows)} cases")
    if args.write:
        path = builtin_config_dir() / "calibration" / "kernels.yaml"
        set_values(path, {(family, "hbm_efficiency"): v for family, v in fitted.items()},
                   indent=4, key="hbm_efficiency", fmt=".3f")  # fmt: skip
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
