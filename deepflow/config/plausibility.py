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

from deepflow.config.specs import DesignDeviceSpec, DeviceSpec, Scenario, TransformerSpec
from deepflow.errors import PlausibilityWarning

__all__ = ["MARGIN", "plausibility_warnings", "warn_implausible"]

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
# 8 TB/s of HBM; 16 GiB (V100) .. 192 GB (B200); dense 14 TFLOP/s (V100 fp32) .. 9 PFLOP/s
# (B200 fp4); clocks 0.9 (TPU v4 1.05) .. 2.1 GHz; 75 W .. 1.2 kW; 100 mm² .. 1.6k mm² per die
# (46,225 mm² for a wafer-scale engine: Cerebras WSE-2); links 12.5 GB/s (100 Gb/s NIC) .. 900
# GB/s (NVLink 5 per direction); latencies 0.5 .. 10 µs.
_HBM_BW = _Range("hbm_bandwidth_GBps", "GB/s", 900, 8000,
                 ((1e3, "TB/s"), (1 / 8, "Gb/s"), (1e-9, "B/s")))  # fmt: skip
_HBM_CAP = _Range("hbm_capacity_GiB", "GiB", 16, 192, ((1 / 1024, "MiB"), (1 / GiB, "bytes")))
_TFLOPS = _Range("peak_dense_TFLOPS", "TFLOP/s", 14, 9000,
                 ((1e-3, "GFLOP/s"), (1e3, "PFLOP/s"), (1e-12, "FLOP/s")))  # fmt: skip
_CLOCK = _Range("clock_GHz", "GHz", 0.9, 2.1, ((1e-3, "MHz"), (1e-9, "Hz")))
_TDP = _Range("tdp_W", "W", 75, 1200, ((1e3, "kW"),))
_POWER_LIMIT = _Range("power_limit_W", "W", 75, 1200, ((1e3, "kW"),))
_DIE = _Range("die_area_mm2", "mm²", 100, 46225, ((100, "cm²"),))
_LINK_BW = _Range("bandwidth_GBps", "GB/s", 12.5, 900,
                  ((1e3, "TB/s"), (1e-9, "B/s")))  # fmt: skip
_LATENCY = _Range("latency_us", "µs", 0.5, 10, ((1e-3, "ns"), (1e6, "s"), (1e3, "ms")))
#: Tokens per optimizer step: GPT-3 3.2 M (Brown et al. 2020, Table 2.1), Llama 3 405B 16 M
#: (Dubey et al. 2024, §3.4); anything above 1e9 tokens per step is no training run.
MAX_TOKENS_PER_STEP = 1e9
#: Sequences per step for workloads without a sequence length (LSTM, GEMM batches).
MAX_BATCH = 1e7


def _check(r: _Range, where: str, value: float, sub: str = "") -> str | None:
    if r.low / MARGIN <= value <= r.high * MARGIN:
        return None
    where = f"{where}.{r.key}{sub}"
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
    found = list(_device(system.device, "system.device"))
    for part in ("scale_up", "scale_out"):
        link = getattr(system.network, part)
        where = f"system.network.{part}"
        found.append(_check(_LINK_BW, where, link.bandwidth_Bps / GB))
        if link.latency_s > 0:
            found.append(_check(_LATENCY, where, link.latency_s * 1e6))
    model, batch = workload.model, workload.global_batch_size
    if isinstance(model, TransformerSpec) and batch * model.seq_length > MAX_TOKENS_PER_STEP:
        found.append(
            f"workload.global_batch_size = {batch:g} sequences of {model.seq_length} tokens "
            f"is {batch * model.seq_length:.3g} tokens per step; real runs take at most ~16M "
            f"(Llama 3 405B): check the batch."
        )
    elif not isinstance(model, TransformerSpec) and batch > MAX_BATCH:
        found.append(
            f"workload.global_batch_size = {batch:g} is far above any real run (at most "
            f"{MAX_BATCH:g}): check the batch."
        )
    return [f"{scenario.source}: {m}" for m in found if m is not None]


def warn_implausible(scenario: Scenario) -> None:
    """Issue a :class:`~deepflow.errors.PlausibilityWarning` per implausible value."""
    for message in plausibility_warnings(scenario):
        warnings.warn(message, PlausibilityWarning, stacklevel=2)
