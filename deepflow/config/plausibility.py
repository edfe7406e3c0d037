"""Plausibility warnings: inputs far outside any real device or training run.

Such a value is not an error (a what-if study may want a 1 TB/s link on a 1 W chip), but it is
most often a unit slip: ``hbm_bandwidth_GBps: 3.35`` copied from a datasheet's "3.35 TB/s".
:func:`plausibility_warnings` names the key, the value, the range real hardware spans and, when
one unit factor brings the value into that range, the unit it looks like.

The ranges span the shipped presets' datasheet values (``configs/devices/``,
``configs/networks/``: V100 to B200/GB200 and TPU v4/v5e, each cited in its preset file); a
value is flagged only when it lies more than a factor ``MARGIN`` outside them, so no real
device of the next generations is flagged.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from dataclasses import dataclass

from deepflow.config.specs import (
    DesignDeviceSpec,
    DeviceSpec,
    ModelSpec,
    NetworkSpec,
    Scenario,
    TransformerSpec,
)
from deepflow.errors import PlausibilityWarning

__all__ = [
    "MARGIN",
    "RANGES",
    "batch_warning",
    "device_warnings",
    "link_warnings",
    "plausibility_warnings",
    "value_warning",
    "warn_implausible",
]

#: How far outside the real range a value must lie to be flagged.
MARGIN = 10.0
GB, GiB = 1e9, float(2**30)


@dataclass(frozen=True)
class _Range:
    """The real range of one YAML key, in the key's unit, and the slips worth naming."""

    key: str
    unit: str
    low: float
    high: float
    #: (factor, unit): value × factor in the real range means the value looks like ``unit``.
    slips: tuple[tuple[float, str], ...]


# Real ranges (YAML units), from the shipped presets' datasheets: V100 900 GB/s .. B200
# 8 TB/s of HBM; 16 GiB (V100) .. 192 GB (B200); dense 1.25 TFLOP/s (B300 fp64: Blackwell
# Ultra cut its FP64 units, configs/devices/gb300.yaml) .. 9 PFLOP/s (B200 fp4); clocks 0.9
# (TPU v4 1.05) .. 2.1 GHz; 75 W .. 1.2 kW; 100 mm² .. 1.6k mm² per die (46,225 mm² for a
# wafer-scale engine: Cerebras WSE-2); links 12.5 GB/s (100 Gb/s NIC) .. 900 GB/s (NVLink 5
# per direction); latencies 0.5 .. 10 µs.
_HBM_BW = _Range("hbm_bandwidth_GBps", "GB/s", 900, 8000,
                 ((1e3, "TB/s"), (1 / 8, "Gb/s"), (1e-9, "B/s")))  # fmt: skip
_HBM_CAP = _Range("hbm_capacity_GiB", "GiB", 16, 192, ((1 / 1024, "MiB"), (1 / GiB, "bytes")))
_TFLOPS = _Range("peak_dense_TFLOPS", "TFLOP/s", 1.25, 9000,
                 ((1e-3, "GFLOP/s"), (1e3, "PFLOP/s"), (1e-12, "FLOP/s")))  # fmt: skip
_CLOCK = _Range("clock_GHz", "GHz", 0.9, 2.1, ((1e-3, "MHz"), (1e-9, "Hz")))
_TDP = _Range("tdp_W", "W", 75, 1200, ((1e3, "kW"),))
_POWER_LIMIT = _Range("power_limit_W", "W", 75, 1200, ((1e3, "kW"),))
_DIE = _Range("die_area_mm2", "mm²", 100, 46225, ((100, "cm²"),))
_LINK_BW = _Range("bandwidth_GBps", "GB/s", 12.5, 900,
                  ((1e3, "TB/s"), (1e-9, "B/s")))  # fmt: skip
_LATENCY = _Range("latency_us", "µs", 0.5, 10, ((1e-3, "ns"), (1e6, "s"), (1e3, "ms")))
#: One HBM stack: 4 GiB (HBM2: the V100's 16 GiB in 4 stacks) .. 36 GB (HBM3E 12-high: B200).
_STACK = _Range("dram_stack_capacity_GiB", "GiB", 4, 36, ((1 / 1024, "MiB"), (1 / GiB, "bytes")))
#: The ranges by YAML key; a design space's variables of these names are checked too.
RANGES = {r.key: r for r in (_HBM_BW, _HBM_CAP, _TFLOPS, _CLOCK, _TDP, _DIE, _STACK)}
#: Tokens per optimizer step: GPT-3 3.2 M (Brown et al. 2020, Table 2.1), Llama 3 405B 16 M
#: (Dubey et al. 2024, §3.4); anything above 1e9 tokens per step is no training run.
MAX_TOKENS_PER_STEP = 1e9
#: Sequences per step for workloads without a sequence length (LSTM, GEMM batches).
MAX_BATCH = 1e7


def _check(r: _Range, where: str, value: float, sub: str = "") -> str | None:
    return _message(r, f"{where}.{r.key}{sub}", value)


def value_warning(key: str, value: float, where: str) -> str | None:
    """The message for a value of the YAML key ``key`` (one of :data:`RANGES`) far outside
    the range real hardware spans, else None.

    Args:
        key: the key whose range applies, e.g. ``tdp_W``.
        value: the value, in the key's unit.
        where: the dotted key the message names, e.g. ``variables.tdp_W.low``.

    Returns:
        e.g. ``variables.tdp_W.low = 5 is far below the range of real devices (75–1200 W);
        check its unit.``, or None for a plausible value.
    """
    return _message(RANGES[key], where, value)


def _message(r: _Range, where: str, value: float) -> str | None:
    if r.low / MARGIN <= value <= r.high * MARGIN:
        return None
    real = f"real devices ({r.low:g}–{r.high:g} {r.unit})"
    for factor, unit in r.slips:
        if r.low <= value * factor <= r.high:
            return (
                f"{where} = {value:g} is far outside the range of {real}; it looks like "
                f"{unit} ({value:g} {unit} = {value * factor:g} {r.unit})."
            )
    side = "below" if value < r.low else "above"
    return f"{where} = {value:g} is far {side} the range of {real}; check its unit."


def _device(device: DeviceSpec | DesignDeviceSpec, where: str) -> Iterator[str | None]:
    yield _check(_TDP, where, device.tdp_W)
    yield _check(_DIE, where, device.die_area_mm2)
    if isinstance(device, DesignDeviceSpec):
        return
    if device.power_limit_W > 0:
        yield _check(_POWER_LIMIT, where, device.power_limit_W)
    yield _check(_HBM_BW, where, device.hbm_bandwidth_Bps / GB)
    yield _check(_HBM_CAP, where, device.hbm_capacity_B / GiB)
    yield _check(_CLOCK, where, device.clock_Hz / 1e9)
    for precision, flops in device.peak_flops.items():
        if flops > 0:
            yield _check(_TFLOPS, where, flops / 1e12, f".{precision}")


def plausibility_warnings(scenario: Scenario) -> list[str]:
    """Messages for the values of ``scenario`` far outside any real device or run.

    Each message starts with the scenario file and the dotted key, e.g. ``s.yaml:
    system.device.hbm_bandwidth_GBps = 3.35 is far outside the range of real
    devices (900–8000 GB/s); it looks like TB/s (3.35 TB/s = 3350 GB/s).``
    """
    system, workload = scenario.system, scenario.workload
    found = [*device_warnings(system.device, "system.device"),
             *link_warnings(system.network, "system.network"),
             batch_warning(workload.global_batch_size, workload.model,
                           "workload.global_batch_size")]  # fmt: skip
    return [f"{scenario.source}: {m}" for m in found if m is not None]


def device_warnings(device: DeviceSpec | DesignDeviceSpec, where: str) -> list[str]:
    """The messages for a device's implausible values; ``where`` is its dotted key."""
    return [m for m in _device(device, where) if m is not None]


def link_warnings(network: NetworkSpec, where: str) -> list[str]:
    """The messages for a network's implausible link bandwidths and latencies."""
    found = []
    for part in ("scale_up", "scale_out"):
        link = getattr(network, part)
        found.append(_check(_LINK_BW, f"{where}.{part}", link.bandwidth_Bps / GB))
        if link.latency_s > 0:
            found.append(_check(_LATENCY, f"{where}.{part}", link.latency_s * 1e6))
    return [m for m in found if m is not None]


def batch_warning(batch: float, model: ModelSpec, where: str) -> str | None:
    """The message for a global batch (sequences per step) no real run takes, else None."""
    if isinstance(model, TransformerSpec) and batch * model.seq_length > MAX_TOKENS_PER_STEP:
        return (
            f"{where} = {batch:g} sequences of {model.seq_length} tokens is "
            f"{batch * model.seq_length:.3g} tokens per step; real runs take at most ~16M "
            f"(Llama 3 405B): check the batch."
        )
    if not isinstance(model, TransformerSpec) and batch > MAX_BATCH:
        return (
            f"{where} = {batch:g} is far above any real run (at most {MAX_BATCH:g}): check "
            "the batch."
        )
    return None


def warn_implausible(scenario: Scenario) -> None:
    """Issue a :class:`~deepflow.errors.PlausibilityWarning` per implausible value."""
    for message in plausibility_warnings(scenario):
        warnings.warn(message, PlausibilityWarning, stacklevel=2)
