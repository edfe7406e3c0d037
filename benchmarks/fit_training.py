"""Fit each device family's training_sustained_fraction to the public end-to-end measurements.

Run: .venv/bin/python benchmarks/fit_training.py [--write]

One number per device family (never per case): the fraction of the microbenchmark matrix
throughput that a whole job sustains at the clocks its power limit allows. It minimises the
group-weighted mean |step-time error| over the family's groups of public end-to-end training
measurements (every framework: Megatron-LM, DeepSpeed, Megatron-Core, NeMo, torchtitan,
llm-foundry; grid 0.50–1.00, step 0.01). A family without public training measurements but
with public serving ones (Blackwell: TensorRT-LLM's B200 throughput rows) takes the fraction
that minimises the group-weighted mean |error| of those (docs/model.md §C6.1); volta, tpu and
generic take the mean of ampere and hopper. Prints the fit; --write updates
configs/calibration/kernels.yaml.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator

import numpy as np

import deepflow.oracle.evaluate as evaluate_module
from deepflow.config.calibration import current_calibration
from deepflow.config.loader import builtin_config_dir
from deepflow.data import load_measurements
from deepflow.errors import ConfigError
from deepflow.measurements import batch_scale, case_category
from deepflow.oracle.hardware import device_caps
from deepflow.validation import (
    measured_step_time_s,
    score_inference_case,
    serving_case_scenario,
    training_case_scenario,
)

GRID = np.round(np.arange(0.50, 1.001, 0.01), 2)
#: Family -> DeviceCaps fields already fitted in this run (the later fits evaluate with them).
_FITTED: dict[str, dict[str, float]] = {}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    cases = [c for c in load_measurements() if case_category(c) == "end_to_end_training"]
    scenarios = [training_case_scenario(c) for c in cases]
    # the measured step at the modelled batch (a batch that does not divide is rescaled)
    measured = np.array([measured_step_time_s(c) / batch_scale(c, s)
                         for c, s in zip(cases, scenarios, strict=True)])  # fmt: skip
    families = [device_caps(s.system.device, s.workload.precision).family for s in scenarios]
    # the Triton attention rate and the sustained fraction share the same Ampere runs: each is
    # fitted at the other's value until neither moves (a fixed point of the two grid searches)
    fitted: dict[str, float] = {}
    triton: dict[str, float] = {}
    for _ in range(_MAX_ROUNDS):
        last = (dict(fitted), dict(triton))
        triton = _fit_triton(cases, scenarios, measured, families)
        for family, value in triton.items():
            _FITTED.setdefault(family, {})["attention_efficiency_triton"] = value
        fitted = _fit_fractions(cases, scenarios, measured, families)
        for family, value in fitted.items():
            _FITTED.setdefault(family, {})["training_sustained_fraction"] = value
        if (fitted, triton) == last:
            break
    for family in sorted(fitted):
        print(f"{family:10s} training_sustained_fraction = {fitted[family]:.2f}")
    for family in sorted(triton):
        print(f"{family:10s} attention_efficiency_triton = {triton[family]:.2f}")
    for family, value in _fit_serving(set(fitted)).items():
        fitted[family] = value
    # Families without public end-to-end measurements (recorded as derived in kernels.yaml).
    if {"ampere", "hopper"} <= set(fitted):
        mean = round((fitted["ampere"] + fitted["hopper"]) / 2 + 1e-9, 2)
        fitted.update(volta=mean, tpu=mean, generic=mean)
        print(f"derived: volta, tpu, generic = {mean:.2f} (mean)")
    if args.write:
        path = builtin_config_dir() / "calibration" / "kernels.yaml"
        text = path.read_text(encoding="utf-8")
        for key, values in (("training_sustained_fraction", fitted),
                            ("attention_efficiency_triton", triton)):  # fmt: skip
            for family, value in values.items():
                pattern = rf"(\n  {family}:[^\n]*\n(?:    .*\n|      .*\n)*?    {key}: +)[0-9.]+"
                text, n = re.subn(pattern, rf"\g<1>{value:.2f}", text, count=1)
                if not n:
                    raise SystemExit(f"kernels.yaml: no {key} line under {family} to update")
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path}")


#: Rounds of the joint fit of the Triton attention rate and the sustained fraction.
_MAX_ROUNDS = 10


def _step_errors(cases: list[dict], scenarios: list, measured: np.ndarray,
                 idx: list[int]) -> Iterator[tuple[str, float]]:  # fmt: skip
    """(group, |step-time error|) of the public training runs ``idx``, evaluated now."""
    for i in idx:
        model = evaluate_module.evaluate_one(scenarios[i])["step_time_s"]
        yield cases[i]["group"], abs(model / measured[i] - 1.0)


def _fit_fractions(cases: list[dict], scenarios: list, measured: np.ndarray,
                   families: list[str]) -> dict[str, float]:  # fmt: skip
    """Family -> the sustained fraction that minimises the group-weighted mean |step-time
    error| over the family's public training runs."""
    fitted: dict[str, float] = {}
    for family in sorted(set(families)):
        idx = [i for i, f in enumerate(families) if f == family]
        errors = functools.partial(_step_errors, cases, scenarios, measured, idx)
        score, fitted[family] = _best_fraction(errors)
        print(f"  {family:10s} training_sustained_fraction {fitted[family]:.2f} "
              f"(group-weighted mean |error| {100 * score:.1f} %)")  # fmt: skip
    return fitted


#: The grid of pre-MLIR Triton attention rates (fraction of the 16-bit peak) the fit searches.
TRITON_GRID = np.round(np.arange(0.10, 0.701, 0.01), 2)


def _fit_triton(cases: list[dict], scenarios: list, measured: np.ndarray,
                families: list[str]) -> dict[str, float]:  # fmt: skip
    """Family -> ``attention_efficiency_triton``: FlashAttention in pre-MLIR Triton (llm-foundry's
    ``attn_impl: triton``; docs/model.md §C6.2) at the rate that minimises the group-weighted mean
    |step-time error| of the family's public training runs that ran it, at the family's present
    sustained fraction. Hopper, which has no such public run, takes Ampere's rate scaled by the
    two families' FlashAttention-2 rates (``attention_efficiency``): the pre-MLIR compiler
    emits Ampere's warp-level mma.sync and cp.async, not Hopper's wgmma and TMA, the same
    instructions FlashAttention-2 runs on Hopper (FlashAttention-3, arXiv 2407.08608 §1)."""
    fitted: dict[str, float] = {}
    for family in sorted(set(families)):
        idx = [i for i, f in enumerate(families)
               if f == family and scenarios[i].mapping.attention_kernel == "triton"]  # fmt: skip
        if not idx:
            continue
        errors = functools.partial(_step_errors, cases, scenarios, measured, idx)
        score, fitted[family] = _best_fraction(errors, "attention_efficiency_triton",
                                               TRITON_GRID)  # fmt: skip
        print(f"  {family:10s} attention_efficiency_triton {fitted[family]:.2f} (group-weighted "
              f"mean |error| {100 * score:.1f} % over {len(idx)} runs)")  # fmt: skip
    if "ampere" in fitted and "hopper" not in fitted:
        fa2 = {f: current_calibration().kernel(f).attention_efficiency
               for f in ("ampere", "hopper")}  # fmt: skip
        fitted["hopper"] = round(fitted["ampere"] * fa2["hopper"] / fa2["ampere"] + 1e-9, 2)
        print(f"  derived: hopper attention_efficiency_triton {fitted['hopper']:.2f} (ampere's "
              f"x FlashAttention-2 {fa2['hopper']:.2f} / {fa2['ampere']:.2f})")  # fmt: skip
    return fitted


def _fit_serving(trained: set[str]) -> dict[str, float]:
    """Family -> the fraction its public serving measurements fit best, for the families
    without public training measurements (``trained``): the group-weighted mean |error| over
    the rows of its serving cases (throughput, TTFT, TPOT as each case states them)."""
    cases = [c for c in load_measurements() if case_category(c) == "inference"]
    by_family: dict[str, list[dict]] = defaultdict(list)
    for case in cases:
        try:
            scenario = serving_case_scenario(case)
        except ConfigError:  # a case validate lists as skipped, with this reason
            continue
        family = device_caps(scenario.system.device, scenario.workload.precision).family
        if family not in trained:
            by_family[family].append(case)
    fitted: dict[str, float] = {}
    for family, members in sorted(by_family.items()):

        def row_errors(members: list[dict] = members) -> Iterator[tuple[str, float]]:
            for case in members:
                for row in score_inference_case(case):
                    yield row["group"], abs(row["error"])

        score, fitted[family] = _best_fraction(row_errors)
        print(f"{family:10s} training_sustained_fraction = {fitted[family]:.2f} from its "
              f"serving rows (group-weighted mean |error| {100 * score:.1f} %)")  # fmt: skip
    return fitted


def _best_fraction(errors: Callable[[], Iterable[tuple[str, float]]],
                   field: str = "training_sustained_fraction",
                   grid: np.ndarray = GRID) -> tuple[float, float]:  # fmt: skip
    """(group-weighted mean |error|, value) of the ``grid`` value of the DeviceCaps ``field``
    with the least error: ``errors`` yields (group, |error|) pairs, evaluated with every
    device at that value."""
    best = (np.inf, 1.0)
    for fraction in grid:

        def caps(device, precision, fraction=fraction, **kw):  # type: ignore[no-untyped-def]
            c = device_caps(device, precision, **kw)
            return dataclasses.replace(c, **{**_FITTED.get(c.family, {}), field: float(fraction)})

        evaluate_module.device_caps = caps  # type: ignore[assignment]
        by_group = defaultdict(list)
        for group, error in errors():
            by_group[group].append(error)
        score = float(np.mean([np.mean(e) for e in by_group.values()]))
        if score < best[0]:
            best = (score, float(fraction))
    evaluate_module.device_caps = device_caps  # type: ignore[assignment]
    return best


if __name__ == "__main__":
    main()
