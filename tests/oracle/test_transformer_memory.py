"""Activation memory: Korthikanti et al. 2022 formulas, exactly (docs/model.md §C2.2)."""

from __future__ import annotations

import pytest

from deepflow.oracle.workloads.transformer import activation_bytes_per_layer

GPT3 = {  # GPT-3 175B, micro-batch 1 (Korthikanti et al. 2022, Table 3 model)
    "hidden_size": 12288, "num_attention_heads": 96, "num_kv_heads": 96,
    "ffn_hidden_size": 4 * 12288, "swiglu": 0.0, "seq_length": 2048, "micro_batch_size": 1,
    "context_parallel": 1, "dropout": 1.0, "flash_attention": 0.0,
}  # fmt: skip
S, B, H, A, T = 2048, 1, 12288, 96, 8
SBH = S * B * H


def per_layer(**mapping: float) -> float:
    x = {**GPT3, "tensor_parallel": 1.0, "sequence_parallel": 0.0, "recompute": 0.0, **mapping}
    return float(activation_bytes_per_layer(x))


@pytest.mark.parametrize(
    ("mapping", "expected"),
    [
        ({}, SBH * (34 + 5 * A * S / H)),
        ({"tensor_parallel": T}, SBH * (10 + 24 / T + 5 * A * S / (H * T))),
        ({"tensor_parallel": T, "sequence_parallel": 1}, SBH * (34 / T + 5 * A * S / (H * T))),
        ({"tensor_parallel": T, "recompute": 1}, SBH * (10 + 24 / T)),
        ({"tensor_parallel": T, "sequence_parallel": 1, "recompute": 1}, SBH * 34 / T),
        ({"tensor_parallel": T, "recompute": 2}, 2 * SBH),
        ({"tensor_parallel": T, "sequence_parallel": 1, "recompute": 2}, 2 * SBH / T),
    ],
    ids=["none", "tp", "tp+sp", "tp+selective", "tp+sp+selective", "full", "full+sp"],
)
def test_korthikanti_table2_per_layer(mapping: dict[str, float], expected: float) -> None:
    assert per_layer(**mapping) == pytest.approx(expected, rel=1e-12)


def test_korthikanti_figure1_22b_totals() -> None:
    # 22B (48 layers, h 6144, a 64, micro-batch 4, t 8): 59.25 GiB without SP or recompute,
    # 9.5625 GiB with SP + selective recompute (Figure 1 values as transcribed in Calculon's
    # validation; docs/model.md §C2.2).
    x = {**GPT3, "hidden_size": 6144, "num_attention_heads": 64, "num_kv_heads": 64,
         "ffn_hidden_size": 4 * 6144, "micro_batch_size": 4, "tensor_parallel": 8.0}  # fmt: skip
    plain = 48 * float(activation_bytes_per_layer({**x, "sequence_parallel": 0.0,
                                                   "recompute": 0.0}))  # fmt: skip
    sp_sel = 48 * float(activation_bytes_per_layer({**x, "sequence_parallel": 1.0,
                                                    "recompute": 1.0}))  # fmt: skip
    assert plain / 2**30 == pytest.approx(59.25, rel=1e-12)
    assert sp_sel / 2**30 == pytest.approx(9.5625, rel=1e-12)


def test_flash_attention_stores_no_score_matrix() -> None:
    unfused = per_layer(tensor_parallel=T)
    flash = per_layer(tensor_parallel=T, flash_attention=1.0)
    assert unfused - flash == pytest.approx(
        SBH * 5 * A * S / (H * T) - 4 * A * S * B / T, rel=1e-12
    )


def test_an_unfused_swiglu_also_keeps_its_silu_output() -> None:
    # nanotron's GLUActivation (act(gate) * up, eager PyTorch) keeps the SiLU output, 2F/h,
    # beside the fc1 output and fc2 input that Megatron's fused bias_swiglu saves (6F/h)
    llama = {**GPT3, "swiglu": 1.0, "ffn_hidden_size": 3.5 * H, "dropout": 0.0,
             "flash_attention": 1.0}  # fmt: skip
    fused = per_layer(**llama, tensor_parallel=T, sequence_parallel=1.0)
    unfused = per_layer(**llama, tensor_parallel=T, sequence_parallel=1.0, fused_swiglu=0.0)
    assert unfused - fused == pytest.approx(SBH * 2 * 3.5 / T, rel=1e-12)
    gelu = {**GPT3, "fused_swiglu": 0.0}  # a GeLU MLP has no GLU to fuse
    assert per_layer(**gelu) == per_layer()
