"""Fit the serving GEMM's per-family constants to the public serving GEMM microbenchmarks.

Run: .venv/bin/python benchmarks/fit_moe_gemm.py [--write]

A serving GEMM runs in the serving model at the dense GEMM's roofline bent by constants of
the device family (docs/model.md §D1): ``gemm_overlap_exponent`` p (its FLOP and byte times
overlap as (t_flops^p + t_bytes^p)^(1/p), so a GEMM near its ridge point runs slower than the
max of the two), which grouped GEMMs and block-scaled ones take, ``gemm_overlap_exponent_dense``,
the p of a dense GEMM without block scales, and ``grouped_gemm_efficiency`` (an MoE grouped
GEMM's matrix rate over a dense GEMM's, ``gemm_efficiency``, where FLOPs dominate). For each
family with ``grouped_gemm_microbenchmark`` or ``serving_gemm_microbenchmark`` cases, the
grouped and block-scaled ones (DeepGEMM's README tables of grouped and dense FP8 GEMMs on H800
for hopper) set p and the efficiency, the pair minimising the squared log error of the model's
TFLOP/s over all of them, the dense ones at the dense rate (a grid search: efficiency 0.50 ...
1.00 by 0.005, p 1.0 ... 8.0 by 0.05), together with ``gemm_pipeline_round_trip_us`` (0 ... 3 µs
by 0.02), the K-loop floor of DeepGEMM's cases (a kernel that does not split K: each tile's
whole K loop through its pipeline, at most its stages' blocks per round trip); the dense ones
without block scales (vLLM's H100 table of cuBLAS bf16 and CUTLASS per-tensor FP8 GEMMs for
hopper) set ``gemm_overlap_exponent_dense`` alone, on the same p grid. Prints the fit and the
per-case error; ``--write`` updates the family's values in configs/calibration/kernels.yaml in
place (comments kept).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from collections import defaultdict
from pathlib import Path

import numpy as np
from fit_gemm import set_values  # benchmarks/ is the script's folder

from deepflow.config.loader import builtin_config_dir
from deepflow.measurements import case_category
from deepflow.oracle.hardware import DeviceCaps
from deepflow.validation import (
    gemm_case_caps,
    score_serving_gemm_cases,
    serving_gemm_case_blockwise,
    serving_gemm_case_time_s,
    serving_gemm_microbenchmarks,
)

EFFICIENCIES = np.round(np.arange(0.50, 1.0001, 0.005), 3)
EXPONENTS = np.round(np.arange(1.0, 8.0001, 0.05), 2)
ROUND_TRIPS_US = np.round(np.arange(0.0, 3.0001, 0.02), 2)

#: The calibration file the fitted constants go to.
KERNELS_YAML = builtin_config_dir() / "calibration" / "kernels.yaml"


def fit() -> dict[str, dict[str, float]]:
    """Family -> the fitted ``grouped_gemm_efficiency``, ``gemm_overlap_exponent`` and
    ``gemm_pipeline_round_trip_s`` (DeepGEMM cases only bound it: the K-loop floor of a
    kernel that does not split K, docs/model.md §D1), over its grouped and block-scaled cases,
    and ``gemm_overlap_exponent_dense`` over its dense cases without block scales."""
    by_family: dict[str, list[tuple[dict, DeviceCaps, tuple[int, int, int, int], bool, float]]] = (
        defaultdict(list)
    )
    for case in serving_gemm_microbenchmarks():
        caps = gemm_case_caps(case)
        spec = case["gemm"]
        shape = (spec["M"], spec["N"], spec["K"], spec.get("groups", 1))
        grouped = case_category(case) == "grouped_gemm_microbenchmark"
        by_family[caps.family].append(
            (case, caps, shape, grouped, float(case["measured"]["tflops"]))
        )
    fitted: dict[str, dict[str, float]] = {}
    trips = ROUND_TRIPS_US * 1e-6
    for family, rows in by_family.items():
        # grouped GEMMs and block-scaled ones (DeepGEMM's) set the three joint constants; the
        # dense GEMMs without block scales set the dense exponent alone
        cases = [r for r in rows if r[3] or serving_gemm_case_blockwise(r[0])]
        dense = [r for r in rows if not (r[3] or serving_gemm_case_blockwise(r[0]))]
        fitted[family] = _fit_joint(cases, trips) if cases else {}
        if dense:
            fitted[family]["gemm_overlap_exponent_dense"] = _fit_dense(dense)
    return fitted


def _fit_dense(cases: list) -> float:
    """The ``gemm_overlap_exponent_dense`` of the grid that minimises the squared log error
    of the model's TFLOP/s over dense GEMMs without block scales."""
    flops = np.array([2.0 * g * m * n * k / 1e12 / measured
                      for _, _, (m, n, k, g), _, measured in cases])  # fmt: skip
    best = (math.inf, 1.0)
    for p in EXPONENTS:
        t = np.array([
            serving_gemm_case_time_s(
                case, dataclasses.replace(caps, gemm_overlap_exponent_dense=float(p)),
                m, n, k, g, grouped=grouped)
            for case, caps, (m, n, k, g), grouped, _ in cases
        ])  # fmt: skip
        loss = float((np.log(flops / t) ** 2).sum())
        if loss < best[0] - 1e-12:
            best = (loss, float(p))
    return best[1]


def _fit_joint(cases: list, trips: np.ndarray) -> dict[str, float]:
    """``grouped_gemm_efficiency``, ``gemm_overlap_exponent`` and ``gemm_pipeline_round_trip_s``
    of the grid that minimise the squared log error of the model's TFLOP/s over grouped and
    block-scaled GEMMs."""
    # each case's K-loop floor per second of round trip (0 where it has none: not a
    # DeepGEMM case) and its FLOPs over its measured rate; neither depends on p or eta
    unit, flops = [], []
    for case, caps, (m, n, k, g), grouped, measured in cases:
        with_floor, without = (
            serving_gemm_case_time_s(
                case, dataclasses.replace(caps, gemm_pipeline_round_trip_s=trip),
                m, n, k, g, grouped=grouped,
            )
            for trip in (1.0, 0.0)
        )  # fmt: skip
        unit.append(with_floor if with_floor > without else 0.0)
        flops.append(2.0 * g * m * n * k / 1e12 / measured)
    u, f = np.asarray(unit), np.asarray(flops)
    floors = trips[:, None] * u[None, :]
    best = (math.inf, 1.0, math.inf, 0.0)
    for p in EXPONENTS:
        for eta in EFFICIENCIES:
            body = np.array([
                serving_gemm_case_time_s(
                    case, dataclasses.replace(caps, grouped_gemm_efficiency=float(eta),
                                              gemm_overlap_exponent=float(p),
                                              gemm_pipeline_round_trip_s=0.0),
                    m, n, k, g, grouped=grouped)
                for case, caps, (m, n, k, g), grouped, _ in cases
            ])  # fmt: skip
            t = np.maximum(body[None, :], floors)
            loss = (np.log(f[None, :] / t) ** 2).sum(axis=1)
            i = int(np.argmin(loss))
            if loss[i] < best[0] - 1e-12:
                best = (float(loss[i]), float(eta), float(p), float(trips[i]))
    return {"grouped_gemm_efficiency": best[1], "gemm_overlap_exponent": best[2],
            "gemm_pipeline_round_trip_s": best[3]}  # fmt: skip


def write(fitted: dict[str, dict[str, float]], path: Path) -> None:
    """Set the fitted values of each family in kernels.yaml, keeping the comments (the round
    trip in microseconds, the file's unit)."""
    values = {}
    for family, row in fitted.items():
        for name, v in row.items():
            if name == "gemm_pipeline_round_trip_s":
                name, v = "gemm_pipeline_round_trip_us", round(v * 1e6, 2)
            values[(family, name)] = v
    names = (
        "(?:grouped_gemm_efficiency|gemm_overlap_exponent_dense|gemm_overlap_exponent|"
        "gemm_pipeline_round_trip_us)"
    )
    set_values(path, values, indent=4, key=names, fmt="g")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="update kernels.yaml in place")
    args = parser.parse_args()
    roofline = {
        "grouped_gemm_efficiency": 1.0,
        "gemm_overlap_exponent": math.inf,
        "gemm_overlap_exponent_dense": math.inf,
        "gemm_pipeline_round_trip_s": 0.0,
    }
    plain = score_serving_gemm_cases(override={"hopper": roofline})
    fitted = fit()
    print("fitted serving GEMM constants (least squares in log TFLOP/s):")
    for family, values in sorted(fitted.items()):
        print(f"  {family:10s} " + ", ".join(f"{k} {v:g}" for k, v in values.items()))
    rows = score_serving_gemm_cases(override=fitted)
    print(f"\n{'case':44s} {'measured':>9s} {'roofline':>9s} {'fitted':>9s} {'error':>7s}")
    for r, d in zip(rows, plain, strict=True):
        print(f"{r['id']:44s} {r['measured_tflops']:9.1f} {d['model_tflops']:9.1f} "
              f"{r['model_tflops']:9.1f} {100 * r['error']:+6.1f}%")  # fmt: skip
    for name, scored in (("dense roofline", plain), ("fitted", rows)):
        mean = sum(abs(r["error"]) for r in scored) / len(scored)
        worst = max(abs(r["error"]) for r in scored)
        print(f"{name}: mean |error| {100 * mean:.1f} %, max |error| {100 * worst:.1f} % over "
              f"{len(scored)} cases")  # fmt: skip
    if args.write:
        write(fitted, KERNELS_YAML)
        print(f"wrote {KERNELS_YAML}")


if __name__ == "__main__":
    main()
