"""Transformer step: the scalar path equals the batched one; communication and memory-bound
terms against values computed by hand from their sources (docs/model.md part C)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from deepflow.config import load_scenario, scenario_from_mapping
from deepflow.config.calibration import current_calibration, framework_calibration
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
from deepflow.oracle.workloads.transformer.layer import attention, elementwise, layer_gemms
from deepflow.oracle.workloads.transformer.ops import ArrayOps, training_caps
from deepflow.oracle.workloads.transformer.shapes import inputs
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
        ("gpt3", {"overlap_grad_reduce": 0.0}),  # unfused attention, DeepSpeed 2021 ZeRO-3
        ("gpt3", {"tp_comm_overlap": 1.0, "overlap_grad_reduce": 1.0}),
        ("llama", {"fsdp_implementation": 1.0, "fsdp_reduce_fp32": 1.0}),  # FSDP1's copies
        ("llama", {"fsdp_implementation": 2.0}),  # FSDP2's
        ("llama", {"grad_accumulation": 1.0}),  # fp32 sums outside the GEMM
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


def test_hybrid_sharding_scalar_path_equals_the_batched_path() -> None:
    # HSDP rows (docs/model.md §C3.2): best-mapping enumerates only data-parallel degrees the
    # replicas divide; ZeRO-1 and ZeRO-3 rows both
    mapping = {"data_parallel": 16, "data_parallel_replicas": 2, "tensor_parallel": 8,
               "pipeline_parallel": 2, "overlap_grad_reduce": True}  # fmt: skip
    s = _gpt3(mapping, nodes=32, batch=256)
    x = _rows(s, 24)
    assert set(x["data_parallel_replicas"].tolist()) == {2.0}
    assert not np.any(x["data_parallel"] % 2) and set(x["zero_stage"].tolist()) >= {1.0, 3.0}
    caps = device_caps(s.system.device, "bf16")
    net = network_model(s)
    batch = transformer_step(caps, net, x)
    for j in range(24):
        one = transformer_step_one(caps, net, {k: float(v[j]) for k, v in x.items()})
        assert one["step_time_s"] == pytest.approx(float(batch["step_time_s"][j]), rel=1e-12)
        assert one["memory_per_device_B"] == pytest.approx(
            float(batch["memory_per_device_B"][j]), rel=1e-12
        )


def _deepspeed_2021_steady_step(
    compute: list[tuple[tuple[int, int], float, float]], gather: dict[int, float]
) -> float:
    """DeepSpeed 0.3.13's coordinator (stage3.py) run over a step's module trace, repeated so
    the second pass is the steady state (the last module's prefetch reaches into the next
    step, as the oracle's per-layer schedule assumes): a module not yet available waits for
    the prefetch in flight and synchronises the device (its interval lasts the longer of the
    compute and the wire since the last wait), then the next trace module not available is
    prefetched; a module's parameters are released after it unless the next trace entry
    reuses them."""
    avail: set[tuple[int, int]] = set()
    acc = wire = elapsed = 0.0
    n = len(compute)
    totals = []
    for _ in range(2):
        start = elapsed
        for j, (module, seconds, reduce_s) in enumerate(compute):
            if module not in avail:
                elapsed += max(acc, wire)
                acc = wire = 0.0
                avail.add(module)
                nxt = next(  # the next step's modules are all partitioned again
                    compute[(j + d) % n][0]
                    for d in range(1, n)
                    if j + d >= n or compute[j + d][0] not in avail
                )
                wire = gather[nxt[1]]
            acc += seconds
            wire += reduce_s
            if j + 1 == n or compute[j + 1][0] != module:  # a step ends by re-partitioning
                avail.discard(module)
        totals.append(elapsed - start)
    return totals[1]


def test_deepspeed_2021_zero3_overlaps_each_module_with_the_next_ones_gather() -> None:
    # DeepSpeed's ZeRO-3 of early 2021 (overlap_grad_reduce false): the oracle's module
    # schedule equals a simulation of the coordinator over the step's trace (forward, then per
    # layer the recompute forward and the backward), each collective at the longer of NCCL's
    # time and the framework's rate (frameworks.yaml), the embedding's exposed.
    s = _gpt3({"data_parallel": 384, "micro_batch_size": 4, "zero_stage": 3,
               "activation_recompute": "full", "overlap_grad_reduce": False},
              nodes=48, batch=1536, num_layers=4)  # fmt: skip
    net = network_model(s)
    model = s.workload.model
    assert isinstance(model, TransformerSpec)
    tcaps = training_caps(device_caps(s.system.device, "bf16"))
    o = ArrayOps(tcaps, net)
    i = inputs(tcaps, transformer_columns(model, s.mapping, 1536), o)
    cal = current_calibration()
    cast_efficiency = cal.float8.rowwise_cast_efficiency
    gemms, attn = layer_gemms(i, o, cal.mxfp8.gemm_time_ratio), attention(tcaps, i, o)
    elem = elementwise(i, o, cast_efficiency)
    one = lambda v: float(np.asarray(v).reshape(-1)[0])  # noqa: E731
    linear = (gemms.qkv, gemms.proj, gemms.up, gemms.down)
    fwd = [one(g.fwd + elem.fwd / 4) for g in linear]
    fwd[0] += one(attn.fwd)
    bwd = [one(g.dgrad + g.wgrad + elem.bwd / 4) for g in linear]
    bwd[1] += one(attn.bwd)
    rate = framework_calibration().deepspeed_zero3_2021_rate_Bps
    assert rate == pytest.approx(10.2e9 * 7 / 8 / 0.470, rel=2e-3)  # PR #1188, 8 GPUs

    def coll(kind: str, size_B: float) -> float:
        return max(float(collective_time_s(kind, size_B, 384, net=net)), size_B * 383 / 384 / rate)

    h, layers, p = 12288, 4, 2.0
    sizes = [3 * h * h * p, h * h * p, 4 * h * h * p, 4 * h * h * p]
    ag = {k: coll("all_gather", t) for k, t in enumerate(sizes)}
    rs = [coll("reduce_scatter", t) for t in sizes]
    trace = [((lay, k), fwd[k], 0.0) for lay in range(layers) for k in range(4)]
    for lay in reversed(range(layers)):
        trace += [((lay, k), fwd[k], 0.0) for k in range(4)]
        trace += [((lay, k), bwd[k], rs[k]) for k in reversed(range(4))]
    compute = sum(seconds for _, seconds, _ in trace)
    emb = 51200 * h * p
    exposed_emb = 3 * coll("all_gather", emb) + coll("reduce_scatter", emb)
    expected = _deepspeed_2021_steady_step(trace, ag) - compute + exposed_emb
    modelled = evaluate_one(s)["breakdown_s"]["data_parallel_comm"]
    assert modelled == pytest.approx(expected, rel=1e-12)  # m = 1536/(4·384) = 1
    caps = device_caps(s.system.device, "bf16")  # transformer_step applies training's clocks
    batched = transformer_step(caps, net, transformer_columns(model, s.mapping, 1536))
    batched_dp = float(batched["breakdown_s"]["data_parallel_comm"][0])
    assert batched_dp == pytest.approx(modelled, rel=1e-12)  # the array path: the same
    # on 384 A100s the framework, not the wire, sets the pace of the large matrices
    assert float(collective_time_s("all_gather", sizes[2], 384, net=net)) < sizes[2] / rate
    # and the schedule hides compute under it: less exposed than gathering without overlap
    assert modelled < layers * (3 * sum(ag.values()) + sum(rs) - ag[3]) + exposed_emb
    prefetched = evaluate_one(replace(s, mapping=replace(s.mapping, overlap_grad_reduce=True)))
    assert prefetched["breakdown_s"]["data_parallel_comm"] < 0.1 * modelled


def test_deepspeed_2021_zero3_hides_compute_while_the_gathers_are_longer() -> None:
    # Narayanan et al. 2021 Table 2: 175B on 1,536 and 768 GPUs (micro-batch 1 and 2, one
    # micro-batch a step) measured the same step time; per GPU, doubling the micro-batch doubles
    # the compute but the parameter traffic stays: the step grows by far less than the compute.
    def run(gpus: int, mb: int) -> dict[str, Any]:
        s = _gpt3({"data_parallel": gpus, "micro_batch_size": mb, "zero_stage": 3,
                   "activation_recompute": "full", "overlap_grad_reduce": False},
                  nodes=gpus // 8, batch=1536)  # fmt: skip
        return evaluate_one(s)

    small, large = run(1536, 1), run(768, 2)
    parts = ("gemm", "attention", "elementwise", "recompute")
    grown = sum(large["breakdown_s"][k] - small["breakdown_s"][k] for k in parts)
    assert grown > 10.0
    assert large["step_time_s"] - small["step_time_s"] < 0.25 * grown


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
