"""Reading measurement cases from sources deepflow has not seen (deepflow.measurements)."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from deepflow.cli import app
from deepflow.data import load_measurements
from deepflow.errors import ConfigError
from deepflow.measurements import (
    FRAMEWORKS,
    accelerator_presets,
    framework,
    framework_profile,
    measured_memory_stage,
    measured_peak_memory,
    measured_step_time_s,
    slice_shape,
    software_date,
    source_year,
    training_case_scenario,
    zero_stage,
)
from deepflow.oracle.evaluate import evaluate_one
from deepflow.validation import score_collective_cases, validation_report

runner = CliRunner()


def _case(group: str = "llm_foundry_a100_80", index: int = 0) -> dict[str, Any]:
    return copy.deepcopy(load_measurements(group)[index])


@pytest.mark.parametrize(
    ("name", "device", "network"),
    [
        ("NVIDIA A100 SXM4 80GB", "a100-sxm4-80gb", "dgx-a100"),
        ("NVIDIA A100-SXM4-40GB", "a100-sxm4-40gb", "dgx-a100"),
        ("NVIDIA A100 40GB PCIe", "a100-sxm4-40gb", "dgx-a100"),
        ("A800 80GB", "a100-sxm4-80gb", "dgx-a100"),
        ("NVIDIA H100 80GB HBM3", "h100-sxm5-80gb", "dgx-h100"),
        ("NVIDIA H800", "h100-sxm5-80gb", "dgx-h100"),
        ("NVIDIA GH200 480GB", "h200-sxm-141gb", "dgx-h100"),
        ("NVIDIA B200", "b200", "dgx-b200"),
        ("NVIDIA GB200 NVL72", "gb200", "gb200-nvl72"),
        ("NVIDIA GB300 NVL72", "gb300", "gb200-nvl72"),
        ("Tesla V100-SXM2-32GB", "v100-sxm2-32gb", "dgx-v100"),
        ("Google TPU v4", "tpu-v4", "tpu-v4-pod"),
        ("TPU v5e", "tpu-v5e", "tpu-v5e-pod"),
        ("Google TPU v5p", "tpu-v5p", "tpu-v5p-pod"),
    ],
)
def test_accelerator_names_map_to_presets(name: str, device: str, network: str) -> None:
    assert accelerator_presets({"hardware": {"accelerator": name}}) == (device, network)


def test_unknown_accelerator_takes_the_nearest_peak_and_the_stated_memory_and_peak() -> None:
    case = _case()
    case["hardware"].update(accelerator="AMD Instinct MI250X", memory_gb=128,
                            peak_dense_tflops={"bf16": 383})  # fmt: skip
    assert accelerator_presets(case) == ("a100-sxm4-80gb", "dgx-a100")
    device = training_case_scenario(case).system.device
    assert device.hbm_capacity_B == 128 * 2**30
    assert device.peak_flops["bf16"] == pytest.approx(383e12)


def test_unknown_accelerator_without_a_peak_is_rejected_by_name() -> None:
    case = {"id": "x1", "hardware": {"accelerator": "Mystery NPU"}}
    with pytest.raises(ConfigError) as info:
        accelerator_presets(case)
    assert str(info.value).startswith(
        "case 'x1': hardware.accelerator 'Mystery NPU' is not an accelerator deepflow has a "
        "preset for (known: A100"
    )


def test_stated_network_bandwidth_and_node_size_override_the_preset() -> None:
    case = copy.deepcopy(
        next(c for c in load_measurements("narayanan2021_table2") if "ptdp" in c["id"])
    )
    base = evaluate_one(training_case_scenario(case))["step_time_s"]
    case["hardware"]["inter_node"] = {"gbps_per_gpu": 100}
    scenario = training_case_scenario(case)
    assert scenario.system.network.scale_out.bandwidth_Bps == pytest.approx(12.5e9)
    assert scenario.system.network.scale_up.topology == "switch"  # the rest of the preset
    assert evaluate_one(scenario)["step_time_s"] > base
    case["hardware"]["inter_node"] = {"nics_per_node": 4, "gbps_per_nic": 400}
    assert training_case_scenario(case).system.network.scale_out.bandwidth_Bps == pytest.approx(
        25e9
    )


@pytest.mark.parametrize("group", sorted(FRAMEWORKS))
def test_inferred_framework_flags_reproduce_the_public_groups_table(group: str) -> None:
    for case in load_measurements(group):
        assert framework(dict(case, group="some_new_source")) == FRAMEWORKS[group], case["id"]


@pytest.mark.parametrize(
    ("text", "year", "expected"),
    [
        ("Megatron-LM", 2021, {"flash": False, "dp_overlap": False, "dropout": True}),
        ("PyTorch FSDP", 2023, {"flash": True, "dp_overlap": True, "dropout": False}),
        ("DeepSpeed ZeRO-3", 2021, {"flash": False, "dp_overlap": False, "dropout": True}),
        ("NeMo, --tp-comm-overlap, FlashAttention", 2022, {"flash": True, "tp_overlap": True}),
        ("Megatron-LM, unfused attention", 2024, {"flash": False, "dp_overlap": True}),
    ],
)
def test_framework_flags_from_text_and_year(text: str, year: int, expected: dict) -> None:
    case = {"group": "g", "source": {"year": year}, "training": {"framework": text}}
    if "ZeRO-3" in text:
        case["training"]["zero_stage"] = 3
    flags = framework(case)
    assert {k: flags[k] for k in expected} == expected


@pytest.mark.parametrize(
    ("model", "training", "expected"),
    [
        ({"hidden_dropout": 0.1, "attention_dropout": 0.1}, {}, True),  # Megatron's defaults
        ({"hidden_dropout": 0.0, "attention_dropout": 0.1}, {}, True),
        ({"hidden_dropout": 0.0, "attention_dropout": 0.0}, {}, False),
        ({}, {"dropout": 0.0}, False),
        ({}, {}, False),  # 2026, nothing stated: the LLaMA-era default
    ],
)
def test_stated_dropout_probabilities_decide_dropout(model: dict, training: dict,
                                                     expected: bool) -> None:  # fmt: skip
    case = {"group": "g", "source": {"year": 2026}, "model": model,
            "training": {"framework": "Megatron-Core", **training}}  # fmt: skip
    assert framework(case)["dropout"] is expected


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        ({"type": "GPT (decoder-only)"}, True),  # Megatron's GPT ties by default
        ({"type": "MPT (GPT-style; learned pos-emb)"}, True),
        ({"type": "BLOOM (GPT-style, ALiBi)"}, True),
        ({"type": "Llama 3 (GQA, SwiGLU)"}, False),
        ({"type": "GPT (Megatron-Core GPTModel)", "tied_embeddings": False}, False),  # stated
        ({"type": "Llama-style decoder", "tied_embeddings": True}, True),
    ],
)
def test_tied_embeddings_as_stated_else_by_model_family(model: dict, expected: bool) -> None:
    case = copy.deepcopy(load_measurements("narayanan2021_table1")[0])
    case["model"] |= model
    assert training_case_scenario(case).workload.model.tied_embeddings is expected


def test_tied_embeddings_that_are_no_boolean_are_rejected() -> None:
    case = copy.deepcopy(load_measurements("narayanan2021_table1")[0])
    case["model"]["tied_embeddings"] = "yes"
    with pytest.raises(ConfigError, match=r"model\.tied_embeddings must be true or false; "
                                          r"got 'yes'"):  # fmt: skip
        training_case_scenario(case)


@pytest.mark.parametrize("value", [1.0, -0.1, "0.1", True])
def test_a_dropout_that_is_no_probability_is_rejected(value: object) -> None:
    case = {"id": "c1", "group": "g", "model": {"hidden_dropout": value},
            "training": {"framework": "Megatron-Core"}}  # fmt: skip
    with pytest.raises(ConfigError, match=r"model\.hidden_dropout must be a probability in "
                                          r"\[0, 1\); got"):  # fmt: skip
        framework(case)


@pytest.mark.parametrize(
    ("source", "year"),
    [
        ({"url": "https://arxiv.org/abs/2205.05198"}, 2022),
        ({"title": "Some paper (SC'21)"}, 2021),
        ({"title": "Report", "location": "Table 3, 2024 release"}, 2024),
        ({"year": 2019}, 2019),
        ({}, None),
    ],
)
def test_source_year(source: dict, year: int | None) -> None:
    assert source_year({"source": source, "id": "case", "group": "g"}) == year


@pytest.mark.parametrize(
    ("training", "stage"),
    [
        ({"zero_stage": 2}, 2),
        ({"fsdp_sharding": "FULL_SHARD"}, 3),
        ({"fsdp_sharding": "SHARD_GRAD_OP"}, 2),
        ({"zero_stage": "distributed optimizer (Megatron)"}, 1),
        ({"fsdp": 8}, 3),
        ({"fsdp": 1, "cp": 8}, 3),  # FSDP2 over the data x context ranks (dp_shard_cp)
        ({"fsdp": 1}, 0),
        ({}, 0),
    ],
)
def test_zero_stage_from_text(training: dict, stage: int) -> None:
    assert zero_stage({"training": training}) == stage


def test_measured_step_time_from_each_quantity_agrees() -> None:
    case = _case("llm_foundry_a100_80", 0)
    step = measured_step_time_s(case)  # derived iteration time
    tokens = case["training"]["global_batch_size"] * case["model"]["seq_len"]
    del case["derived"]
    case["measured"] = {"tokens_per_s": tokens / step}
    assert measured_step_time_s(case) == pytest.approx(step)
    case["measured"] = {"tokens_per_s_per_gpu": tokens / step / case["training"]["num_gpus"]}
    assert measured_step_time_s(case) == pytest.approx(step)
    case["measured"] = {"samples_per_s": case["training"]["global_batch_size"] / step}
    assert measured_step_time_s(case) == pytest.approx(step)


def test_model_flops_convention_6n_equals_megatrons_for_a_gpt() -> None:
    case = _case("megatron_core_h100_2024", 0)
    megatron = measured_step_time_s(case)
    case["measured"]["flops_definition"] = "MFU = 6*N*tokens + 12*L*h*s*tokens"
    assert measured_step_time_s(case) == pytest.approx(megatron, rel=1e-9)
    case["measured"] = {"mfu_pct": 41.0, "flops_definition": "model FLOPs (6N)"}
    tflops = 0.41 * case["hardware"]["peak_dense_tflops_precision_used"]
    assert measured_step_time_s(case) == pytest.approx(megatron * 408.8 / tflops, rel=1e-9)


def test_measured_step_time_without_a_usable_quantity_names_the_keys() -> None:
    case = _case()
    case["measured"], case["derived"] = {"loss": 2.0}, None
    with pytest.raises(ConfigError, match="measured has none of iteration_time_s, tokens_per_s"):
        measured_step_time_s(case)


def test_gqa_swiglu_and_moe_model_keys_are_read() -> None:
    case = _case()
    case["model"].update(type="Llama-2 style", kv_heads=8, num_experts=8, top_k=2)
    model = training_case_scenario(case).workload.model
    assert (model.num_kv_heads, model.ffn_activation) == (8, "swiglu")
    assert (model.num_experts, model.experts_per_token) == (8, 2)


def test_an_moe_models_experts_take_their_own_width() -> None:
    # a model that states a dense width beside its experts' (DeepSeek-style configs)
    case = _case()
    case["model"].update(num_experts=64, top_k=6, ffn_hidden=12288, moe_ffn_hidden=1408)
    assert training_case_scenario(case).workload.model.ffn_hidden_size == 1408


@pytest.mark.parametrize(
    ("key", "value", "what"),
    [
        ("sliding_window", 4096, "sliding-window attention"),
        ("shared_expert_intermediate_size", 5632, "a shared expert of a width of its own"),
    ],
)  # fmt: skip
def test_an_architecture_the_model_does_not_represent_is_named(key: str, value: int,
                                                              what: str) -> None:  # fmt: skip
    case = _case()
    case["model"][key] = value
    message = rf"model.{key} \({value}\) states {what}.*, which deepflow's transformer model"
    with pytest.raises(ConfigError, match=message + r" does not represent\."):
        training_case_scenario(case)
    case["model"][key] = None  # stated as absent (Mixtral's sliding_window: null)
    training_case_scenario(case)


def test_latent_attention_is_read_and_served_only() -> None:
    # DeepSeek-V3's latent attention, read from its config names, is a serving model (§D7)
    case = _case()
    case["model"].update(kv_lora_rank=512, q_lora_rank=1536, qk_rope_head_dim=64,
                         qk_nope_head_dim=128, v_head_dim=128, head_dim=192)  # fmt: skip
    with pytest.raises(ConfigError, match=r"workload.model.kv_lora_rank \(512\) is modelled "
                       r"for serving \(workload.kind: inference\) only\."):  # fmt: skip
        training_case_scenario(case)
    case["model"]["v_head_dim"] = 96
    with pytest.raises(ConfigError, match=r"model.qk_nope_head_dim \(128\) and v_head_dim "
                       r"\(96\) differ"):  # fmt: skip
        training_case_scenario(case)


def test_public_cases_under_new_group_names_score_identically(tmp_path: Path) -> None:
    renamed = [dict(c, group=f"new_{c['group']}") for c in load_measurements()]
    path = tmp_path / "cases.json"
    path.write_text(json.dumps(renamed), encoding="utf-8")
    report = validation_report()
    before = {(r["id"], r["quantity"]): r["model"] for r in report["cases"]}
    after = validation_report(path)
    assert [s["id"] for s in after["skipped"]] == [s["id"] for s in report["skipped"]]
    assert {(r["id"], r["quantity"]): r["model"] for r in after["cases"]} == pytest.approx(
        before, rel=1e-12
    )


def test_cli_scores_what_it_can_and_lists_the_rest(tmp_path: Path) -> None:
    good = _case("korthikanti2022_table5", 0)
    bad = dict(_case("korthikanti2022_table5", 1), id="bad1")
    bad["hardware"] = {"accelerator": "Mystery NPU"}
    path = tmp_path / "cases.json"
    path.write_text(json.dumps([good, bad]), encoding="utf-8")
    result = runner.invoke(app, ["validate", "--cases", str(path), "--json"])
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert [r["id"] for r in data["cases"]] == [good["id"]]
    assert data["skipped"][0]["id"] == "bad1"
    assert "hardware.accelerator 'Mystery NPU'" in data["skipped"][0]["reason"]
    table = runner.invoke(app, ["validate", "--cases", str(path)])
    assert "skipped bad1: case 'bad1': hardware.accelerator" in table.stdout


def test_cli_rejects_a_file_where_nothing_can_be_scored(tmp_path: Path) -> None:
    path = tmp_path / "cases.json"
    path.write_text(json.dumps([{"id": "c0", "group": "mystery"}]), encoding="utf-8")
    result = runner.invoke(app, ["validate", "--cases", str(path)])
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.startswith(
        f"error: {path}: no case could be scored (case 'c0': category None is not one "
        "deepflow scores (known: gemm_microbenchmark, grouped_gemm_microbenchmark, "
        "serving_gemm_microbenchmark, collective_microbenchmark, float8_linear_microbenchmark, "
        "memory_bandwidth_microbenchmark, attention_microbenchmark, end_to_end_training, "
        "peak_memory, inference))."
    )


def test_generic_collective_case_with_algorithm_bandwidth() -> None:
    case = copy.deepcopy(load_measurements("nccl_tests_a100_node")[-1])
    reference = validation_report()
    expected = next(r for r in reference["cases"] if r["id"] == case["id"])
    case["group"] = "other_nccl"
    case["collective"]["op"] = "AllReduce"
    n = case["collective"]["ranks"]
    case["measured"] = {"algbw_GBps": case["measured"]["busbw_GBps"] * n / (2 * (n - 1))}
    (row,) = score_collective_cases([case])
    assert row["quantity"] == "algbw GB/s"
    assert row["error"] == pytest.approx(expected["error"], rel=1e-9)


def test_generic_gemm_case_is_scored_at_its_own_shape() -> None:
    from deepflow.validation import score_gemm_cases

    case = copy.deepcopy(load_measurements("mamf_ml_engineering")[0])
    best = score_gemm_cases([case])[0]["model_tflops"]
    case.update(group="other_gemm", notes="one shape")
    case["gemm"].update(M=256, N=256, K=256)
    (row,) = score_gemm_cases([case])
    assert 0 < row["model_tflops"] < best
    case["gemm"]["M"] = 0
    with pytest.raises(ConfigError, match=r"gemm\.M, gemm\.N and gemm\.K must be positive"):
        score_gemm_cases([case])


def test_serving_gemm_cases_are_scored_by_the_serving_gemm() -> None:
    """DeepGEMM's grouped and dense FP8 GEMMs on H800 (the joint fit's cases) and vLLM's H100
    table of dense bf16 and per-tensor FP8 GEMMs (the dense exponent's): each kind within 10 %
    on average (the roofline misses DeepGEMM's by a third); a grouped case without its group
    count, or a dense one without its rows, is refused with the keys it needs."""
    from deepflow.validation import score_serving_gemm_cases, serving_gemm_microbenchmarks

    cases = serving_gemm_microbenchmarks()
    rows = score_serving_gemm_cases()
    assert len(rows) == len(cases) == 45
    assert {r["family"] for r in rows} == {"hopper"}
    deepgemm = [r for r in rows if r["group"].startswith("deepgemm_")]
    for grouped, count, bound in ((True, 10, 0.10), (False, 18, 0.10)):
        mine = [r for r in deepgemm if r["grouped"] is grouped]
        assert len(mine) == count
        assert sum(abs(r["error"]) for r in mine) / count < bound
    vllm = [r for r in rows if r["group"] == "vllm_bench_fp8_gemm_h100"]
    assert len(vllm) == 17 and sum(abs(r["error"]) for r in vllm) / 17 < 0.10
    plain = score_serving_gemm_cases(
        override={
            "hopper": {
                "grouped_gemm_efficiency": 1.0,
                "gemm_overlap_exponent": math.inf,
                "gemm_overlap_exponent_dense": math.inf,
                "gemm_pipeline_round_trip_s": 0.0,
            }
        }
    )
    plain_deepgemm = [r for r in plain if r["group"].startswith("deepgemm_")]
    assert sum(abs(r["error"]) for r in plain_deepgemm) / len(plain_deepgemm) > 0.30
    case = copy.deepcopy(cases[0])
    del case["gemm"]["groups"]
    with pytest.raises(
        ConfigError,
        match=r"case 'deepgemm_h800_contiguous_g4_m8192_n4096_k7168': "
        r"gemm\.groups, gemm\.M, gemm\.N and gemm\.K must be positive integers\.",
    ):
        score_serving_gemm_cases([case])
    dense = copy.deepcopy(next(c for c in cases if c["category"] == "serving_gemm_microbenchmark"))
    del dense["gemm"]["M"]
    with pytest.raises(
        ConfigError,
        match=rf"case '{dense['id']}': gemm\.M, gemm\.N and gemm\.K must be positive integers\.",
    ):
        score_serving_gemm_cases([dense])


def test_hbm_stream_cases_are_scored_at_their_familys_efficiency() -> None:
    """OpenCL-Benchmark's coalesced streams on A100, H100, B200 and B300: each row is the
    stated peak times its family's hbm_efficiency; the families the fit derives
    (benchmarks/fit_hbm.py) hold Hopper's estimate scaled by their measured read fraction over
    Hopper's, so every read row is as far from its measurement as Hopper's (Blackwell's two
    devices bracket it); a case without its peak or bytes is refused with the keys it needs."""
    from deepflow.config.calibration import current_calibration
    from deepflow.validation import hbm_stream_microbenchmarks, score_hbm_stream_cases

    rows = score_hbm_stream_cases()
    assert len(rows) == len(hbm_stream_microbenchmarks()) == 8
    assert {r["family"] for r in rows} == {"ampere", "hopper", "blackwell"}
    cal = current_calibration()
    for r in rows:
        efficiency = cal.kernel(r["family"]).hbm_efficiency
        assert r["model_GBps"] == pytest.approx(r["peak_GBps"] * efficiency, rel=1e-3)
    reads = {r["id"]: r["error"] for r in rows if "_read_" in r["id"]}
    hopper = reads["opencl_benchmark_hbm_read_h100"]
    assert reads["opencl_benchmark_hbm_read_a100"] == pytest.approx(hopper, abs=0.002)
    blackwell = math.sqrt((1 + reads["opencl_benchmark_hbm_read_b200"])
                          * (1 + reads["opencl_benchmark_hbm_read_b300"])) - 1  # fmt: skip
    assert blackwell == pytest.approx(hopper, abs=0.002)
    case = copy.deepcopy(hbm_stream_microbenchmarks()[0])
    del case["hardware"]["memory_bandwidth_GBps"]
    with pytest.raises(ConfigError, match=r"case 'opencl_benchmark_hbm_read_a100': hardware\."
                       r"memory_bandwidth_GBps \(or _TBps: the device's peak\) must be a "
                       r"positive number\."):  # fmt: skip
        score_hbm_stream_cases([case])
    case = copy.deepcopy(hbm_stream_microbenchmarks()[0])
    case["memory"]["bytes"] = 0
    with pytest.raises(ConfigError, match=r"memory\.bytes and measured\.GBps must be positive"):
        score_hbm_stream_cases([case])


def test_float8_linear_cases_are_scored_per_n_by_the_layers_cast_bytes() -> None:
    """torchao's rowwise LayerNorm -> Linear -> Sigmoid table: 36 rows of 6 shapes, scored at
    the fitted cast efficiency within 11 % on average (benchmarks/fit_float8.py); float8 is
    modelled slower than bf16 where the table says so (small N) and faster at large shapes;
    a case whose shape lists do not match is refused with the keys it needs."""
    from deepflow.config.calibration import current_calibration
    from deepflow.validation import (
        float8_linear_case_caps,
        float8_linear_microbenchmarks,
        float8_linear_speedup,
        score_float8_linear_case,
    )

    cases = float8_linear_microbenchmarks()
    rows = [r for c in cases for r in score_float8_linear_case(c)]
    assert (len(cases), len(rows)) == (36, 216)
    assert sum(abs(r["error"]) for r in rows) / len(rows) < 0.11
    by_id = {r["id"]: r for r in rows}
    assert by_id["torchao_float8_rowwise_h100_m1024_k1024_n1024"]["model"] < 1.0
    assert by_id["torchao_float8_rowwise_h100_m16384_k8192_n32768"]["model"] > 1.3
    # a row is the shared model at the case's device and the calibration's efficiency
    case = cases[-1]
    caps16, caps8 = float8_linear_case_caps(case)
    assert caps16.hbm_bandwidth_Bps == 2.4e12 and caps8.peak_flops > caps16.peak_flops
    efficiency = current_calibration().float8.rowwise_cast_efficiency
    model = float8_linear_speedup(caps16, caps8, 32768, 32768, 1024, recipe="rowwise",
                                  rowwise_cast_efficiency=efficiency)  # fmt: skip
    assert by_id["torchao_float8_rowwise_h100_m32768_k32768_n1024"]["model"] == float(model)
    # slower casts, smaller speedups; tensor-wise casts do not read the rowwise efficiency
    slower = score_float8_linear_case(case, rowwise_cast_efficiency=efficiency / 2)
    assert all(s["model"] < r["model"] for s, r in zip(slower, rows[-6:], strict=True))
    tensorwise = [float8_linear_speedup(caps16, caps8, 8192, 8192, 8192, recipe="tensorwise",
                                        rowwise_cast_efficiency=e) for e in (0.2, 1.0)]  # fmt: skip
    assert tensorwise[0] == tensorwise[1]
    bad = copy.deepcopy(case)
    bad["measured"]["speedup_vs_bf16"].pop()
    with pytest.raises(ConfigError, match=r"case 'torchao_float8_rowwise_h100_m32768_k32768': "
                       r"float8_linear\.M and K must be positive integers and float8_linear\.N "
                       r"a list of them, one per measured\.speedup_vs_bf16\."):  # fmt: skip
        score_float8_linear_case(bad)
    bad = copy.deepcopy(case)
    bad["float8_linear"]["recipe"] = "blockwise"
    with pytest.raises(ConfigError, match=r"float8_linear\.recipe must be one of tensorwise, "
                       r"rowwise; got 'blockwise'\."):  # fmt: skip
        score_float8_linear_case(bad)


def test_a_batch_that_does_not_divide_is_modelled_at_the_nearest_multiple_and_rescaled() -> None:
    from deepflow.measurements import batch_scale

    case = _case("narayanan2021_table2", 0)  # 1,536 sequences on 384 ranks, micro-batch 4
    exact = score_training_row(case)
    case["training"]["global_batch_size"] = 1536 + 100
    scenario = training_case_scenario(case)
    assert scenario.workload.global_batch_size == 1536
    assert batch_scale(case, scenario) == pytest.approx(1636 / 1536)
    assert score_training_row(case) == pytest.approx(exact * 1636 / 1536)


def score_training_row(case: dict[str, Any]) -> float:
    from deepflow.validation import score_training_cases

    (row,) = score_training_cases([case])
    return float(row["model_s"])


def test_a_node_larger_than_the_presets_scale_up_domain_widens_it() -> None:
    # Megatron-LM 2019 ran on DGX-2H nodes: 16 V100s on NVSwitch, 8 x 100 Gb/s NICs
    case = _case("narayanan2021_table1", 0)
    case["hardware"] = {"accelerator": "NVIDIA Tesla V100 SXM3 32GB", "memory_gb": 32,
                        "peak_dense_tflops": {"fp16 tensor": 125}, "gpus_per_node": 16,
                        "inter_node": {"nics_per_node": 8, "gbps_per_nic": 100}}  # fmt: skip
    case["source"] = {"url": "https://arxiv.org/abs/1909.08053"}
    scenario = training_case_scenario(case)
    assert scenario.system.devices_per_node == 16
    assert scenario.system.network.scale_up.domain_size == 16
    assert scenario.system.network.scale_out.bandwidth_Bps == pytest.approx(6.25e9)
    assert scenario.workload.precision == "fp16"  # V100 has no bf16


def test_layout_inconsistencies_give_way_to_the_gpu_count_and_the_layer_count() -> None:
    case = _case("narayanan2021_table1", 5)
    train = case["training"]
    train["dp"] = 3 * train["dp"]  # disagrees with num_gpus / (tp x pp)
    train["virtual_pipeline_stages"] = 1000  # no such interleave divides the layers
    mapping = training_case_scenario(case).mapping
    assert mapping.num_devices == train["num_gpus"]
    v = mapping.virtual_pipeline_stages
    assert (mapping.pipeline_parallel, v) == (4, 15)  # 60 layers: the largest v <= 1000
    train["pp"], train["dp"] = 1, None
    assert training_case_scenario(case).mapping.virtual_pipeline_stages == 1
    train["tp"] = 7
    with pytest.raises(ConfigError, match="is not a multiple of tp 7"):
        training_case_scenario(case)


# ------------------------------------------------------------------ memory-relevant behaviour
def _titan(**training: Any) -> dict[str, Any]:
    """A torchtitan-style Llama 3 8B case on 8 H100s (FSDP), with ``training`` overrides."""
    base = {
        "id": "titan", "group": "g", "category": "peak_memory",
        "source": {"title": "a benchmark", "url": "https://example.org/bench_2025-06.md"},
        "hardware": {"accelerator": "NVIDIA H100 80GB HBM3", "gpus_per_node": 8},
        "model": {"type": "Llama 3", "layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 8,
                  "ffn_hidden": 14336, "seq_len": 8192, "vocab": 128256},
        "training": {"framework": "torchtitan", "num_gpus": 8, "fsdp": 8, "local_batch_size": 2,
                     "global_batch_size": 16, "activation_recompute": "selective"},
        "measured": {"peak_memory_gib": 60.0, "memory_kind": "reserved"},
    }  # fmt: skip
    base["training"].update(training)
    return base


def test_torchtitan_runs_its_local_batch_with_per_op_recompute_and_fsdp() -> None:
    m = training_case_scenario(_titan()).mapping
    assert (m.zero_stage, m.micro_batch_size, m.activation_recompute) == (3, 2, "selective_op")
    accumulating = training_case_scenario(_titan(global_batch_size=64))
    assert accumulating.mapping.micro_batch_size == 2  # 4 accumulation steps of the local batch
    assert accumulating.workload.global_batch_size == 64
    assert training_case_scenario(_titan(tp=2, num_gpus=16)).mapping.sequence_parallel


def test_torchtitan_layer_selective_checkpointing_recomputes_every_kth_block_in_full() -> None:
    # selective_ac_option an integer k: every k-th block in a full checkpoint; k = 2 (the
    # option's default) where the case does not say
    m = training_case_scenario(_titan(activation_recompute="selective layer")).mapping
    assert (m.activation_recompute, m.recompute_num_layers) == ("full", 16)
    stated = _titan(activation_recompute="selective layer (selective_ac_option = '4')")
    assert training_case_scenario(stated).mapping.recompute_num_layers == 8
    # per-op stays per-op
    assert training_case_scenario(_titan()).mapping.recompute_num_layers == 0


def test_offloaded_and_recomputed_layers_read_from_the_case_itself() -> None:
    m = training_case_scenario(_titan(cpu_offloading_num_layers=16,
                                      activation_recompute="full")).mapping  # fmt: skip
    assert (m.activation_offload_layers, m.recompute_num_layers) == (16, 0)
    block = _titan(activation_recompute="full (--recompute-method block --recompute-num-layers 5)")
    assert training_case_scenario(block).mapping.recompute_num_layers == 5
    # a note listing several recipes' values says none of them is this run's
    listed = _titan()
    listed["notes"] = "GB200 offloads 40 layers (cpu_offloading_num_layers 40), B200 95 layers"
    assert training_case_scenario(listed).mapping.activation_offload_layers == 0
    with pytest.raises(ConfigError, match=r"case 'titan': training.recompute_num_layers must be "
                                          r"a whole number >= 0; got -2\."):  # fmt: skip
        training_case_scenario(_titan(recompute_num_layers=-2))


def test_fsdp_under_pipelining_is_zero1_with_fp32_gradients() -> None:
    m = training_case_scenario(_titan(pp=2, num_gpus=16)).mapping
    assert (m.zero_stage, m.fp32_main_grads) == (1, True)


@pytest.mark.parametrize(
    ("framework_text", "compile_", "url", "version", "expected"),
    [
        ("torchtitan", True, "bench_2025-06.md", None, "fused"),  # compiled loss (PR #1033)
        ("torchtitan", True, "bench_2024-12.md", None, "unfused"),
        ("torchtitan", False, "bench_2025-06.md", None, "unfused"),
        ("torchtitan", True, "bench.md", "torch 2.7.0a0+git, torchtitan 0.0.2", "unfused"),
        ("torchtitan", True, "bench.md", "torch 2.9.0.dev20250811", "fused"),
        ("Megatron-Core", False, "bench.md", None, "vocab_parallel"),
        # --cross-entropy-loss-fusion runs Megatron's native fused kernels: the same buffers
        ("Megatron-Core, --cross-entropy-loss-fusion", False, "bench.md", None, "vocab_parallel"),
        ("Megatron-Core, cross_entropy_fusion_impl: te", False, "bench.md", None, "fused"),
        ("llm-foundry (Composer, FSDP)", False, "bench.md", None, "fused"),
    ],
)
def test_loss_kernel_from_framework_and_software_date(
    framework_text: str, compile_: bool, url: str, version: str | None, expected: str
) -> None:
    case = _titan(framework=framework_text, torch_compile=compile_, framework_version=version)
    case["source"]["url"] = f"https://example.org/{url}"
    assert framework(case)["cross_entropy"] == expected


@pytest.mark.parametrize(
    ("framework_text", "compile_", "url", "expected"),
    [
        # eager torchtitan: SiLU and mul, fp32 complex rotary, composite RMSNorm from May 2024
        ("torchtitan", False, "bench_2024-12.md", (False, False, False)),
        # before pytorch/torchtitan PR #297 the train configs used the Triton fused RMSNorm
        ("torchtitan", False, "bench_2024-04.md", (True, False, False)),
        ("torchtitan", True, "bench_2024-12.md", (True, True, True)),  # Inductor fuses them
        ("torchtitan", None, "bench_2024-12.md", (True, True, True)),  # unstated: as compiled
        ("nanotron", None, "bench_2024-12.md", (True, True, False)),  # GLUActivation only
    ],
)
def test_eager_torchtitan_runs_its_norms_rotary_and_swiglu_unfused(
    framework_text: str, compile_: bool | None, url: str, expected: tuple[bool, ...]
) -> None:
    case = _titan(framework=framework_text, torch_compile=compile_)
    case["source"]["url"] = f"https://example.org/{url}"
    flags = framework(case)
    assert (flags["fused_norm"], flags["fused_rotary"], flags["fused_swiglu"]) == expected
    m = training_case_scenario(case).mapping
    assert (m.fused_norm, m.fused_rotary, m.fused_swiglu) == expected


@pytest.mark.parametrize(
    ("framework_text", "precision", "expected"),
    [
        # docs/model.md §C3.3: Composer runs PyTorch FSDP1; its mixed_precision DEFAULT
        # reduces in fp32, PURE in bf16 (composer/trainer/mosaic_fsdp_utils.py)
        (
            "Composer + PyTorch FSDP (llm-foundry)",
            "amp_bf16 (FSDP mixed_precision=DEFAULT)",
            ("fsdp1", True),
        ),
        (
            "Composer + PyTorch FSDP (llm-foundry)",
            "bf16 (FSDP mixed_precision=PURE)",
            ("fsdp1", False),
        ),
        # torchtitan: fully_shard (FSDP2) with an fp32 reduce dtype
        ("torchtitan", "bf16", ("fsdp2", True)),
        ("PyTorch fully_shard (FSDP2)", "bf16 (reduce_dtype bf16)", ("fsdp2", False)),
        ("Megatron-Core", "bf16", ("none", False)),  # its own contiguous buffers
    ],
)
def test_fsdp_implementation_and_reduce_dtype_from_the_framework(
    framework_text: str, precision: str, expected: tuple[str, bool]
) -> None:
    case = _titan(framework=framework_text, precision=precision)
    m = training_case_scenario(case).mapping
    assert (m.fsdp_implementation, m.fsdp_reduce_fp32) == expected


def test_maxtext_minimal_remat_keeps_the_weight_matmuls_outputs() -> None:
    # MaxText/layers/models.py: remat_policy 'minimal' is JAX's
    # checkpoint_dots_with_no_batch_dims (docs/model.md §C2.2)
    case = _titan(framework="MaxText (JAX/XLA on TPU)",
                  activation_recompute="selective (MaxText remat_policy 'minimal')")  # fmt: skip
    assert training_case_scenario(case).mapping.activation_recompute == "selective_dots"
    case = _titan(framework="MaxText (JAX/XLA on TPU)",
                  activation_recompute="full (MaxText remat_policy 'full')")  # fmt: skip
    assert training_case_scenario(case).mapping.activation_recompute == "full"


@pytest.mark.parametrize(
    ("framework_text", "techniques", "expected"),
    [
        # the Llama 3 paper §3.3.2: "FP32 gradient accumulation during backward computation
        # over multiple micro-batches" (docs/model.md §C6.3)
        ("Meta internal trainer (FSDP + TP + PP), PyTorch",
         "FP32 gradient accumulation during backward computation over multiple micro-batches",
         "unfused_fp32"),
        ("nanotron", None, "unfused_fp32"),  # its FP32GradientAccumulator's hooks
        # Megatron's fp32 main_grad accumulates inside the weight-gradient GEMM
        ("Megatron-LM", "--accumulate-allreduce-grads-in-fp32", "fused"),
        ("torchtitan", None, "fused"),
    ],
)  # fmt: skip
def test_unfused_fp32_grad_accumulation_where_the_text_says_so(
    framework_text: str, techniques: str | None, expected: str
) -> None:
    case = _titan(framework=framework_text, techniques=techniques)
    assert training_case_scenario(case).mapping.grad_accumulation == expected


def test_software_date_from_versions_and_source() -> None:
    assert software_date(_titan(framework_version="torch 2.9.0.dev20250815+cu128")) == (2025, 8)
    assert software_date(_titan(framework_version="torch 2.7.0a0+gitb98af95")) == (2025, 3)
    assert software_date(_titan()) == (2025, 6)


def test_a_pipeline_whose_ends_take_a_layer_slot_is_read_from_the_text() -> None:
    """The Llama 3 paper's split (§3.3.2) and Megatron-Core's flags name the layout; its
    asynchronous point-to-point sends overlap; the stated interleave then divides L + 2."""

    def flags(text: str) -> dict[str, Any]:
        training = {"framework": "PyTorch trainer", "techniques": text}
        return framework({"group": "g", "source": {"year": 2024}, "training": training})

    llama3 = flags("one Transformer layer removed from the first and from the last stage, so "
                   "the embedding and the output layer with its loss each take one layer's "
                   "slot; asynchronous point-to-point communication in PP")  # fmt: skip
    assert (llama3["pipeline_balance"], llama3["p2p_overlap"]) == ("ends_as_layers", True)
    mcore = flags("--account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split")
    assert mcore["pipeline_balance"] == "ends_as_layers"
    assert (flags("interleaved")["pipeline_balance"], flags("")["p2p_overlap"]) == ("layers", False)
    case = _titan(
        num_gpus=16,
        pp=16,
        virtual_pipeline_stages=8,
        fsdp=None,
        local_batch_size=None,
        global_batch_size=32,
        techniques="the embedding takes one layer's slot",
    )
    case["model"]["layers"] = 126
    m = training_case_scenario(case).mapping
    assert (m.pipeline_balance, m.virtual_pipeline_stages) == ("ends_as_layers", 8)
    case["training"]["techniques"] = "interleaved"  # 126 layers: no even split into 16 x 8
    assert training_case_scenario(case).mapping.virtual_pipeline_stages == 1


def test_nemo_2024_keeps_16_bit_gradients_and_te_caches_fp8_weights() -> None:
    nemo = {"group": "g", "source": {"year": 2024}, "training": {"framework": "NeMo 24.07"}}
    flags = framework(nemo)
    assert (flags["fp32_main_grads"], flags["fp8_weight_cache"]) == (False, True)
    assert framework(_titan())["fp8_weight_cache"] is False
    # Composer never passes is_first_microbatch: TE re-casts the weights every forward
    assert framework(_titan(framework="Composer + PyTorch FSDP (llm-foundry)"))[
        "fp8_weight_cache"] is False  # fmt: skip


def test_nanotron_accumulates_in_fp32_balances_stages_by_compute_and_shards_its_loss() -> None:
    def flags(optimizer: str) -> dict[str, Any]:
        return framework({"group": "g", "source": {"year": 2025}, "training": {
            "framework": "nanotron v0.5 (HF), PyTorch", "optimizer": optimizer}})  # fmt: skip

    on = flags("AdamW (torch fused), accumulate_grad_in_fp32=True")
    assert (on["gradient_buffers"], on["pipeline_balance"]) == ("fp32_accumulator", "compute")
    assert on["cross_entropy"] == "vocab_parallel_fp32"  # sharded_cross_entropy, fp32 logits
    assert on["fused_swiglu"] is False  # GLUActivation in eager PyTorch
    assert flags("AdamW, accumulate_grad_in_fp32: false")["gradient_buffers"] == "main"
    megatron = framework({"group": "g", "training": {"framework": "Megatron-Core"}})
    assert (megatron["gradient_buffers"], megatron["pipeline_balance"]) == ("main", "layers")


def test_nanotrons_asynchronous_tp_linears_leave_their_gradients_recorded() -> None:
    def recorded(mode: str, framework_name: str = "nanotron v0.5 (HF), PyTorch") -> bool:
        return bool(framework({"group": "g", "source": {"year": 2025}, "training": {
            "framework": framework_name, "tp_mode": mode}})["recorded_tp_gradients"])  # fmt: skip

    assert recorded("REDUCE_SCATTER (sequence-parallel style) with async TP linear comm")
    assert not recorded("REDUCE_SCATTER")  # synchronous linears
    assert not recorded("ALL_REDUCE with async TP linear comm")  # nanotron: REDUCE_SCATTER only
    assert not recorded("REDUCE_SCATTER with async TP linear comm", "Megatron-Core")


def test_the_measured_rank_names_its_pipeline_stage() -> None:
    megatron = {
        "group": "g",
        "training": {"framework": "Megatron-Core"},
        "measured": {"rank_measured": "world_size-1 (last PP stage, last TP rank)"},
    }
    assert measured_memory_stage(megatron) == "last"
    nanotron = {"group": "g", "training": {"framework": "nanotron v0.5"}, "measured": {}}
    assert measured_memory_stage(nanotron) == "first"  # world rank 0 writes the bench CSV
    assert measured_memory_stage(_titan()) == "peak"


def test_measured_peak_memory_units_and_kinds() -> None:
    assert measured_peak_memory(_titan()) == (60.0 * 2**30, "reserved")
    decimal = _titan()
    decimal["measured"] = {"peak_memory_gb": 64.0, "memory_kind": "allocated"}
    assert measured_peak_memory(decimal) == (64e9, "allocated")
    with pytest.raises(ConfigError, match=r"case 'titan': measured.peak_memory_gib is missing\."):
        measured_peak_memory(dict(_titan(), measured={}))


def test_validate_scores_a_memory_case_from_any_source(tmp_path: Path) -> None:
    path = tmp_path / "memory.json"
    case = _titan()
    case["hardware"]["memory_gb"] = 96
    path.write_text(json.dumps([case]), encoding="utf-8")
    report = validation_report(path)
    (row,) = report["cases"]
    assert row["quantity"] == "GiB reserved" and row["measured"] == 60.0
    assert row["model"] > 0 and row["feasible"] is True


def test_tpu_cases_count_devices_not_gpus() -> None:
    case = _titan()
    case["category"] = "end_to_end_training"
    case["hardware"] = {"accelerator": "Google Cloud TPU v5e"}
    case["training"] = {"framework": "MaxText", "num_devices": 256, "fsdp": 256,
                        "local_batch_size": 4, "global_batch_size": 1024}  # fmt: skip
    case["measured"] = {"tokens_per_s_per_gpu": 3000.0}
    scenario = training_case_scenario(case)
    assert scenario.system.num_devices == 256
    assert scenario.system.device.name == "tpu-v5e"
    assert measured_step_time_s(case) == pytest.approx(1024 * 8192 / (3000.0 * 256))
    del case["training"]["num_devices"]
    with pytest.raises(ConfigError, match=r"training.num_gpus \(or num_devices\) is missing\."):
        training_case_scenario(case)


@pytest.mark.parametrize(
    ("chips", "dims", "shape"),
    [(64, 3, (4, 4, 4)), (128, 3, (8, 4, 4)), (256, 3, (8, 8, 4)), (2048, 3, (16, 16, 8)),
     (6144, 3, (24, 16, 16)), (128, 2, (16, 8)), (256, 2, (16, 16))],
)  # fmt: skip
def test_tpu_slices_are_tori_of_googles_slice_shapes(chips: int, dims: int,
                                                      shape: tuple[int, ...]) -> None:  # fmt: skip
    # docs.cloud.google.com/tpu/docs/v5p: 4x4x4, 4x4x8, 4x8x8, 8x16x16, 16x16x24; v5e: 8x16, 16x16
    assert slice_shape(chips, dims) == shape


def test_a_tpu_slice_smaller_than_the_pod_is_its_own_torus() -> None:
    case = _titan()
    case["category"] = "end_to_end_training"
    case["hardware"] = {"accelerator": "Google TPU v5p", "gpus_per_node": 128}
    case["training"] = {"framework": "MaxText (JAX/XLA on TPU)", "num_devices": 128, "tp": 8,
                        "fsdp": 16, "local_batch_size": 2, "global_batch_size": 256}  # fmt: skip
    case["measured"] = {"tokens_per_s_per_gpu": 3000.0}
    up = training_case_scenario(case).system.network.scale_up
    assert (up.topology, up.domain_size, up.shape) == ("torus-3d", 128, (8, 4, 4))


def test_maxtext_cases_take_the_xla_profiles_switches_not_the_pytorch_heuristics() -> None:
    case = _titan()
    case["category"] = "end_to_end_training"
    case["hardware"] = {"accelerator": "Google TPU v5p"}
    case["training"] = {"framework": "MaxText (JAX/XLA on TPU)", "num_devices": 64, "tp": 4,
                        "fsdp": 16, "local_batch_size": 4, "global_batch_size": 64}  # fmt: skip
    case["measured"] = {"tokens_per_s_per_gpu": 3000.0}
    mapping = training_case_scenario(case).mapping
    # configs/frameworks/maxtext-tpu.yaml: XLA overlaps TP collectives and fuses the loss;
    # the text rules alone would give no TP overlap and Megatron's vocab-parallel loss
    assert mapping.tp_comm_overlap is True
    assert mapping.cross_entropy == "fused"
    assert mapping.fp8_weight_cache is False
    titan = _titan()
    assert training_case_scenario(titan).mapping.cross_entropy != "fused"


def test_a_stated_power_limit_and_memory_bandwidth_reach_the_device() -> None:
    case = _titan()
    hardware = "NVIDIA H100 SXM, 96GB HBM2e (2.4 TB/s), run at 500W power limit"
    case["hardware"]["accelerator"] = hardware
    device = training_case_scenario(case).system.device
    assert (device.power_limit_W, device.hbm_bandwidth_Bps) == (500.0, 2.4e12)
    # a TDP is not a limit, and a field beats the text
    case["hardware"]["accelerator"] = "NVIDIA H100 SXM 80GB HBM3 (700W TDP)"
    device = training_case_scenario(case).system.device
    assert (device.power_limit_W, device.hbm_bandwidth_Bps) == (0.0, 3.35e12)
    case["hardware"].update(power_limit_W=450, memory_bandwidth_TBps=3.0)
    device = training_case_scenario(case).system.device
    assert (device.power_limit_W, device.hbm_bandwidth_Bps) == (450.0, 3.0e12)
    case["hardware"]["accelerator"] = "NVIDIA H100, power capped at 400 W"
    del case["hardware"]["power_limit_W"]
    assert training_case_scenario(case).system.device.power_limit_W == 400.0


def test_float8_and_async_tp_are_read_from_the_case() -> None:
    case = _titan(tp=8, num_gpus=64, precision="float8 rowwise", async_tp=True)
    s = training_case_scenario(case)
    assert s.workload.precision == "fp8"
    assert (s.mapping.tp_comm_overlap, s.mapping.tp_async_backward) == (True, False)
    # the stated flag wins over a title that names async TP
    case = _titan(tp=8, num_gpus=64, async_tp=False)
    case["source"] = {"title": "torchtitan benchmarks: asyncTP on Llama 3", "year": 2025}
    assert not training_case_scenario(case).mapping.tp_comm_overlap
    case["training"].pop("async_tp")
    assert training_case_scenario(case).mapping.tp_comm_overlap
    # Megatron keeps its asynchronous backward collectives
    assert framework({"group": "g", "training": {"framework": "Megatron-Core"}})[
        "tp_async_backward"
    ]


def test_attention_kernel_from_the_stack_and_its_date() -> None:
    def kernel(stack: str, version: str = "", year: int = 2025) -> str:
        case = {"group": "g", "source": {"year": year},
                "training": {"framework": stack, "framework_version": version}}  # fmt: skip
        return str(framework(case)["attention_kernel"])

    # Transformer Engine prefers cuDNN's fused attention on Hopper from TE 1.8 (June 2024)
    assert kernel("NeMo (Megatron-Core, Transformer Engine)", "NeMo 24.07 container") == "cudnn"
    assert kernel("NeMo (Megatron-Core, Transformer Engine)", "NeMo 24.03.01 container") == "fa2"
    assert kernel("Megatron-Bridge") == "cudnn"
    assert kernel("torchtitan") == "fa2"
    assert kernel("PyTorch with FlashAttention-3") == "fa3"
    assert kernel("Megatron-LM, unfused attention") == "fa2"
    # llm-foundry's benchmark harness passed MPT's attn_impl: triton until v0.7.0 (March 2024)
    assert kernel("Composer + PyTorch FSDP (llm-foundry)", year=2023) == "triton"
    assert kernel("llm-foundry", "2024-03-20") == "triton"
    assert kernel("llm-foundry", "2024-04-02") == "fa2"
    assert kernel("PyTorch FSDP, attn_impl: triton") == "triton"


def test_the_fp8_recipe_is_read_from_the_precision() -> None:
    def recipe(precision: str) -> str:
        return str(framework(_titan(precision=precision))["fp8_recipe"])

    assert recipe("float8 rowwise") == "rowwise"
    assert recipe("fp8 row-wise scaling, bf16 FSDP all-gather") == "rowwise"
    assert recipe("float8 tensorwise") == "tensorwise"
    assert recipe("bf16") == "tensorwise"
    # Megatron-Bridge's tables: "FP8-MX" / MXFP8 block scaling, "FP8-CS" per-tensor
    assert recipe("mxfp8 (FP8-MX: MXFP8 block scaling)") == "mxfp8"
    assert recipe("fp8-mx") == "mxfp8"
    assert recipe("fp8 (FP8-CS: per-tensor current scaling)") == "tensorwise"
    s = training_case_scenario(_titan(precision="float8 rowwise"))
    assert s.mapping.fp8_recipe == "rowwise"


def test_a_job_spreads_over_the_scale_up_domains_it_can_fill_evenly() -> None:
    case = _titan(num_gpus=128, fsdp=128, global_batch_size=256)
    case["hardware"] = {"accelerator": "NVIDIA GB200 NVL72"}  # node size unstated: 72
    s = training_case_scenario(case)
    assert (s.system.devices_per_node, s.system.num_nodes) == (64, 2)


def test_fp4_training_and_a_peak_stated_for_another_precision() -> None:
    case = _titan(precision="nvfp4")
    case["hardware"] = {"accelerator": "NVIDIA B200", "gpus_per_node": 8,
                        "peak_dense_tflops": {"bf16 tensor": 2250},
                        "peak_dense_tflops_precision_used": 2250,
                        "peak_precision_key": "bf16 tensor"}  # fmt: skip
    s = training_case_scenario(case)
    assert s.workload.precision == "fp4"
    # the bf16 peak the case names is not taken for fp4
    assert s.system.device.peak_flops["fp4"] == 9000e12


def test_unstated_sharding_is_the_least_that_fits() -> None:
    # Llama 3 8B on 8 x 80 GB without sharding (16 B per parameter) does not fit; the source
    # states no ZeRO stage
    case = _titan(local_batch_size=1, global_batch_size=8, activation_recompute="full")
    for key in ("fsdp", "zero_stage"):
        case["training"].pop(key, None)
    case["training"]["framework"] = "PyTorch"
    s = training_case_scenario(case)
    assert s.mapping.zero_stage >= 1
    assert evaluate_one(s)["feasible"]
    case["training"]["zero_stage"] = 0  # stated: kept, even if it does not fit
    assert training_case_scenario(case).mapping.zero_stage == 0


def test_nemo2_and_megatron_bridge_fp8_recipes_keep_fp8_weights() -> None:
    def fp8_params(stack: str, version: str, precision: str = "fp8") -> bool:
        case = {"group": "g", "source": {"year": 2025}, "training": {
            "framework": stack, "framework_version": version, "precision": precision}}  # fmt: skip
        return bool(framework(case)["fp8_params"])

    assert fp8_params("Megatron-Bridge", "NeMo 25.09 container")
    assert not fp8_params("NeMo", "NeMo 24.07 container")  # NeMo 1.x: bf16 weights + FP8 cache
    assert not fp8_params("Megatron-Bridge", "NeMo 25.09 container", "fp8 blockwise")
    assert not fp8_params("Megatron-Bridge", "NeMo 25.09 container", "bf16")
    assert fp8_params("torchtitan", "2025-06-01", "float8 with fp8_param all-gather")


def test_megatron_bridge_performance_recipes_reduce_in_16_bits_with_te_s_fused_loss() -> None:
    # every Megatron-Bridge performance recipe sets grad_reduce_in_fp32 false and
    # cross_entropy_fusion_impl "te" (scripts/performance, perf_recipes/_common.py)
    def flags(title: str, notes: str = "") -> dict[str, Any]:
        training = {"framework": "Megatron-Bridge (Megatron-Core, TE)"}
        source = {"year": 2026, "title": title}
        return framework({"group": "g", "source": source, "notes": notes, "training": training})

    perf = flags("NVIDIA-NeMo/Megatron-Bridge performance summary, 26.02 NeMo container")
    assert (perf["fp32_main_grads"], perf["cross_entropy"]) == (False, "fused")
    stated = flags("Megatron-Bridge performance summary", "grad_reduce_in_fp32: true")
    assert stated["fp32_main_grads"] is True
    other = flags("a Megatron-Bridge training run")  # not its benchmark recipes
    assert (other["fp32_main_grads"], other["cross_entropy"]) == (True, "vocab_parallel")


def test_nemo2_performance_recipes_reduce_in_16_bits_and_fsdp_drops_fp8_weights() -> None:
    # NeMo v2.2.0 scripts/llm/performance: grad_reduce_in_fp32 = False; v2.3.0
    # scripts/performance/utils.py turns fp8_param_gather off under Megatron-Core FSDP
    def flags(version: str, zero: Any = "distributed optimizer", title: str = "Performance "
              "Summary") -> dict[str, Any]:  # fmt: skip
        training = {
            "framework": "NeMo 2.0 (Megatron-Core, Transformer Engine)",
            "framework_version": version,
            "precision": "fp8",
            "zero_stage": zero,
        }
        source = {"year": 2025, "title": f"NVIDIA NeMo Framework User Guide, {title}"}
        return framework({"group": "g", "source": source, "training": training})

    nemo2 = flags("NeMo 25.02 container")
    assert (nemo2["fp32_main_grads"], nemo2["fp8_params"]) == (False, True)
    assert flags("NeMo 25.04 container", zero=3)["fp8_params"] is False
    assert flags("NeMo 25.02 container", zero=3)["fp8_params"] is True  # before v2.3.0
    # NeMo 1.x (the launcher) and pages other than the performance summary keep fp32
    assert flags("NeMo 24.07 container")["fp32_main_grads"] is True
    assert flags("NeMo 25.04 container", title="Long Sequence Performance")["fp32_main_grads"]


def test_nemo2_and_megatron_bridge_cases_name_the_2025_profile() -> None:
    def profile(stack: str, version: str) -> str | None:
        training = {"framework": stack, "framework_version": version}
        return framework_profile({"group": "g", "source": {"year": 2025}, "training": training})

    assert profile("Megatron-Bridge", "NeMo 25.09 container") == "megatron-bridge-2025"
    assert profile("NeMo 2.0 (Megatron-Core)", "NeMo 25.02 container") == "megatron-bridge-2025"
    assert profile("NeMo (Megatron-Core)", "NeMo 24.03.01 container") == "nemo-24.07"


def test_a_run_that_ran_out_of_memory_is_scored_against_feasibility(tmp_path: Path) -> None:
    """``measured.out_of_memory: true`` is scored as a feasibility outcome: 1 where the oracle
    has the run fit (a miss), 0 where it calls it infeasible; its group has its own figure
    and stays out of the overall mean."""
    oom = dict(_titan(local_batch_size=16, global_batch_size=128), id="oom", group="ran_out",
               measured={"out_of_memory": True})  # fmt: skip
    fits = dict(_titan(local_batch_size=1, global_batch_size=8), id="fits", group="ran_out",
                measured={"out_of_memory": True})  # fmt: skip
    ran = dict(_titan(), id="ran")
    ran["hardware"]["memory_gb"] = 96
    path = tmp_path / "oom.json"
    path.write_text(json.dumps([oom, fits, ran]), encoding="utf-8")
    report = validation_report(path)
    rows = {r["id"]: r for r in report["cases"]}
    assert rows["oom"]["quantity"] == "fits" and rows["oom"]["measured"] == 0.0
    outcome = {k: (r["model"], r["error"], r["feasible"]) for k, r in rows.items()}
    assert outcome["oom"] == (0.0, 0.0, False) and outcome["fits"] == (1.0, 1.0, True)
    group = report["groups"]["ran_out"]
    assert group["kind"] == "feasibility" and group["mean_abs_error"] == 0.5
    assert report["feasibility_group_weighted_mean_abs_error"] == 0.5
    memory = report["groups"]["g"]["mean_abs_error"]
    assert report["group_weighted_mean_abs_error"] == memory  # the feasibility group stays out
    out = CliRunner().invoke(app, ["validate", "--cases", str(path)])
    assert out.exit_code == 0, out.output
    text = " ".join(out.output.split())
    assert "runs that ran out of memory, modelled as fitting: 1 of 2" in text
    assert "over 1 cases in 1 groups" in out.output


def test_gemms_under_a_power_limit_set_the_matrix_rate_there_and_only_there() -> None:
    """FBGEMM's H100 GEMMs at 500 W (group fbgemm_h100_500w) are scored under their limit;
    benchmarks/fit_power.py's full-clock powers are the calibration's (each precision's rows
    then average out, geometric mean), and benchmarks/fit_gemm.py leaves them out, so the
    efficiencies at the TDP are the MAMF rows' alone."""
    from deepflow.config.calibration import current_calibration
    from deepflow.validation import gemm_microbenchmarks, score_gemm_cases

    limited = [c for c in gemm_microbenchmarks() if c["group"] == "fbgemm_h100_500w"]
    assert len(limited) == 6 and all(c["hardware"]["power_limit_W"] == 500 for c in limited)
    rows = score_gemm_cases(limited)
    for precision in ("bf16", "fp8"):
        errors = [r["error"] for r in rows if r["precision"] == precision]
        assert len(errors) == 3
        assert math.prod(1 + e for e in errors) == pytest.approx(1.0, abs=0.01)
        assert max(abs(e) for e in errors) < 0.06
    cal = current_calibration().kernel("hopper")
    fitted = _script("fit_power").fit()
    assert set(fitted) == {("hopper", "bf16"), ("hopper", "fp8")}
    for (_, precision), value in fitted.items():
        assert value == pytest.approx(cal.gemm_full_clock_power_for(precision), abs=6e-4)
    efficiencies, _ = _script("fit_gemm").fit()
    assert efficiencies[("hopper", "bf16")] == pytest.approx(cal.gemm_efficiency["bf16"], abs=6e-5)
    assert efficiencies[("hopper", "fp8")] == pytest.approx(cal.gemm_efficiency["fp8"], abs=6e-5)


def test_a_family_without_public_training_runs_takes_its_serving_rows_sustained_fraction() -> None:
    """Blackwell has no public training run: benchmarks/fit_training.py fits its sustained
    fraction to its public serving rows (TensorRT-LLM's B200 throughput), and the calibration
    holds that fit; a family with training runs is not refitted on serving ones."""
    from deepflow.config.calibration import current_calibration

    fitted = _script("fit_training")._fit_serving({"ampere", "hopper"})
    assert set(fitted) == {"blackwell"}
    blackwell = current_calibration().kernel("blackwell").training_sustained_fraction
    assert fitted["blackwell"] == pytest.approx(blackwell, abs=1e-9)
    assert blackwell < current_calibration().kernel("hopper").training_sustained_fraction


def test_the_triton_attention_rate_is_fitted_on_ampere_and_carried_to_hopper() -> None:
    """benchmarks/fit_training.py fits pre-MLIR Triton's FlashAttention rate to the public
    llm-foundry A100 runs (the only public runs of that kernel) jointly with Ampere's sustained
    fraction, and gives Hopper Ampere's rate scaled by the two families' FlashAttention-2 rates;
    the calibration holds that fit, below FlashAttention-2 on both families."""
    import numpy as np

    from deepflow.config.calibration import current_calibration
    from deepflow.measurements import batch_scale, case_category
    from deepflow.oracle.hardware import device_caps
    from deepflow.validation import training_case_scenario

    fit = _script("fit_training")
    cases = [c for c in load_measurements() if case_category(c) == "end_to_end_training"]
    scenarios = [training_case_scenario(c) for c in cases]
    triton = [c["group"] for c, s in zip(cases, scenarios, strict=True)
              if s.mapping.attention_kernel == "triton"]  # fmt: skip
    assert set(triton) == {"llm_foundry_a100_80"} and len(triton) == 11
    measured = np.array([measured_step_time_s(c) / batch_scale(c, s)
                         for c, s in zip(cases, scenarios, strict=True)])  # fmt: skip
    families = [device_caps(s.system.device, s.workload.precision).family for s in scenarios]
    fitted = fit._fit_triton(cases, scenarios, measured, families)
    ampere, hopper = current_calibration().kernel("ampere"), current_calibration().kernel("hopper")
    assert fitted["ampere"] == pytest.approx(ampere.attention_efficiency_triton, abs=1e-9)
    ratio = hopper.attention_efficiency / ampere.attention_efficiency
    assert fitted["hopper"] == pytest.approx(hopper.attention_efficiency_triton, abs=1e-9)
    assert hopper.attention_efficiency_triton == pytest.approx(
        ampere.attention_efficiency_triton * ratio, abs=0.005
    )
    assert ampere.attention_efficiency_triton < ampere.attention_efficiency
    assert hopper.attention_efficiency_triton < hopper.attention_efficiency


def test_attention_sweeps_across_lengths_set_each_familys_query_block_overhead() -> None:
    """cudnn-frontend's SDPA tables (cuDNN and FlashAttention-2, bf16, causal, 2k-32k tokens)
    are scored as each kernel's rate relative to its rate at 8k tokens, and
    benchmarks/fit_attention.py's per-family fit of that shape is the calibration's: Hopper's
    from H200, Blackwell's from B200, GB200 and GB300, the other GPU families Hopper's, the
    TPU none (docs/model.md §C6.2)."""
    from deepflow.config.calibration import current_calibration
    from deepflow.validation import attention_microbenchmarks, score_attention_cases

    cases = attention_microbenchmarks()
    groups = {c["group"] for c in cases}
    assert groups == {"cudnn_frontend_sdpa_hopper", "cudnn_frontend_sdpa_blackwell"}
    assert all(c["source"]["url"].startswith("https://github.com/NVIDIA/cudnn-frontend/blob/")
               for c in cases)  # fmt: skip
    rows = score_attention_cases(cases)
    assert {r["family"] for r in rows} == {"hopper", "blackwell"}
    for family, bound in (("hopper", 0.05), ("blackwell", 0.10)):
        errors = [abs(r["error"]) for r in rows if r["family"] == family]
        assert sum(errors) / len(errors) < bound
    fitted = _script("fit_attention").fit()
    assert set(fitted) == {"hopper", "blackwell", "ampere", "volta", "generic"}
    for family, value in fitted.items():
        overhead = current_calibration().kernel(family).attention_block_overhead
        assert value == pytest.approx(overhead, abs=1e-9)
    assert fitted["ampere"] == fitted["volta"] == fitted["generic"] == fitted["hopper"] > 0
    assert current_calibration().kernel("tpu").attention_block_overhead == 0.0
    # the rate rises with the length in every series, as the model's does
    short = [r for r in rows if r["id"].endswith("_2k")]
    assert short and all(r["measured"] < 1 and r["model"] < 1 for r in short)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"causal": False},
            "attention.causal must be true (the model's fused attention is causal).",
        ),
        (
            {"seq_len": 0},
            "attention.seq_len, reference_seq_len, measured.tflops and "
            "tflops_at_reference must be positive numbers.",
        ),
    ],
)
def test_an_attention_case_that_cannot_be_read_is_a_clear_error(
    change: dict[str, Any], message: str
) -> None:
    from deepflow.validation import attention_microbenchmarks, score_attention_cases

    case = copy.deepcopy(attention_microbenchmarks()[0])
    case["attention"].update(change)
    with pytest.raises(ConfigError) as err:
        score_attention_cases([case])
    assert str(err.value) == f"case {case['id']!r}: {message}"


def test_the_dense_overlap_exponent_is_fitted_to_the_dense_gemms_without_block_scales() -> None:
    """benchmarks/fit_moe_gemm.py fits Hopper's ``gemm_overlap_exponent_dense`` to the public
    dense GEMMs without block scales (vLLM's H100 table) alone, and the calibration holds it;
    DeepGEMM's block-scaled cases stay with the joint constants."""
    from deepflow.config.calibration import current_calibration
    from deepflow.validation import gemm_case_caps, serving_gemm_case_blockwise
    from deepflow.validation import serving_gemm_microbenchmarks as cases_of

    fit = _script("fit_moe_gemm")
    dense, blockwise = [], []
    for case in cases_of():
        g = case["gemm"]
        row = (case, gemm_case_caps(case), (g["M"], g["N"], g["K"], g.get("groups", 1)),
               "layout" in g, float(case["measured"]["tflops"]))  # fmt: skip
        (blockwise if serving_gemm_case_blockwise(case) else dense).append(row)
    assert {r[0]["group"] for r in dense} == {"vllm_bench_fp8_gemm_h100"}
    assert {r[0]["group"] for r in blockwise} == {"deepgemm_dense_h800", "deepgemm_grouped_h800"}
    hopper = current_calibration().kernel("hopper")
    assert fit._fit_dense(dense) == pytest.approx(hopper.gemm_overlap_exponent_dense, abs=1e-9)
    assert hopper.gemm_overlap_exponent_dense > hopper.gemm_overlap_exponent


def test_blackwell_grouped_gemm_rates_are_fitted_to_tensorrt_llm_fused_moe_tables() -> None:
    """benchmarks/fit_moe_layer.py fits Blackwell's grouped-GEMM rates to aiconfigurator's
    TensorRT-LLM fused-MoE tables on B200 over the rows whose modelled GEMMs are FLOP-bound:
    bf16 and fp8 at the dense rate (their fit above 1 is written as 1), nvfp4 at its own lower
    rate, which only FP4 capabilities take (docs/model.md §D1)."""
    from deepflow.config import load_device
    from deepflow.config.calibration import current_calibration
    from deepflow.oracle.hardware import device_caps

    fit = _script("fit_moe_layer")
    source = json.loads(fit.DATA.read_text())["source"]
    assert source["url"].startswith("https://github.com/ai-dynamo/aiconfigurator/blob/095f58a5")
    fitted = fit.fit()
    assert set(fitted) == {"grouped_gemm_efficiency", "grouped_gemm_efficiency_fp4"}
    blackwell = current_calibration().kernel("blackwell")
    for key, f in fitted.items():
        assert f["value"] == pytest.approx(getattr(blackwell, key), abs=1e-9)
        assert f["bound_rows"] >= 20 and f["bound_error"] < 0.25
    assert fitted["grouped_gemm_efficiency"]["raw"] > 1.0 == blackwell.grouped_gemm_efficiency
    assert 0.5 < blackwell.grouped_gemm_efficiency_fp4 < 0.8
    b200 = load_device("b200")
    assert device_caps(b200, "fp4").grouped_gemm_efficiency == blackwell.grouped_gemm_efficiency_fp4
    assert device_caps(b200, "fp8").grouped_gemm_efficiency == blackwell.grouped_gemm_efficiency
    # a family without an FP4 table of its own keeps its one rate
    assert current_calibration().kernel("hopper").grouped_gemm_efficiency_fp4 == 0.0


def test_tensorrt_llm_context_attention_is_fitted_per_family_to_its_tables() -> None:
    """benchmarks/fit_serving_attention.py fits TensorRT-LLM's context-attention rate at 8k
    tokens and its query block's fixed work to aiconfigurator's tables for each family with
    one (A100; H100 and H200; B200), and the calibration holds them (docs/model.md §D1)."""
    from deepflow.config.calibration import current_calibration

    fit = _script("fit_serving_attention")
    doc = json.loads(fit.DATA.read_text())
    assert doc["source"]["repository"].startswith("https://github.com/ai-dynamo/aiconfigurator")
    assert all(t["url"].startswith("https://github.com/ai-dynamo/aiconfigurator/blob/095f58a5")
               for t in doc["tables"])  # fmt: skip
    fitted = fit.fit()
    assert set(fitted) == {"ampere", "hopper", "blackwell"}
    for family, f in fitted.items():
        kernel = current_calibration().kernel(family)
        assert f["attention_efficiency_trtllm"] == pytest.approx(
            kernel.attention_efficiency_trtllm, abs=1e-9
        )
        assert f["attention_block_overhead_trtllm"] == pytest.approx(
            kernel.attention_block_overhead_trtllm, abs=1e-9
        )
        assert f["rows"] > 1000 and f["error"] < 0.08
    # a family without a table keeps its rate at every length
    assert current_calibration().kernel("volta").attention_block_overhead_trtllm == 0.0


def test_gb300_runs_cudnn_attention_faster_than_its_family_by_its_measured_ratio() -> None:
    """Blackwell Ultra's doubled exponential rate: GB300's cuDNN attention over GB200's on one
    cuDNN release (configs/devices/gb300.yaml); the other kernels and devices keep the
    family's rate."""
    from deepflow.config import load_device
    from deepflow.config.calibration import current_calibration
    from deepflow.oracle.hardware import device_caps

    family = current_calibration().kernel("blackwell")
    gb300 = load_device("gb300")
    caps = device_caps(gb300, "bf16")
    ratio = gb300.attention_speedup["cudnn"]
    assert 1.1 < ratio < 1.25
    assert caps.attention_efficiency_cudnn == pytest.approx(
        family.attention_efficiency_cudnn * ratio, rel=1e-12
    )
    assert caps.attention_efficiency == family.attention_efficiency
    for other in ("gb200", "b200"):
        assert device_caps(load_device(other), "bf16").attention_efficiency_cudnn == (
            family.attention_efficiency_cudnn
        )


def test_a_device_with_its_own_matmul_benchmark_holds_its_own_efficiency() -> None:
    """GB200's preset holds the GEMM efficiency its MAMF rows measure (fitted by
    benchmarks/fit_gemm.py, whose Blackwell family fit leaves them out); B200 and GB300 take
    the family's; the 16-bit formats stand in for each other; FP4 takes the family's."""
    from deepflow.config import load_device
    from deepflow.config.calibration import current_calibration
    from deepflow.oracle.hardware import device_caps, device_gemm_efficiency
    from deepflow.validation import gemm_case_caps, gemm_efficiency_key, gemm_microbenchmarks

    gb200, b200 = load_device("gb200"), load_device("b200")
    family = current_calibration().kernel("blackwell")
    assert device_gemm_efficiency(b200, "bf16") is None
    assert device_gemm_efficiency(gb200, "fp16") == gb200.gemm_efficiency["bf16"]
    assert device_gemm_efficiency(gb200, "fp4") is None
    for precision in ("bf16", "fp8"):
        assert device_caps(gb200, precision).gemm_efficiency == gb200.gemm_efficiency[precision]
        assert device_caps(b200, precision).gemm_efficiency == family.gemm_efficiency[precision]
        gb300 = device_caps(load_device("gb300"), precision)
        assert gb300.gemm_efficiency == family.gemm_efficiency[precision]
    assert device_caps(gb200, "fp4").gemm_efficiency == family.gemm_efficiency["fp4"]
    assert gb200.gemm_efficiency["bf16"] < family.gemm_efficiency["bf16"]
    keys = {gemm_efficiency_key(gemm_case_caps(c)) for c in gemm_microbenchmarks()
            if "GB200" in str(c["hardware"]["accelerator"])}  # fmt: skip
    assert keys == {("gb200", "bf16"), ("gb200", "fp8")}
    efficiencies, _ = _script("fit_gemm").fit()
    for key, value in efficiencies.items():
        if key[0] == "gb200":
            assert value == pytest.approx(gb200.gemm_efficiency[key[1]], abs=6e-5)
        elif key[0] == "blackwell":
            assert value == pytest.approx(family.gemm_efficiency[key[1]], abs=6e-5)


def test_the_device_writer_sets_only_its_gemm_efficiency_block(tmp_path: Path) -> None:
    fit_gemm = _script("fit_gemm")
    (tmp_path / "gb200.yaml").write_text(
        "peak_dense_TFLOPS:\n  bf16: 2500  # p\ngemm_efficiency:   # own\n  bf16: 0.7  # a\n"
        "  fp8: 0.6\nhbm_technology: hbm3e\n",
        encoding="utf-8",
    )
    (path,) = fit_gemm.write_devices({("gb200", "bf16"): 0.73801, ("gb200", "fp8"): 0.7328},
                                     tmp_path)  # fmt: skip
    assert path.read_text(encoding="utf-8") == (
        "peak_dense_TFLOPS:\n  bf16: 2500  # p\ngemm_efficiency:   # own\n  bf16: 0.7380  # a\n"
        "  fp8: 0.7328\nhbm_technology: hbm3e\n"
    )
    with pytest.raises(SystemExit, match="no 'gemm_efficiency: fp4' entry to set"):
        fit_gemm.write_devices({("gb200", "fp4"): 0.6}, tmp_path)


def _script(name: str) -> Any:
    """A benchmarks/ script as a module (benchmarks/ on the path, as when it runs)."""
    import importlib.util
    import sys

    folder = Path(__file__).resolve().parent.parent / "benchmarks"
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
    spec = importlib.util.spec_from_file_location(name, folder / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_jax_timing_per_call_includes_the_dispatch_fitted_with_the_tpu_efficiency() -> None:
    """JAX's Pallas guide times each XLA matmul with its dispatch (timeit over
    jax.block_until_ready): the scored model adds frameworks.yaml's jax_dispatch to the kernel,
    and benchmarks/fit_gemm.py fits that overhead (the 1024^3 row less its modelled kernel)
    together with the TPU family's efficiency, to the calibration's values."""
    from deepflow.config.calibration import current_calibration
    from deepflow.validation import gemm_microbenchmarks, host_overhead_s, score_gemm_cases

    cases = [c for c in gemm_microbenchmarks() if c["group"] == "jax_xla_matmul_tpu_v5e"]
    assert [c["gemm"]["M"] for c in cases] == [1024, 4096, 8192]
    overhead = current_calibration().jax_dispatch.call_overhead_s
    assert all(host_overhead_s(c) == overhead for c in cases)
    assert 50e-6 < overhead < 119.43e-6  # the 1024^3 call, less a kernel of some microseconds
    with_overhead = score_gemm_cases(cases)
    without = score_gemm_cases(cases, host_overheads={"jax_dispatch": 0.0})
    for a, b, case in zip(with_overhead, without, cases, strict=True):
        flops = 2.0 * case["gemm"]["M"] * case["gemm"]["N"] * case["gemm"]["K"]
        assert flops / (a["model_tflops"] * 1e12) == pytest.approx(
            flops / (b["model_tflops"] * 1e12) + overhead, rel=1e-12
        )
    assert max(abs(r["error"]) for r in with_overhead) < 0.03
    efficiencies, overheads = _script("fit_gemm").fit()
    assert overheads["jax_dispatch"] == pytest.approx(overhead, abs=0.06e-6)
    tpu = current_calibration().kernel("tpu").gemm_efficiency["bf16"]
    assert efficiencies[("tpu", "bf16")] == pytest.approx(tpu, abs=6e-5)


def test_an_unknown_host_overhead_is_a_clear_error() -> None:
    from deepflow.validation import host_overhead_s

    case = {"id": "x", "measured": {"includes_host_overhead": "python_loop"}}
    with pytest.raises(ConfigError, match=r"measured\.includes_host_overhead is 'python_loop'; "
                                          r"known: jax_dispatch\."):  # fmt: skip
        host_overhead_s(case)
    assert host_overhead_s({"id": "y", "measured": {}}) == 0.0


def test_fit_writers_set_only_their_own_block(tmp_path: Path) -> None:
    """benchmarks/fit_gemm.py sets gemm_efficiency's precisions and fit_power.py
    gemm_full_clock_power's, though both blocks name bf16 and fp8 at the same depth; the host
    overhead lands in its frameworks.yaml entry."""
    fit_gemm, fit_power = _script("fit_gemm"), _script("fit_power")
    path = tmp_path / "kernels.yaml"
    path.write_text(
        "families:\n  hopper:\n    gemm_efficiency:\n      bf16: 0.8  # a\n      fp8: 0.7\n"
        "    gemm_full_clock_power:\n      bf16: 0.9  # b\n      fp8: 0.95\n"
        "  tpu:\n    gemm_efficiency:\n      bf16: 0.9\n",
        encoding="utf-8",
    )
    fit_gemm.write({("hopper", "bf16"): 0.81234, ("hopper", "fp8"): 0.75}, path)
    fit_power.write({("hopper", "fp8"): 0.912}, path)
    assert path.read_text(encoding="utf-8") == (
        "families:\n  hopper:\n    gemm_efficiency:\n      bf16: 0.8123  # a\n      fp8: 0.7500\n"
        "    gemm_full_clock_power:\n      bf16: 0.9  # b\n      fp8: 0.912\n"
        "  tpu:\n    gemm_efficiency:\n      bf16: 0.9\n"
    )
    frameworks = tmp_path / "frameworks.yaml"
    frameworks.write_text("other:\n  x: 1\njax_dispatch:\n  call_overhead_us: 1.0   # c\n",
                          encoding="utf-8")  # fmt: skip
    fit_gemm.write_overheads({"jax_dispatch": 106.96e-6}, frameworks)
    assert frameworks.read_text(encoding="utf-8").endswith("call_overhead_us: 107.0   # c\n")
    with pytest.raises(SystemExit, match="no 'absent: call_overhead_us' entry"):
        fit_gemm.write_overheads({"absent": 1e-6}, frameworks)


# ------------------------------------------------------------------ validate --group --breakdown
def test_a_group_pattern_scores_only_its_cases_as_the_whole_set_does() -> None:
    whole = {(r["id"], r["quantity"]): r["model"] for r in validation_report()["cases"]}
    some = validation_report(group="korthikanti*")
    assert {r["group"] for r in some["cases"]} == {"korthikanti2022_table5"}
    assert len(some["cases"]) == 8 and set(some["groups"]) == {"korthikanti2022_table5"}
    assert all(r["model"] == whole[(r["id"], r["quantity"])] for r in some["cases"])
    (one,) = validation_report(group="korthikanti2022_t5_1T_full_recompute")["cases"]
    assert one["id"] == "korthikanti2022_t5_1T_full_recompute"
    assert all("breakdown" not in r for r in some["cases"])  # only when asked


def test_a_group_pattern_that_matches_nothing_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        validation_report(group="nomatch*")
    assert str(err.value).startswith(
        "the public set: no case's group or id matches 'nomatch*' (a shell-style pattern, e.g. "
        "'megatron*'); its groups: allreduce_bench_h200_node, cudnn_frontend_sdpa_blackwell, "
        "cudnn_frontend_sdpa_hopper, deepgemm_dense_h800, "
    )
    assert str(err.value).endswith(" (33 in all).")
    path = tmp_path / "cases.json"
    path.write_text(json.dumps([_case("korthikanti2022_table5", 0)]), encoding="utf-8")
    result = runner.invoke(app, ["validate", "--cases", str(path), "--group", "x*"])
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr == (
        f"error: {path}: no case's group or id matches 'x*' (a shell-style pattern, e.g. "
        "'megatron*'); its groups: korthikanti2022_table5.\n"
    )


def test_breakdowns_add_up_to_the_modelled_step_peak_and_request_slot() -> None:
    from deepflow.measurements import inference_case_scenario

    report = validation_report(group="*", breakdown=True)
    kinds = {"step s": 0, "GiB": 0, "slot": 0}
    for row in report["cases"]:
        parts = row.get("breakdown")
        if row["quantity"] == "step s" or str(row["quantity"]).startswith("GiB"):
            assert sum(parts.values()) == pytest.approx(row["model"], rel=1e-9), row["id"]
            kinds["step s" if row["quantity"] == "step s" else "GiB"] += 1
        elif row["quantity"] in ("throughput", "ttft", "tpot"):
            kinds["slot"] += 1
        else:  # kernels, collectives: no parts
            assert parts is None, row["id"]
    assert min(kinds.values()) > 10, kinds
    case = next(c for c in load_measurements() if c["id"] == "trtllm_l70b_h200_tp1_128_2048")
    slot = evaluate_one(inference_case_scenario(case))["step_time_s"]
    rows = [r for r in report["cases"] if r["id"] == case["id"]]
    assert rows and all(sum(r["breakdown"].values()) == pytest.approx(slot) for r in rows)


def test_cli_shows_where_each_cases_modelled_value_goes(monkeypatch: Any) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    result = runner.invoke(app, ["validate", "--group", "korthikanti*", "--breakdown"])
    assert result.exit_code == 0, result.output
    assert "where the modelled value goes" in result.stdout
    line = next(s for s in result.stdout.splitlines() if "korthikanti2022_t5_22B_full_rec" in s
                and "gemm" in s)  # fmt: skip
    shares = [int(p.split()[-2]) for p in line.split("│")[4:] if p.strip()]
    assert shares == sorted(shares, reverse=True) and 50 < sum(shares) <= 100
    data = json.loads(runner.invoke(app, ["validate", "--group", "korthikanti*", "--breakdown",
                                          "--json"]).stdout)  # fmt: skip
    assert all(r["breakdown"]["gemm"] > 0 for r in data["cases"])
    kernels = runner.invoke(app, ["validate", "--group", "deepgemm*", "--breakdown"])
    assert kernels.exit_code == 0
    assert "no end-to-end case among them: nothing to break down" in kernels.stdout


# ------------------------------------------------------------------------ validate --scenarios
@pytest.mark.parametrize(
    ("case_id", "output", "reads"),
    [
        ("korthikanti2022_t5_1T_full_recompute", "step_time_s", "validate reads step_time_s"),
        ("trtllm_l70b_h200_tp1_128_2048", "tokens_per_s", "validate reads tokens_per_s"),
        ("tt2412_8b_8gpu_fsdp", "memory_per_device_B", "validate reads memory_breakdown_B less"),
    ],
)  # fmt: skip
def test_a_written_case_scenario_reproduces_its_case(tmp_path: Path, case_id: str, output: str,
                                                     reads: str) -> None:  # fmt: skip
    from deepflow.config import load_scenario
    from deepflow.validation import case_scenario, load_cases, write_case_scenarios

    (case,) = load_cases(group=case_id)
    (path,) = write_case_scenarios([case], tmp_path / "scenarios")
    assert path == tmp_path / "scenarios" / f"{case_id}.yaml"
    text = path.read_text(encoding="utf-8")
    header = [line for line in text.splitlines() if line.startswith("# ")]
    assert header[0] == (f"# deepflow scenario of the published case {case_id} "
                         f"(group {case['group']})")  # fmt: skip
    assert any(line.startswith(f"# {reads}") for line in header), header
    scenario, _ = case_scenario(case)
    back = load_scenario(path)
    assert evaluate_one(back)[output] == evaluate_one(scenario)[output]
    assert "description" not in text and "head_dim: 0" not in text  # defaults left out
    assert not list(path.parent.glob(".*.part"))


def test_a_case_scenario_says_how_its_step_is_scaled_to_the_measured_batch() -> None:
    from deepflow.validation import case_scenario, load_cases, score_training_cases

    (case,) = load_cases(group="korthikanti2022_t5_22B_full_recompute")
    case = copy.deepcopy(case)
    case["training"]["global_batch_size"] += 1  # 5 sequences on a micro-batch of 4
    scenario, note = case_scenario(case)
    assert scenario.workload.global_batch_size == 4
    assert note == "validate reads step_time_s x 1.25 (the case's global batch / the modelled one)"
    (row,) = score_training_cases([case])
    assert row["model_s"] == pytest.approx(evaluate_one(scenario)["step_time_s"] * 1.25, rel=1e-12)


def test_cli_writes_the_scored_cases_scenarios_and_evaluate_reads_them(tmp_path: Path) -> None:
    folder = tmp_path / "cases"
    result = runner.invoke(app, ["validate", "--group", "korthikanti2022_t5_22B*",
                                 "--scenarios", str(folder)])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert f"wrote 2 case scenarios to {folder} (deepflow evaluate reads each)" in " ".join(
        result.stdout.split()
    )
    args = ["validate", "--group", "korthikanti2022_t5_22B*", "--scenarios", str(folder)]
    report = json.loads(runner.invoke(app, [*args, "--json"]).stdout)
    assert sorted(report["scenario_files"]) == sorted(str(p) for p in folder.glob("*.yaml"))
    for row in report["cases"]:
        out = runner.invoke(app, ["evaluate", str(folder / f"{row['id']}.yaml"), "--json"])
        assert out.exit_code == 0, out.output
        assert json.loads(out.stdout)["step_time_s"] == pytest.approx(row["model"], rel=1e-12)
    kernels = runner.invoke(app, ["validate", "--group", "deepgemm_dense*", "--scenarios",
                                  str(tmp_path / "none")])  # fmt: skip
    assert "no end-to-end case among them: no scenario to write" in kernels.stdout


def test_cli_refuses_a_scenarios_folder_that_is_a_file(tmp_path: Path) -> None:
    target = tmp_path / "taken"
    target.write_text("mine", encoding="utf-8")
    result = runner.invoke(app, ["validate", "--group", "korthikanti*", "--scenarios",
                                 str(target)])  # fmt: skip
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr == (f"error: {target}: exists and is not a folder; give a folder "
                             "for the scenarios.\n")  # fmt: skip
    assert target.read_text(encoding="utf-8") == "mine"
