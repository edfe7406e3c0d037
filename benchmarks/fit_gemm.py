"""Fit per-family GEMM efficiency to the public matmul microbenchmarks.

Run: .venv/bin/python benchmarks/fit_gemm.py [--write]

For each (device family, precision) the efficiency is the geometric mean over its cases of
measured / model-at-efficiency-1 (a device whose preset holds its own ``gemm_efficiency``, as
GB200's, gets its own from its cases, which its family's leaves out), where the model's value
is its best FLOP/s over the same kind of shape sweep the benchmark runs for best-achievable
(MAMF) cases, and its FLOP/s at the stated shape otherwise (so tile and wave quantisation
are accounted for). A timing that includes a host overhead per call
(``measured.includes_host_overhead``: JAX's dispatch, timed with ``jax.block_until_ready``)
has it taken off first; the overhead is fitted with the
efficiencies, as the harness's case of fewest FLOPs less its modelled kernel (JAX's 1024^3
XLA matmul on TPU v5e, where the kernel is a tenth of the call).
Prints the fit and the per-case error; ``--write`` updates the gemm_efficiency values of
configs/calibration/kernels.yaml, those of the device presets that hold their own
(configs/devices/) and the host overheads of frameworks.yaml in place (comments kept).
"""

from __future__ import annotations

import argparse
import math
import re
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

from deepflow.config.loader import builtin_config_dir
from deepflow.validation import (
    gemm_case_caps,
    gemm_efficiency_key,
    gemm_microbenchmarks,
    host_overhead_name,
    host_overhead_s,
    score_gemm_cases,
)

#: Most rounds of the joint fit of efficiencies and host overheads (each moves the other a
#: little: the overhead is the smallest case's time less its modelled kernel); it stops once
#: the overheads move less than a picosecond (four rounds for JAX's).
ROUNDS = 20


def fit() -> tuple[dict[tuple[str, str], float], dict[str, float]]:
    """The fitted gemm_efficiency per (family, precision) and host overhead per name (s)."""
    cases = [c for c in gemm_microbenchmarks()
             if not (c.get("hardware") or {}).get("power_limit_W")]  # fmt: skip
    # a timing with a host overhead per call: the harness's case of fewest FLOPs sets it
    harnesses: dict[str, list[dict]] = defaultdict(list)
    for case in cases:
        if (name := host_overhead_name(case)) is not None:
            harnesses[name].append(case)
    anchors = {name: min(group, key=_flops) for name, group in harnesses.items()}
    overheads = dict.fromkeys(anchors, 0.0)
    efficiency: dict[tuple[str, str], float] = {}
    for _ in range(ROUNDS):
        ratios: dict[tuple[str, str], list[float]] = defaultdict(list)
        for case in cases:
            if any(case is anchor for anchor in anchors.values()):
                continue
            key = gemm_efficiency_key(gemm_case_caps(case))
            (unit,) = score_gemm_cases([case], efficiency_override={key: 1.0},
                                       host_overheads=dict.fromkeys(overheads, 0.0))  # fmt: skip
            ratio = unit["measured_tflops"] / unit["model_tflops"]
            if overhead := host_overhead_s(case, overheads):
                # the kernel's measured rate: the timed call less its host overhead
                call_s = _flops(case) / (unit["measured_tflops"] * 1e12)
                ratio *= call_s / (call_s - overhead)
            ratios[key].append(ratio)
        efficiency = {key: math.exp(sum(map(math.log, r)) / len(r)) for key, r in ratios.items()}
        before = dict(overheads)
        for name, anchor in anchors.items():
            (unit,) = score_gemm_cases([anchor], efficiency_override=efficiency,
                                       host_overheads={name: 0.0})  # fmt: skip
            overheads[name] = _flops(anchor) / 1e12 * (1 / unit["measured_tflops"]
                                                       - 1 / unit["model_tflops"])  # fmt: skip
        if all(abs(overheads[n] - before[n]) < 1e-12 for n in overheads):
            break
    return efficiency, overheads


def _flops(case: dict) -> float:
    g = case.get("gemm") or {}
    return 2.0 * g.get("M", 0) * g.get("N", 0) * g.get("K", 0)


def set_values(path: Path, values: dict[tuple[str, str], float], *, indent: int, key: str,
               fmt: str, block: str | None = None) -> None:  # fmt: skip
    """Set ``values[(family, name)]`` in a kernels.yaml in place, keeping its comments: the
    entries ``indent`` spaces deep, their names matching the regex ``key``, under each
    two-space family header and, where ``block`` is given, only under that four-space key
    (``gemm_efficiency``'s precisions, not ``gemm_full_clock_power``'s)."""
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    family = sub = None
    for i, line in enumerate(lines):
        if header := re.match(r"^  ([a-z]+):\s*(#.*)?$", line):
            family, sub = header.group(1), None
            continue
        if parent := re.match(r"^    ([a-z_0-9]+):", line):
            sub = parent.group(1)
        entry = re.match(rf"^(\s{{{indent}}})({key}):\s*([0-9.]+)(\s*#.*)?$", line)
        if entry and family and (family, entry.group(2)) in values and block in (None, sub):
            value = values[(family, entry.group(2))]
            lines[i] = f"{entry.group(1)}{entry.group(2)}: {value:{fmt}}{entry.group(4) or ''}\n"
    path.write_text("".join(lines), encoding="utf-8")


def write(fitted: dict[tuple[str, str], float], path: Path) -> None:
    """Set the fitted gemm_efficiency of each (family, precision)."""
    set_values(path, fitted, indent=6, key="[a-z0-9]+", fmt=".4f", block="gemm_efficiency")


def write_devices(fitted: dict[tuple[str, str], float], folder: Path) -> list[Path]:
    """Set the fitted ``gemm_efficiency`` of each (device preset, precision) in
    ``folder/<preset>.yaml`` in place (its block's two-space entries, comments kept)."""
    written = []
    for preset in sorted({name for name, _ in fitted}):
        path = folder / f"{preset}.yaml"
        lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
        inside, found = False, set()
        for i, line in enumerate(lines):
            if re.match(r"^gemm_efficiency:", line):
                inside = True
                continue
            if inside and not line.startswith("  "):
                inside = False
            entry = re.match(r"^(  )([a-z0-9]+):\s*([0-9.]+)(\s*#.*)?$", line)
            if inside and entry and (preset, entry.group(2)) in fitted:
                value = fitted[(preset, entry.group(2))]
                lines[i] = f"{entry.group(1)}{entry.group(2)}: {value:.4f}{entry.group(4) or ''}\n"
                found.add(entry.group(2))
        missing = {p for name, p in fitted if name == preset} - found
        if missing:
            raise SystemExit(f"{path}: no 'gemm_efficiency: {sorted(missing)[0]}' entry to set")
        path.write_text("".join(lines), encoding="utf-8")
        written.append(path)
    return written


def write_overheads(overheads: dict[str, float], path: Path) -> None:
    """Set ``call_overhead_us`` of each fitted host overhead in frameworks.yaml in place."""
    text = path.read_text(encoding="utf-8")
    for name, seconds in overheads.items():
        pattern = rf"(?m)^({name}:\n(?:  .*\n)*?  call_overhead_us: )[0-9.]+"
        text, count = re.subn(pattern, rf"\g<1>{seconds * 1e6:.1f}", text)
        if count != 1:
            raise SystemExit(f"{path}: no '{name}: call_overhead_us' entry to set")
    path.write_text(text, encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="update kernels.yaml in place")
    args = parser.parse_args()
    fitted, overheads = fit()
    print("fitted gemm_efficiency (geometric mean of measured / model at efficiency 1):")
    for (family, precision), value in sorted(fitted.items()):
        print(f"  {family:10s} {precision:5s} {value:.4f}")
    for name, seconds in sorted(overheads.items()):
        print(f"fitted host overhead per call: {name} {seconds * 1e6:.1f} us")
    rows = score_gemm_cases(efficiency_override=fitted, host_overheads=overheads)
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
        from deepflow.config.specs import DEVICE_FAMILIES

        path = builtin_config_dir() / "calibration" / "kernels.yaml"
        write({k: v for k, v in fitted.items() if k[0] in DEVICE_FAMILIES}, path)
        print(f"wrote {path}")
        devices = {k: v for k, v in fitted.items() if k[0] not in DEVICE_FAMILIES}
        for written in write_devices(devices, builtin_config_dir() / "devices"):
            print(f"wrote {written}")
        path = builtin_config_dir() / "calibration" / "frameworks.yaml"
        write_overheads(overheads, path)
        print(f"wrote {path}")


if __name__ == "__main__":
    main()


def fit_main(doc: str, fit: Callable[[], dict], report: Callable[[dict], None],
             values: Callable[[dict], dict[tuple[str, str], float]], key: str) -> None:  # fmt: skip
    """A kernel fit script's command line: run ``fit``, print it with ``report`` and, with
    ``--write``, set the (family, name) -> value pairs ``values`` takes from it in
    configs/calibration/kernels.yaml in place (the four-space entries whose names match the
    regex ``key``; comments kept)."""
    parser = argparse.ArgumentParser(description=doc.split("\n", 1)[0])
    parser.add_argument("--write", action="store_true",
                        help="update configs/calibration/kernels.yaml")  # fmt: skip
    args = parser.parse_args()
    fits = fit()
    report(fits)
    if args.write:
        path = builtin_config_dir() / "calibration" / "kernels.yaml"
        set_values(path, values(fits), indent=4, key=key, fmt=".3f")
        print(f"wrote {path}")
