"""Fit per-family GEMM efficiency to the public matmul microbenchmarks.

Run: .venv/bin/python benchmarks/fit_gemm.py [--write]

For each (device family, precision) the efficiency is the geometric mean over its cases of
measured / model-at-efficiency-1, where the model's value is its best FLOP/s over the same
kind of shape sweep the benchmark runs for best-achievable (MAMF) cases, and its FLOP/s at the
stated shape otherwise (so tile and wave quantisation are accounted for).
Prints the fit and the per-case error; ``--write`` updates the gemm_efficiency values of
configs/calibration/kernels.yaml in place (comments kept).
"""

from __future__ import annotations

import argparse
import math
import re
from collections import defaultdict
from pathlib import Path

from deepflow.config.loader import builtin_config_dir
from deepflow.validation import gemm_case_caps, gemm_microbenchmarks, score_gemm_cases


def fit() -> dict[tuple[str, str], float]:
    ratios: dict[tuple[str, str], list[float]] = defaultdict(list)
    for case in gemm_microbenchmarks():
        if (case.get("hardware") or {}).get("power_limit_W"):
            continue  # the matrix rate under a power limit: benchmarks/fit_power.py
        caps = gemm_case_caps(case)
        (unit,) = score_gemm_cases([case], efficiency_override={(caps.family, caps.precision): 1.0})
        ratios[(caps.family, caps.precision)].append(unit["measured_tflops"] / unit["model_tflops"])
    return {key: math.exp(sum(map(math.log, r)) / len(r)) for key, r in ratios.items()}


def set_values(path: Path, values: dict[tuple[str, str], float], *, indent: int, key: str,
               fmt: str) -> None:  # fmt: skip
    """Set ``values[(family, name)]`` in a kernels.yaml in place, keeping its comments: the
    entries ``indent`` spaces deep, their names matching the regex ``key``, under each
    two-space family header."""
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    family = None
    for i, line in enumerate(lines):
        header = re.match(r"^  ([a-z]+):\s*(#.*)?$", line)
        if header:
            family = header.group(1)
            continue
        entry = re.match(rf"^(\s{{{indent}}})({key}):\s*([0-9.]+)(\s*#.*)?$", line)
        if entry and family and (family, entry.group(2)) in values:
            value = values[(family, entry.group(2))]
            lines[i] = f"{entry.group(1)}{entry.group(2)}: {value:{fmt}}{entry.group(4) or ''}\n"
    path.write_text("".join(lines), encoding="utf-8")


def write(fitted: dict[tuple[str, str], float], path: Path) -> None:
    """Set the fitted gemm_efficiency of each (family, precision)."""
    set_values(path, fitted, indent=6, key="[a-z0-9]+", fmt=".4f")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="update kernels.yaml in place")
    args = parser.parse_args()
    fitted = fit()
    print("fitted gemm_efficiency (geometric mean of measured / model at efficiency 1):")
    for (family, precision), value in sorted(fitted.items()):
        print(f"  {family:10s} {precision:5s} {value:.4f}")
    rows = score_gemm_cases(efficiency_override=fitted)
    print(f"\n{'case':32s} {'measured':>9s} {'model':>9s} {'error':>7s}")
    for r in rows:
        print(
            f"{r['id']:32s} {r['measured_tflops']:9.1f} {r['model_tflops']:9.1f} "
            f"{100 * r['error']:+6.1f}%"
        )
    worst = max(abs(r["error"]) for r in rows)
    mean = sum(abs(r["error"]) for r in rows) / len(rows)
    print(
        f"\nmean |error| {100 * mean:.1f} %, max |error| {100 * worst:.1f} % over {len(rows)} cases"
    )
    if args.write:
        path = builtin_config_dir() / "calibration" / "kernels.yaml"
        write(fitted, path)
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
