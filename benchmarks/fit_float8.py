"""Fit the efficiency of torchao's rowwise float8 casts to its linear-layer microbenchmark.

Run: .venv/bin/python benchmarks/fit_float8.py [--write]

One framework constant (never per case): ``cast_efficiency`` of ``torchao_float8_rowwise`` in
configs/calibration/frameworks.yaml, the share of the streaming HBM rate at which the rowwise
recipe's casts and rescales move the bytes the model gives them (docs/model.md §C6.4). It
minimises the mean |error| of the modelled speedup over bf16 of torchao's LayerNorm -> Linear
-> Sigmoid microbenchmark on H100 (group torchao_float8_rowwise_h100 of
deepflow/data/measurements_kernels.json: 216 shapes, M, K, N from 1024 to 32768; grid
0.30-1.00, step 0.01). Prints the fit, the error by N and by M; --write updates the file.
"""

from __future__ import annotations

import argparse
import re
from collections import defaultdict

import numpy as np
from calibration_file import write_value

from deepflow.validation import float8_linear_microbenchmarks, score_float8_linear_case

GRID = np.round(np.arange(0.30, 1.001, 0.01), 2)


def rows_at(efficiency: float) -> list[dict[str, object]]:
    """Every scored row of the microbenchmark at a cast efficiency."""
    rows = []
    for case in float8_linear_microbenchmarks():
        rows.extend(score_float8_linear_case(case, rowwise_cast_efficiency=efficiency))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="update frameworks.yaml in place")
    args = parser.parse_args()
    scores = {float(e): float(np.mean([abs(float(r["error"])) for r in rows_at(e)]))
              for e in GRID}  # fmt: skip
    best = min(scores, key=scores.__getitem__)
    rows = rows_at(best)
    errors = np.array([float(r["error"]) for r in rows])
    print(f"cast_efficiency = {best:.2f}: mean |error| {100 * scores[best]:.1f} %, "
          f"max {100 * np.max(np.abs(errors)):.1f} %, mean signed {100 * np.mean(errors):+.1f} % "
          f"over {len(rows)} shapes (at 1.00, the bytes at the streaming rate: "
          f"{100 * scores[1.0]:.1f} %)")  # fmt: skip
    by: dict[str, dict[int, list[float]]] = {"N": defaultdict(list), "M": defaultdict(list)}
    for row in rows:
        m = int(re.search(r"_m(\d+)_", str(row["id"])).group(1))  # type: ignore[union-attr]
        n = int(str(row["id"]).rsplit("_n", 1)[1])
        by["N"][n].append(float(row["error"]))
        by["M"][m].append(float(row["error"]))
    for name, groups in by.items():
        cells = ", ".join(f"{k}: {100 * np.mean(v):+.1f} %" for k, v in sorted(groups.items()))
        print(f"mean signed error by {name}: {cells}")
    if args.write:
        pattern = r"(\ntorchao_float8_rowwise:\n  cast_efficiency: )"
        print(f"wrote {write_value('frameworks.yaml', pattern, f'{best:.2f}')}")


if __name__ == "__main__":
    main()
