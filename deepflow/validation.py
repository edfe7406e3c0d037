"""Score the oracle against the public measurements (``deepflow.data``).

One scorer per kind of measurement; each returns rows with the measured value, the model's
value and the relative error. ``deepflow validate`` and the calibration scripts use these.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from deepflow.config import load_device
from deepflow.config.calibration import current_calibration
from deepflow.data import load_measurements
from deepflow.errors import ConfigError
from deepflow.measurements import (
    FRAMEWORKS,
    accelerator_presets,
    batch_scale,
    case_category,
    measured_memory_stage,
    measured_peak_memory,
    measured_step_time_s,
    stated_hbm_bandwidth_GBps,
    training_case_scenario,
)
from deepflow.oracle.hardware import DeviceCaps, device_caps
from deepflow.oracle.kernels import gemm, memory_op_time_s

__all__ = [
    "FITS_QUANTITY",
    "MAMF_DEVICES",
    "MAMF_SWEEP",
    "SERVING_GEMM_CATEGORIES",
    "TRAINING_GROUPS",
    "attention_microbenchmarks",
    "case_scenario",
    "float8_linear_case_caps",
    "float8_linear_microbenchmarks",
    "float8_linear_speedup",
    "gemm_case_caps",
    "gemm_efficiency_key",
    "gemm_microbenchmarks",
    "hbm_stream_case_caps",
    "hbm_stream_microbenchmarks",
    "load_cases",
    "measured_step_time_s",
    "score_attention_cases",
    "score_collective_cases",
    "score_float8_linear_case",
    "score_gemm_cases",
    "score_hbm_stream_cases",
    "score_inference_case",
    "score_memory_cases",
    "score_out_of_memory_case",
    "score_serving_gemm_cases",
    "score_training_cases",
    "serving_case_scenario",
    "serving_gemm_microbenchmarks",
    "training_case_scenario",
    "validation_report",
    "write_case_scenarios",
]

#: Accelerator names in the MAMF group -> the preset with the same chip (peak taken from the case).
MAMF_DEVICES = {
    "NVIDIA A100 SXM": "a100-sxm4-80gb",
    "NVIDIA A100 PCIe": "a100-sxm4-80gb",  # same GA100 die and peak; PCIe power limit not modelled
    "NVIDIA H100 SXM": "h100-sxm5-80gb",
    "NVIDIA GH200 SXM": "h200-sxm-141gb",  # GH100 with 141 GiB HBM3e, as H200
    "NVIDIA H200 SXM": "h200-sxm-141gb",
    "NVIDIA B200 SXM": "b200",
    "NVIDIA B300 SXM": "b200",  # same dense BF16/FP8 peaks as B200 (the case's notes)
    "NVIDIA GB200 SXM": "gb200",
}
#: Shapes swept per device, as the maximum-achievable-matmul benchmark sweeps M, N, K and
#: reports the best (Bekman, ml-engineering, compute/accelerator/benchmarks/mamf-finder.py).
MAMF_SWEEP = (4096, 6144, 8192, 12288, 16384)


def _gemm_precision(key: str) -> str:
    """The oracle precision of a peak key ("bf16", "fp8_e4m3fn", "fp16/bf16 tensor", "tf32")."""
    lowered = key.lower()
    for name in ("fp4", "fp8", "bf16", "fp16", "tf32", "fp32", "int8", "fp64"):
        if name in lowered:
            return name
    return "bf16"


def gemm_case_caps(case: dict[str, Any], *, gemm_efficiency: float | None = None) -> DeviceCaps:
    """Device capabilities for a GEMM case: its preset under the case's power limit
    (``hardware.power_limit_W``, where stated), the case's stated peak at the TDP."""
    peaks = case.get("hardware", {}).get("peak_dense_tflops")
    if not isinstance(peaks, dict) or not peaks:
        raise ConfigError(f"case {case.get('id')!r}: hardware.peak_dense_tflops is missing.")
    (precision_key, peak_tflops), *_ = peaks.items()
    precision = _gemm_precision(str(precision_key))
    name = case["hardware"].get("accelerator")
    preset = MAMF_DEVICES.get(name) if isinstance(name, str) else None
    if preset is None:
        preset = accelerator_presets(case)[0]
    limit = case["hardware"].get("power_limit_W")
    caps = device_caps(load_device(preset), precision)
    scale = 1.0
    if isinstance(limit, int | float) and not isinstance(limit, bool):
        # the stated peak (at the TDP), scaled as the preset's by the power limit's matrix rate
        at_tdp = caps.peak_flops
        caps = device_caps(load_device({"base": preset, "power_limit_W": limit}), precision)
        scale = caps.peak_flops / at_tdp
    caps = dataclasses.replace(caps, peak_flops=float(peak_tflops) * 1e12 * scale)
    if gemm_efficiency is not None:
        caps = dataclasses.replace(caps, gemm_efficiency=gemm_efficiency)
    return caps


def gemm_efficiency_key(caps: DeviceCaps) -> tuple[str, str]:
    """Whose GEMM efficiency a GEMM case's capabilities carry: (its device preset,
    precision) where the preset holds its own (``gemm_efficiency``, measured on that device),
    else (its family, precision). ``benchmarks/fit_gemm.py`` fits one value per key."""
    from deepflow.oracle.hardware import device_gemm_efficiency

    preset = str(caps.name).split("+", 1)[0]  # a preset with overrides (a power limit)
    own = device_gemm_efficiency(load_device(preset), caps.precision)
    return (preset, caps.precision) if own is not None else (caps.family, caps.precision)


def best_achievable_flops(caps: DeviceCaps) -> float:
    """The model's best FLOP/s over the MAMF-style shape sweep."""
    m, n, k = np.meshgrid(MAMF_SWEEP, MAMF_SWEEP, MAMF_SWEEP, indexing="ij")
    result = gemm(caps, m.ravel(), n.ravel(), k.ravel())
    return float(np.max(result["flops"] / result["time_s"]))


def _gemm_shape(case: dict[str, Any]) -> tuple[int, int, int] | None:
    """The case's (M, N, K), or None for a best-of-a-sweep result (MAMF: "Best shape of a
    search"), which is scored against the model's best over :data:`MAMF_SWEEP`."""
    spec = case.get("gemm") or {}
    text = f"{case.get('notes') or ''} {case.get('group') or ''}".lower()
    if "best" in text or "mamf" in text or "maximum achievable" in text:
        return None
    dims: list[Any] = [spec.get(k, spec.get(k.lower())) for k in ("M", "N", "K")]
    if not all(isinstance(d, int) and d > 0 for d in dims):
        raise ConfigError(f"case {case.get('id')!r}: gemm.M, gemm.N and gemm.K must be positive "
                          "integers.")  # fmt: skip
    return int(dims[0]), int(dims[1]), int(dims[2])


#: Host overheads a GEMM timing may include (``measured.includes_host_overhead``): the
#: calibration entry of each, in seconds per timed call.
HOST_OVERHEADS = {"jax_dispatch": lambda cal: cal.jax_dispatch.call_overhead_s}


def host_overhead_name(case: dict[str, Any]) -> str | None:
    """The host overhead the case's timing includes per call (``measured.
    includes_host_overhead``: a JAX microbenchmark timed with ``jax.block_until_ready`` per
    call includes the call's dispatch, ``jax_dispatch``; docs/model.md §C6.1), or None."""
    name = case.get("measured", {}).get("includes_host_overhead")
    if name is not None and name not in HOST_OVERHEADS:
        raise ConfigError(f"case {case.get('id')!r}: measured.includes_host_overhead is "
                          f"{name!r}; known: {', '.join(sorted(HOST_OVERHEADS))}.")  # fmt: skip
    return name


def host_overhead_s(case: dict[str, Any], overheads: Mapping[str, float] | None = None) -> float:
    """Seconds the case's timing adds per call around the kernel (0 where it adds none), from
    ``overheads`` (seconds per name) or else the calibration."""
    name = host_overhead_name(case)
    if name is None:
        return 0.0
    if overheads is not None:
        return float(overheads[name])
    return float(HOST_OVERHEADS[name](current_calibration()))


def gemm_microbenchmarks() -> list[dict[str, Any]]:
    """The public set's matmul microbenchmarks (``category: gemm_microbenchmark``)."""
    return [c for c in load_measurements() if case_category(c) == "gemm_microbenchmark"]


def score_gemm_cases(
    cases: list[dict[str, Any]] | None = None,
    *,
    efficiency_override: dict[tuple[str, str], float] | None = None,
    host_overheads: Mapping[str, float] | None = None,
) -> list[dict[str, Any]]:
    """Model vs measured matmul TFLOP/s for every GEMM microbenchmark of the public set (the
    MAMF best-achievable ones against the model's best over a sweep), or for ``cases``; a
    timing that includes a host overhead per call is modelled with it (``host_overheads``:
    seconds per name instead of the calibration's, as benchmarks/fit_gemm.py fits them)."""
    rows = []
    for case in gemm_microbenchmarks() if cases is None else cases:
        caps = gemm_case_caps(case)
        key = gemm_efficiency_key(caps)
        if efficiency_override and key in efficiency_override:
            caps = dataclasses.replace(caps, gemm_efficiency=efficiency_override[key])
        shape = _gemm_shape(case)
        if shape is None:
            model = best_achievable_flops(caps) / 1e12
        else:
            result = gemm(caps, *(np.array([float(d)]) for d in shape))
            seconds = result["time_s"][0] + host_overhead_s(case, host_overheads)
            model = float(result["flops"][0] / seconds) / 1e12
        measured = float(case["measured"]["tflops"])
        rows.append(
            {
                "id": case["id"],
                "group": case["group"],
                "family": caps.family,
                "precision": caps.precision,
                "measured_tflops": measured,
                "model_tflops": model,
                "error": model / measured - 1.0,
            }
        )
    return rows


#: The serving GEMM microbenchmarks' categories: MoE grouped GEMMs and dense GEMMs, both timed
#: kernel-only and scored by the serving model's GEMM (docs/model.md §D1).
SERVING_GEMM_CATEGORIES = ("grouped_gemm_microbenchmark", "serving_gemm_microbenchmark")


def serving_gemm_microbenchmarks() -> list[dict[str, Any]]:
    """The public set's serving GEMM microbenchmarks: MoE grouped GEMMs (``category:
    grouped_gemm_microbenchmark``) and dense GEMMs across their ridge point (``category:
    serving_gemm_microbenchmark``)."""
    return [c for c in load_measurements() if case_category(c) in SERVING_GEMM_CATEGORIES]


def score_serving_gemm_cases(
    cases: list[dict[str, Any]] | None = None,
    *,
    override: dict[str, dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """Model vs measured TFLOP/s of serving GEMMs, by the serving model's GEMM at the
    microbenchmark's clocks, launch excluded
    (:func:`deepflow.oracle.workloads.inference.serving_gemm_time_s`): MoE grouped GEMMs
    (``gemm.groups`` experts of ``gemm.M`` rows each) and dense ones (``groups`` 1 unless
    stated); a DeepGEMM case by that kernel (:func:`serving_gemm_case_time_s`). ``override``:
    family -> DeviceCaps fields (``grouped_gemm_efficiency``, ``gemm_overlap_exponent``,
    ``gemm_overlap_exponent_dense``, ``gemm_pipeline_round_trip_s``) to score with instead of
    the calibration's (the fit, ``benchmarks/fit_moe_gemm.py``)."""
    rows = []
    for case in serving_gemm_microbenchmarks() if cases is None else cases:
        caps = gemm_case_caps(case)
        if override and caps.family in override:
            caps = dataclasses.replace(caps, **override[caps.family])
        shape = _gemm_shape(case)
        grouped = case_category(case) == "grouped_gemm_microbenchmark"
        groups = (case.get("gemm") or {}).get("groups", None if grouped else 1)
        if shape is None or not isinstance(groups, int) or groups < 1:
            need = "gemm.groups, gemm.M" if grouped else "gemm.M"
            raise ConfigError(f"case {case.get('id')!r}: {need}, gemm.N and gemm.K must be "
                              "positive integers.")  # fmt: skip
        m, n, k = shape
        time_s = serving_gemm_case_time_s(case, caps, m, n, k, groups, grouped=grouped)
        model = 2.0 * groups * m * n * k / time_s / 1e12
        measured = float(case["measured"]["tflops"])
        rows.append({"id": case["id"], "group": case["group"], "family": caps.family,
                     "grouped": grouped, "measured_tflops": measured, "model_tflops": model,
                     "error": model / measured - 1.0})  # fmt: skip
    return rows


def serving_gemm_case_time_s(case: dict[str, Any], caps: DeviceCaps, m: int, n: int, k: int,
                             groups: int, *, grouped: bool) -> float:  # fmt: skip
    """Kernel seconds of a serving GEMM microbenchmark at its clocks, launch excluded: the
    serving model's GEMM (:func:`deepflow.oracle.workloads.inference.serving_gemm_time_s`), or,
    where the case's ``gemm.op`` names DeepGEMM (``deep_gemm.``), that kernel with its own
    tiling and K-loop floor (:func:`~deepflow.oracle.workloads.inference.deepgemm_time_s`;
    ``gemm.layout`` contiguous: its M-aligned grouped layout)."""
    from deepflow.oracle.workloads.inference import deepgemm_time_s, serving_gemm_time_s

    spec = case.get("gemm") or {}
    if "deep_gemm." in str(spec.get("op", "")):
        contiguous = spec.get("layout") == "contiguous"
        return deepgemm_time_s(caps, m, n, k, groups, grouped=grouped, sustained=False,
                               launch=False, contiguous=contiguous)  # fmt: skip
    blockwise = serving_gemm_case_blockwise(case)
    return float(serving_gemm_time_s(caps, m, n, k, groups, grouped=grouped, sustained=False,
                                     launch=False, blockwise=blockwise))  # fmt: skip


def serving_gemm_case_blockwise(case: dict[str, Any]) -> bool:
    """Whether a serving GEMM case's operands carry block scales: DeepGEMM's kernels, or inputs
    stated with block scales (``gemm.dtype_inputs``); the serving model bends such a GEMM's
    roofline by ``gemm_overlap_exponent``, a dense one without them by
    ``gemm_overlap_exponent_dense`` (docs/model.md §D1)."""
    spec = case.get("gemm") or {}
    return "deep_gemm." in str(spec.get("op", "")) or "block scale" in str(
        spec.get("dtype_inputs", "")
    )


def hbm_stream_microbenchmarks() -> list[dict[str, Any]]:
    """The public set's memory-bandwidth microbenchmarks (``category:
    memory_bandwidth_microbenchmark``)."""
    return [c for c in load_measurements()
            if case_category(c) == "memory_bandwidth_microbenchmark"]  # fmt: skip


def hbm_stream_case_caps(case: dict[str, Any]) -> DeviceCaps:
    """Capabilities of a memory-bandwidth case's device: its preset (its family's
    ``hbm_efficiency``) with the memory bandwidth the case states as the device's peak."""
    peak = stated_hbm_bandwidth_GBps(case)
    if peak is None or peak <= 0:
        raise ConfigError(f"case {case.get('id')!r}: hardware.memory_bandwidth_GBps (or _TBps: "
                          "the device's peak) must be a positive number.")  # fmt: skip
    device = load_device({"base": accelerator_presets(case)[0], "hbm_bandwidth_GBps": peak})
    return device_caps(device, "bf16")


def score_hbm_stream_cases(
    cases: list[dict[str, Any]] | None = None,
    *,
    efficiency_override: dict[str, float] | None = None,
) -> list[dict[str, Any]]:
    """Model vs measured GB/s of streaming kernels that read (or write) ``memory.bytes`` from
    HBM once: the rate of the oracle's memory-bound kernel
    (:func:`deepflow.oracle.kernels.memory_op_time_s`, launch excluded: the benchmarks time
    kernels) at the stated peak. ``efficiency_override``: family -> ``hbm_efficiency`` to
    score with instead of the calibration's (the fit, ``benchmarks/fit_hbm.py``)."""
    rows = []
    for case in hbm_stream_microbenchmarks() if cases is None else cases:
        caps = hbm_stream_case_caps(case)
        if efficiency_override and caps.family in efficiency_override:
            caps = dataclasses.replace(caps, hbm_efficiency=efficiency_override[caps.family])
        values = [(case.get("memory") or {}).get("bytes"), (case.get("measured") or {}).get("GBps")]
        numbers = [float(v) for v in values
                   if isinstance(v, int | float) and not isinstance(v, bool)]  # fmt: skip
        if len(numbers) != 2 or min(numbers) <= 0:
            raise ConfigError(f"case {case.get('id')!r}: memory.bytes and measured.GBps must "
                              "be positive numbers.")  # fmt: skip
        nbytes, measured = numbers
        model = nbytes / float(memory_op_time_s(caps, nbytes, launches=0)) / 1e9
        rows.append({"id": case["id"], "group": case["group"], "family": caps.family,
                     "peak_GBps": caps.hbm_bandwidth_Bps / 1e9, "measured_GBps": measured,
                     "model_GBps": model, "error": model / measured - 1.0})  # fmt: skip
    return rows


def attention_microbenchmarks() -> list[dict[str, Any]]:
    """The public set's fused-attention microbenchmarks across sequence lengths (``category:
    attention_microbenchmark``)."""
    return [c for c in load_measurements() if case_category(c) == "attention_microbenchmark"]


def score_attention_cases(
    cases: list[dict[str, Any]] | None = None,
    *,
    overhead_override: dict[str, float] | None = None,
) -> list[dict[str, Any]]:
    """Model vs measured rate of a causal fused-attention kernel at ``attention.seq_len``
    tokens relative to the same kernel's at ``attention.reference_seq_len`` (the length at
    which the families' attention efficiencies are stated): the shape the training model's
    attention takes over the length (``attention_length_factor`` of the transformer layer with
    the family's ``attention_block_overhead``, and the causal mask's executed tiles,
    docs/model.md §C6.2), against the benchmark's TFLOP/s, which count the unmasked half.
    ``overhead_override``: family -> ``attention_block_overhead`` to score with instead of the
    calibration's (the fit, ``benchmarks/fit_attention.py``).

    Raises:
        ConfigError: a case without a causal mask, or without positive lengths and rates.
    """
    from deepflow.oracle.workloads.transformer.layer import (
        attention_length_factor,
        causal_executed_fraction,
    )

    rows = []
    caps_of: dict[str, DeviceCaps] = {}  # per device preset (the fit scores every case often)
    for case in attention_microbenchmarks() if cases is None else cases:
        spec = case.get("attention") or {}
        measured = case.get("measured") or {}
        values = [spec.get("seq_len"), spec.get("reference_seq_len"), measured.get("tflops"),
                  measured.get("tflops_at_reference")]  # fmt: skip
        numbers = [float(v) for v in values
                   if isinstance(v, int | float) and not isinstance(v, bool)]  # fmt: skip
        if len(numbers) != 4 or min(numbers) <= 0:
            raise ConfigError(f"case {case.get('id')!r}: attention.seq_len, reference_seq_len, "
                              "measured.tflops and tflops_at_reference must be positive "
                              "numbers.")  # fmt: skip
        if spec.get("causal") is not True:
            raise ConfigError(f"case {case.get('id')!r}: attention.causal must be true (the "
                              "model's fused attention is causal).")  # fmt: skip
        tokens, reference, rate, rate_reference = numbers
        preset = accelerator_presets(case)[0]
        if preset not in caps_of:
            caps_of[preset] = device_caps(load_device(preset), "bf16")
        caps = caps_of[preset]
        overhead = (overhead_override or {}).get(caps.family, caps.attention_block_overhead)
        # seconds per unmasked FLOP (the benchmark's count) go as the executed tiles times the
        # length factor; the rate ratio is the inverse ratio of those
        cost = [causal_executed_fraction(n) * float(attention_length_factor(n, overhead))
                for n in (reference, tokens)]  # fmt: skip
        model = cost[0] / cost[1]
        measured_ratio = rate / rate_reference
        rows.append({"id": case["id"], "group": case["group"], "family": caps.family,
                     "measured": measured_ratio, "model": model,
                     "error": model / measured_ratio - 1.0})  # fmt: skip
    return rows


def float8_linear_microbenchmarks() -> list[dict[str, Any]]:
    """The shipped float8 linear-layer microbenchmarks (``category:
    float8_linear_microbenchmark``)."""
    return [c for c in load_measurements() if case_category(c) == "float8_linear_microbenchmark"]


def float8_linear_case_caps(case: dict[str, Any]) -> tuple[DeviceCaps, DeviceCaps]:
    """(16-bit, FP8) capabilities of a float8 linear case's device: its preset with the case's
    memory bandwidth and power limit."""
    hardware = case.get("hardware") or {}
    bandwidth, limit = hardware.get("memory_bandwidth_TBps"), hardware.get("power_limit_W")
    device = load_device({
        "base": accelerator_presets(case)[0],
        **({"hbm_bandwidth_GBps": 1e3 * bandwidth} if isinstance(bandwidth, int | float) else {}),
        **({"power_limit_W": limit} if isinstance(limit, int | float) else {}),
    })  # fmt: skip
    return device_caps(device, "bf16"), device_caps(device, "fp8")


def float8_linear_speedup(
    caps16: DeviceCaps, caps8: DeviceCaps, m: Any, k: Any, n: Any, *, recipe: str,
    rowwise_cast_efficiency: float,
) -> Any:  # fmt: skip
    """Modelled bf16 time / FP8 time of torchao's microbenchmark module, LayerNorm(k) ->
    Linear(k, n) -> Sigmoid, forward and backward on an m x k input (benchmarks/float8/
    float8_roofline.py): the three GEMMs (forward, input and weight gradients) at either
    precision; the norm (forward read and write, backward read x and dy, write dx) and the
    sigmoid (likewise) in 16 bits; FP8 adds its operands' casts and rescales as the
    transformer layer counts them (:func:`fp8_operand_bytes`, docs/model.md §C6.4)."""
    from deepflow.oracle.workloads.transformer.layer import (
        FP8_LINEAR_LAUNCHES,
        fp8_operand_bytes,
    )

    m, k, n = (np.asarray(v, dtype=float) for v in (m, k, n))

    def gemms(caps: DeviceCaps) -> Any:
        return sum(gemm(caps, *shape, detail=False)["time_s"]
                   for shape in ((m, n, k), (m, k, n), (k, n, m)))  # fmt: skip

    p = caps16.bytes_per_element
    norm_sigmoid = sum(
        memory_op_time_s(caps16, nbytes)
        for nbytes in (2 * p * m * k, 2 * p * m * n, 3 * p * m * n, 3 * p * m * k)
    )
    cast_B, rescale_B = fp8_operand_bytes(recipe == "rowwise", rowwise_cast_efficiency, np)
    launches_f, launches_b = FP8_LINEAR_LAUNCHES[recipe]
    casts = memory_op_time_s(caps16, cast_B * (m * k + k * n), launches=launches_f) + (
        memory_op_time_s(caps16, cast_B * m * n + rescale_B * (m * k + k * n),
                         launches=launches_b)
    )  # fmt: skip
    return (gemms(caps16) + norm_sigmoid) / (gemms(caps8) + norm_sigmoid + casts)


#: The torchao float8 recipes its linear-layer microbenchmark runs (torchao/float8/config.py
#: ``Float8LinearRecipeName``) that :func:`float8_linear_speedup` models.
_TORCHAO_FLOAT8_RECIPES = ("tensorwise", "rowwise")


def score_float8_linear_case(
    case: dict[str, Any], *, rowwise_cast_efficiency: float | None = None
) -> list[dict[str, Any]]:
    """Model vs measured speedup over bf16 of a float8 linear case, one row per N (``float8_
    linear.N`` a list); ``rowwise_cast_efficiency`` replaces the calibration's (the fit,
    ``benchmarks/fit_float8.py``)."""
    spec = case.get("float8_linear") or {}
    recipe = spec.get("recipe")
    if recipe not in _TORCHAO_FLOAT8_RECIPES:
        raise ConfigError(f"case {case.get('id')!r}: float8_linear.recipe must be one of "
                          f"{', '.join(_TORCHAO_FLOAT8_RECIPES)}; got {recipe!r}.")  # fmt: skip
    ns = spec.get("N")
    measured = (case.get("measured") or {}).get("speedup_vs_bf16")
    dims = [spec.get("M"), spec.get("K")]
    if not (isinstance(ns, list) and isinstance(measured, list) and len(ns) == len(measured)
            and all(isinstance(d, int) and d > 0 for d in [*dims, *ns])):  # fmt: skip
        raise ConfigError(f"case {case.get('id')!r}: float8_linear.M and K must be positive "
                          "integers and float8_linear.N a list of them, one per "
                          "measured.speedup_vs_bf16.")  # fmt: skip
    if rowwise_cast_efficiency is None:
        rowwise_cast_efficiency = current_calibration().float8.rowwise_cast_efficiency
    caps16, caps8 = float8_linear_case_caps(case)
    model = float8_linear_speedup(caps16, caps8, dims[0], dims[1], np.array(ns), recipe=recipe,
                                  rowwise_cast_efficiency=rowwise_cast_efficiency)  # fmt: skip
    return [{"id": f"{case['id']}_n{n}", "group": case["group"], "quantity": "speedup",
             "measured": float(s), "model": float(v), "error": float(v) / float(s) - 1.0}
            for n, s, v in zip(ns, measured, model, strict=True)]  # fmt: skip


# ------------------------------------------------------------------------ end-to-end training
TRAINING_GROUPS = tuple(FRAMEWORKS)


def score_training_cases(cases: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Model vs measured step time for every end-to-end training case."""
    from deepflow.oracle.evaluate import evaluate_one

    if cases is None:
        cases = [c for g in TRAINING_GROUPS for c in load_measurements(g)]
    rows = []
    for case in cases:
        scenario = training_case_scenario(case)
        result = evaluate_one(scenario)
        measured = measured_step_time_s(case)
        scale = batch_scale(case, scenario)
        model = result["step_time_s"] * scale
        rows.append({
            "id": case["id"], "group": case["group"], "measured_s": measured,
            "model_s": model,
            "error": model / measured - 1.0,
            "feasible": result["feasible"],
            "memory_GiB": result["memory_per_device_B"] / 2**30,
            # the modelled step by part (s), at the step the source measured
            "breakdown": {k: float(v) * scale for k, v in result["breakdown_s"].items()},
        })  # fmt: skip
    return rows


# ------------------------------------------------------------------------ peak memory
#: The memory breakdown's terms each measured kind counts (docs/model.md §C2.6).
_MEMORY_KIND_TERMS = {
    "allocated": ("fragmentation", "recorded_blocks", "cuda_context", "nccl_buffers"),
    "reserved": ("cuda_context", "nccl_buffers"),
    "device": (),
}


def modelled_peak_memory_B(result: dict[str, Any], kind: str) -> float:
    """The oracle's peak memory as a source measures it (``kind``: allocated, reserved or
    device; :func:`deepflow.measurements.measured_peak_memory`)."""
    left_out = _MEMORY_KIND_TERMS[kind]
    terms = result["memory_breakdown_B"]
    return float(result["memory_per_device_B"] - sum(terms[t] for t in left_out))


def score_memory_cases(cases: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Model vs measured peak memory per device for every case that states one."""
    from deepflow.oracle.evaluate import evaluate_one, stage_memory_B

    if cases is None:
        cases = [c for c in load_measurements() if case_category(c) == "peak_memory"]
    rows = []
    for case in cases:
        measured, kind = measured_peak_memory(case)
        scenario = training_case_scenario(case)
        result = evaluate_one(scenario)
        stage = measured_memory_stage(case)
        if stage != "peak" and scenario.mapping.pipeline_parallel > 1:
            # the source logged one rank: that stage's breakdown (docs/model.md §C2.6)
            terms = stage_memory_B(scenario, stage)
            result = {"memory_per_device_B": sum(terms.values()), "memory_breakdown_B": terms,
                      "feasible": result["feasible"]}  # fmt: skip
        model = modelled_peak_memory_B(result, kind)
        # the modelled peak by term (GiB), the terms the measured kind counts
        parts = {k: float(v) / 2**30 for k, v in result["memory_breakdown_B"].items()
                 if k not in _MEMORY_KIND_TERMS[kind]}  # fmt: skip
        rows.append({"id": case["id"], "group": case["group"], "kind": kind,
                     "measured_GiB": measured / 2**30, "model_GiB": model / 2**30,
                     "error": model / measured - 1.0,
                     "feasible": result["feasible"], "breakdown": parts})  # fmt: skip
    return rows


def _ran_out_of_memory(case: dict[str, Any]) -> bool:
    """Whether the case records a run that ran out of memory (``measured.out_of_memory``)."""
    return (case.get("measured") or {}).get("out_of_memory") is True


def score_out_of_memory_case(case: dict[str, Any]) -> dict[str, Any]:
    """A run its source records as out of memory (``measured.out_of_memory: true``) against
    the oracle's feasibility: ``model`` 1 where the oracle has it fit (a miss: the feasibility
    constraint would keep a design that does not run), 0 where it calls it infeasible;
    ``measured`` 0 (it did not fit), ``error`` the difference. A group's mean |error| is the
    share of its out-of-memory runs modelled as fitting."""
    from deepflow.oracle.evaluate import evaluate_one

    fits = bool(evaluate_one(training_case_scenario(case))["feasible"])
    return {"id": case["id"], "group": case["group"], "measured": 0.0,
            "model": float(fits), "error": float(fits), "feasible": fits}  # fmt: skip


# ------------------------------------------------------------------------ serving
def serving_case_scenario(case: dict[str, Any]) -> Any:
    """A serving case's scenario; one that states neither a batch, a concurrency nor a number
    of requests is offered the batch its KV cache holds (``max_concurrency``; §D5)."""
    from deepflow.measurements import inference_case_scenario
    from deepflow.oracle.evaluate import evaluate_one

    try:
        return inference_case_scenario(case)
    except ConfigError as exc:
        if "batch_size" not in str(exc):
            raise
        probe = evaluate_one(inference_case_scenario(case, batch=1))
        return inference_case_scenario(case, batch=max(1, int(probe["max_concurrency"])))


#: A throughput column whose source does not say whether it is per GPU or the system's total.
_UNSTATED_SCOPE = "output_tokens_per_s_column_scope_unstated"


def _serving_measured(case: dict[str, Any]) -> dict[str, Any]:
    """The case's measured figures, those in milliseconds also in seconds, and a throughput
    column of unstated scope read as the total where the run had one GPU (its per-GPU figure
    and its total are then the same)."""
    from deepflow.measurements import SERVING_MS_KEY, serving_gpus

    measured = dict(case.get("measured") or {})
    for key, value in list(measured.items()):
        found = SERVING_MS_KEY.match(key)
        if found and isinstance(value, int | float) and not isinstance(value, bool):
            measured.setdefault(f"{found[1]}_s{found[2] or ''}", value / 1e3)
    unstated = measured.get(_UNSTATED_SCOPE)
    if unstated is not None and serving_gpus(case) == 1:
        measured.setdefault("output_tokens_per_s_total", unstated)
    return measured


def score_inference_case(case: dict[str, Any]) -> list[dict[str, Any]]:
    """Model vs measured serving figures of one case: a row per quantity it states
    (throughput, TTFT, TPOT; :data:`deepflow.measurements.SERVING_QUANTITIES`), in the group
    ``<group>/<quantity>`` (the row's ``quantity`` names it). A case that states neither a
    batch, a concurrency nor a number of requests is offered the batch its KV cache holds
    (``max_concurrency``; docs/model.md §D5)."""
    from deepflow.measurements import SERVING_QUANTITIES, serving_gpus
    from deepflow.oracle.evaluate import evaluate_one

    measured = _serving_measured(case)
    stated = [(next(k for k in keys if measured.get(k) is not None), output, label)
              for keys, output, label in SERVING_QUANTITIES
              if any(measured.get(k) is not None for k in keys)]  # fmt: skip
    if not stated:
        if measured.get("layer_latency_s_sum_of_ops") is not None:
            raise ConfigError(
                f"case {case.get('id')!r}: measured.layer_latency_s_sum_of_ops sums one "
                "layer's operators timed one by one, not a served request's latency or "
                "throughput, which is what deepflow's serving model gives."
            )
        if measured.get(_UNSTATED_SCOPE) is not None:
            raise ConfigError(
                f"case {case.get('id')!r}: its throughput column "
                f"(measured.{_UNSTATED_SCOPE}) does not say whether it is per GPU or the total "
                f"of its {serving_gpus(case)} GPUs, and it states no other quantity."
            )
        names = ", ".join(k for keys, _, _ in SERVING_QUANTITIES for k in keys)
        raise ConfigError(f"case {case.get('id')!r}: measured has none of {names}.")
    scenario = serving_case_scenario(case)
    result = evaluate_one(scenario)

    def model(key: str, output: str) -> float:  # a per-GPU figure against the system's
        per_gpu = key.endswith("_per_gpu")
        return float(result[output]) / (scenario.system.num_devices if per_gpu else 1)

    # one request's slot by part (s): its prompt and its output tokens (docs/model.md part D)
    parts = {k: float(v) for k, v in result["breakdown_s"].items()}
    return [{"id": case["id"], "group": f"{case['group']}/{label}",
             "quantity": label, "measured": float(measured[key]), "model": model(key, output),
             "error": model(key, output) / float(measured[key]) - 1.0,
             "feasible": result["feasible"], "breakdown": parts}
            for key, output, label in stated]  # fmt: skip


# ------------------------------------------------------------------------ collectives
#: Collective benchmark nodes -> network presets (H200 has H100's NVLink4 + NVSwitch).
_COLLECTIVE_NETWORKS = {"nccl_tests_a100_node": "dgx-a100", "allreduce_bench_h200_node": "dgx-h100"}


_COLLECTIVE_OPS = {
    "allreduce": "all_reduce",
    "allgather": "all_gather",
    "reducescatter": "reduce_scatter",
    "alltoall": "all_to_all",
}


def score_collective_cases(cases: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Model vs measured bandwidth for every collective case: bus bandwidth (nccl-tests
    convention) where the case states it, else algorithm bandwidth, else time."""
    from deepflow.config import load_network
    from deepflow.oracle.network import NetworkModel, bus_bandwidth_Bps, collective_time_s

    if cases is None:
        cases = [c for g in _COLLECTIVE_NETWORKS for c in load_measurements(g)]
    rows = []
    for case in cases:
        coll = case.get("collective")
        if not isinstance(coll, dict):
            raise ConfigError(f"case {case.get('id')!r}: collective is missing.")
        try:
            op = _COLLECTIVE_OPS.get(re.sub(r"[-_ ]", "", str(coll["op"]).lower()), "")
            size, ranks = float(coll["payload_bytes"]), int(coll["ranks"])
            per_node = int(coll.get("gpus_per_node") or ranks // int(coll.get("nodes") or 1))
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(
                f"case {case.get('id')!r}: collective needs op, payload_bytes, ranks and "
                f"gpus_per_node ({exc!r})."
            ) from None
        if not op:
            known = ", ".join(sorted(set(_COLLECTIVE_OPS.values())))
            raise ConfigError(
                f"case {case.get('id')!r}: collective.op {coll['op']!r} is not one of {known}."
            )
        network = _COLLECTIVE_NETWORKS.get(case["group"]) or accelerator_presets(case)[1]
        net = NetworkModel.from_spec(load_network(network), per_node)
        t = float(collective_time_s(op, size, ranks, net=net))
        measured_block = case.get("measured") or {}
        if measured_block.get("busbw_GBps") is not None:
            model = float(bus_bandwidth_Bps(op, size, t, ranks)) / 1e9
            measured, quantity = float(measured_block["busbw_GBps"]), "busbw GB/s"
        elif measured_block.get("algbw_GBps") is not None:
            model, quantity = size / t / 1e9, "algbw GB/s"
            measured = float(measured_block["algbw_GBps"])
        elif measured_block.get("time_us") is not None:
            model, measured, quantity = t * 1e6, float(measured_block["time_us"]), "time µs"
        else:
            raise ConfigError(f"case {case.get('id')!r}: measured has none of busbw_GBps, "
                              "algbw_GBps, time_us.")  # fmt: skip
        rows.append({"id": case["id"], "group": case["group"], "payload_B": size,
                     "quantity": quantity, "measured_GBps": measured, "model_GBps": model,
                     "error": model / measured - 1.0})  # fmt: skip
    return rows


# ------------------------------------------------------------------------ case scenarios
def case_scenario(case: dict[str, Any]) -> tuple[Any, str] | None:
    """The scenario an end-to-end case is scored on and how the score reads the oracle's
    result on it (one line), or None for a microbenchmark (no scenario: a kernel, a
    collective).

    Raises:
        ConfigError: the case cannot be read (as when it is scored).
    """
    kind = case_category(case)
    if kind == "inference":
        per_gpu = any(str(k).endswith("_per_gpu") for k in (case.get("measured") or {}))
        return serving_case_scenario(case), (
            "validate reads tokens_per_s, ttft_s and tpot_s"
            + (" (a per-GPU figure: tokens_per_s / num_devices)" if per_gpu else "")
        )
    if kind == "peak_memory":
        scenario = training_case_scenario(case)
        if _ran_out_of_memory(case):
            return scenario, "validate reads feasible (the run ran out of memory)"
        _, measured_kind = measured_peak_memory(case)
        stage = measured_memory_stage(case)
        left_out = ", ".join(_MEMORY_KIND_TERMS[measured_kind]) or "nothing"
        where = (f" of the {stage} pipeline stage" if stage != "peak"
                 and scenario.mapping.pipeline_parallel > 1 else "")  # fmt: skip
        return scenario, (f"validate reads memory_breakdown_B{where} less {left_out} "
                          f"({measured_kind} memory)")  # fmt: skip
    if kind == "end_to_end_training":
        scenario = training_case_scenario(case)
        scale = batch_scale(case, scenario)
        note = "validate reads step_time_s"
        if scale != 1.0:
            note += f" x {scale:.6g} (the case's global batch / the modelled one)"
        return scenario, note
    return None


def write_case_scenarios(cases: list[dict[str, Any]], folder: Path) -> list[Path]:
    """Write the scenario of every end-to-end case in ``cases`` to ``folder/<id>.yaml``, a
    file ``deepflow evaluate`` reads (:func:`deepflow.config.serialize.scenario_yaml`), headed
    by comments naming the case, its source, what it measured and how the score reads the
    result. Each file is written whole or not at all; cases it cannot read are left out.

    Raises:
        ConfigError: ``folder`` is an existing file, or cannot be created.
    """
    import os

    import yaml

    from deepflow.config.serialize import scenario_yaml

    if folder.exists() and not folder.is_dir():
        raise ConfigError(f"{folder}: exists and is not a folder; give a folder for the "
                          "scenarios.")  # fmt: skip
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"{folder}: cannot create the folder ({exc.strerror}).") from exc
    written = []
    for case in cases:
        try:
            found = case_scenario(case)
        except ConfigError:
            continue  # listed under "skipped" by the score
        if found is None:
            continue
        scenario, note = found
        source = case.get("source") or {}
        measured = {k: v for k, v in (case.get("measured") or {}).items()
                    if isinstance(v, int | float) and not isinstance(v, bool)}  # fmt: skip
        header = [f"deepflow scenario of the published case {case.get('id')} "
                  f"(group {case.get('group')})"]  # fmt: skip
        if source.get("title") or source.get("url"):
            header.append(f"source: {source.get('title', '')} {source.get('url', '')}".rstrip())
        if measured:
            header.append("measured: " + ", ".join(f"{k} {v:g}" for k, v in measured.items()))
        header.append(note)
        body = yaml.safe_dump(scenario_yaml(scenario), sort_keys=False, width=100,
                              allow_unicode=True)  # fmt: skip
        text = "".join(f"# {line}\n" for line in header) + body
        name = re.sub(r"[^A-Za-z0-9._-]+", "_", str(case.get("id")))
        path = folder / f"{name}.yaml"
        part = path.with_name(f".{path.name}.part")
        part.write_text(text, encoding="utf-8")
        os.replace(part, path)
        written.append(path)
    return written


def load_cases(path: Path | None = None, *, group: str | None = None) -> list[dict[str, Any]]:
    """The measurement cases of a JSON file (default: the public set), those whose group or
    id matches the shell-style pattern ``group`` where one is given.

    Raises:
        ConfigError: the file is unreadable or not a list of cases, or no case matches.
    """
    cases = _load_cases(path)
    return cases if group is None else _matching(cases, group, path)


def _load_cases(path: Path | None) -> list[dict[str, Any]]:
    if path is None:
        return load_measurements()
    shown = str(path)
    if not path.is_file():
        raise ConfigError(f"{shown}: no such file.")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{shown}: invalid JSON at line {exc.lineno}: {exc.msg}.") from exc
    if not isinstance(data, list) or not all(isinstance(c, dict) and "group" in c for c in data):
        raise ConfigError(f"{shown}: must be a JSON list of measurement cases with a 'group'.")
    return data


def _matching(cases: list[dict[str, Any]], pattern: str,
              path: Path | None) -> list[dict[str, Any]]:  # fmt: skip
    """The cases whose group or id matches the shell-style ``pattern``."""
    chosen = [c for c in cases if fnmatch.fnmatchcase(str(c.get("group")), pattern)
              or fnmatch.fnmatchcase(str(c.get("id")), pattern)]  # fmt: skip
    if not chosen:
        shown = str(path) if path is not None else "the public set"
        groups = sorted({str(c.get("group")) for c in cases})
        more = f", … ({len(groups)} in all)" if len(groups) > 8 else ""
        raise ConfigError(
            f"{shown}: no case's group or id matches {pattern!r} (a shell-style "
            f"pattern, e.g. 'megatron*'); its groups: {', '.join(groups[:8])}{more}."
        )
    return chosen


def _score_rows(case: dict[str, Any]) -> list[dict[str, Any]]:
    """The rows one case scores: one per quantity of a serving case, one per N of a float8
    linear case, else one."""
    category = case_category(case)
    if category == "inference":
        return score_inference_case(case)
    if category == "float8_linear_microbenchmark":
        return score_float8_linear_case(case)
    return [{"id": case.get("id"), "group": case["group"], **_score_one(case)}]


def _score_one(case: dict[str, Any]) -> dict[str, Any]:
    kind = case_category(case)
    if kind == "gemm_microbenchmark":
        (r,) = score_gemm_cases([case])
        return {"quantity": "TFLOP/s", "measured": r["measured_tflops"],
                "model": r["model_tflops"], "error": r["error"]}  # fmt: skip
    if kind in SERVING_GEMM_CATEGORIES:
        (r,) = score_serving_gemm_cases([case])
        return {"quantity": "TFLOP/s", "measured": r["measured_tflops"],
                "model": r["model_tflops"], "error": r["error"]}  # fmt: skip
    if kind == "attention_microbenchmark":
        (r,) = score_attention_cases([case])
        return {"quantity": "rate ratio", "measured": r["measured"], "model": r["model"],
                "error": r["error"]}  # fmt: skip
    if kind == "memory_bandwidth_microbenchmark":
        (r,) = score_hbm_stream_cases([case])
        return {"quantity": "GB/s", "measured": r["measured_GBps"],
                "model": r["model_GBps"], "error": r["error"]}  # fmt: skip
    if kind == "collective_microbenchmark":
        (r,) = score_collective_cases([case])
        return {"quantity": r["quantity"], "measured": r["measured_GBps"],
                "model": r["model_GBps"], "error": r["error"]}  # fmt: skip
    if kind == "peak_memory" and _ran_out_of_memory(case):
        r = score_out_of_memory_case(case)
        return {"quantity": FITS_QUANTITY, "measured": r["measured"], "model": r["model"],
                "error": r["error"], "feasible": r["feasible"]}  # fmt: skip
    if kind == "peak_memory":
        (m,) = score_memory_cases([case])
        return {"quantity": f"GiB {m['kind']}", "measured": m["measured_GiB"],
                "model": m["model_GiB"], "error": m["error"],
                "feasible": m["feasible"], "breakdown": m["breakdown"]}  # fmt: skip
    (r,) = score_training_cases([case])
    return {"quantity": "step s", "measured": r["measured_s"], "model": r["model_s"],
            "error": r["error"], "feasible": r["feasible"],
            "breakdown": r["breakdown"]}  # fmt: skip


#: The ``quantity`` of a row that scores a recorded out-of-memory run against feasibility.
FITS_QUANTITY = "fits"


def _kind(row: Mapping[str, Any]) -> str:
    """What a scored row measures: ``memory`` (peak memory), ``feasibility`` (a run that ran
    out of memory: modelled as fitting or not), ``serving`` (throughput, TTFT, TPOT, request
    latency, requests per second of an inference case) or ``performance`` (step time, kernels,
    collectives)."""
    quantity = str(row["quantity"])
    if quantity.startswith("GiB"):
        return "memory"
    if quantity == FITS_QUANTITY:
        return "feasibility"
    serving = ("throughput", "ttft", "tpot", "latency", "requests")
    return "serving" if quantity in serving else "performance"


def validation_report(path: Path | None = None, *, group: str | None = None,
                      breakdown: bool = False) -> dict[str, Any]:  # fmt: skip
    """Score every case; per-case rows, per-group mean/max |error|, group-weighted mean.

    A case deepflow cannot read (an accelerator without a preset, a missing input, a category
    it does not score) is listed under ``skipped`` with the reason; the others are scored.

    Args:
        path: a measurement JSON (default: the public set).
        group: score only the cases whose group or id matches this shell-style pattern
            (``fnmatch``: ``*``, ``?``, ``[...]``), e.g. ``"trtllm_perf_overview_h200*"``.
        breakdown: give each end-to-end row the model's value by part (``breakdown``): a
            training step in seconds, a peak in GiB by memory term (the terms its measured
            kind counts), a serving case's request slot (its prefill and decode iterations)
            in seconds; the parts sum to the step, the peak or the slot.

    Raises:
        ConfigError: the file is unreadable, no case matches ``group``, or no case could be
            scored.
    """
    cases = load_cases(path, group=group)
    rows: list[dict[str, Any]] = []
    skipped: list[dict[str, Any]] = []
    for case in cases:
        try:
            scored = _score_rows(case)
        except ConfigError as exc:
            skipped.append({"id": case.get("id"), "group": case.get("group"),
                            "reason": str(exc)})  # fmt: skip
            continue
        rows.extend(scored)
    if not breakdown:
        for row in rows:
            row.pop("breakdown", None)
    if cases and not rows:
        shown = str(path) if path is not None else "the public set"
        reasons = "; ".join(s["reason"].rstrip(".") for s in skipped[:3])
        raise ConfigError(f"{shown}: no case could be scored ({reasons}).")
    groups: dict[str, dict[str, Any]] = {}
    for row in rows:
        bucket = groups.setdefault(row["group"], {"errors": [], "kind": _kind(row)})
        bucket["errors"].append(abs(row["error"]))
    summary = {
        name: {"cases": len(g["errors"]), "mean_abs_error": float(np.mean(g["errors"])),
               "max_abs_error": float(np.max(g["errors"])), "kind": g["kind"],
               "memory": g["kind"] == "memory"}
        for name, g in groups.items()
    }  # fmt: skip

    def weighted_mean(kind: str | None) -> float:
        # a feasibility group's mean is a share of misclassified runs, not a relative error:
        # it has its own figure and stays out of the overall mean
        means = [g["mean_abs_error"] for g in summary.values()
                 if g["kind"] == kind or (kind is None and g["kind"] != "feasibility")]  # fmt: skip
        return float(np.mean(means)) if means else 0.0

    return {"cases": rows, "groups": summary, "group_weighted_mean_abs_error": weighted_mean(None),
            # training, kernel and collective groups; peak memory; serving
            "performance_group_weighted_mean_abs_error": weighted_mean("performance"),
            "memory_group_weighted_mean_abs_error": weighted_mean("memory"),
            "serving_group_weighted_mean_abs_error": weighted_mean("serving"),
            # out-of-memory runs modelled as fitting (share, mean over groups)
            "feasibility_group_weighted_mean_abs_error": weighted_mean("feasibility"),
            "skipped": skipped}  # fmt: skip
