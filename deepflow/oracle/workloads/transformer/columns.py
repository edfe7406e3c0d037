"""The transformer workload's input columns: the model's shape and the mapping, as floats.

:data:`MODEL_COLUMNS` and :data:`MAPPING_COLUMNS` are what :func:`transformer_step` takes,
each an array over n cases; :func:`transformer_values` turns a (model, mapping) into them.
The mapping columns are the transformer's knobs of the knob table
(:data:`deepflow.config.mapping.KNOBS`), encoded as it says.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.typing import NDArray

from deepflow.config.mapping import KNOB, knobs_of
from deepflow.config.specs import RECOMPUTE_MODES, MappingSpec, TransformerSpec

__all__ = [
    "CROSS_ENTROPY_CODES",
    "DOTS_RECOMPUTE",
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
    "head_dim",
    "ffn_hidden_size",
    "swiglu",
    "seq_length",
    "vocab_size",
    "num_experts",
    "experts_per_token",
    "dropout",
    "tied_embeddings",
    "global_batch_size",
)
#: The transformer's mapping knobs (the knob table's) and their input columns.
_KNOBS = knobs_of("transformer")
MAPPING_COLUMNS = tuple(k.column for k in _KNOBS)
#: The ``recompute`` column's code of each ``activation_recompute`` mode, and the codes by name
#: (what the formulas compare against).
RECOMPUTE_CODES = KNOB["activation_recompute"].codes
NO_RECOMPUTE, SELECTIVE_RECOMPUTE, FULL_RECOMPUTE, OP_RECOMPUTE, DOTS_RECOMPUTE = (
    RECOMPUTE_CODES[m] for m in RECOMPUTE_MODES
)
#: The ``cross_entropy`` column's code of each mode (index into its bytes per logit).
CROSS_ENTROPY_CODES = KNOB["cross_entropy"].codes

#: (field, column, encoder) of each mapping knob: the table's encoding, unrolled for the
#: scalar path (evaluate_one).
_ENCODE: tuple[tuple[str, str, Callable[[Any], float]], ...] = tuple(
    (k.name, k.column, k.codes.__getitem__ if k.type == "choice" else float) for k in _KNOBS
)


def transformer_values(
    model: TransformerSpec, mapping: MappingSpec, global_batch_size: int
) -> dict[str, float]:
    """One (model, mapping) as floats, keyed by the model and mapping column names."""
    mapping_values = {column: encode(getattr(mapping, name)) for name, column, encode in _ENCODE}
    return {
        "num_layers": float(model.num_layers),
        "hidden_size": float(model.hidden_size),
        "num_attention_heads": float(model.num_attention_heads),
        "num_kv_heads": float(model.num_kv_heads),
        "head_dim": float(model.head_dim),  # 0: hidden_size / num_attention_heads
        "ffn_hidden_size": float(model.ffn_hidden_size),
        "swiglu": float(model.ffn_activation == "swiglu"),
        "seq_length": float(model.seq_length),
        "vocab_size": float(model.vocab_size),
        "num_experts": float(model.num_experts),
        "experts_per_token": float(model.experts_per_token),
        "dropout": float(model.dropout),
        "tied_embeddings": float(model.tied_embeddings),
        "global_batch_size": float(global_batch_size),
    } | mapping_values


def transformer_columns(
    model: TransformerSpec, mapping: MappingSpec, global_batch_size: int
) -> dict[str, F]:
    """One (model, mapping) as a batch of one, in the columns :func:`transformer_step` takes."""
    values = transformer_values(model, mapping, global_batch_size)
    return {k: np.atleast_1d(np.asarray(v, dtype=float)) for k, v in values.items()}
