"""Transformer step: the scalar path equals the batched one; communication and memory-bound
terms against values computed by hand from their sources (docs/model.md part C)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from deepflow.config import load_scenario, scenario_from_mapping
from deepflow.config.calibration import framework_calibration
from deepflow.config.specs import Scenario, TransformerSpec
from deepflow.oracle.best_mapping import enumerate_mappings
from deepflow.oracle.evaluate import evaluate_one, network_model
from deepflow.oracle.hardware import device_caps
from deepflow.oracle.kernels import memory_op_time_s
from deepflow.oracle.network import collective_time_s
from deepflow.oracle.workloads.transformer import (
    transformer_columns,
    transformer_step,
    transformer_step_one,
)
from tests.conftest import REPO


def _gpt3(mapping: dict[str, Any], *, nodes: int, batch: int, **model: Any) -> Scenario:
    """GPT-3 175B (or a variant) on DGX-A100 nodes, unfused attention, as in 2021-2022."""
    spec = {"kind": "transformer", "num_layers": 96, "hidden_size": 12288,
            "num_attention_heads": 96, "ffn_hidden_size": 49152, "seq_length": 2048,
            "vocab_size": 51200, "dropout": True} | model  # fmt: skip
    return scenario_from_mapping({
        "system": {"device": "a100-sxm4-80gb", "network": "dgx-a100", "devices_per_node": 8,
                   "num_nodes": nodes},
        "workload": {"model": spec, "global_batch_size": batch, "precision": "bf16"},
        "mapping": {"flash_attention": False, "tp_comm_overlap": False} | mapping,
    })  # fmt: skip


def _rows(s: Scenario, count: int, **override: float) -> dict[str, np.ndarray]:
    model = s.workload.model
    assert isinstance(model, TransformerSpec)
    mappings = enumerate_mappings(s)
    pick = np.linspace(0, len(mappings["tensor_parallel"]) - 1, count).astype(int)
    base = transformer_columns(model, s.mapping, s.workload.global_batch_size)
    x = {k: np.broadcast_to(v, (count,)).copy() for k, v in base.items()}
    x |= {k: v[pick] for k, v in mappings.items()}
    return x | {k: np.full(count, v) for k, v in override.items()}


@pytest.mark.parametrize(
    ("name", "override"),
    [
        ("llama", {}),  # fused attention, TP overlap, distributed optimizer
        ("gpt3", {"overlap_grad_reduce": 0.0}),  # unfused attention, blocking ZeRO-3
        ("gpt3", {"tp_comm_overlap": 1.0, "overlap_grad_reduce": 1.0}),
    ],
)
def test_scalar_path_equals_the_batched_path(name: str, override: dict[str, float]) -> None:
    # evaluate_one runs the formulas on floats; best-mapping and sweeps on arrays: same rows.
    if name == "llama":
        s = load_scenario(REPO / "configs" / "scenarios" / "llama3-8b-h100.yaml")
    else:
        s = _gpt3({"data_parallel": 8, "tensor_parallel": 8, "pipeline_parallel": 4},
                  nodes=32, batch=256)  # fmt: skip
    x = _rows(s, 48, **override)
    caps = device_caps(s.system.device, "bf16")
    net = network_model(s)
    batch = transformer_step(caps, net, x)
    for j in range(48):
        one = transformer_step_one(caps, net, {k: float(v[j]) for k, v in x.items()})
        for key in ("step_time_s", "memory_per_device_B", "model_flops_per_step"):
            assert one[key] == pytest.approx(float(batch[key][j]), rel=1e-12), key
        for part, value in one["breakdown_s"].items():
            assert value == pytest.approx(float(batch["breakdown_s"][part][j]), rel=1e-12), part


def test_blocking_zero3_gathers_every_module_three_times_with_full_recompute() -> None:
    # DeepSpeed's ZeRO-3 of 2021 (no overlap): per micro-batch and layer, each weight matrix
    # is all-gathered for the forward, again for the recompute forward and for the backward,
    # and its gradient reduce-scattered, all on the critical path (§3.1: 3Ψ + Ψ for recompute),
    # each at the longer of NCCL's time and the framework's own rate (frameworks.yaml).
    s = _gpt3({"data_parallel": 384, "micro_batch_size": 4, "zero_stage": 3,
               "activation_recompute": "full", "overlap_grad_reduce": False},
              nodes=48, batch=1536)  # fmt: skip
    net = network_model(s)
    h, layers, vocab, p = 12288, 96, 51200, 2.0
    tensors = [3 * h * h * p, h * h * p, 4 * h * h * p, 4 * h * h * p, vocab * h / layers * p]
    rate = framework_calibration().deepspeed_zero3_2021_rate_Bps
    assert rate == pytest.approx(10.2e9 / 0.410, rel=2e-3)  # PR #1188 / issue #1174
    per_layer = sum(
        3 * max(collective_time_s("all_gather", t, 384, net=net), t * 383 / 384 / rate)
        + max(collective_time_s("reduce_scatter", t, 384, net=net), t * 383 / 384 / rate)
        for t in tensors
    )
    # on 384 A100s the framework, not the wire, sets the pace of the large matrices
    assert collective_time_s("all_gather", tensors[2], 384, net=net) < tensors[2] / rate
    blocking = evaluate_one(s)["breakdown_s"]["data_parallel_comm"]
    assert blocking == pytest.approx(1 * layers * per_layer, rel=1e-12)  # m = 1536/(4·384) = 1
    prefetched = evaluate_one(replace(s, mapping=replace(s.mapping, overlap_grad_reduce=True)))
    assert prefetched["breakdown_s"]["data_parallel_comm"] < 0.1 * blocking


def test_cross_entropy_moves_52_bytes_per_logit() -> None:
    # Megatron-LM's unfused vocab-parallel cross-entropy over fp32 logits (§6.3): forward
    # cast (2 + 4), max 4, subtract 8, exp 8, sum 4, divide 8; backward scale 8, cast 4 + 2.
    small = _gpt3({"data_parallel": 1, "tensor_parallel": 8}, nodes=1, batch=1, num_layers=2)
    large = _gpt3({"data_parallel": 1, "tensor_parallel": 8}, nodes=1, batch=1, num_layers=2,
                  vocab_size=102400)  # fmt: skip
    caps = device_caps(small.system.device, "bf16")
    extra_logits = 2048 * (102400 - 51200) / 8  # T·ΔV/t, one micro-batch
    expected = 52 * extra_logits / (caps.hbm_bandwidth_Bps * caps.hbm_efficiency)
    grown = (evaluate_one(large)["breakdown_s"]["elementwise"]
             - evaluate_one(small)["breakdown_s"]["elementwise"])  # fmt: skip
    assert grown == pytest.approx(expected, rel=1e-9)


def test_sequence_parallel_backward_waits_for_the_output_gradient_gather() -> None:
    # Megatron-LM tensor_parallel (§3.1, §3.2): forward 2 all-gathers + 2 reduce-scatters; in
    # backward the row-parallel GEMMs all-gather the output gradient first (exposed) while the
    # input re-gathers and reduce-scatters hide under the column-parallel GEMMs. Without SP
    # the forward all-reduces are exposed and the backward ones hide under the weight grads.
    s = _gpt3({"data_parallel": 1, "tensor_parallel": 8, "sequence_parallel": True,
               "activation_recompute": "selective"}, nodes=1, batch=1, num_layers=4)  # fmt: skip
    net = network_model(s)
    msg = 2048 * 12288 * 2.0  # T·h·p
    ag = collective_time_s("all_gather", msg, 8, net=net)
    rs = collective_time_s("reduce_scatter", msg, 8, net=net)
    ar = collective_time_s("all_reduce", msg, 8, net=net)
    with_sp = evaluate_one(s)["breakdown_s"]["tensor_parallel_comm"]
    assert with_sp == pytest.approx(4 * (2 * (ag + rs) + 2 * ag), rel=1e-12)
    without = evaluate_one(replace(s, mapping=replace(s.mapping, sequence_parallel=False)))
    assert without["breakdown_s"]["tensor_parallel_comm"] == pytest.approx(4 * 2 * ar, rel=1e-12)


def test_optimizer_reads_norm_and_zeroes_the_gradient_buffer() -> None:
    # Adam over the local parameters (30 B, §6.3), the gradient-norm pass (read 4 B) and
    # zeroing the fp32 gradient buffer for the next step (write 4 B): 38 B per parameter.
    s = _gpt3({"data_parallel": 1, "tensor_parallel": 8, "zero_stage": 0}, nodes=1, batch=1)
    h, layers, vocab = 12288, 96, 51200
    local = (layers * (12 * h * h + 4 * h) + 2 * vocab * h) / 8
    caps = device_caps(s.system.device, "bf16")
    expected = float(memory_op_time_s(caps, 38 * local, 11 * local, launches=6))
    assert evaluate_one(s)["breakdown_s"]["optimizer"] == pytest.approx(expected, rel=1e-12)
