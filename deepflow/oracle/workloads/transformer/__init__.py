"""Transformer (decoder-only LLM) training step: time, breakdown, memory, FLOPs. Vectorised.

Every input is an array over n cases (mappings, models or devices); one scenario can also be
evaluated on plain floats (:func:`transformer_step_one`), through the same formulas (one
:func:`compose`, run with numpy or with scalar operations, :mod:`.ops`). The composition is
additive, as in Calculon (docs/model.md §C4, §C7.1):

    step = pipeline (micro-batches × slowest stage + bubble) + exposed data-parallel
           communication + optimizer step + tied-embedding sync,

with, per layer and micro-batch, GEMMs and the attention core on the matrix units
(:mod:`deepflow.oracle.kernels`), norms/activations/residuals at HBM bandwidth, and tensor-,
context- and expert-parallel collectives from :mod:`deepflow.oracle.network` on the links the
group crosses. The components, each a function of (caps, inputs, ops) with a named result:
:mod:`.layer` (GEMMs, attention, elementwise, TP/CP/EP communication), :mod:`.pipeline`
(stages, bubble), :mod:`.data_parallel` (DP/ZeRO, optimizer), :mod:`.memory`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from deepflow.config.calibration import Calibration, current_calibration
from deepflow.oracle.hardware import DeviceCaps
from deepflow.oracle.network import NetworkModel
from deepflow.oracle.workloads.transformer import data_parallel as dpm
from deepflow.oracle.workloads.transformer import layer as lay
from deepflow.oracle.workloads.transformer.columns import (
    CROSS_ENTROPY_CODES,
    FULL_RECOMPUTE,
    MAPPING_COLUMNS,
    MODEL_COLUMNS,
    NO_RECOMPUTE,
    RECOMPUTE_CODES,
    SELECTIVE_RECOMPUTE,
    transformer_columns,
    transformer_values,
)
from deepflow.oracle.workloads.transformer.memory import (
    STAGES,
    activation_bytes_per_layer,
    activation_offload,
    memory,
)
from deepflow.oracle.workloads.transformer.ops import ArrayOps, scalar_ops, training_caps
from deepflow.oracle.workloads.transformer.pipeline import pipeline_breakdown
from deepflow.oracle.workloads.transformer.shapes import (
    inputs,
    model_flops,
    model_flops_per_step,
)

__all__ = [
    "CROSS_ENTROPY_CODES",
    "FULL_RECOMPUTE",
    "MAPPING_COLUMNS",
    "MODEL_COLUMNS",
    "NO_RECOMPUTE",
    "RECOMPUTE_CODES",
    "SELECTIVE_RECOMPUTE",
    "activation_bytes_per_layer",
    "compose",
    "model_flops_per_step",
    "stage_memory_B",
    "transformer_columns",
    "transformer_step",
    "transformer_step_one",
    "transformer_values",
]


def transformer_step(
    caps: DeviceCaps,
    net: NetworkModel,
    x: Mapping[str, Any],
    *,
    calibration: Calibration | None = None,
) -> dict[str, Any]:
    """Step time, breakdown (sums to it), memory per device and FLOPs for n cases.

    Args:
        caps: the device at the workload's precision.
        net: the network (its numbers may be arrays of n).
        x: arrays of n for every name in :data:`MODEL_COLUMNS` and :data:`MAPPING_COLUMNS`.
            ``overlap_grad_reduce`` 0 means no data-parallel communication hides under compute;
            with ZeRO-3 it is DeepSpeed's 2021 ZeRO-3: per-module gathers, each module's compute
            under the next one's, again for the recompute forward.
        calibration: framework constants (DeepSpeed 2021's ZeRO-3 rate); default: the files
            in use.

    Returns:
        ``step_time_s``, ``breakdown_s`` (dict of arrays), ``memory_per_device_B``,
        ``memory_breakdown_B`` (dict of arrays, :data:`.memory.MEMORY_TERMS`, sums to it),
        ``model_flops_per_step``, ``tokens_per_step``, ``samples_per_step``,
        ``num_micro_batches`` — arrays of n.
    """
    arrays = {k: np.asarray(v, dtype=float) for k, v in x.items()}
    tcaps = training_caps(caps)
    out = compose(tcaps, arrays, ArrayOps(tcaps, net), calibration or current_calibration())
    for key in ("step_time_s", "memory_per_device_B", "model_flops_per_step"):
        out[key] = np.asarray(out[key], dtype=float)
    return out


def stage_memory_B(
    caps: DeviceCaps,
    net: NetworkModel,
    values: Mapping[str, float],
    *,
    stage: str,
    calibration: Calibration | None = None,
) -> dict[str, float]:
    """The memory breakdown of one pipeline stage (``stage``: first or last; peak is what
    :func:`transformer_step` reports), for a source that measured one rank (docs/model.md
    §C2.6). The terms of :data:`.memory.MEMORY_TERMS`, in bytes."""
    if stage not in STAGES:
        raise ValueError(f"stage must be one of {', '.join(STAGES)}; got {stage!r}.")
    x = {k: np.atleast_1d(np.asarray(v, dtype=float)) for k, v in values.items()}
    tcaps = training_caps(caps)
    o = ArrayOps(tcaps, net)
    i = inputs(tcaps, x, o)
    cal = calibration or current_calibration()
    mem = memory(i, o, dpm.stage_params(i, o), cal.memory_of(caps.family), stage=stage)
    return {k: float(np.asarray(v).reshape(-1)[0]) for k, v in mem.terms.items()}


def transformer_step_one(
    caps: DeviceCaps,
    net: NetworkModel,
    values: Mapping[str, float],
    *,
    calibration: Calibration | None = None,
) -> dict[str, Any]:
    """:func:`transformer_step` of one case given as floats; the same keys, as floats.

    The fast path of one evaluation: plain float arithmetic with kernels and collectives
    memoised per (device, network). A device or network with array fields (design sweeps)
    takes the array path.
    """
    ops = scalar_ops(caps, net)
    if ops is None:
        columns = {k: np.atleast_1d(v) for k, v in values.items()}
        batch = transformer_step(caps, net, columns, calibration=calibration)
        return {
            k: (
                {n: float(np.asarray(t)[0]) for n, t in val.items()}
                if isinstance(val, dict)
                else float(np.asarray(val)[0])
            )
            for k, val in batch.items()
        }
    x = {k: float(v) for k, v in values.items()}
    recorder = ops.recorder()
    cal = calibration or current_calibration()
    result = compose(ops.caps, x, recorder, cal)
    if ops.flush(recorder):  # kernels not seen before were recorded, evaluated together
        result = compose(ops.caps, x, ops, cal)
    return result


def compose(
    caps: DeviceCaps, x: Mapping[str, Any], o: Any, calibration: Calibration
) -> dict[str, Any]:
    """The step model over ``o``'s operations; ``caps`` already at training efficiency."""
    i = inputs(caps, x, o)
    gemms = lay.layer_gemms(i, o, calibration.mxfp8.gemm_time_ratio)
    attn = lay.attention(caps, i, o)
    elem = lay.elementwise(i, o, calibration.float8.rowwise_cast_efficiency)
    tp = lay.tensor_comm(i, o, gemms)
    layer = lay.layer_times(
        i,
        o,
        gemms,
        attn,
        elem,
        tp,
        lay.context_comm(i, o, attn),
        lay.expert_comm(i, o),
    )
    layer = activation_offload(i, o, caps, layer)
    params = dpm.stage_params(i, o)
    breakdown = pipeline_breakdown(i, o, layer, tp)
    breakdown["data_parallel_comm"] = dpm.data_parallel_comm(
        i, o, params, layer, calibration, (gemms, attn, elem)
    )
    breakdown["fsdp_copies"] = dpm.fsdp_copies(i, o, params)
    breakdown["grad_accumulation"] = dpm.grad_accumulation(i, o, params)
    breakdown["optimizer"] = dpm.optimizer(i, o, params)
    breakdown["embedding_sync"] = dpm.embedding_sync(i, o, params)
    mem = memory(i, o, params, calibration.memory_of(caps.family))
    return {
        "step_time_s": sum(breakdown.values()),
        "breakdown_s": breakdown,
        "memory_per_device_B": mem.total,
        "memory_breakdown_B": mem.terms,
        "model_flops_per_step": model_flops(x, o),
        "tokens_per_step": x["global_batch_size"] * i.s,
        "samples_per_step": x["global_batch_size"],
        "num_micro_batches": i.m,
    }
