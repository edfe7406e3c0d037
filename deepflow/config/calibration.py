"""Calibration data (``configs/calibration/*.yaml``): efficiencies per device family, framework
rates, link classes.

Numbers live in YAML with their provenance; this module finds and validates them. One lookup
rule, the presets' (:func:`deepflow.config.loader.preset_path`): a ``calibration/NAME.yaml``
under a folder of ``DEEPFLOW_CONFIG_PATH`` first, else the built-in ``configs/calibration/``.
:func:`calibration_files` lists exactly the files in use, which ``oracle_version`` hashes.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from deepflow.config._schema import Ctx, build, key, require_mapping
from deepflow.config.loader import builtin_config_dir, preset_path, read_yaml
from deepflow.config.specs import DEVICE_FAMILIES, PEAK_PRECISIONS

__all__ = [
    "CALIBRATION_FILES",
    "FrameworkCalibration",
    "KernelCalibration",
    "calibration_files",
    "calibration_path",
    "framework_calibration",
    "kernel_calibration",
]

#: The calibration files the oracle reads (``calibration/<name>.yaml``).
CALIBRATION_FILES = ("frameworks", "kernels", "network")


def calibration_path(name: str) -> Path:
    """The calibration file ``name`` in use: under ``DEEPFLOW_CONFIG_PATH`` first, else built-in.

    Looked up once per value of ``DEEPFLOW_CONFIG_PATH`` (an evaluation asks on its hot path).
    """
    return _calibration_path(name, os.environ.get("DEEPFLOW_CONFIG_PATH", ""))


@cache
def _calibration_path(name: str, config_path: str) -> Path:
    found = preset_path("calibration", name)
    return found if found is not None else builtin_config_dir() / "calibration" / f"{name}.yaml"


def calibration_files() -> tuple[Path, ...]:
    """Every calibration file the oracle reads now, in :data:`CALIBRATION_FILES` order."""
    return tuple(calibration_path(name) for name in CALIBRATION_FILES)


@dataclass(frozen=True, kw_only=True)
class KernelCalibration:
    """Kernel efficiencies and architecture constants of one device family."""

    family: str
    gemm_efficiency: Mapping[str, float] = key(
        "gemm_efficiency", gt=0, le=1, keys=PEAK_PRECISIONS, doc="achieved/peak, large GEMMs"
    )
    hbm_efficiency: float = key("hbm_efficiency", gt=0, le=1, doc="streaming kernels")
    l2_bytes_per_clock: float = key("l2_bytes_per_clock", gt=0)
    l1_bytes_per_clock_per_sm: float = key("l1_bytes_per_clock_per_sm", gt=0)
    kernel_launch_s: float = key("kernel_launch_us", scale=1e-6, ge=0)
    warp_tile_m: float = key("warp_tile_m", ge=1, doc="A-operand reuse of one MMA issuer")
    warp_tile_n: float = key("warp_tile_n", ge=1, doc="B-operand reuse of one MMA issuer")
    cluster_size: float = key("cluster_size", ge=1, doc="CTAs sharing operand panels (multicast)")
    training_sustained_fraction: float = key(
        "training_sustained_fraction", gt=0, le=1, default=1.0,
        doc="matrix throughput sustained in end-to-end training / microbenchmark",
    )  # fmt: skip
    idle_power_fraction: float = key(
        "idle_power_fraction", ge=0, le=1, default=0.09, doc="power at idle / TDP (energy model)"
    )
    attention_efficiency: float = key(
        "attention_efficiency", gt=0, le=1, default=0.6, doc="fused attention kernel / peak"
    )

    def gemm_efficiency_for(self, precision: str) -> float:
        """GEMM efficiency for ``precision``.

        Precisions without an entry fall back to fp8 (for fp4/int8), then bf16, then fp16:
        the same matrix units at another rate; the mean of the entries as a last resort.
        """
        eff = self.gemm_efficiency
        chain = ("fp8", "bf16", "fp16") if precision in ("fp4", "int8") else ("bf16", "fp16")
        for p in (precision, *chain):
            if p in eff:
                return eff[p]
        return sum(eff.values()) / len(eff)


def kernel_calibration(family: str) -> KernelCalibration:
    """The kernel calibration of a device family from ``calibration/kernels.yaml``."""
    return _kernel_calibration(calibration_path("kernels"), family)


@cache
def _kernel_calibration(path: Path, family: str) -> KernelCalibration:
    raw = read_yaml(path, what="a calibration mapping with key 'families'")
    ctx = Ctx(str(path))
    families = require_mapping(raw.get("families"), ctx.child("families"))
    if family not in families:
        raise ctx.child("families").error(
            f"has no entry for device family {family!r} (known: {', '.join(DEVICE_FAMILIES)})."
        )
    return build(
        KernelCalibration, families[family], ctx.child(f"families.{family}"),
        extra={"family": family},
    )  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class FrameworkCalibration:
    """Framework costs the links do not set (``configs/calibration/frameworks.yaml``)."""

    deepspeed_zero3_2021_rate_Bps: float = key(
        "collective_rate_GBps", scale=1e9, gt=0,
        doc="bytes per second per GPU of DeepSpeed's 2021 per-parameter ZeRO-3 collectives",
    )  # fmt: skip


def framework_calibration() -> FrameworkCalibration:
    """The framework calibration from ``calibration/frameworks.yaml``."""
    return _framework_calibration(calibration_path("frameworks"))


@cache
def _framework_calibration(path: Path) -> FrameworkCalibration:
    raw = read_yaml(path, what="a calibration mapping with key 'deepspeed_zero3_2021'")
    ctx = Ctx(str(path))
    entry = require_mapping(raw.get("deepspeed_zero3_2021"), ctx.child("deepspeed_zero3_2021"))
    return build(FrameworkCalibration, entry, ctx.child("deepspeed_zero3_2021"))
