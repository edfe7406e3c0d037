"""The transformer workload's input columns: the model's shape and the mapping, as floats.

:data:`MODEL_COLUMNS` and :data:`MAPPING_COLUMNS` are what :func:`transformer_step` takes,
each an array over n cases; :func:`transformer_values` turns a (model, mapping) into them.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from deepflow.config.specs import (
    CROSS_ENTROPY_MODES,
    RECOMPUTE_MODES,
    MappingSpec,
    TransformerSpec,
)

__all__ = [
    "CROSS_ENTROPY_CODES",
    "FULL_RECOMPUTE",
    "MAPPING_COLUMNS",
    "MODEL_COLUMNS",
    "NO_RECOMPUTE",
    "OP_RECOMPUTE",
    "RECOMPUTE_CODES",
    "SELECTIVE_RECOMPUTE",
    "transformer_columns",
    "transformer_values",
]

F = NDArray[np.float64]

MODEL_COLUMNS = (
    "num_layers",
    "hidden_size",
    "num_attention_heads",
    "num_kv_heads",
    "ffn_hidden_size",
    "swiglu",
    "seq_length",
    "vocab_size",
    "num_experts",
    "experts_per_token",
    "dropout",
    "global_batch_size",
)
MAPPING_COLUMNS = (
    "tensor_parallel",
    "pipeline_parallel",
    "data_parallel",
    "context_parallel",
    "expert_parallel",
    "micro_batch_size",
    "virtual_pipeline_stages",
    "sequence_parallel",
    "recompute",
    "zero_stage",
    "flash_attention",
    "tp_comm_overlap",
    "overlap_grad_reduce",
    "fp32_main_grads",
    "cross_entropy",
)
#: The ``recompute`` column's code of each ``activation_recompute`` mode, and the codes by name
#: (what the formulas compare against).
RECOMPUTE_CODES = {"none": 0.0, "selective": 1.0, "full": 2.0, "selective_op": 3.0}
NO_RECOMPUTE, SELECTIVE_RECOMPUTE, FULL_RECOMPUTE, OP_RECOMPUTE = (
    RECOMPUTE_CODES[m] for m in RECOMPUTE_MODES
)
#: The ``cross_entropy`` column's code of each mode (index into its bytes per logit).
CROSS_ENTROPY_CODES = {mode: float(code) for code, mode in enumerate(CROSS_ENTROPY_MODES)}


def transformer_values(
    model: TransformerSpec, mapping: MappingSpec, global_batch_size: int
) -> dict[str, float]:
    """One (model, mapping) as floats, keyed by the model and mapping column names."""
    return {
        "num_layers": float(model.num_layers),
        "hidden_size": float(model.hidden_size),
        "num_attention_heads": float(model.num_attention_heads),
        "num_kv_heads": float(model.num_kv_heads),
        "ffn_hidden_size": float(model.ffn_hidden_size),
        "swiglu": float(model.ffn_activation == "swiglu"),
        "seq_length": float(model.seq_length),
        "vocab_size": float(model.vocab_size),
        "num_experts": float(model.num_experts),
        "experts_per_token": float(model.experts_per_token),
        "dropout": float(model.dropout),
        "global_batch_size": float(global_batch_size),
        "tensor_parallel": float(mapping.tensor_parallel),
        "pipeline_parallel": float(mapping.pipeline_parallel),
        "data_parallel": float(mapping.data_parallel),
        "context_parallel": float(mapping.context_parallel),
        "expert_parallel": float(mapping.expert_parallel),
        "micro_batch_size": float(mapping.micro_batch_size),
        "virtual_pipeline_stages": float(mapping.virtual_pipeline_stages),
        "sequence_parallel": float(mapping.sequence_parallel),
        "recompute": RECOMPUTE_CODES[mapping.activation_recompute],
        "zero_stage": float(mapping.zero_stage),
        "flash_attention": float(mapping.flash_attention),
        "tp_comm_overlap": float(mapping.tp_comm_overlap),
        "overlap_grad_reduce": float(mapping.overlap_grad_reduce),
        "fp32_main_grads": float(mapping.fp32_main_grads),
        "cross_entropy": CROSS_ENTROPY_CODES[mapping.cross_entropy],
    }


def transformer_columns(
    model: TransformerSpec, mapping: MappingSpec, global_batch_size: int
) -> dict[str, F]:
    """One (model, mapping) as a batch of one, in the columns :func:`transformer_step` takes."""
    values = transformer_values(model, mapping, global_batch_size)
    return {k: np.atleast_1d(np.asarray(v, dtype=float)) for k, v in values.items()}
