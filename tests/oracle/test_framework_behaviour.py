"""Framework behaviours the step model follows: FP8 mixed precision and pipeline-send overlap
(docs/model.md §C6.4, §C3.2)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

from deepflow.config import load_scenario, scenario_from_mapping
from deepflow.config.calibration import calibration_from, calibration_path, current_calibration
from deepflow.config.specs import Scenario
from deepflow.errors import ConfigError
from deepflow.oracle.evaluate import evaluate_one

SCENARIOS = Path(__file__).resolve().parents[2] / "configs" / "scenarios"


def llama(precision: str = "bf16", **mapping: object) -> Scenario:
    s = load_scenario(SCENARIOS / "llama3-8b-h100.yaml")
    return dataclasses.replace(
        s,
        workload=dataclasses.replace(s.workload, precision=precision),
        mapping=dataclasses.replace(s.mapping, **mapping),
    )


def test_fp8_training_runs_only_the_linear_layers_in_fp8() -> None:
    bf16, fp8 = evaluate_one(llama("bf16")), evaluate_one(llama("fp8"))
    b, f = bf16["breakdown_s"], fp8["breakdown_s"]
    # attention stays 16-bit (Transformer Engine's fused attention in BF16)
    assert f["attention"] == pytest.approx(b["attention"], rel=1e-12)
    # the linear layers' GEMMs are faster, but not the output layer's 16-bit GEMM: more than
    # half the 16-bit GEMM time remains
    assert 0.5 * b["gemm"] < f["gemm"] < b["gemm"]
    # activations stay 16-bit and every GEMM operand is cast with its transpose: more bytes
    assert f["elementwise"] > b["elementwise"]
    # TP and DP traffic stays 16-bit: the same collectives
    assert f["data_parallel_comm"] == pytest.approx(b["data_parallel_comm"], rel=1e-12)


def test_interleaved_pipeline_sends_hide_under_compute_when_overlapped() -> None:
    base = {"data_parallel": 1, "pipeline_parallel": 8, "tensor_parallel": 1,
            "virtual_pipeline_stages": 2, "zero_stage": 0}  # fmt: skip
    exposed = evaluate_one(llama(**base, overlap_p2p_comm=False))["breakdown_s"]
    hidden = evaluate_one(llama(**base, overlap_p2p_comm=True))["breakdown_s"]
    assert exposed["pipeline_p2p"] > 0
    assert hidden["pipeline_p2p"] < exposed["pipeline_p2p"]
    # without interleaving Megatron's schedule has nothing to overlap the sends with
    plain = {**base, "virtual_pipeline_stages": 1}
    a = evaluate_one(llama(**plain, overlap_p2p_comm=False))["breakdown_s"]["pipeline_p2p"]
    b = evaluate_one(llama(**plain, overlap_p2p_comm=True))["breakdown_s"]["pipeline_p2p"]
    assert a == b


def test_interleaved_chunks_reduce_their_gradients_as_each_chunk_finishes() -> None:
    """Megatron-Core syncs a model chunk's gradients with its last micro-batch backward: with
    v chunks the reduce-scatters queue behind the cool-down's chunk backwards (§C3.2)."""
    import numpy as np

    from deepflow.oracle.workloads.transformer.data_parallel import _chunked_exposed

    comm, compute = 1.0, 0.2
    assert _chunked_exposed(np, comm, compute, 1.0, 4.0) == pytest.approx(0.8)  # (c - t)+
    # v = 4, p = 4: t_c 0.05, chunks final 0.2 apart; 0.25 each queue: 1 - 13 x 0.05
    assert _chunked_exposed(np, comm, compute, 4.0, 4.0) == pytest.approx(0.35)
    # the links keep up: only the last chunk's reduction outlasts its own backward
    assert _chunked_exposed(np, 1.2, 0.8, 4.0, 4.0) == pytest.approx(0.3 - 0.2)
    exposed = [_chunked_exposed(np, comm, compute, v, 4.0) for v in (1.0, 2.0, 3.0, 6.0, 12.0)]
    assert exposed == sorted(exposed, reverse=True) and min(exposed) >= 0.0
    # the preset's 70B (dp 2 × cp 2 over nodes, distributed optimizer, v 5)
    core = load_scenario(SCENARIOS / "llama3-70b-megatron-core-h100.yaml")
    comm_of = {v: evaluate_one(dataclasses.replace(core, mapping=dataclasses.replace(
        core.mapping, virtual_pipeline_stages=v)))["breakdown_s"]["data_parallel_comm"]
        for v in (1, 5)}  # fmt: skip
    assert 0.0 < comm_of[5] < comm_of[1] / 2


def _tp8(**mapping: object) -> dict[str, float]:
    base = {"data_parallel": 1, "tensor_parallel": 8, "zero_stage": 0, "micro_batch_size": 1,
            "sequence_parallel": True}  # fmt: skip
    return evaluate_one(llama(**base, **mapping))["breakdown_s"]  # type: ignore[return-value]


def test_waited_on_backward_collectives_expose_more_than_megatrons_async_ones() -> None:
    megatron = _tp8(tp_comm_overlap=False, tp_async_backward=True)
    dtensor = _tp8(tp_comm_overlap=False, tp_async_backward=False)
    assert megatron["tensor_parallel_comm"] < dtensor["tensor_parallel_comm"]
    # nothing else changes
    assert megatron["gemm"] == dtensor["gemm"]


def test_decomposed_tp_collectives_hide_under_their_gemms_but_not_all_of_them() -> None:
    plain = _tp8(tp_comm_overlap=False)
    overlapped = _tp8(tp_comm_overlap=True)
    assert 0 < overlapped["tensor_parallel_comm"] < plain["tensor_parallel_comm"]
    # async TP (DTensor's backward, the forward decomposed) hides less than userbuffers
    torch_async = _tp8(tp_comm_overlap=True, tp_async_backward=False)
    assert overlapped["tensor_parallel_comm"] < torch_async["tensor_parallel_comm"]
    assert (
        torch_async["tensor_parallel_comm"] < _tp8(tp_async_backward=False)["tensor_parallel_comm"]
    )


def test_decomposition_leaves_one_chunk_of_the_gemm_uncovered() -> None:
    from deepflow.oracle.workloads.transformer.layer import _decomposed
    from deepflow.oracle.workloads.transformer.ops import ArrayOps

    # a collective shorter than 7/8 of its GEMM hides; a longer one shows the excess
    assert _decomposed(0.5, 1.0, 8.0, ArrayOps) == 0.0
    assert _decomposed(1.0, 1.0, 8.0, ArrayOps) == pytest.approx(1 / 8)
    assert _decomposed(3.0, 1.0, 2.0, ArrayOps) == pytest.approx(2.5)


def test_attention_kernels_rank_as_their_microbenchmarks() -> None:
    times = {k: _tp8(attention_kernel=k)["attention"] for k in ("fa2", "cudnn", "fa3", "triton")}
    # pre-MLIR Triton's FlashAttention, below FlashAttention-2 (docs/model.md §C6.2)
    assert times["fa3"] < times["cudnn"] < times["fa2"] < times["triton"]
    # only the attention core changes
    assert _tp8(attention_kernel="fa3")["gemm"] == _tp8(attention_kernel="fa2")["gemm"]


def test_fused_attention_runs_slower_per_flop_over_short_sequences() -> None:
    """A query block's fixed work beside its key loop (the family's attention_block_overhead,
    §C6.2) weighs more over fewer keys: the rates the efficiencies state at 8k tokens fall
    below it and rise above it; pre-MLIR Triton, whose rate is fitted at its runs' length,
    keeps it at every length."""
    from deepflow.oracle.workloads.transformer.layer import attention_length_factor

    assert attention_length_factor(8192.0, 4.05) == 1.0
    assert attention_length_factor(2048.0, 0.0) == 1.0
    short, long = attention_length_factor(2048.0, 4.05), attention_length_factor(32768.0, 4.05)
    assert attention_length_factor(1024.0, 4.05) > short > 1.0 > long
    # a 128-key query block visits (2048/128 + 1)/2 = 8.5 key blocks: (8.5 + c0)/8.5 over the
    # same at 8k, (32.5 + c0)/32.5
    assert short == pytest.approx((1 + 4.05 / 8.5) / (1 + 4.05 / 32.5), rel=1e-12)

    def attention_per_token_and_key(kernel: str, tokens: int) -> float:
        s = llama(tensor_parallel=8, data_parallel=1, zero_stage=0, micro_batch_size=8,
                  attention_kernel=kernel)  # fmt: skip
        model = dataclasses.replace(s.workload.model, seq_length=tokens)
        s = dataclasses.replace(s, workload=dataclasses.replace(s.workload, model=model))
        return float(evaluate_one(s)["breakdown_s"]["attention"]) / tokens**2

    flash = attention_per_token_and_key("fa2", 2048) / attention_per_token_and_key("fa2", 8192)
    triton = (attention_per_token_and_key("triton", 2048)
              / attention_per_token_and_key("triton", 8192))  # fmt: skip
    # the causal mask's whole diagonal tiles weigh more at 2k for both (§C1.1); only
    # FlashAttention-2 pays the query blocks' fixed work on top
    assert flash == pytest.approx(triton * short, rel=0.02)
    assert triton == pytest.approx((1 + 128 / 2048) / (1 + 128 / 8192), rel=0.02)


def test_rowwise_fp8_is_slower_than_tensorwise_at_equal_shapes() -> None:
    tensorwise = evaluate_one(llama("fp8", tensor_parallel=8, data_parallel=1, zero_stage=0))
    rowwise = evaluate_one(
        llama("fp8", tensor_parallel=8, data_parallel=1, zero_stage=0, fp8_recipe="rowwise")
    )
    assert rowwise["step_time_s"] > tensorwise["step_time_s"]
    t, r = tensorwise["breakdown_s"], rowwise["breakdown_s"]
    # the casts along two axes of the gathered tensors and the backward GEMMs' rescales
    assert r["elementwise"] > t["elementwise"]
    # the GEMMs and the (16-bit) TP traffic are the same
    assert r["gemm"] == pytest.approx(t["gemm"], rel=1e-12)
    assert r["tensor_parallel_comm"] == pytest.approx(t["tensor_parallel_comm"], rel=1e-12)
    # outside FP8 training the recipe changes nothing
    bf16 = [
        evaluate_one(llama("bf16", fp8_recipe=k))["step_time_s"] for k in ("tensorwise", "rowwise")
    ]
    assert bf16[0] == bf16[1]


def test_mxfp8_gemms_take_the_measured_ratio_of_per_tensor_fp8_time(tmp_path: Path) -> None:
    """Transformer Engine's MXFP8 GEMMs against per-tensor FP8 (frameworks.yaml
    ``transformer_engine_mxfp8``): the linear layers' GEMM time scales by the ratio, their
    casts carry the block scales; attention and the TP traffic are the same."""

    def breakdown(precision: str, recipe: str, calibration: object = None) -> dict[str, float]:
        s = llama(precision, tensor_parallel=8, data_parallel=1, zero_stage=0, fp8_recipe=recipe)
        return evaluate_one(s, calibration=calibration)["breakdown_s"]  # type: ignore[arg-type,return-value]

    ratio = current_calibration().mxfp8.gemm_time_ratio
    assert ratio > 1.0
    tensor, mx = breakdown("fp8", "tensorwise"), breakdown("fp8", "mxfp8")
    # the output layer's 16-bit GEMM is outside the linear layers: more than 1, less than ratio
    assert tensor["gemm"] < mx["gemm"] < ratio * tensor["gemm"] * (1 + 1e-12)
    assert mx["elementwise"] > tensor["elementwise"]  # one E8M0 scale byte per 32 elements
    assert mx["attention"] == tensor["attention"]
    # the same 16-bit TP traffic, a little more of it hidden under the longer GEMMs
    assert mx["tensor_parallel_comm"] <= tensor["tensor_parallel_comm"]
    # a ratio of 1 leaves only the scale bytes
    data = yaml.safe_load(calibration_path("frameworks").read_text())
    data["transformer_engine_mxfp8"]["gemm_time_ratio"] = 1.0
    frameworks = tmp_path / "frameworks.yaml"
    frameworks.write_text(yaml.safe_dump(data))
    same = calibration_from((frameworks, calibration_path("kernels"), calibration_path("network")))
    assert breakdown("fp8", "mxfp8", same)["gemm"] == pytest.approx(tensor["gemm"], rel=1e-12)
    # outside FP8 training the recipe changes nothing
    assert breakdown("bf16", "mxfp8") == breakdown("bf16", "tensorwise")


def test_async_tp_fuses_no_all_gather_into_a_rowwise_float8_gemm() -> None:
    """PyTorch's async-TP pass fuses an all-gather only with matmuls that take the gathered
    tensor itself; the rowwise recipe gathers 16 bits and casts first, so only its
    reduce-scatters decompose (torch/_inductor/fx_passes/micro_pipeline_tp.py)."""

    def tp_comm(precision: str, recipe: str, overlap: bool) -> float:
        mapping = {"data_parallel": 1, "tensor_parallel": 8, "zero_stage": 0,
                   "micro_batch_size": 1, "sequence_parallel": True, "fp8_recipe": recipe,
                   "tp_comm_overlap": overlap}  # fmt: skip
        breakdown = evaluate_one(llama(precision, **mapping))["breakdown_s"]
        return float(breakdown["tensor_parallel_comm"])

    tensorwise = {o: tp_comm("fp8", "tensorwise", o) for o in (False, True)}
    rowwise = {o: tp_comm("fp8", "rowwise", o) for o in (False, True)}
    assert rowwise[False] == pytest.approx(tensorwise[False], rel=1e-12)  # 16-bit traffic
    # both gain from async TP, the rowwise recipe less: its all-gathers stay exposed
    assert tensorwise[True] < rowwise[True] < rowwise[False]
    # in 16-bit training the recipe changes nothing
    assert tp_comm("bf16", "rowwise", True) == tp_comm("bf16", "tensorwise", True)


def test_only_the_rowwise_casts_read_their_fitted_efficiency(tmp_path: Path) -> None:
    data = yaml.safe_load(calibration_path("frameworks").read_text())
    data["torchao_float8_rowwise"]["cast_efficiency"] /= 2
    frameworks = tmp_path / "frameworks.yaml"
    frameworks.write_text(yaml.safe_dump(data))
    files = (frameworks, calibration_path("kernels"), calibration_path("network"))
    slower = calibration_from(files)

    def breakdown(precision: str, recipe: str, calibration: object = None) -> dict[str, float]:
        s = llama(precision, tensor_parallel=8, data_parallel=1, zero_stage=0, fp8_recipe=recipe)
        return evaluate_one(s, calibration=calibration)["breakdown_s"]  # type: ignore[arg-type,return-value]

    fast, slow = breakdown("fp8", "rowwise"), breakdown("fp8", "rowwise", slower)
    assert slow["elementwise"] > fast["elementwise"] and slow["gemm"] == fast["gemm"]
    for precision, recipe in (("fp8", "tensorwise"), ("bf16", "rowwise")):
        assert breakdown(precision, recipe, slower) == breakdown(precision, recipe)


def test_context_parallel_ranks_exchange_only_their_tensor_parallel_kv_heads() -> None:
    from types import SimpleNamespace

    from deepflow.oracle.workloads.transformer.layer import Attention, context_comm

    class Ops:  # records the all-gather's message
        maximum = staticmethod(max)

        def __init__(self) -> None:
            self.msgs: list[float] = []

        def coll(self, kind: str, msg: float, size: float, stride: float, axes: float) -> float:
            self.msgs.append(msg)
            return 0.0

    def kv_message(tp: int, kv: int) -> float:
        i = SimpleNamespace(mb=1, s=8192, kv=kv, tp=tp, d_h=128, p=2.0, cp=2, st_cp=tp, axes=0.0)
        o = Ops()
        context_comm(i, o, Attention(fwd=1.0, bwd=2.0))  # type: ignore[arg-type]
        return o.msgs[0]

    # 8 KV heads over 8 TP ranks: one head each; over 16, still one (replicated)
    assert kv_message(1, 8) == 8 * kv_message(8, 8) == 8 * kv_message(16, 8)
    assert kv_message(8, 8) == 2 * 8192 * 128 * 2.0


def test_a_stated_head_dim_equal_to_hidden_over_heads_changes_nothing() -> None:
    s = llama()
    stated = dataclasses.replace(s, workload=dataclasses.replace(
        s.workload, model=dataclasses.replace(s.workload.model, head_dim=128)))  # fmt: skip
    a, b = evaluate_one(s), evaluate_one(stated)
    assert b["step_time_s"] == pytest.approx(a["step_time_s"], rel=1e-12)
    assert b["memory_per_device_B"] == pytest.approx(a["memory_per_device_B"], rel=1e-12)


def test_per_op_recompute_reruns_what_the_backward_needs_and_torchtitan_does_not_save() -> None:
    # torchtitan's per-op policy saves wq, wv, w1, w2 (every second mm of wq wk wv wo w1 w3
    # w2), the attention output and reduce-scatters: the backward re-runs K (wk), the up
    # projection w3, wo only without SP, and the unsaved collectives (docs/model.md §C2.2)
    from types import SimpleNamespace

    from deepflow.oracle.workloads.transformer.layer import (
        GemmTimes,
        TensorComm,
        op_recompute,
    )
    from deepflow.oracle.workloads.transformer.ops import ArrayOps

    def gemm(fwd: float) -> GemmTimes:
        return GemmTimes(fwd=fwd, dgrad=2 * fwd, wgrad=2 * fwd)

    gemms = SimpleNamespace(qkv=gemm(24.0), proj=gemm(32.0), up=gemm(100.0), down=gemm(50.0))
    tp = TensorComm(all_reduce=7.0, all_gather=5.0, reduce_scatter=5.0, fwd=0.0, bwd=0.0)

    def rerun(sp: bool, overlap: bool = False, swiglu: bool = True, rowwise: bool = False) -> float:
        x = {"swiglu": float(swiglu), "tp_comm_overlap": float(overlap), "fp8_recipe": 1.0}
        i = SimpleNamespace(a=32, kv=8, tp=8.0, sp=sp, x=x, fp8=rowwise)
        return float(op_recompute(i, ArrayOps, gemms, tp))  # type: ignore[arg-type]

    wk, w3 = 24.0 * 8 / 48, 50.0
    # SP: K and w3, the QKV and MLP inputs' two all-gathers
    assert rerun(sp=True) == pytest.approx(wk + w3 + 2 * 5.0)
    # no SP: wo rebuilds the residual stream, with the all-reduce after it
    assert rerun(sp=False) == pytest.approx(wk + w3 + 32.0 + 7.0)
    # async TP: each re-gather decomposed with its recomputed GEMM (K hides 7/8 of itself)
    assert rerun(sp=True, overlap=True) == pytest.approx(wk + w3 + (5.0 - 7 / 8 * wk))
    # ... but not a rowwise float8 GEMM's, which casts the gathered tensor first
    assert rerun(sp=True, overlap=True, rowwise=True) == rerun(sp=True)
    # a 2-matrix MLP: fc1 is saved and fc2's output feeds no backward
    assert rerun(sp=True, swiglu=False) == pytest.approx(wk + 2 * 5.0)


def test_per_op_recompute_costs_less_than_full_recompute_and_more_than_none() -> None:
    base = {"data_parallel": 1, "tensor_parallel": 8, "zero_stage": 0, "sequence_parallel": True}
    recompute = {
        mode: evaluate_one(llama(**base, activation_recompute=mode))["breakdown_s"]["recompute"]
        for mode in ("none", "selective_op", "full")
    }
    assert recompute["none"] == 0.0 < recompute["selective_op"] < recompute["full"]


def test_keeping_the_matmul_outputs_recomputes_attention_elementwise_and_tp_gathers() -> None:
    # docs/model.md §C2.2: selective_dots re-runs the attention core, the elementwise forward
    # and the forward's TP collectives, exactly; less than full recompute, more than none
    base = {"data_parallel": 1, "tensor_parallel": 8, "zero_stage": 0, "sequence_parallel": True}
    runs = {mode: evaluate_one(llama(**base, activation_recompute=mode))["breakdown_s"]
            for mode in ("none", "selective_dots", "full")}  # fmt: skip
    none, dots = runs["none"], runs["selective_dots"]
    assert 0.0 == none["recompute"] < dots["recompute"] < runs["full"]["recompute"]
    for part in ("gemm", "attention", "elementwise", "tensor_parallel_comm"):
        assert dots[part] == pytest.approx(none[part], rel=1e-12), part


def test_eager_elementwise_ops_move_the_bytes_autograd_moves_op_by_op() -> None:
    # docs/model.md §C6.3: torchtitan's eager RMSNorm 4p + 28 bytes an element forward and
    # 8p + 76 backward (fused 2p and 3p), its fp32 complex rotary 2p + 16 each way (fused 2p),
    # eager SiLU and mul 5p and 9p per gated element (fused 3p and 5p)
    from types import SimpleNamespace

    import numpy as np

    from deepflow.oracle.workloads.transformer.layer import _eager_bytes
    from deepflow.oracle.workloads.transformer.ops import ArrayOps

    def extra(norm: bool = True, rotary: bool = True, glu: bool = True, swiglu: bool = True):
        flags = {"fused_norm": norm, "fused_rotary": rotary, "fused_swiglu": glu, "swiglu": swiglu}
        x = {k: np.asarray(float(v)) for k, v in flags.items()}
        i = SimpleNamespace(p=2.0, x=x)
        fwd, bwd, _, _ = _eager_bytes(i, ArrayOps, 10.0, 100.0, 1000.0)  # type: ignore[arg-type]
        return float(fwd), float(bwd)

    assert extra() == (0.0, 0.0)
    assert extra(norm=False) == (2 * 10.0 * (36 - 4), 2 * 10.0 * (92 - 6))
    assert extra(rotary=False) == (100.0 * (20 - 4), 100.0 * (20 - 4))
    assert extra(glu=False) == (1000.0 * (10 - 6), 1000.0 * (18 - 10))
    # a GeLU model has neither a rotary embedding nor a GLU to run eager
    assert extra(rotary=False, glu=False, swiglu=False) == (0.0, 0.0)


def test_eager_elementwise_ops_slow_only_the_elementwise_kernels_and_their_recompute() -> None:
    base = {"data_parallel": 1, "tensor_parallel": 1, "zero_stage": 0,
            "activation_recompute": "selective_op"}  # fmt: skip
    fused = evaluate_one(llama(**base))
    eager = evaluate_one(llama(**base, fused_norm=False, fused_rotary=False, fused_swiglu=False))
    f, e = fused["breakdown_s"], eager["breakdown_s"]
    assert e["elementwise"] > 2 * f["elementwise"]
    assert e["recompute"] > f["recompute"]  # per-op SAC re-runs the eager forward ops
    assert e["gemm"] == f["gemm"] and e["attention"] == f["attention"]
    assert eager["step_time_s"] > fused["step_time_s"]


def test_fsdp_copies_move_each_implementations_bytes_every_micro_batch() -> None:
    # docs/model.md §C3.3, per unsharded parameter and micro-batch (p = 2, r the reduce
    # dtype's bytes): FSDP1 2p (the flat gradient from its views' gradients) + 2r (the
    # pre-divide) + p + 4 where it casts to an fp32 reduce: 8 or 18 bytes; FSDP2 copies each
    # all-gather out (2p, twice under ZeRO-3) and the gradients in (p + r): 14 bytes in fp32,
    # 10 without resharding after the forward; kernels: one each per layer
    from types import SimpleNamespace

    import numpy as np

    from deepflow.oracle.workloads.transformer.data_parallel import fsdp_copies
    from deepflow.oracle.workloads.transformer.ops import ArrayOps

    class Bytes(ArrayOps):
        @staticmethod
        def mem(nbytes: object, flops: object = 0.0, launches: object = 1.0) -> object:
            return np.asarray([nbytes, launches], dtype=float)

    def moved(impl: str, fp32: bool, zero: int = 3, dp: int = 8) -> tuple[float, float]:
        x = {"fsdp_implementation": float(("none", "fsdp1", "fsdp2").index(impl)),
             "fsdp_reduce_fp32": float(fp32), "fp8_params": 0.0}  # fmt: skip
        i = SimpleNamespace(
            x=x, p=2.0, fp8=False, zero=zero, dp=dp, dp_sh=dp, m=1.0, layers_stage=4.0
        )
        out = fsdp_copies(i, Bytes, SimpleNamespace(stage=1.0))  # type: ignore[arg-type]
        return float(out[0]), float(out[1])

    assert moved("fsdp1", False) == (8.0, 2 * 4)
    assert moved("fsdp1", True) == (18.0, 3 * 4)
    assert moved("fsdp2", True) == (14.0, 3 * 4)
    assert moved("fsdp2", True, zero=2) == (10.0, 2 * 4)
    assert moved("none", True) == (0.0, 0.0)  # contiguous buffers, a compiled program
    assert moved("fsdp1", True, zero=1) == (0.0, 0.0)  # ZeRO-1 keeps a bucketed reduce
    assert moved("fsdp1", True, dp=1) == (0.0, 0.0)  # nothing sharded


def test_fsdp_copies_recur_every_micro_batch() -> None:
    def copies(s: Scenario) -> float:
        return float(evaluate_one(s)["breakdown_s"]["fsdp_copies"])

    assert copies(llama()) == 0.0
    once = llama(fsdp_implementation="fsdp1")
    twice = dataclasses.replace(
        once, workload=dataclasses.replace(once.workload, global_batch_size=128)
    )
    assert copies(once) > 0.0
    assert copies(twice) == pytest.approx(2 * copies(once), rel=1e-12)


def test_unfused_fp32_grad_accumulation_moves_its_bytes_every_micro_batch() -> None:
    # docs/model.md §C6.3: every micro-batch read the 16-bit gradient (p = 2) and read and
    # write the fp32 sum (8): 10 bytes per local parameter, the shard under ZeRO-3; one kernel
    # per weight of a layer (QKV, projection, the MLP's 2 or 3 matrices, two norms)
    from types import SimpleNamespace

    import numpy as np

    from deepflow.oracle.workloads.transformer.data_parallel import grad_accumulation
    from deepflow.oracle.workloads.transformer.ops import ArrayOps

    class Bytes(ArrayOps):
        @staticmethod
        def mem(nbytes: object, flops: object = 0.0, launches: object = 1.0) -> object:
            return np.asarray([nbytes, launches], dtype=float)

    def moved(mode: str, zero: int = 2, m: float = 1.0, mats: float = 3.0) -> tuple[float, float]:
        x = {"grad_accumulation": float(("fused", "unfused_fp32").index(mode))}
        i = SimpleNamespace(
            x=x, p=2.0, zero=zero, dp=8.0, dp_sh=8.0, m=m, mats=mats, layers_stage=4.0
        )
        out = grad_accumulation(i, Bytes, SimpleNamespace(stage=8.0))  # type: ignore[arg-type]
        return float(out[0]), float(out[1])

    assert moved("unfused_fp32") == (80.0, 7 * 4)
    assert moved("unfused_fp32", mats=2.0) == (80.0, 6 * 4)
    assert moved("unfused_fp32", zero=3) == (10.0, 7 * 4)  # the reduce-scattered shard
    assert moved("unfused_fp32", m=3.0) == (240.0, 3 * 7 * 4)  # every micro-batch
    assert moved("fused") == (0.0, 0.0)  # in the weight-gradient GEMM


def test_unfused_grad_accumulation_lengthens_the_step_by_its_own_part() -> None:
    fused = evaluate_one(llama())
    unfused = evaluate_one(llama(grad_accumulation="unfused_fp32"))
    part = float(unfused["breakdown_s"]["grad_accumulation"])
    assert float(fused["breakdown_s"]["grad_accumulation"]) == 0.0
    assert part > 0.0
    assert float(unfused["step_time_s"]) == pytest.approx(float(fused["step_time_s"]) + part)
    # a streaming part: its bytes cost HBM energy
    assert float(unfused["energy_per_step_ops_J"]) > float(fused["energy_per_step_ops_J"])


def test_hybrid_sharding_shards_over_one_replica_and_all_reduces_across_replicas() -> None:
    # docs/model.md §C3.2: HSDP's model states shard over data_parallel / replicas ranks
    def states(replicas: int) -> dict[str, float]:
        out = evaluate_one(llama(zero_stage=3, data_parallel_replicas=replicas))
        return {k: float(v) for k, v in out["memory_breakdown_B"].items()}

    one, two = states(1), states(2)
    for part in ("weights", "master_weights", "gradients", "optimizer_states"):
        assert two[part] == pytest.approx(2 * one[part], rel=1e-12), part

    # as many replicas as ranks shard nothing: ZeRO-1's gradient reduction is then plain data
    # parallelism's all-reduce (each rank's shard is all its gradients)
    def comm(**mapping: object) -> float:
        out = evaluate_one(llama(overlap_grad_reduce=False, **mapping))
        return float(out["breakdown_s"]["data_parallel_comm"])

    plain = comm(zero_stage=0)
    assert plain > 0.0
    assert comm(zero_stage=1, data_parallel_replicas=8) == pytest.approx(plain, rel=1e-12)
    assert comm(zero_stage=1, data_parallel_replicas=2) != pytest.approx(plain, rel=1e-3)


def test_an_fp32_fsdp_reduce_scatters_twice_the_bytes() -> None:
    # the reduce-scatter of the last layer unit stays exposed (§C3.2): fp32 gradients make it
    # longer than 16-bit ones
    def comm(**mapping: object) -> float:
        s = llama(fsdp_implementation="fsdp1", **mapping)
        return float(evaluate_one(s)["breakdown_s"]["data_parallel_comm"])

    assert comm(fsdp_reduce_fp32=True) > comm()


def _llama405b(**mapping: object) -> Scenario:
    """Llama 3 405B (126 layers) on 16 pipeline stages of 8 H100s, 32 micro-batches."""
    from deepflow.config import scenario_from_mapping

    base = {"data_parallel": 1, "tensor_parallel": 8, "pipeline_parallel": 16,
            "sequence_parallel": True, "activation_recompute": "full"}  # fmt: skip
    return scenario_from_mapping({
        "system": {"device": "h100-sxm5-80gb", "network": "dgx-h100", "devices_per_node": 8,
                   "num_nodes": 16},
        "workload": {"model": "llama3-405b", "global_batch_size": 32, "precision": "bf16"},
        "mapping": {**base, **mapping},
    })  # fmt: skip


def test_a_split_whose_ends_take_a_layer_slot_balances_the_end_stages() -> None:
    """Llama 3's split (§3.3.2; Megatron-Core's account_for_embedding/loss_in_pipeline_split):
    126 layers + 2 slots over 16 stages, 8 each, the end stages 7 layers and the embedding or
    the output layer; the plain split puts ceil(126/16) = 8 layers on every stage and the output
    layer on top of the last, which sets the pace (docs/model.md §C4)."""
    from deepflow.errors import ConfigError

    plain = evaluate_one(_llama405b())
    ends = evaluate_one(_llama405b(pipeline_balance="ends_as_layers"))
    assert ends["step_time_s"] < plain["step_time_s"]
    # the middle stages (8 layers) are the slowest now: the output layer's GEMMs leave the
    # pipelined part, its 8 layers stay
    p, e = plain["breakdown_s"], ends["breakdown_s"]
    head = p["gemm"] - e["gemm"]
    assert head > 0 and e["attention"] == pytest.approx(p["attention"], rel=1e-12)
    # interleaving one layer's slot per chunk (v = 8) needs the ends' slots: 16 x 8 = 128
    interleaved = evaluate_one(_llama405b(pipeline_balance="ends_as_layers",
                                          virtual_pipeline_stages=8))  # fmt: skip
    assert interleaved["breakdown_s"]["pipeline_bubble"] < e["pipeline_bubble"]
    with pytest.raises(
        ConfigError,
        match=r"mapping\.virtual_pipeline_stages pipeline_parallel 16"
        r" × virtual_pipeline_stages 8 = 128 must divide num_layers \(126\)\.",
    ):
        _llama405b(virtual_pipeline_stages=8)
    with pytest.raises(ConfigError, match=r"pipeline_parallel 16 × virtual_pipeline_stages 3 = 48"
                       r" must divide num_layers \(126 \+ 2 \(the embedding and the output layer "
                       r"take a slot each\)\)\."):  # fmt: skip
        _llama405b(pipeline_balance="ends_as_layers", virtual_pipeline_stages=3)
    # the end stages hold a layer fewer in memory too
    memory = evaluate_one(_llama405b(pipeline_balance="ends_as_layers"))["memory_breakdown_B"]
    assert memory["activations"] < plain["memory_breakdown_B"]["activations"]


def test_tensorrt_llms_serving_attention_kernel_is_refused_for_training() -> None:
    raw = yaml.safe_load((SCENARIOS / "llama3-8b-h100.yaml").read_text())
    raw["mapping"]["attention_kernel"] = "trtllm"
    message = (
        r"mapping.attention_kernel \('trtllm'\) is TensorRT-LLM's serving kernel, a forward "
        r"pass only; training takes fa2, cudnn, fa3 or triton\."
    )
    with pytest.raises(ConfigError, match=message):
        scenario_from_mapping(raw, file="<training>")
