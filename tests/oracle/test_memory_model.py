"""The memory component: its named breakdown, framework behaviours and monotonicity
(docs/model.md §C2)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deepflow.config import load_scenario
from deepflow.config.calibration import current_calibration
from deepflow.config.specs import Scenario, TransformerSpec
from deepflow.errors import ConfigError
from deepflow.oracle.best_mapping import best_mappings
from deepflow.oracle.evaluate import evaluate_one, network_model
from deepflow.oracle.hardware import device_caps
from deepflow.oracle.workloads.transformer import (
    CROSS_ENTROPY_CODES,
    RECOMPUTE_CODES,
    transformer_columns,
    transformer_step,
)
from deepflow.oracle.workloads.transformer.memory import (
    ALLOCATED_TERMS,
    MEMORY_TERMS,
    activation_bytes_per_layer,
)

SCENARIOS = Path(__file__).resolve().parents[2] / "configs" / "scenarios"


def llama() -> Scenario:
    return load_scenario(SCENARIOS / "llama3-8b-h100.yaml")


def memory_of(scenario: Scenario, **columns: float) -> tuple[float, dict[str, float]]:
    """Peak memory and breakdown of a scenario with some input columns replaced."""
    model = scenario.workload.model
    assert isinstance(model, TransformerSpec)
    x = transformer_columns(model, scenario.mapping, scenario.workload.global_batch_size)
    x |= {k: np.atleast_1d(float(v)) for k, v in columns.items()}
    cal = current_calibration()
    caps = device_caps(scenario.system.device, scenario.workload.precision, calibration=cal)
    out = transformer_step(caps, network_model(scenario, calibration=cal), x, calibration=cal)
    terms = {k: float(np.asarray(v).reshape(-1)[0]) for k, v in out["memory_breakdown_B"].items()}
    return float(out["memory_per_device_B"][0]), terms


def test_breakdown_names_every_term_and_sums_to_the_total() -> None:
    result = evaluate_one(llama())
    terms = result["memory_breakdown_B"]
    assert tuple(terms) == MEMORY_TERMS
    assert sum(terms.values()) == pytest.approx(result["memory_per_device_B"], rel=1e-12)
    assert all(v >= 0 for v in terms.values())


def test_best_mapping_reports_the_breakdown() -> None:
    for entry in best_mappings(llama(), top=3)["mappings"]:
        terms = entry["memory_breakdown_B"]
        assert sum(terms.values()) == pytest.approx(entry["memory_per_device_B"], rel=1e-12)


def test_model_states_per_parameter_follow_the_zero_paper() -> None:
    # Rajbhandari et al. 2020 §5 (docs/model.md §C2.1): with 16-bit gradients 16, 4 + 12/D,
    # 2 + 14/D, 16/D bytes per parameter; Megatron's fp32 main gradients add 2 below ZeRO-2.
    s = dataclasses.replace(llama(), mapping=dataclasses.replace(llama().mapping,
                                                                 data_parallel=8))  # fmt: skip
    states = ("weights", "master_weights", "gradients", "optimizer_states")
    _, base = memory_of(s, zero_stage=0, fp32_main_grads=0)
    params = sum(base[t] for t in states) / 16
    expected = {0: 16, 1: 4 + 12 / 8, 2: 2 + 14 / 8, 3: 16 / 8}
    for zero, per_param in expected.items():
        _, terms = memory_of(s, zero_stage=zero, fp32_main_grads=0)
        assert sum(terms[t] for t in states) == pytest.approx(per_param * params, rel=1e-12)
    _, megatron = memory_of(s, zero_stage=1, fp32_main_grads=1)
    assert sum(megatron[t] for t in states) == pytest.approx((6 + 12 / 8) * params, rel=1e-12)


def test_context_parallel_ranks_shard_the_optimizer() -> None:
    # Megatron-Core's distributed optimizer and torchtitan's FSDP mesh span data x context
    # parallel ranks: dp 4 x cp 2 shards as dp 8 does.
    _, cp = memory_of(llama(), data_parallel=4, context_parallel=2, zero_stage=1)
    _, dp = memory_of(llama(), data_parallel=8, context_parallel=1, zero_stage=1)
    assert cp["optimizer_states"] == pytest.approx(dp["optimizer_states"], rel=1e-12)


def test_loss_buffers_per_logit_follow_each_kernel() -> None:
    # Megatron's vocab-parallel loss holds its fp32 softmax and a 16-bit tensor (6 bytes),
    # PyTorch's unfused one 14, a fused kernel 2, nanotron's loss on fp32 logits 8
    _, vocab = memory_of(llama(), cross_entropy=CROSS_ENTROPY_CODES["vocab_parallel"])
    _, unfused = memory_of(llama(), cross_entropy=CROSS_ENTROPY_CODES["unfused"])
    _, fused = memory_of(llama(), cross_entropy=CROSS_ENTROPY_CODES["fused"])
    _, fp32 = memory_of(llama(), cross_entropy=CROSS_ENTROPY_CODES["vocab_parallel_fp32"])
    assert vocab["logits"] == pytest.approx(3 * fused["logits"], rel=1e-12)
    assert unfused["logits"] == pytest.approx(7 * fused["logits"], rel=1e-12)
    assert fp32["logits"] == pytest.approx(4 * fused["logits"], rel=1e-12)


def test_allocator_terms_and_reserve() -> None:
    cal = current_calibration().memory
    _, terms = memory_of(llama())
    allocated = sum(terms[t] for t in ALLOCATED_TERMS)
    assert terms["fragmentation"] == pytest.approx(cal.fragmentation * allocated, rel=1e-12)
    assert terms["cuda_context"] == cal.cuda_context_B
    assert terms["nccl_buffers"] == cal.nccl_buffers_B


def test_a_run_on_one_device_opens_no_nccl_communicator() -> None:
    # NCCL's buffers are a communicator's, per peer: one device has no peer to talk to
    cal = current_calibration().memory
    one = {"tensor_parallel": 1, "pipeline_parallel": 1, "data_parallel": 1,
           "context_parallel": 1}  # fmt: skip
    total, alone = memory_of(llama(), **one)
    _, paired = memory_of(llama(), **(one | {"data_parallel": 2}))
    assert alone["nccl_buffers"] == 0 and paired["nccl_buffers"] == cal.nccl_buffers_B
    assert sum(alone.values()) == pytest.approx(total, rel=1e-12)


#: A Llama 3 8B layer at 8k tokens, one sequence, FlashAttention (activation bytes' columns).
_LLAMA8B_LAYER = {
    "hidden_size": 4096, "num_attention_heads": 32, "num_kv_heads": 8,
    "ffn_hidden_size": 14336, "swiglu": 1.0, "seq_length": 8192, "micro_batch_size": 1,
    "context_parallel": 1, "dropout": 0.0, "flash_attention": 1.0, "tensor_parallel": 1.0,
    "sequence_parallel": 0.0,
}  # fmt: skip


def _layer_bytes(modes: tuple[str, ...], **columns: float) -> list[float]:
    x = {**_LLAMA8B_LAYER, **columns}
    return [float(activation_bytes_per_layer({**x, "recompute": RECOMPUTE_CODES[m]}))
            for m in modes]  # fmt: skip


def test_per_op_recompute_sits_between_none_and_full() -> None:
    sbh = 8192 * 4096
    none, op, full = _layer_bytes(("none", "selective_op", "full"))
    # layer input 2 + attention output 2 + Q 2 + V 2g + MLP up 2F/h + MLP down 2, plus lse
    assert op == pytest.approx(sbh * (8 + 2 * 0.25 + 2 * 14336 / 4096) + 4 * 32 * 8192)
    assert full < op < none


def test_keeping_the_weight_matmuls_outputs_saves_every_projection() -> None:
    # JAX checkpoint_dots_with_no_batch_dims (MaxText remat_policy minimal; docs/model.md
    # §C2.2): the layer input 2, Q 2, K and V 2g each, the projection 2, the MLP up
    # projections 2(mats - 1)F/h and the down projection 2, split by t; no log-sum-exp
    sbh = 8192 * 4096
    none, dots, full = _layer_bytes(
        ("none", "selective_dots", "full"), tensor_parallel=4.0, sequence_parallel=1.0
    )
    assert dots == pytest.approx(sbh * (2 + 2 + 4 * 0.25 + 2 + 2 * 2 * 14336 / 4096 + 2) / 4)
    assert full < dots < none


def test_fp8_keeps_gemm_inputs_in_one_byte() -> None:
    x = {
        "hidden_size": 4096, "num_attention_heads": 32, "num_kv_heads": 32,
        "ffn_hidden_size": 16384, "swiglu": 0.0, "seq_length": 2048, "micro_batch_size": 1,
        "context_parallel": 1, "dropout": 0.0, "flash_attention": 1.0, "tensor_parallel": 1.0,
        "sequence_parallel": 0.0, "recompute": 0.0,
    }  # fmt: skip
    bf16 = float(activation_bytes_per_layer(x))
    fp8 = float(activation_bytes_per_layer({**x, "fp8": 1.0}))
    # QKV and fc1 inputs 1 + 1, projection input 1, fc2 input F/h = 4 bytes per s·b·h saved
    assert bf16 - fp8 == pytest.approx(2048 * 4096 * (1 + 1 + 1 + 4), rel=1e-12)


# ----------------------------------------------------------------------------- properties
def _grid_memory(capacity_B: float | None = None, **columns: list[float]) -> np.ndarray:
    s = llama() if capacity_B is None else with_capacity(llama(), capacity_B)
    model = s.workload.model
    assert isinstance(model, TransformerSpec)
    n = len(next(iter(columns.values())))
    x = {k: np.broadcast_to(v, (n,)).astype(float)
         for k, v in transformer_columns(model, s.mapping, 512).items()}  # fmt: skip
    x |= {k: np.asarray(v, dtype=float) for k, v in columns.items()}
    cal = current_calibration()
    caps = device_caps(s.system.device, s.workload.precision, calibration=cal)
    out = transformer_step(caps, network_model(s, calibration=cal), x, calibration=cal)
    return np.asarray(out["memory_per_device_B"])


_degree = st.sampled_from([1, 2, 4, 8])


@settings(max_examples=40, deadline=None)
@given(tp=_degree, pp=_degree, cp=_degree, dp=_degree, mb=st.sampled_from([1, 2, 4]),
       rc=st.sampled_from(["none", "selective", "selective_op", "selective_dots", "full"]),
       fp32=st.booleans(), accumulator=st.booleans())  # fmt: skip
def test_more_sharding_or_recompute_never_raises_memory(
    tp: int, pp: int, cp: int, dp: int, mb: int, rc: str, fp32: bool, accumulator: bool
) -> None:
    base = {"tensor_parallel": tp, "pipeline_parallel": pp, "context_parallel": cp,
            "data_parallel": dp, "micro_batch_size": mb, "recompute": RECOMPUTE_CODES[rc],
            "fp32_main_grads": float(fp32), "zero_stage": 0.0,
            "sequence_parallel": float(tp > 1),
            "gradient_buffers": float(accumulator)}  # fmt: skip
    variants = [base]
    variants += [{**base, "zero_stage": z} for z in (1.0, 2.0, 3.0)]
    variants += [{**base, "tensor_parallel": 2 * tp, "sequence_parallel": 1.0},
                 {**base, "pipeline_parallel": 2 * pp}, {**base, "context_parallel": 2 * cp},
                 {**base, "recompute": RECOMPUTE_CODES["full"]}]  # fmt: skip
    columns = {k: [v[k] for v in variants] for k in base}
    # the reserved peaks on a device that keeps the backward's cached blocks under the optimizer
    # step's buffers (near its capacity the allocator releases them, so a stage with more to
    # hold can peak lower than one that keeps them: docs/model.md §C2.1); on the device itself,
    # a variant with more sharding or recompute fits wherever the one below it does
    memory = _grid_memory(capacity_B=2.0**50, **columns)
    fits = _grid_memory(**columns) <= llama().system.device.hbm_capacity_B
    assert np.all(np.diff(fits[:3].astype(int)) >= 0) and fits[3] >= fits[0]
    assert np.all(fits[4:8] >= fits[0])
    zeros = memory[:4]
    # ZeRO-1 and -2 never hold more than the stage below; ZeRO-3 never more than plain data
    # parallelism. ZeRO-3 against ZeRO-2 is physics, not a rule: its gathered blocks (and a
    # 128k-vocabulary embedding unit) can outweigh sharding 2 bytes per parameter over few
    # ranks (FSDP over 2 ranks of a small pipeline stage).
    assert np.all(np.diff(zeros[:3]) <= 1e-6 * zeros[:2])
    assert zeros[3] <= zeros[0] * (1 + 1e-12)
    # more TP / PP / CP never more, with even stages: nanotron's compute-balanced cut
    # (pipeline_balance compute) gives rank 0 floor(t/c) + 1 layers of the p micro-batches it
    # holds, and (floor(t/c) + 1)·p grows with p (docs/model.md §C2.3), physics not a bug
    assert np.all(memory[4:7] <= memory[0] * (1 + 1e-12))
    assert memory[7] <= memory[0] * (1 + 1e-12)  # full recompute never more


@settings(max_examples=30, deadline=None)
@given(pp=st.sampled_from([2, 4, 8]), v=st.sampled_from([1, 2]))
def test_more_micro_batches_in_flight_never_lower_memory(pp: int, v: int) -> None:
    # global batch 512 on dp 1: micro-batches m = 512 / mb; fewer than pp stages keep fewer
    # in flight (1F1B holds min(m, p))
    batches = [4.0, 8.0, 16.0, 64.0, 512.0]
    memory = _grid_memory(global_batch_size=batches, pipeline_parallel=[pp] * 5,
                          micro_batch_size=[1.0] * 5, data_parallel=[1.0] * 5,
                          virtual_pipeline_stages=[float(v)] * 5)  # fmt: skip
    assert np.all(np.diff(memory) >= -1e-6 * memory[:-1])


def test_public_runs_modelled_as_fitting_their_devices() -> None:
    from deepflow.validation import validation_report

    report = validation_report()
    refused = [r["id"] for r in report["cases"] if r.get("feasible") is False]
    # every run that happened fits, Nemotron-4 340B FP8 (NeMo 24.07, tp 8 pp 8 dp 2: its
    # optimizer shards over only 2 ranks) included: Apex's distributed Adam keeps only the
    # low 16 bits of its master weights (79.0 GiB with the reserves, of 80)
    assert refused == []


def test_peak_memory_measurements_are_scored() -> None:
    from deepflow.validation import score_memory_cases

    rows = score_memory_cases()
    groups: dict[str, list[float]] = {}
    for r in rows:
        groups.setdefault(r["group"], []).append(abs(r["error"]))
    assert len(rows) >= 15 and len(groups) >= 3
    assert all(r["measured_GiB"] > 0 and r["model_GiB"] > 0 for r in rows)
    # README "Memory": group-weighted mean |error| 7.4 % (target <= 10 %), 8.8 % by row, max
    # 24.8 % (target <= 20 %, not met)
    assert np.mean([np.mean(e) for e in groups.values()]) <= 0.08
    from deepflow.validation import validation_report

    report = validation_report()
    assert report["memory_group_weighted_mean_abs_error"] == pytest.approx(
        np.mean([np.mean(e) for e in groups.values()]), rel=1e-12
    )
    assert np.mean([abs(r["error"]) for r in rows]) <= 0.095
    assert max(abs(r["error"]) for r in rows) <= 0.25
    assert all(r["feasible"] for r in rows)  # every measured run modelled as fitting


def test_evaluate_cli_prints_and_emits_the_breakdown() -> None:
    from typer.testing import CliRunner

    from deepflow.cli import app

    path = str(SCENARIOS / "llama3-8b-h100.yaml")
    as_json = CliRunner().invoke(app, ["evaluate", path, "--json"])
    assert as_json.exit_code == 0, as_json.output
    data = json.loads(as_json.stdout)
    assert sum(data["memory_breakdown_B"].values()) == pytest.approx(data["memory_per_device_B"])
    human = CliRunner().invoke(app, ["evaluate", path])
    assert "where the memory goes (per device)" in human.stdout
    assert "optimizer_states" in human.stdout


def test_apex_remainders_keep_half_the_master_weights_and_nothing_else_changes() -> None:
    s = llama()
    fp32 = evaluate_one(s)["memory_breakdown_B"]
    rem = evaluate_one(dataclasses.replace(s, mapping=dataclasses.replace(
        s.mapping, master_weights="remainders")))["memory_breakdown_B"]  # fmt: skip
    assert rem["master_weights"] == fp32["master_weights"] / 2
    same = [k for k in fp32 if k not in ("master_weights", "fragmentation")]
    assert all(rem[k] == fp32[k] for k in same)


def test_fp8_parameters_replace_the_16_bit_weights_and_their_cache() -> None:
    s = llama()
    fp8 = dataclasses.replace(s, workload=dataclasses.replace(s.workload, precision="fp8"),
                              mapping=dataclasses.replace(s.mapping, zero_stage=1))  # fmt: skip
    cached = evaluate_one(fp8)["memory_breakdown_B"]
    own = evaluate_one(dataclasses.replace(fp8, mapping=dataclasses.replace(
        fp8.mapping, fp8_params=True)))["memory_breakdown_B"]  # fmt: skip
    assert own["weights"] == cached["weights"] / 2
    assert (cached["fp8_weight_cache"] > 0, own["fp8_weight_cache"]) == (True, 0.0)
    assert own["master_weights"] == cached["master_weights"]


def test_nanotron_stages_are_balanced_by_compute_with_the_output_layer() -> None:
    # nanotron build_model (src/nanotron/models/base.py) on its 1.34B benchmark model: 16
    # layers of cost 2^26 (4·32·64·2048 + 3·8192·2048) and an output layer of 2^28 = 4 layers;
    # over 2 stages the threshold is 10 layers' cost, the block that crosses it stays: rank 0
    # holds 11 layers, rank 1 five and the output layer
    from deepflow.oracle.workloads.transformer.memory import stage_layers
    from deepflow.oracle.workloads.transformer.ops import ArrayOps
    from deepflow.oracle.workloads.transformer.shapes import inputs

    model = llama().workload.model
    assert isinstance(model, TransformerSpec)
    base = transformer_columns(model, llama().mapping, 256)
    x = {k: float(v[0]) for k, v in base.items()}
    x |= {"num_layers": 16.0, "hidden_size": 2048.0, "num_attention_heads": 32.0,
          "num_kv_heads": 32.0, "head_dim": 0.0, "ffn_hidden_size": 8192.0, "swiglu": 1.0,
          "vocab_size": 131072.0, "pipeline_parallel": 2.0, "pipeline_balance": 1.0}  # fmt: skip
    caps = device_caps(llama().system.device, "bf16", calibration=current_calibration())
    ops = ArrayOps(caps, network_model(llama()))

    def layers(**columns: float) -> tuple[float, float]:
        first, last = stage_layers(inputs(caps, {**x, **columns}, ops), ops)
        return float(first), float(last)

    assert layers() == (11.0, 5.0)
    assert layers(pipeline_parallel=1.0) == (16.0, 16.0)
    assert layers(pipeline_balance=0.0) == (8.0, 8.0)  # Megatron: L/p each


def test_nanotron_fp32_accumulator_adds_ddp_buckets_and_the_16_bit_grads() -> None:
    # FP32GradientAccumulator: the fp32 buffer (4 B, unsharded under ZeRO-1) as Megatron's
    # main gradients; with data parallelism DDP's 16-bit buckets (2 B) under ZeRO-0, and under
    # ZeRO-1, which builds no DDP, the optimizer's flattened all-gather buffers (2 + 2/D B);
    # the 16-bit .grad of a backward only where it outgrows the activations it replaces (on a
    # device that holds the optimizer step's buffers on top of the backward's cached blocks)
    s = with_capacity(llama(), 160 * 2**30)
    params = memory_of(s, data_parallel=1)[1]["weights"] / 2
    _, main = memory_of(s, data_parallel=8, zero_stage=1)
    _, acc = memory_of(s, data_parallel=8, zero_stage=1, gradient_buffers=1)
    one_mb = acc["activations"]  # pp 1: one micro-batch's activations
    extra = 2 * params * (1 + 1 / 8) + max(2 * params - one_mb, 0.0)
    assert acc["gradients"] - main["gradients"] == pytest.approx(extra, rel=1e-12)
    _, main0 = memory_of(s, data_parallel=8, zero_stage=0)
    _, ddp = memory_of(s, data_parallel=8, zero_stage=0, gradient_buffers=1)
    assert ddp["gradients"] - main0["gradients"] == pytest.approx(
        2 * params + max(2 * params - ddp["activations"], 0.0), rel=1e-12
    )
    _, solo = memory_of(s, data_parallel=1, zero_stage=1, gradient_buffers=1)
    _, solo_main = memory_of(s, data_parallel=1, zero_stage=1)
    assert solo["gradients"] - solo_main["gradients"] == pytest.approx(
        max(2 * params - one_mb, 0.0), abs=1.0
    )


def test_zero1_gather_buffers_take_the_backwards_memory_where_the_device_cannot_hold_both() -> None:
    # the optimizer step's buffers come after the backward: on top of its cached blocks where
    # the device holds both, else (a failed cudaMalloc releases the free cached blocks and
    # retries) in the memory the backward freed, so they add only what exceeds it
    s = with_capacity(llama(), 160 * 2**30)
    params = memory_of(s, data_parallel=1)[1]["weights"] / 2
    kept = []
    for dp in (2, 8):  # the backward frees less than the buffers, then more
        buffers = 2 * params * (1 + 1 / dp)
        columns = {"data_parallel": dp, "zero_stage": 1, "gradient_buffers": 1}
        total, roomy = memory_of(s, **columns)
        tight_total, cut = memory_of(with_capacity(s, total - 2**30), **columns)
        main = memory_of(s, data_parallel=dp, zero_stage=1)[1]
        grad16 = roomy["gradients"] - main["gradients"] - buffers  # the .grad's excess
        freed = cut["activations"] + cut["logits"] + grad16
        added = max(buffers - freed, 0.0)
        kept.append(added)
        assert cut["gradients"] == pytest.approx(roomy["gradients"] - buffers + added, rel=1e-12)
        assert tight_total == pytest.approx(total - (buffers - added) * (1 + _fragmentation()),
                                            rel=1e-12)  # fmt: skip
    assert kept[0] > 0 and kept[1] == 0


def test_recorded_tp_gradients_hold_two_full_length_blocks_a_layer_the_host_runs_ahead() -> None:
    # nanotron's asynchronous reduce-scatters of the column linears' full-length input
    # gradients: reserved (not allocated) memory, two blocks of s·b·h for each of the layers
    # the host thread leads the GPU by, up to the memory the device has left
    s = with_capacity(llama(), 160 * 2**30)
    model = s.workload.model
    assert isinstance(model, TransformerSpec)
    columns = {"tensor_parallel": 2, "sequence_parallel": 1, "data_parallel": 4,
               "pipeline_parallel": 1, "micro_batch_size": 2}  # fmt: skip
    total, plain = memory_of(s, **columns)
    held_total, held = memory_of(s, **columns, recorded_tp_gradients=1)
    ahead = current_calibration().memory_of("hopper").recorded_layers_ahead
    layers = min(model.num_layers, ahead)
    block = 2 * model.seq_length * 2 * model.hidden_size  # s·b·h in 16 bits
    assert held["recorded_blocks"] == pytest.approx(2 * layers * block, rel=1e-12)
    assert held_total == pytest.approx(total + held["recorded_blocks"], rel=1e-12)
    assert plain["recorded_blocks"] == 0.0
    assert {k: v for k, v in held.items() if k != "recorded_blocks"} == {
        k: v for k, v in plain.items() if k != "recorded_blocks"}  # fmt: skip
    # without tensor parallelism nothing is reduce-scattered
    assert memory_of(s, **{**columns, "tensor_parallel": 1},
                     recorded_tp_gradients=1)[1]["recorded_blocks"] == 0.0  # fmt: skip
    # near the capacity the allocator waits for the collectives and frees the blocks: they
    # fill what is left and never make a run not fit
    tight_total, tight = memory_of(with_capacity(s, total + block), **columns,
                                   recorded_tp_gradients=1)  # fmt: skip
    assert tight["recorded_blocks"] == pytest.approx(block, rel=1e-9)
    assert tight_total == pytest.approx(total + block, rel=1e-9)
    # an allocated peak leaves them out
    from deepflow.validation import modelled_peak_memory_B

    result = {"memory_per_device_B": held_total, "memory_breakdown_B": held}
    assert modelled_peak_memory_B(result, "allocated") == pytest.approx(
        modelled_peak_memory_B({"memory_per_device_B": total, "memory_breakdown_B": plain},
                               "allocated"), rel=1e-12)  # fmt: skip


def with_capacity(s: Scenario, capacity_B: float) -> Scenario:
    """``s`` on its device with ``capacity_B`` bytes of memory."""
    device = dataclasses.replace(s.system.device, hbm_capacity_B=capacity_B)
    return dataclasses.replace(s, system=dataclasses.replace(s.system, device=device))


def _fragmentation() -> float:
    return current_calibration().memory_of("hopper").fragmentation


def test_activation_offload_keeps_the_other_layers_and_one_in_flight() -> None:
    # Megatron-Core --cpu-offloading-num-layers N (PP 1): N of the L layers' activations in
    # host memory, one more layer's on the device while it is copied
    s = llama()
    layers = s.workload.model.num_layers  # type: ignore[union-attr]
    _, kept = memory_of(s, pipeline_parallel=1, recompute=RECOMPUTE_CODES["none"])
    _, off = memory_of(s, pipeline_parallel=1, recompute=RECOMPUTE_CODES["none"],
                       activation_offload_layers=layers // 2)  # fmt: skip
    expected = kept["activations"] * (layers - layers // 2 + 1) / layers
    assert off["activations"] == pytest.approx(expected, rel=1e-12)
    assert off["weights"] == kept["weights"]


def _offload_step(s: Scenario, host_GBps: float, offloaded: int) -> dict[str, float]:
    """Breakdown of ``s`` at PP 1, no recompute, ``offloaded`` layers offloaded, on its device
    with a host link of ``host_GBps`` each way."""
    model = s.workload.model
    assert isinstance(model, TransformerSpec)
    x = transformer_columns(model, s.mapping, s.workload.global_batch_size)
    x |= {"pipeline_parallel": np.atleast_1d(1.0), "data_parallel": np.atleast_1d(8.0),
          "recompute": np.atleast_1d(float(RECOMPUTE_CODES["none"])),
          "activation_offload_layers": np.atleast_1d(float(offloaded))}  # fmt: skip
    cal = current_calibration()
    caps = dataclasses.replace(
        device_caps(s.system.device, s.workload.precision, calibration=cal),
        host_to_device_Bps=host_GBps * 1e9, device_to_host_Bps=host_GBps * 1e9,
    )  # fmt: skip
    out = transformer_step(caps, network_model(s, calibration=cal), x, calibration=cal)
    return {k: float(np.asarray(v).reshape(-1)[0]) for k, v in out["breakdown_s"].items()}


def test_activation_offload_exposes_the_copies_a_layer_cannot_hide() -> None:
    # Transformer Engine overlaps each offloaded layer's copy with the next layer's compute
    # and waits for it: a copy longer than a layer's forward (out) or backward (back) shows
    s = llama()
    layers = s.workload.model.num_layers  # type: ignore[union-attr]
    none = _offload_step(s, 1.0, 0)
    assert none["activation_offload"] == 0.0
    # a link fast enough hides every copy; the rest of the step does not change
    fast = _offload_step(s, 1e6, layers // 2)
    assert fast["activation_offload"] == 0.0
    assert fast == none
    # a slow link: min(N, n) layers of m micro-batches, each copy minus the compute it hides
    slow = _offload_step(s, 1.0, layers // 2)
    x = transformer_columns(s.workload.model, s.mapping, s.workload.global_batch_size)  # type: ignore[arg-type]
    act = float(activation_bytes_per_layer(x | {"recompute": float(RECOMPUTE_CODES["none"])})[0])
    m = s.workload.global_batch_size / (8 * s.mapping.micro_batch_size)
    outside = ("data_parallel_comm", "optimizer", "embedding_sync", "pipeline_bubble")
    per_layer = sum(v for k, v in none.items() if k not in outside) / (m * layers)
    copies = 2 * act / 1e9 * (layers // 2) * m
    assert copies - per_layer * m * layers < slow["activation_offload"] < copies
    # more offloaded layers or a slower link never hide more
    assert _offload_step(s, 1.0, layers)["activation_offload"] > slow["activation_offload"]
    assert _offload_step(s, 2.0, layers // 2)["activation_offload"] < slow["activation_offload"]


def test_host_links_come_from_the_preset_else_pcie_gen5() -> None:
    from deepflow.config import load_device

    gb200 = device_caps(load_device("gb200"), "bf16")  # nvbandwidth all_to_host / host_to_all
    assert (gb200.device_to_host_Bps, gb200.host_to_device_Bps) == (182.1e9, 168.5e9)
    h100 = device_caps(load_device("h100-sxm5-80gb"), "bf16")
    assert (h100.device_to_host_Bps, h100.host_to_device_Bps) == (52e9, 51e9)


def test_partial_recompute_recomputes_n_layers_and_keeps_the_rest() -> None:
    s = llama()
    layers = s.workload.model.num_layers  # type: ignore[union-attr]
    base = {"pipeline_parallel": 1, "virtual_pipeline_stages": 1}
    _, none = memory_of(s, **base, recompute=RECOMPUTE_CODES["none"])
    _, full = memory_of(s, **base, recompute=RECOMPUTE_CODES["full"])
    _, every = memory_of(s, **base, recompute=RECOMPUTE_CODES["full"],
                         recompute_num_layers=layers)  # fmt: skip
    assert every["activations"] == pytest.approx(full["activations"], rel=1e-12)
    _, half = memory_of(s, **base, recompute=RECOMPUTE_CODES["full"],
                        recompute_num_layers=layers // 2)  # fmt: skip
    one = none["activations"] / layers  # one layer's activations without recompute
    kept_input = (full["activations"] - one) / layers  # full recompute keeps the input
    expected = (layers // 2) * kept_input + (layers - layers // 2) * one + one
    assert half["activations"] == pytest.approx(expected, rel=1e-9)


def test_partial_recompute_reruns_that_share_of_the_forward() -> None:
    s = llama()
    layers = s.workload.model.num_layers  # type: ignore[union-attr]
    mapping = dataclasses.replace(s.mapping, activation_recompute="full")
    full = evaluate_one(dataclasses.replace(s, mapping=mapping))["breakdown_s"]["recompute"]
    quarter = evaluate_one(dataclasses.replace(s, mapping=dataclasses.replace(
        mapping, recompute_num_layers=layers // 4 // s.mapping.pipeline_parallel)))  # fmt: skip
    share = (layers // 4 // s.mapping.pipeline_parallel) * s.mapping.virtual_pipeline_stages / (
        -(-layers // s.mapping.pipeline_parallel))  # fmt: skip
    assert quarter["breakdown_s"]["recompute"] == pytest.approx(full * share, rel=1e-9)


@settings(max_examples=30, deadline=None)
@given(n=st.integers(0, 31), off=st.integers(0, 30))
def test_more_recomputed_or_offloaded_layers_never_raise_memory(n: int, off: int) -> None:
    full = RECOMPUTE_CODES["full"]
    memory = _grid_memory(recompute=[full] * 4, pipeline_parallel=[1.0] * 4,
                          virtual_pipeline_stages=[1.0] * 4,
                          recompute_num_layers=[n + 1, n, 0, n],
                          activation_offload_layers=[0, 0, 0, off + 1])  # fmt: skip
    # n + 1 layers recomputed hold no more than n (0: every layer, the least)
    if n > 0:
        assert memory[0] <= memory[1] * (1 + 1e-12)
    assert memory[2] <= memory[0] * (1 + 1e-12)
    assert memory[3] <= memory[1] * (1 + 1e-12)


def test_a_measured_stage_is_scored_as_that_stage() -> None:
    from deepflow.oracle.evaluate import stage_memory_B

    s = llama()
    s = dataclasses.replace(s, mapping=dataclasses.replace(
        s.mapping, pipeline_parallel=4, data_parallel=s.mapping.data_parallel * s.mapping.
        pipeline_parallel // 4, virtual_pipeline_stages=2))  # fmt: skip
    peak = evaluate_one(s)
    first, last = stage_memory_B(s, "first"), stage_memory_B(s, "last")
    assert max(sum(first.values()), sum(last.values())) == pytest.approx(
        peak["memory_per_device_B"], rel=1e-12
    )
    assert first["logits"] == 0 < last["logits"]
    # interleaved 1F1B: the last rank warms up (v - 1)·p chunks, then runs one more
    model = s.workload.model
    assert isinstance(model, TransformerSpec)
    x = transformer_columns(model, s.mapping, s.workload.global_batch_size)
    layer = float(activation_bytes_per_layer({k: v[0] for k, v in x.items()}))
    chunks = (2 - 1) * 4 + 1
    stage_layers = -(-model.num_layers // 4)
    assert last["activations"] == pytest.approx(1.05 * chunks * stage_layers / 2 * layer, rel=1e-12)
    with pytest.raises(ValueError, match="stage must be one of peak, first, last; got 'middle'"):
        stage_memory_B(s, "middle")
    with pytest.raises(ConfigError, match="stage memory is modelled for transformer training; "
                                          "got a training GemmSpec workload"):  # fmt: skip
        stage_memory_B(load_scenario(SCENARIOS / "gemm-a100.yaml"), "last")


def test_a_compiled_program_gathers_weight_by_weight_and_reuses_the_loss_buffers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # XLA (the TPU family's buffer_lifetime, docs/model.md §C2.5): FSDP holds the largest
    # weight, the next one and the first's gradient, 16-bit each; the loss buffers share the
    # re-materialised layer's memory. The eager allocator's accounting holds two whole
    # layers and one layer's fp32 gradients, and the loss buffers besides.
    from deepflow.config import calibration

    tpu = load_scenario(SCENARIOS / "llama3-8b-maxtext-tpu-v5e.yaml")
    compiled = evaluate_one(tpu)["memory_breakdown_B"]
    model = tpu.workload.model
    assert isinstance(model, TransformerSpec)
    own = calibration.Calibration.memory_of

    def eager(self: calibration.Calibration, family: str) -> calibration.MemoryCalibration:
        return dataclasses.replace(own(self, family), buffer_lifetime="caching_allocator")

    monkeypatch.setattr(calibration.Calibration, "memory_of", eager)
    allocator = evaluate_one(tpu)["memory_breakdown_B"]
    h, f, v = model.hidden_size, model.ffn_hidden_size, model.vocab_size
    largest = max(h * f, v * h) / tpu.mapping.tensor_parallel
    assert compiled["fsdp_buffers"] == pytest.approx(3 * 2.0 * largest, rel=1e-9)
    assert compiled["fsdp_buffers"] < allocator["fsdp_buffers"]
    assert compiled["logits"] < allocator["logits"]
    assert compiled["activations"] == pytest.approx(allocator["activations"], rel=1e-12)


def test_an_unknown_buffer_lifetime_is_refused(tmp_path: Path) -> None:
    from deepflow.config.calibration import _memory_calibration

    path = tmp_path / "frameworks.yaml"
    path.write_text("memory: {workspace_MiB: 0, allocator_fragmentation: 0, cuda_context_MiB: 0,"
                    " nccl_buffers_MiB: 0, buffer_lifetime: eager}\n")  # fmt: skip
    with pytest.raises(ConfigError, match="buffer_lifetime"):
        _memory_calibration(path)


def two_stages(scenario: Scenario) -> Scenario:
    """The scenario on two pipeline stages (half the data-parallel ranks)."""
    mapping = scenario.mapping
    return dataclasses.replace(scenario, mapping=dataclasses.replace(
        mapping, pipeline_parallel=2, data_parallel=mapping.data_parallel // 2))  # fmt: skip


def test_tied_embeddings_hold_one_vocabulary_matrix_on_a_single_stage() -> None:
    scenario = llama()  # one stage, FSDP over 8: 16/8 bytes a parameter (ZeRO-3)
    model = scenario.workload.model
    assert isinstance(model, TransformerSpec) and scenario.mapping.pipeline_parallel == 1
    _, untied = memory_of(scenario)
    _, tied = memory_of(scenario, tied_embeddings=1.0)
    shards = scenario.mapping.data_parallel * scenario.mapping.tensor_parallel
    matrix = model.vocab_size * model.hidden_size / shards
    states = ("weights", "master_weights", "gradients", "optimizer_states")
    assert sum(untied[k] - tied[k] for k in states) == pytest.approx(16.0 * matrix, rel=1e-9)
    # with pipeline stages either end keeps its own copy: nothing changes in memory
    staged = two_stages(scenario)
    assert memory_of(staged, tied_embeddings=1.0) == memory_of(staged)


def test_only_a_tied_model_syncs_its_embedding_between_the_pipeline_ends() -> None:
    scenario = llama()
    staged = two_stages(scenario)
    model = scenario.workload.model
    assert isinstance(model, TransformerSpec)
    untied = evaluate_one(staged)["breakdown_s"]["embedding_sync"]
    tied_model = dataclasses.replace(model, tied_embeddings=True)
    tied = evaluate_one(
        dataclasses.replace(staged, workload=dataclasses.replace(staged.workload, model=tied_model))
    )["breakdown_s"]["embedding_sync"]
    assert untied == 0.0 < tied
