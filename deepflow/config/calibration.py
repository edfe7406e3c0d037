"""Calibration data (``configs/calibration/*.yaml``): efficiencies per device family, framework
rates, link classes.

Numbers live in YAML with their provenance; this module finds and validates them. One lookup
rule, the presets' (:func:`deepflow.config.loader.preset_path`): a ``calibration/NAME.yaml``
under a folder of ``DEEPFLOW_CONFIG_PATH`` first, else the built-in ``configs/calibration/``.
:func:`calibration_files` lists exactly the files in use, which ``oracle_version`` hashes.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, TypeVar

from deepflow.config._schema import Ctx, build, check_keys, key, require_mapping
from deepflow.config.loader import builtin_config_dir, preset_path, read_yaml
from deepflow.config.specs import DEVICE_FAMILIES, PEAK_PRECISIONS, MiB, NetworkSpec

T = TypeVar("T")

__all__ = [
    "CALIBRATION_FILES",
    "Calibration",
    "Float8Calibration",
    "FrameworkCalibration",
    "InNetworkCalibration",
    "KernelCalibration",
    "LinkCalibration",
    "MXFP8Calibration",
    "MemoryCalibration",
    "NetworkCalibration",
    "ProtocolCalibration",
    "calibration_files",
    "calibration_from",
    "calibration_path",
    "clear_calibration_caches",
    "current_calibration",
    "framework_calibration",
    "kernel_calibration",
    "network_calibration",
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


@dataclass(frozen=True, eq=False)
class Calibration:
    """Every calibration an evaluation uses, resolved from its files by the config layer.

    The oracle's entry points (``evaluate_one``, ``evaluate_table``, ``best_mappings``) take
    one explicitly, defaulting to :func:`current_calibration` (the files in use). One object
    per set of files (compared and hashed by identity, so it can key memos).
    """

    frameworks_path: Path
    kernels_path: Path
    network_path: Path

    @property
    def files(self) -> tuple[Path, ...]:
        """The files, in :data:`CALIBRATION_FILES` order."""
        return (self.frameworks_path, self.kernels_path, self.network_path)

    def kernel(self, family: str) -> KernelCalibration:
        """The kernel calibration of a device family."""
        return _kernel_calibration(self.kernels_path, family)

    @property
    def framework(self) -> FrameworkCalibration:
        """Framework costs the links do not set."""
        return _entry(self.frameworks_path, "deepspeed_zero3_2021", FrameworkCalibration)

    @property
    def memory(self) -> MemoryCalibration:
        """What frameworks and the driver hold besides the model's tensors (GPU stacks)."""
        return _memory_calibration(self.frameworks_path)

    def memory_of(self, family: str) -> MemoryCalibration:
        """:attr:`memory` with the device family's own reserves (``memory_by_family``)."""
        return _memory_calibration(self.frameworks_path, family)

    @property
    def network(self) -> NetworkCalibration:
        """The link classes and which class each network uses."""
        return _network_calibration(self.network_path)

    @property
    def float8(self) -> Float8Calibration:
        """torchao's float8 training kernels beside the GEMMs."""
        return _entry(self.frameworks_path, "torchao_float8_rowwise", Float8Calibration)

    @property
    def mxfp8(self) -> MXFP8Calibration:
        """Transformer Engine's MXFP8 GEMMs against per-tensor FP8 ones."""
        return _entry(self.frameworks_path, "transformer_engine_mxfp8", MXFP8Calibration)

    @property
    def jax_dispatch(self) -> DispatchCalibration:
        """A jitted JAX call's host time around its kernels."""
        return _entry(self.frameworks_path, "jax_dispatch", DispatchCalibration)

    @property
    def serving(self) -> ServingCalibration:
        """Serving frameworks' measured host costs."""
        return _entry(self.frameworks_path, "tensorrt_llm_pytorch", ServingCalibration)


def current_calibration() -> Calibration:
    """The calibration of the files in use (under ``DEEPFLOW_CONFIG_PATH``, else built-in)."""
    return _current_calibration(os.environ.get("DEEPFLOW_CONFIG_PATH", ""))


@cache
def _current_calibration(config_path: str) -> Calibration:
    return calibration_from(calibration_files())


@cache
def calibration_from(files: tuple[Path, ...]) -> Calibration:
    """The calibration of given files (frameworks, kernels, network), one object per set."""
    return Calibration(*files)


@dataclass(frozen=True, kw_only=True)
class KernelCalibration:
    """Kernel efficiencies and architecture constants of one device family."""

    family: str
    gemm_efficiency: Mapping[str, float] = key(
        "gemm_efficiency", gt=0, le=1, keys=PEAK_PRECISIONS, doc="achieved/peak, large GEMMs"
    )
    gemm_full_clock_power: Mapping[str, float] = key(
        "gemm_full_clock_power", gt=0, le=1.5, keys=PEAK_PRECISIONS, default={},
        doc="a large GEMM's power at the TDP's clock / TDP (power-limit law, §A6.2)",
    )  # fmt: skip
    hbm_efficiency: float = key("hbm_efficiency", gt=0, le=1, doc="streaming kernels")
    l2_bytes_per_clock: float = key("l2_bytes_per_clock", gt=0)
    l1_bytes_per_clock_per_sm: float = key("l1_bytes_per_clock_per_sm", gt=0)
    kernel_launch_s: float = key("kernel_launch_us", scale=1e-6, ge=0)
    warp_tile_m: float = key("warp_tile_m", ge=1, doc="A-operand reuse of one MMA issuer")
    warp_tile_n: float = key("warp_tile_n", ge=1, doc="B-operand reuse of one MMA issuer")
    cluster_size: float = key("cluster_size", ge=1, doc="CTAs sharing operand panels (multicast)")
    training_sustained_fraction: float = key(
        "training_sustained_fraction",
        gt=0,
        le=1,
        default=1.0,
        doc="matrix throughput sustained in end-to-end training / microbenchmark",
    )
    idle_power_fraction: float = key(
        "idle_power_fraction", ge=0, le=1, default=0.09, doc="power at idle / TDP (energy model)"
    )
    attention_efficiency: float = key(
        "attention_efficiency", gt=0, le=1, default=0.6, doc="FlashAttention-2-class kernel / peak"
    )
    attention_efficiency_cudnn: float = key(
        "attention_efficiency_cudnn", ge=0, le=1, default=0.0,
        doc="cuDNN fused attention / peak (0: as attention_efficiency)",
    )  # fmt: skip
    attention_efficiency_fa3: float = key(
        "attention_efficiency_fa3", ge=0, le=1, default=0.0,
        doc="FlashAttention-3 / peak (0: as attention_efficiency)",
    )  # fmt: skip
    attention_efficiency_trtllm: float = key(
        "attention_efficiency_trtllm", ge=0, le=1, default=0.0,
        doc="TensorRT-LLM's fused MHA, forward (serving) / peak (0: as attention_efficiency)",
    )  # fmt: skip
    attention_efficiency_mla: float = key(
        "attention_efficiency_mla", ge=0, le=1, default=0.0,
        doc="a latent attention decode kernel (FlashMLA) / peak, compute-bound (docs/model.md "
        "§D7; 0: the server's attention kernel's)",
    )  # fmt: skip
    attention_efficiency_triton: float = key(
        "attention_efficiency_triton", ge=0, le=1, default=0.0,
        doc="FlashAttention in pre-MLIR Triton, forward + backward / peak "
        "(0: as attention_efficiency)",
    )  # fmt: skip
    attention_block_overhead: float = key(
        "attention_block_overhead", ge=0, default=0.0,
        doc="a fused-attention query block's fixed work, in key-block iterations (§C6.2)",
    )  # fmt: skip
    attention_block_overhead_trtllm: float = key(
        "attention_block_overhead_trtllm", ge=0, default=0.0,
        doc="TensorRT-LLM's context FMHA's query-block fixed work, in key-block iterations "
            "(serving prefill, docs/model.md §D1); 0: its rate at every length",
    )  # fmt: skip
    grouped_gemm_efficiency: float = key(
        "grouped_gemm_efficiency", gt=0, le=1, default=1.0,
        doc="MoE grouped GEMM's matrix rate / a dense GEMM's (docs/model.md §D1)",
    )  # fmt: skip
    grouped_gemm_efficiency_fp4: float = key(
        "grouped_gemm_efficiency_fp4", ge=0, le=1, default=0.0,
        doc="an FP4 MoE grouped GEMM's matrix rate / a dense FP4 GEMM's (docs/model.md §D1); "
            "0: as grouped_gemm_efficiency",
    )  # fmt: skip
    gemm_overlap_exponent: float = key(
        "gemm_overlap_exponent", ge=1, default=math.inf,
        doc="p of a serving GEMM's roofline (t_flops^p + t_bytes^p)^(1/p), dense or grouped; "
            "inf: the max",
    )  # fmt: skip
    gemm_overlap_exponent_dense: float = key(
        "gemm_overlap_exponent_dense", ge=0, default=0.0,
        doc="p of a dense serving GEMM without block scales (16-bit, or FP8 with per-tensor or "
            "row-wise scales); 0: as gemm_overlap_exponent, else >= 1",
    )  # fmt: skip
    gemm_pipeline_round_trip_s: float = key(
        "gemm_pipeline_round_trip_us", scale=1e-6, ge=0, default=0.0,
        doc="loaded latency of one operand-load round trip of a GEMM's multi-stage pipeline: a "
            "kernel that does not split K runs each tile's K loop at no more than its stages' "
            "blocks per round trip (docs/model.md §D1); 0: no floor",
    )  # fmt: skip
    accumulator_store: str = key(
        "accumulator_store",
        choices=("register_file", "l1"),
        default="register_file",
        doc="where GEMM accumulators live (tile fit, docs/model.md §C6.1a)",
    )

    def gemm_full_clock_power_for(self, precision: str) -> float:
        """A large GEMM's power at the TDP's clock over the TDP, for ``precision``: the
        precision's entry, else fp8's for fp4/int8 and 16-bit's for the 16-bit and wider
        formats (the same matrix units), else 1 (power-bound at the TDP: the power-limit law
        of §A6.2 is then linear in the dynamic power)."""
        power = self.gemm_full_clock_power
        chain = {"fp8": (), "fp4": ("fp8",), "int8": ("fp8",)}.get(precision, ("bf16", "fp16"))
        for p in (precision, *chain):
            if p in power:
                return power[p]
        return 1.0

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
    return current_calibration().kernel(family)


@cache
def _kernel_calibration(path: Path, family: str) -> KernelCalibration:
    raw = read_yaml(path, what="a calibration mapping with key 'families'")
    ctx = Ctx(str(path))
    families = require_mapping(raw.get("families"), ctx.child("families"))
    if family not in families:
        raise ctx.child("families").error(
            f"has no entry for device family {family!r} (known: {', '.join(DEVICE_FAMILIES)})."
        )
    cal = build(
        KernelCalibration,
        families[family],
        ctx.child(f"families.{family}"),
        extra={"family": family},
    )
    if 0 < cal.gemm_overlap_exponent_dense < 1:
        raise ctx.child(f"families.{family}.gemm_overlap_exponent_dense").error(
            f"must be 0 (as gemm_overlap_exponent) or >= 1; got "
            f"{cal.gemm_overlap_exponent_dense:g}."
        )
    return cal


@dataclass(frozen=True, kw_only=True)
class FrameworkCalibration:
    """Framework costs the links do not set (``configs/calibration/frameworks.yaml``)."""

    deepspeed_zero3_2021_rate_Bps: float = key(
        "collective_rate_GBps",
        scale=1e9,
        gt=0,
        doc="bytes per second per GPU of DeepSpeed's 2021 per-parameter ZeRO-3 collectives",
    )


def framework_calibration() -> FrameworkCalibration:
    """The framework calibration from ``calibration/frameworks.yaml``."""
    return current_calibration().framework


@cache
def _entry(path: Path, name: str, cls: type[T]) -> T:
    """The ``name`` mapping of a calibration file as ``cls`` (read once per file and name)."""
    raw = read_yaml(path, what=f"a calibration mapping with key '{name}'")
    ctx = Ctx(str(path)).child(name)
    return build(cls, require_mapping(raw.get(name), ctx), ctx)


#: How long the framework's tensors live (docs/model.md §C2.5): as eager PyTorch frees them
#: through its caching allocator, or from definition to last use in a compiled (XLA) program.
BUFFER_LIFETIMES = ("caching_allocator", "compiled_program")


@dataclass(frozen=True, kw_only=True)
class MemoryCalibration:
    """Device memory a training process holds besides its model tensors
    (``configs/calibration/frameworks.yaml``, ``memory``; docs/model.md §C2.5)."""

    workspace_B: float = key(
        "workspace_MiB", scale=MiB, ge=0, doc="cuBLAS / Transformer Engine workspaces"
    )
    fragmentation: float = key(
        "allocator_fragmentation", ge=0, lt=1, doc="caching allocator: reserved / allocated - 1"
    )
    cuda_context_B: float = key("cuda_context_MiB", scale=MiB, ge=0, doc="context + kernels")
    nccl_buffers_B: float = key("nccl_buffers_MiB", scale=MiB, ge=0, doc="NCCL's own buffers")
    recorded_layers_ahead: float = key(
        "recorded_layers_ahead",
        ge=0,
        default=0.0,
        doc="layers the backward's host thread runs ahead of the GPU, holding their recorded "
        "TP gradient blocks (recorded_tp_gradients)",
    )
    buffer_lifetime: str = key(
        "buffer_lifetime",
        choices=BUFFER_LIFETIMES,
        default="caching_allocator",
        doc="tensors live as PyTorch frees them, or from def to last use in a compiled program",
    )


@cache
def _memory_calibration(path: Path, family: str | None = None) -> MemoryCalibration:
    """``memory``, each key of ``memory_by_family[family]`` replacing its value there."""
    raw = read_yaml(path, what="a calibration mapping with key 'memory'")
    ctx = Ctx(str(path))
    base = require_mapping(raw.get("memory"), ctx.child("memory"))
    memory = build(MemoryCalibration, base, ctx.child("memory"))
    by_family = raw.get("memory_by_family")
    if by_family is None:
        return memory
    fctx = ctx.child("memory_by_family")
    by_family = require_mapping(by_family, fctx)
    check_keys(by_family, DEVICE_FAMILIES, fctx)
    if family is None or family not in by_family:
        return memory
    own = require_mapping(by_family[family], fctx.child(family))
    return build(MemoryCalibration, {**base, **own}, fctx.child(family))


@dataclass(frozen=True, kw_only=True)
class ServingCalibration:
    """A serving framework's host cost (``configs/calibration/frameworks.yaml``,
    ``tensorrt_llm_pytorch``; docs/model.md §D2)."""

    host_s_per_request: float = key(
        "host_us_per_request", scale=1e-6, ge=0,
        doc="executor host time per running request and iteration",
    )  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class DispatchCalibration:
    """The host time one jitted JAX call adds to a benchmark that times each call to
    completion (``configs/calibration/frameworks.yaml``, ``jax_dispatch``; docs/model.md
    §C6.1)."""

    call_overhead_s: float = key(
        "call_overhead_us", scale=1e-6, ge=0,
        doc="Python dispatch, launch and the wait for the result, per call",
    )  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class Float8Calibration:
    """torchao's float8 training recipes beside their GEMMs (``configs/calibration/
    frameworks.yaml``, ``torchao_float8_rowwise``; docs/model.md §C6.4)."""

    rowwise_cast_efficiency: float = key(
        "cast_efficiency", gt=0, le=1,
        doc="the rowwise recipe's casts and rescales: their bytes at the streaming bandwidth / "
            "their measured time",
    )  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class MXFP8Calibration:
    """Transformer Engine's MXFP8 recipe beside per-tensor FP8 (``configs/calibration/
    frameworks.yaml``, ``transformer_engine_mxfp8``; docs/model.md §C6.4)."""

    gemm_time_ratio: float = key(
        "gemm_time_ratio", ge=1,
        doc="an MXFP8 GEMM's time / the per-tensor FP8 GEMM's at the same shape",
    )  # fmt: skip


# ------------------------------------------------------------------- network link classes
@dataclass(frozen=True, kw_only=True)
class ProtocolCalibration:
    """One protocol on one link class (``configs/calibration/network.yaml``)."""

    efficiency: float = key("efficiency", ge=0, le=1, doc="achieved / raw link bandwidth")
    step_latency_s: float = key(
        "step_latency_us",
        scale=1e-6,
        ge=0,
        default=math.nan,
        doc="per algorithm step; null = the network spec's latency_us",
    )
    min_wire_B: float = key("min_wire_MiB", scale=MiB, ge=0, default=0.0, doc="granularity floor")
    fill_wire_B: float = key("fill_wire_MiB", scale=MiB, ge=0, default=0.0, doc="pipeline fill")


@dataclass(frozen=True, kw_only=True)
class InNetworkCalibration:
    """In-switch reduction (NVLS) on a switch link class; efficiency 0 = not available."""

    efficiency: float = key("efficiency", ge=0, le=1, doc="achieved / raw link bandwidth")
    latency_s: float = key("latency_us", scale=1e-6, ge=0, default=0.0, doc="per collective")
    fill_wire_B: float = key("fill_wire_MiB", scale=MiB, ge=0, default=0.0, doc="pipeline fill")


_PROTOCOL_OFF = ProtocolCalibration(efficiency=0.0)
_IN_NETWORK_OFF = InNetworkCalibration(efficiency=0.0)


@dataclass(frozen=True, kw_only=True)
class LinkCalibration:
    """Efficiencies and latencies of one link class (NVLink3+NVSwitch, InfiniBand, ...)."""

    name: str
    description: str = key("description", default="")
    launch_latency_s: float = key("launch_latency_us", scale=1e-6, ge=0, doc="per collective")
    ll: ProtocolCalibration = key("ll", default=_PROTOCOL_OFF)
    ll128: ProtocolCalibration = key("ll128", default=_PROTOCOL_OFF)
    simple: ProtocolCalibration = key("simple")
    in_network: InNetworkCalibration = key("in_network", default=_IN_NETWORK_OFF)
    provenance: Mapping[str, Any] = field(default_factory=dict)

    @property
    def protocols(self) -> tuple[ProtocolCalibration, ...]:
        """The protocols in :data:`PROTOCOLS` order."""
        return (self.ll, self.ll128, self.simple)

    @classmethod
    def from_mapping(cls, name: str, raw: object, ctx: Ctx | None = None) -> LinkCalibration:
        """A link class from its YAML mapping (``provenance`` is kept as given).

        Raises:
            ConfigError: unknown keys, out-of-range values, a bulk efficiency of 0.
        """
        where = ctx if ctx is not None else Ctx("<link class>", name)
        body = dict(require_mapping(raw, where))
        provenance = body.pop("provenance", None) or {}
        out = build(cls, body, where, extra={"name": name, "provenance": provenance})
        if not out.simple.efficiency > 0:
            raise where.child("simple.efficiency").error("must be > 0 (the bulk protocol).")
        return out


@dataclass(frozen=True, kw_only=True)
class NetworkCalibration:
    """All link classes, and which class each network preset's two levels use."""

    classes: Mapping[str, LinkCalibration]
    networks: Mapping[str, tuple[str, str]]
    default_class: str
    path: str = ""

    def classes_for(self, network: NetworkSpec) -> tuple[LinkCalibration, LinkCalibration]:
        """(scale-up, scale-out) classes of a network; ``base+overrides`` uses the base's."""
        base = network.name.split("+", 1)[0]
        up, out = self.networks.get(base, (self.default_class, self.default_class))
        return self.classes[up], self.classes[out]


def network_calibration(path: str | None = None) -> NetworkCalibration:
    """The link classes of ``configs/calibration/network.yaml`` (or ``path``), validated.

    Raises:
        ConfigError: unknown keys, out-of-range values, a network naming an unknown class.
    """
    return _network_calibration(Path(path) if path is not None else calibration_path("network"))


def clear_calibration_caches() -> None:
    """Forget every calibration file read and found (after rewriting one in this process)."""
    for cached in (
        _calibration_path,
        _kernel_calibration,
        _entry,
        _memory_calibration,
        _network_calibration,
        _current_calibration,
        calibration_from,
    ):
        cached.cache_clear()


@cache
def _network_calibration(p: Path) -> NetworkCalibration:
    raw = read_yaml(p, what="a calibration mapping with keys 'link_classes' and 'networks'")
    ctx = Ctx(str(p))
    check_keys(raw, ("link_classes", "networks", "default_class"), ctx)
    raw_classes = require_mapping(raw.get("link_classes"), ctx.child("link_classes"))
    classes: dict[str, LinkCalibration] = {}
    for name, body in raw_classes.items():
        cctx = ctx.child(f"link_classes.{name}")
        classes[str(name)] = LinkCalibration.from_mapping(str(name), body, cctx)
    default = raw.get("default_class", "generic")
    if default not in classes:
        raise ctx.child("default_class").error(
            f"names unknown link class {default!r}; known: {', '.join(classes)}."
        )
    networks: dict[str, tuple[str, str]] = {}
    for net_name, levels in require_mapping(raw.get("networks", {}), ctx.child("networks")).items():
        nctx = ctx.child(f"networks.{net_name}")
        lv = require_mapping(levels, nctx)
        check_keys(lv, ("scale_up", "scale_out"), nctx)
        pair = []
        for level in ("scale_up", "scale_out"):
            cls_name = lv.get(level, default)
            if cls_name not in classes:
                raise nctx.child(level).error(
                    f"names unknown link class {cls_name!r}; known: {', '.join(classes)}."
                )
            pair.append(str(cls_name))
        networks[str(net_name)] = (pair[0], pair[1])
    return NetworkCalibration(
        classes=classes, networks=networks, default_class=default, path=str(p)
    )
