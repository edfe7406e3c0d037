"""Generalisation check: the oracle on published runs it was never calibrated on.

Run: .venv/bin/python benchmarks/generalisation.py [--cases] [--json] [FILE ...]

Scores benchmarks/data/generalisation_training.json and generalisation_memory.json (or the
files given) through the same code path as ``deepflow validate --cases FILE``
(:func:`deepflow.validation.validation_report`), and prints per group: the cases in the file,
how many were scored and skipped, the mean and maximum |error|, the mean signed error (> 0:
the model is slower / larger than measured), how many scored runs the model calls infeasible
(out of memory) although they ran, and the group-weighted mean |error| per file. Skipped
cases are listed with the reader's reason. Nothing here fits anything: these files are a
check, never calibration input (benchmarks/data/README.md).
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from deepflow.validation import validation_report

DATA = Path(__file__).resolve().parent / "data"
DEFAULT_FILES = (
    DATA / "generalisation_training.json",
    DATA / "generalisation_memory.json",
    DATA / "generalisation_memory_nanotron.json",
)


def summarise(path: Path) -> dict[str, Any]:
    """Per-group figures for one case file (validation_report does the scoring)."""
    cases = json.loads(path.read_text(encoding="utf-8"))
    report = validation_report(path)
    in_file: dict[str, int] = defaultdict(int)
    for case in cases:
        in_file[str(case["group"])] += 1
    rows: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in report["cases"]:
        rows[str(row["group"])].append(row)
    skipped: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for skip in report["skipped"]:
        skipped[str(skip["group"])].append(skip)
    # a serving group is scored per quantity ("group/throughput", "group/ttft"): one row each
    names = [n for g in in_file for n in ([k for k in rows if k.split("/")[0] == g] or [g])]
    groups = {}
    for name in names:
        errors = np.array([r["error"] for r in rows[name]], dtype=float)
        groups[name] = {
            "cases": in_file[name.split("/")[0]],
            "scored": len(rows[name]),
            "skipped": len(skipped[name.split("/")[0]]),
            "mean_abs_error": float(np.mean(np.abs(errors))) if errors.size else None,
            "max_abs_error": float(np.max(np.abs(errors))) if errors.size else None,
            "mean_signed_error": float(np.mean(errors)) if errors.size else None,
            "kind": report["groups"].get(name, {}).get("kind"),
        }
        # runs that ran: how many the model calls out of memory; runs that ran out of
        # memory (a feasibility group): how many it has fit
        feasibility = groups[name]["kind"] == "feasibility"
        groups[name]["infeasible"] = sum(1 for r in rows[name] if r.get("feasible") is False
                                         and not feasibility)  # fmt: skip
        groups[name]["modelled_fitting"] = sum(1 for r in rows[name] if r.get("feasible")
                                               and feasibility)  # fmt: skip
    return {
        "file": str(path),
        "groups": groups,
        "group_weighted_mean_abs_error": report["group_weighted_mean_abs_error"],
        "feasibility_group_weighted_mean_abs_error": report[
            "feasibility_group_weighted_mean_abs_error"
        ],
        "cases": report["cases"],
        "skipped": report["skipped"],
    }


def _pct(value: float | None, signed: bool = False) -> str:
    if value is None:
        return "-"
    return f"{100 * value:+.1f} %" if signed else f"{100 * value:.1f} %"


def print_summary(summary: dict[str, Any], show_cases: bool) -> None:
    header = ("group", "cases", "scored", "skipped", "mean |err|", "max |err|", "mean err",
              "infeasible")  # fmt: skip
    table = [header]
    for name, g in summary["groups"].items():
        table.append((name, str(g["cases"]), str(g["scored"]), str(g["skipped"]),
                      _pct(g["mean_abs_error"]), _pct(g["max_abs_error"]),
                      _pct(g["mean_signed_error"], signed=True), str(g["infeasible"])))  # fmt: skip
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    print(f"\n{summary['file']}")
    for k, row in enumerate(table):
        right = zip(row[1:], widths[1:], strict=True)
        cells = [row[0].ljust(widths[0])] + [c.rjust(w) for c, w in right]
        print("  ".join(cells))
        if k == 0:
            print("  ".join("-" * w for w in widths))
    groups = summary["groups"].values()
    totals = [sum(g[key] for g in groups) for key in ("cases", "scored", "skipped", "infeasible")]
    print(f"total: {totals[0]} cases, {totals[1]} scored, {totals[2]} skipped, "
          f"{totals[3]} scored runs modelled infeasible (out of memory)")  # fmt: skip
    scored_groups = sum(1 for g in groups if g["scored"] and g["kind"] != "feasibility")
    if scored_groups:
        print(f"group-weighted mean |error|: {_pct(summary['group_weighted_mean_abs_error'])} "
              f"over {scored_groups} groups")  # fmt: skip
    oom = [g for g in groups if g["kind"] == "feasibility"]
    if oom:
        print(f"runs that ran out of memory, modelled as fitting: "
              f"{sum(g['modelled_fitting'] for g in oom)} of {sum(g['scored'] for g in oom)} "
              f"(the 'mean |err|' of {len(oom)} feasibility group(s))")  # fmt: skip
    if show_cases:
        print("\nper case (error > 0: model slower / larger than measured)")
        for row in summary["cases"]:
            flag = "" if row.get("feasible", True) else "  infeasible"
            print(f"  {row['group']:<28} {row['id']:<52} {row['quantity']:>14} "
                  f"measured {row['measured']:<10.4g} model {row['model']:<10.4g} "
                  f"{100 * row['error']:+7.1f} %{flag}")  # fmt: skip
    if summary["skipped"]:
        print("\nskipped (the reader's reason)")
        for skip in summary["skipped"]:
            print(f"  {skip['group']}: {skip['reason']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", type=Path, help="case files (default: both in data/)")
    parser.add_argument("--cases", action="store_true", help="also print every scored case")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    files = args.files or [p for p in DEFAULT_FILES if p.is_file()]
    summaries = [summarise(path) for path in files]
    if args.json:
        print(json.dumps(summaries, indent=1))
        return
    for summary in summaries:
        print_summary(summary, args.cases)


if __name__ == "__main__":
    main()
