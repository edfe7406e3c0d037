"""Fit each family's GEMM power at full clock to matmul microbenchmarks run under a power limit.

Run: .venv/bin/python benchmarks/fit_power.py [--write]

One constant per (family, precision), never per case: ``gemm_full_clock_power`` in
configs/calibration/kernels.yaml, the power a large GEMM draws at the TDP's clock over the TDP.
Under a power limit below it the matrix units run at the rate their dynamic power allows,
(limit - static) / (full-clock power - static) of the TDP's rate (the clock on the voltage
floor, where dynamic power is linear in the clock; docs/model.md §A6.2,
:func:`deepflow.oracle.hardware.power_limit_matrix_ratio`). The fit makes the geometric mean of
measured / modelled TFLOP/s 1 over the family's GEMM microbenchmarks of that precision that
state ``hardware.power_limit_W`` (group fbgemm_h100_500w: pytorch/FBGEMM PR #2546, H100 at
500 W, BF16 cuBLAS and FP8 row-wise GEMMs at three shapes); the efficiency at the TDP stays
``benchmarks/fit_gemm.py``'s. Prints the fit and each case; --write updates kernels.yaml.
"""

from __future__ import annotations

import argparse
import math
from collections import defaultdict
from pathlib import Path
from typing import Any

from fit_gemm import set_values  # benchmarks/ is the script's folder

from deepflow.config.calibration import current_calibration
from deepflow.config.loader import builtin_config_dir, load_device
from deepflow.oracle.hardware import power_limit_matrix_ratio
from deepflow.validation import (
    accelerator_presets,
    gemm_case_caps,
    gemm_microbenchmarks,
    score_gemm_cases,
)


def power_limited_cases() -> list[dict[str, Any]]:
    """The GEMM microbenchmarks run under a stated power limit."""
    return [c for c in gemm_microbenchmarks() if (c.get("hardware") or {}).get("power_limit_W")]


def fit() -> dict[tuple[str, str], float]:
    """(family, precision) -> the full-clock power over the TDP that the cases imply."""
    ratios: dict[tuple[str, str], list[float]] = defaultdict(list)
    limits: dict[tuple[str, str], tuple[float, float, float]] = {}
    for case in power_limited_cases():
        caps = gemm_case_caps(case)
        (row,) = score_gemm_cases([case])
        cal = current_calibration().kernel(caps.family)
        device = load_device({"base": accelerator_presets(case)[0],
                              "power_limit_W": case["hardware"]["power_limit_W"]})  # fmt: skip
        # the rate the law gives now, times measured / modelled: the rate the case implies
        now = power_limit_matrix_ratio(device, cal.idle_power_fraction,
                                       cal.gemm_full_clock_power_for(caps.precision))  # fmt: skip
        key = (caps.family, caps.precision)
        ratios[key].append(now * row["measured_tflops"] / row["model_tflops"])
        limits[key] = (device.tdp_W, cal.idle_power_fraction * device.tdp_W, device.power_W)
    fitted = {}
    for key, values in ratios.items():
        tdp, static, limit = limits[key]
        ratio = math.exp(sum(map(math.log, values)) / len(values))
        # invert ratio = (limit - static) / (full - static); above 1 the limit does not bind
        fitted[key] = min((static + (limit - static) / ratio) / tdp, 1.0)
    return fitted


def write(values: dict[tuple[str, str], float], path: Path) -> None:
    """Set the fitted ``gemm_full_clock_power`` of each (family, precision) in place."""
    set_values(path, values, indent=6, key="[a-z0-9]+", fmt=".3f", block="gemm_full_clock_power")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="update kernels.yaml in place")
    args = parser.parse_args()
    fitted = fit()
    print("fitted gemm_full_clock_power (a large GEMM's power at the TDP's clock / TDP):")
    for (family, precision), value in sorted(fitted.items()):
        print(f"  {family:10s} {precision:5s} {value:.3f}")
    if args.write:
        path = builtin_config_dir() / "calibration" / "kernels.yaml"
        write(fitted, path)
        print(f"wrote {path}")
    rows = score_gemm_cases(power_limited_cases())
    print(f"\n{'case':44s} {'measured':>9s} {'model':>9s} {'error':>7s}")
    for r in rows:
        print(f"{r['id']:44s} {r['measured_tflops']:9.1f} {r['model_tflops']:9.1f} "
              f"{100 * r['error']:+6.1f}%")  # fmt: skip


if __name__ == "__main__":
    main()
