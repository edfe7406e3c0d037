"""Reading published serving measurements (deepflow.measurements, category ``inference``)."""

from __future__ import annotations

import copy
import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import pytest

from deepflow.config.calibration import current_calibration
from deepflow.data import load_measurements
from deepflow.errors import ConfigError
from deepflow.measurements import (
    SERVING_QUANTITIES,
    caching_allocator,
    decode_kv_reads,
    disaggregated_pools,
    first_token_from_decode,
    inference_case_scenario,
    kv_cache_reservation,
    offline_run,
    poisson_arrivals,
    poisson_rate,
    prompt_tokens_per_iteration,
    serving_scheduler,
    trtllm_bench_limits,
)
from deepflow.oracle.evaluate import evaluate_one
from deepflow.validation import score_inference_case, validation_report


def _case(case_id: str) -> dict[str, Any]:
    (case,) = [c for c in load_measurements() if c["id"] == case_id]
    return copy.deepcopy(case)


def test_trtllm_bench_limits_follow_tensorrt_llms_tuning_formula() -> None:
    # Llama 3.1 8B FP8 on one H100 at ISL/OSL 2048/128, by hand from TensorRT-LLM
    # bench/build/tuning.py: KV bytes per token 2·32 layers·8 heads·128·1 B, the engine's
    # parameters at 1 byte, 95 % of the memory left for the KV cache
    case = _case("trtllm_l8b_h100_tp1_2048_128")
    scenario = inference_case_scenario(case)
    model = scenario.workload.model
    params = 32 * (4096 * 48 * 128 + 32 * 128 * 4096 + 3 * 4096 * 14336 + 2 * 4096)
    params += 2 * 128256 * 4096
    per_token_GiB = 2 * 32 * 8 * 128 / 2**30
    requests = (80 - params / 2**30) * 0.95 / (per_token_GiB * 2176)
    raw_bs, raw_tokens = requests, requests * (1 + 2048 / 128)
    assert 256 <= raw_bs < 1024 and raw_tokens >= 8192
    expected = 128 * math.ceil(raw_bs / 128), 1024 * math.ceil(raw_tokens / 1024)
    assert model.num_kv_heads == 8 and trtllm_bench_limits(case, scenario) == expected
    # the 4,096-request cap; without chunked prefill at least ISL + max batch tokens
    short = inference_case_scenario(_case("trtllm_l8b_h200_tp1_128_128"))
    assert trtllm_bench_limits(_case("trtllm_l8b_h200_tp1_128_128"), short) == (4096, 8192)
    long = _case("trtllm_l8b_h100_tp1_20000_2000")
    bs, tokens = trtllm_bench_limits(long, inference_case_scenario(long))
    assert tokens == 20000 + bs


def test_serving_scheduler_reads_how_each_source_batched() -> None:
    offline = _case("trtllm_l70b_h200_tp1_128_2048")
    s = inference_case_scenario(offline)
    assert s.workload.batching == "continuous" and s.workload.cuda_graph_padding
    assert (s.workload.max_batch_size, s.workload.max_num_tokens) == trtllm_bench_limits(offline, s)
    assert s.workload.global_batch_size == offline["inference"]["num_requests"]
    # trtllm-bench queues every request at once and times the run to the last (waves)
    assert s.workload.arrivals == "offline"
    # TensorRT-LLM's PyTorch executor spends host time on every request every iteration
    host = current_calibration().serving.host_s_per_request
    assert s.workload.host_s_per_request == host == pytest.approx(45.11e-3 / 1536, rel=2e-3)
    # its executor preallocates the KV pool as 95 % of the free memory (the perf overview's
    # --kv_cache_free_gpu_mem_fraction "in many cases"), or the share a case states
    assert s.workload.kv_cache_memory_fraction == 0.95
    offline["inference"]["kv_cache_free_gpu_mem_fraction"] = 0.9
    assert inference_case_scenario(offline).workload.kv_cache_memory_fraction == 0.9
    session = inference_case_scenario(_case("trt061_l2_7b_h100_tp1_b768_128_128"))
    assert session.workload.batching == "static" and session.workload.global_batch_size == 768
    assert session.workload.arrivals == "offline"  # one batch issued at once, no clients
    assert not session.workload.cuda_graph_padding and session.workload.max_batch_size == 0
    assert session.workload.host_s_per_request == 0  # the C++ runtime of TensorRT-LLM 0.6
    assert session.workload.kv_cache_memory_fraction == 0  # no trtllm-bench executor pool
    # fixed-length sessions of a closed loop start together and stay in lockstep
    closed = _case("lmdeploy_l2_7b_a100_tp1_c16_128_128")
    assert serving_scheduler(closed, inference_case_scenario(closed))["batching"] == "static"
    assert serving_scheduler(closed, inference_case_scenario(closed))["arrivals"] == "closed_loop"
    closed["inference"]["mode"] = "closed loop: 16 sessions, lengths drawn from ShareGPT"
    assert serving_scheduler(closed, inference_case_scenario(closed))["batching"] == "continuous"
    # a server with a per-iteration token budget staggers the resubmitted prompts: continuous
    # batching's steady state, whoever the clients are (NIM's AIPerf at --concurrency 25,
    # request rate "inf": a closed loop, not an offline run)
    nim = _case("lmdeploy_l2_7b_a100_tp1_c16_128_128")
    nim["inference"] |= {"framework": "NVIDIA NIM for LLMs 1.8.0 (AIPerf)",
                         "mode": "online serving, closed loop at fixed concurrency, fixed lengths",
                         "request_rate": "inf"}  # fmt: skip
    workload = inference_case_scenario(nim).workload
    assert (workload.batching, workload.arrivals) == ("continuous", "closed_loop")


def test_each_server_runs_its_own_attention_kernel() -> None:
    # TensorRT-LLM runs its own fused MHA (both its runtimes); LMDeploy's TurboMind a
    # FlashAttention-2-class one
    for case_id in ("trtllm_l70b_h200_tp1_128_2048", "trt061_l2_7b_h100_tp1_b768_128_128",
                    "trt05_ttft_l2_7b_h100_tp1_128"):  # fmt: skip
        assert inference_case_scenario(_case(case_id)).mapping.attention_kernel == "trtllm"
    lmdeploy = _case("lmdeploy_l2_7b_a100_tp1_c16_128_128")
    assert inference_case_scenario(lmdeploy).mapping.attention_kernel == "fa2"


def test_an_offline_run_is_read_from_the_mode_or_an_infinite_request_rate() -> None:
    case = _case("trtllm_l8b_h100_tp1_2048_128")
    assert offline_run(case)
    case["inference"]["mode"] = "max-throughput"
    assert offline_run(case)  # request_rate "inf"
    case["inference"]["request_rate"] = 4.0
    assert not offline_run(case)
    assert not offline_run(_case("lmdeploy_l2_7b_a100_tp1_c16_128_128"))
    case["inference"] |= {"request_rate": "inf", "mode": "closed loop at --concurrency 64"}
    assert not offline_run(case)
    case["inference"] |= {"mode": "benchmark_serving", "max_concurrency": 64}
    assert not offline_run(case)  # --request-rate inf --max-concurrency 64: 64 clients
    case["inference"]["mode"] = "offline fixed batch"
    assert offline_run(case)  # the batch of a latency benchmark, issued at once


def test_each_servers_default_prompt_budget_is_read_where_the_case_states_none() -> None:
    case = _case("trtllm_l70b_h200_tp1_128_2048")
    inf = case["inference"]
    # a trtllm-bench run: its own engine's max_num_tokens
    scenario = inference_case_scenario(case)
    assert scenario.workload.prompt_tokens_per_iteration == scenario.workload.max_num_tokens > 0
    inf |= {"framework": "TensorRT-LLM 1.2 (trtllm-serve)", "mode": "closed loop"}
    assert prompt_tokens_per_iteration(case) == 8192
    inf["framework"], inf["framework_version"] = "vLLM", "0.12.0"
    assert prompt_tokens_per_iteration(case) == 8192  # the OpenAI server on a 141 GB H200
    case["hardware"]["memory_gb"] = 48
    assert prompt_tokens_per_iteration(case) == 2048
    inf["framework_version"] = "0.6.3"  # V0: not known here
    assert prompt_tokens_per_iteration(case) == 0
    inf["framework"], inf["framework_version"] = "SGLang 0.5.6", None
    case["hardware"]["memory_gb"] = 180
    assert prompt_tokens_per_iteration(case) == 16384  # a B200
    inf["framework_version"] = "v0.4.1"
    assert prompt_tokens_per_iteration(case) == 8192  # before 0.4.7: 8192 on every GPU
    inf["framework_version"] = None
    case["hardware"]["memory_gb"] = 80
    assert prompt_tokens_per_iteration(case) == 8192
    inf["chunked_prefill_size"] = 4096
    assert prompt_tokens_per_iteration(case) == 4096
    inf["framework"] = "NVIDIA NIM 1.8.0"
    del inf["chunked_prefill_size"]
    assert prompt_tokens_per_iteration(case) == 0


def test_a_finite_request_rate_is_read_as_poisson_arrivals() -> None:
    # vLLM's benchmark_serving / SGLang's bench_serving at --request-rate 2: exponential gaps,
    # the run's requests offered, a stated concurrency capping those in flight
    case = _case("trtllm_l70b_h200_tp1_128_2048")
    assert poisson_rate(case) is None and poisson_arrivals(case) == {}
    case["inference"] |= {"request_rate": 2.0, "max_concurrency": 64}
    assert poisson_rate(case) == 2.0
    workload = inference_case_scenario(case).workload
    assert (workload.arrivals, workload.request_rate) == ("poisson", 2.0)
    assert workload.global_batch_size == case["inference"]["num_requests"]
    assert workload.max_batch_size == 64 and workload.batching == "continuous"
    for rate in ("inf", 0, -1.0, True):
        case["inference"]["request_rate"] = rate
        assert poisson_rate(case) is None
    # at 0.25 requests a second the server serves the rate; flooded, the offline run's
    case["inference"] |= {"request_rate": 0.25}
    del case["inference"]["max_concurrency"]
    (slow,) = score_inference_case(case)
    assert slow["model"] == pytest.approx(0.25 * 2048, rel=0.02)
    case["inference"]["request_rate"] = 1e6
    (flood,) = score_inference_case(case)
    (offline,) = score_inference_case(_case("trtllm_l70b_h200_tp1_128_2048"))
    assert flood["model"] == pytest.approx(offline["model"], rel=1e-9)


def test_the_kv_cache_reservation_follows_each_frameworks_block_manager() -> None:
    # TensorRT-LLM's GUARANTEED_NO_EVICT reserves the whole context on admission
    for case_id in ("trtllm_l70b_h200_tp1_128_2048", "trt061_l2_7b_h100_tp1_b768_128_128"):
        assert inference_case_scenario(_case(case_id)).workload.kv_cache_reservation == (
            "full_context"
        )
    # LMDeploy's TurboMind 2.x (v0.1 on) allocates paged blocks as tokens come; 0.0.x did not
    lmdeploy = _case("lmdeploy_l2_7b_a100_tp1_c64_128_2048")
    scenario = inference_case_scenario(lmdeploy)
    assert scenario.workload.kv_cache_reservation == "on_demand"
    lmdeploy["inference"]["framework_version"] = "v0.0.14"
    assert kv_cache_reservation(lmdeploy) == "full_context"
    lmdeploy["inference"] |= {"framework": "vLLM 0.6.3 (benchmark_throughput.py)",
                              "framework_version": "0.6.3"}  # fmt: skip
    assert kv_cache_reservation(lmdeploy) == "on_demand"
    # 64 sessions of 128 + 2048 tokens: reserved whole they overflow the KV cache and queue;
    # paged, all 64 run (the source measured a 0.535 s mean first-token latency, no queueing)
    paged = evaluate_one(scenario)
    full = evaluate_one(dataclasses.replace(scenario, workload=dataclasses.replace(
        scenario.workload, kv_cache_reservation="full_context")))  # fmt: skip
    assert full["active_batch"] < 64 == paged["active_batch"] and paged["queue_wait_s"] == 0


def test_tensorrt_llm_before_0_7_1_reads_the_kv_cache_once_per_query_head() -> None:
    # v0.6.1's masked MHA kernel: one thread block per query head, each streaming its KV head
    session = _case("trt061_l2_70b_h100_tp2_b64_2048_2048")
    scenario = inference_case_scenario(session)
    assert scenario.workload.decode_kv_reads == "per_query_head"
    for version, reads in (("0.7.0", "per_query_head"), ("v0.7.1", "per_kv_head"),
                           ("1.0", "per_kv_head"), ("not stated", "per_kv_head")):  # fmt: skip
        session["inference"]["framework_version"] = version
        assert decode_kv_reads(session) == reads, version
    # XQA (trtllm-bench's releases) and other frameworks share a KV head's read
    for case_id in ("trtllm_l70b_h200_tp1_128_2048", "lmdeploy_l2_7b_a100_tp1_c64_128_2048"):
        assert decode_kv_reads(_case(case_id)) == "per_kv_head", case_id
    # Llama 2 70B on two GPUs: 32 query heads read what 4 KV heads hold, 8 times the bytes
    shared = evaluate_one(dataclasses.replace(scenario, workload=dataclasses.replace(
        scenario.workload, decode_kv_reads="per_kv_head")))  # fmt: skip
    apart = evaluate_one(scenario)
    assert apart["breakdown_s"]["decode_attention"] > 7 * shared["breakdown_s"]["decode_attention"]
    assert apart["breakdown_s"]["decode_gemm"] == shared["breakdown_s"]["decode_gemm"]


def test_turbomind_before_0_1_0a2_takes_the_first_token_from_a_decode_iteration() -> None:
    # v0.1.0a1's ContextDecode prefills input_length - 1 tokens; Generate runs the last one
    session = _case("lmdeploy_l2_7b_a100_tp1_c1_128_128")
    scenario = inference_case_scenario(session)
    assert scenario.workload.first_token_from_decode
    for version, late in (("v0.0.14", True), ("v0.1.0a1", True), ("v0.1.0a2", False),
                          ("v0.1.0", False), ("0.2.6", False), ("not stated", False)):  # fmt: skip
        session["inference"]["framework_version"] = version
        assert first_token_from_decode(session) is late, version
    assert not first_token_from_decode(_case("trtllm_l70b_h200_tp1_128_2048"))
    # one session: TTFT = the prefill of 127 tokens (no logits) + a decode iteration, and
    # the request runs 128 decode iterations (its TPOT is one of them)
    late = evaluate_one(scenario)
    fused = evaluate_one(dataclasses.replace(scenario, workload=dataclasses.replace(
        scenario.workload, first_token_from_decode=False)))  # fmt: skip
    one_less = evaluate_one(dataclasses.replace(scenario, workload=dataclasses.replace(
        scenario.workload, first_token_from_decode=False, input_tokens=127)))  # fmt: skip
    head = one_less["breakdown_s"]["prefill_lm_head"]
    assert late["tpot_s"] == pytest.approx(fused["tpot_s"], rel=1e-12)
    assert late["ttft_s"] == pytest.approx(one_less["ttft_s"] - head + late["tpot_s"], rel=1e-12)
    assert late["step_time_s"] == pytest.approx(late["ttft_s"] + 127 * late["tpot_s"], rel=1e-12)
    # a 1-token prompt leaves the prefill nothing to run: the first token is one decode step
    single = evaluate_one(dataclasses.replace(scenario, workload=dataclasses.replace(
        scenario.workload, input_tokens=1)))  # fmt: skip
    assert all(v == 0 for k, v in single["breakdown_s"].items() if k.startswith("prefill_"))
    assert single["ttft_s"] == pytest.approx(single["tpot_s"], rel=1e-12)


def test_stated_scheduler_limits_win_over_trtllm_benchs_heuristic() -> None:
    case = _case("trtllm_l8b_h100_tp1_128_128")
    case["inference"]["max_batch_size"], case["inference"]["max_num_tokens"] = 512, 4096
    w = inference_case_scenario(case).workload
    assert (w.max_batch_size, w.max_num_tokens) == (512, 4096)
    assert evaluate_one(inference_case_scenario(case))["active_batch"] == 512


def test_attention_data_parallel_moe_runs_attention_per_gpu_and_experts_over_all() -> None:
    case = _case("trtllm_q235b_h200_tp8_128_2048")
    # the page's command passes --ep $ep_size without its value: TensorRT-LLM's default
    # (trtllm-bench --ep None: Mapping's moe_tp_size = tp_size), every expert split over all 8
    assert case["inference"]["ep"] is None
    m = inference_case_scenario(case).mapping
    assert (m.tensor_parallel, m.data_parallel, m.expert_parallel,
            m.expert_tensor_parallel) == (1, 8, 1, 8)  # fmt: skip
    # a stated expert parallelism shards whole experts over the ranks instead
    case["inference"]["ep"] = 8
    m = inference_case_scenario(case).mapping
    assert (m.tensor_parallel, m.data_parallel, m.expert_parallel,
            m.expert_tensor_parallel) == (1, 8, 8, 0)  # fmt: skip
    case["inference"]["ep"] = None
    model = inference_case_scenario(case).workload.model
    # Qwen3-235B: 64 heads of 128 on a 4096-wide model; experts 1,536 wide (moe_ffn_hidden)
    assert (model.head_dim, model.ffn_hidden_size, model.num_experts) == (128, 1536, 128)
    (row,) = score_inference_case(case)
    assert row["feasible"] and row["group"] == "trtllm_perf_overview_h200/throughput"


def test_attention_data_parallel_spreads_the_servers_requests_over_its_ranks() -> None:
    # one trtllm-bench instance queues 3,000 requests; its 8 attention-DP ranks take a share
    # each, and global_batch_size is what one data-parallel replica is offered
    case = _case("trtllm_q235b_h200_tp8_128_2048")
    assert case["inference"]["num_requests"] == 3000
    assert inference_case_scenario(case).workload.global_batch_size == 375
    case["inference"]["num_requests"] = 3001
    assert inference_case_scenario(case).workload.global_batch_size == 376
    # without attention DP the 8 GPUs are one tensor-parallel replica offered all of them
    del case["inference"]["attention_dp"]
    assert inference_case_scenario(case).workload.global_batch_size == 3001
    # a batch the caller offers (the KV-cache probe's) is already one replica's
    case = _case("trtllm_q235b_h200_tp8_128_2048")
    del case["inference"]["num_requests"]
    assert inference_case_scenario(case, batch=40).workload.global_batch_size == 40


def test_replicas_share_the_clients_requests() -> None:
    # two TP 4 replicas behind one client's 16 concurrent requests: 8 each
    case = _case("trtllm_l70b_h200_tp1_128_2048")
    case["inference"] |= {"tp": 4, "num_gpus": 8, "max_concurrency": 16, "batch_size": None}
    scenario = inference_case_scenario(case)
    assert scenario.mapping.data_parallel == 2 and scenario.workload.global_batch_size == 8


def _disaggregated() -> dict[str, Any]:
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "data"
    cases = json.loads((path / "serving_holdout_disaggregated.json").read_text())
    (case,) = [c for c in cases if c["id"].startswith("triton_distributed_h100_llama31_70b_fp8_"
                                                      "disagg")]  # fmt: skip
    return case


def test_disaggregated_pools_are_read_into_the_mapping() -> None:
    # four prefill replicas of TP 2 and one decode replica of TP 8 on 16 H100s, 48 clients
    case = _disaggregated()
    assert disaggregated_pools(case) == ((4, 2), (1, 8), 1)
    scenario = inference_case_scenario(case)
    m = scenario.mapping
    assert (m.tensor_parallel, m.data_parallel, m.prefill_replicas,
            m.prefill_tensor_parallel) == (8, 5, 4, 2)  # fmt: skip
    assert m.num_devices == scenario.system.num_devices == 16
    # the clients are the decode replica's (the pool that holds them)
    assert scenario.workload.global_batch_size == 48
    assert evaluate_one(scenario)["pools"]["decode_replicas"] == 1
    # a co-located case has no pools
    assert disaggregated_pools(_case("trtllm_l70b_h200_tp1_128_2048")) is None


@pytest.mark.parametrize(
    ("pools", "message"),
    [
        ({"prefill_pp": 2}, r"its prefill and decode pools have 2 and 1 pipeline stages; pools "
                            r"of different pipeline depths are not modelled\."),
        ({"decode_attention_dp": 8}, r"its pools run expert or attention data parallelism; a "
                                     r"disaggregated pool of either is not modelled\."),
        ({"decode_instances": None}, r"disaggregation.decode_instances must be a count >= 1\."),
    ],
)  # fmt: skip
def test_pools_the_model_does_not_represent_are_refused(pools: dict, message: str) -> None:
    case = _disaggregated()
    case["disaggregation"] |= pools
    with pytest.raises(ConfigError, match=message):
        inference_case_scenario(case)


def test_published_disaggregated_runs_are_scored_or_skipped_with_a_reason() -> None:
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "data"
    report = validation_report(path / "serving_holdout_disaggregated.json")
    assert len(report["skipped"]) + len({r["id"] for r in report["cases"]}) == 54
    reasons = " ".join(s["reason"] for s in report["skipped"])
    assert "attention data parallelism" in reasons and "H20" in reasons
    assert "triton_distributed_2025_02_llama31_70b_fp8_h100_disagg_vs_agg/tpot" in report["groups"]


def test_nvidias_measured_deployments_are_read_with_their_moe_layout() -> None:
    # aiconfigurator's silicon sample: one replica of tp GPUs at its engine's batch size; a
    # stated MoE tensor-parallel degree (moe_tp x moe_ep = tp) splits each expert that many ways
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "data"
    cases = json.loads((path / "serving_holdout_aiconfigurator.json").read_text())
    assert len(cases) == 1692
    (moe,) = [c for c in cases if c["inference"].get("moe_tp") == 1
              and c["inference"]["tp"] == 8][:1]  # fmt: skip
    m = inference_case_scenario(moe).mapping
    assert (m.tensor_parallel, m.expert_parallel, m.expert_tensor_parallel) == (8, 8, 1)
    # DeepSeek-R1: latent attention, a shared expert, three dense layers of their own width
    (r1,) = [c for c in cases if c["model"]["name"] == "deepseek-ai/DeepSeek-R1"][:1]
    model = inference_case_scenario(r1).workload.model
    assert (model.kv_lora_rank, model.q_lora_rank, model.rope_head_dim, model.head_dim) == (
        512, 1536, 64, 128)  # fmt: skip
    assert (model.num_shared_experts, model.first_dense_layers, model.ffn_hidden_size,
            model.moe_ffn_hidden_size) == (1, 3, 18432, 2048)  # fmt: skip
    dense = cases[0]
    scenario = inference_case_scenario(dense)
    assert scenario.mapping.data_parallel == 1
    assert scenario.workload.global_batch_size == dense["inference"]["max_concurrency"]
    assert {r["quantity"] for r in score_inference_case(dense)} == {"ttft", "tpot"}


def test_tensor_parallel_beyond_the_kv_heads_is_read_for_serving() -> None:
    case = _case("trtllm_q235b_h200_tp8_128_2048")
    del case["inference"]["attention_dp"]
    m = inference_case_scenario(case).mapping
    assert (m.tensor_parallel, m.data_parallel) == (8, 1)  # 4 KV heads, each on 2 ranks


def test_every_shipped_serving_case_with_fixed_lengths_and_a_precision_is_scored() -> None:
    report = validation_report()
    skipped = {s["id"]: s["reason"] for s in report["skipped"]}
    serving = [c for c in load_measurements() if c.get("category") == "inference"]
    for case in serving:
        inf = case["inference"]
        fixed = all(isinstance(inf.get(k), int) for k in ("input_len", "output_len"))
        measured = any(k in case["measured"] for keys, _, _ in SERVING_QUANTITIES for k in keys)
        if fixed and inf.get("weight_precision") and measured:
            assert case["id"] not in skipped, skipped.get(case["id"])
    assert len([i for i in skipped if i in {c["id"] for c in serving}]) == 12


def test_a_one_gpu_throughput_column_of_unstated_scope_is_scored_as_the_total() -> None:
    # TensorRT-LLM v0.6.1's A100 table heads its column "Throughput (out tok/s)" where the
    # H100 one says "/GPU": on one GPU the two are the same figure
    case = _case("trt061_l2_7b_a100_tp1_b60_128_2048")
    assert "output_tokens_per_s_total" not in case["measured"]
    (row,) = score_inference_case(case)
    assert row["measured"] == case["measured"]["output_tokens_per_s_column_scope_unstated"]
    assert row["group"] == "trtllm_v061_static_batch/throughput"
    # on two GPUs it could be either, and the case states nothing else
    with pytest.raises(ConfigError, match=r"case 'trt061_l2_7b_a100_tp2_b64_2048_2048': its "
                       r"throughput column \(measured.output_tokens_per_s_column_scope_"
                       r"unstated\) does not say whether it is per GPU or the total of its 2 "
                       r"GPUs, and it states no other quantity\."):  # fmt: skip
        score_inference_case(_case("trt061_l2_7b_a100_tp2_b64_2048_2048"))


def test_latencies_in_milliseconds_medians_and_the_request_latency_are_read(
    tmp_path: Path,
) -> None:
    # vLLM's benchmark_serving prints median_ttft_ms, mean_tpot_ms, ...: one figure each here
    case = _case("lmdeploy_l2_7b_a100_tp1_c16_128_2048")
    base = {row["quantity"]: row for row in score_inference_case(case)}
    case["measured"] = {"ttft_ms_median": 1e3 * base["ttft"]["measured"],
                        "itl_ms_mean": 1e3 * base["tpot"]["measured"],
                        "e2e_latency_s_mean": 60.0, "output_tokens_per_s": 1000.0}  # fmt: skip
    rows = {row["quantity"]: row for row in score_inference_case(case)}
    assert set(rows) == {"throughput", "ttft", "tpot", "latency"}
    for label in ("ttft", "tpot"):
        assert rows[label]["measured"] == pytest.approx(base[label]["measured"], rel=1e-12)
        assert rows[label]["model"] == base[label]["model"]
    assert rows["latency"]["group"] == "lmdeploy_v010a1_a100_static/latency"
    (tmp_path / "cases.json").write_text(json.dumps([case]))
    report = validation_report(tmp_path / "cases.json")
    assert report["groups"]["lmdeploy_v010a1_a100_static/latency"]["kind"] == "serving"
    result = evaluate_one(inference_case_scenario(case))
    assert rows["latency"]["model"] == result["request_latency_s"]
    assert rows["throughput"]["model"] == result["tokens_per_s"]


def test_requests_per_second_are_scored_against_the_models_request_rate() -> None:
    case = _case("trtllm_l70b_h200_tp1_128_2048")
    tokens = case["measured"].pop("output_tokens_per_s_total")
    case["measured"]["request_throughput_per_s"] = tokens / 2048
    (row,) = score_inference_case(case)
    assert row["quantity"] == "requests" and row["group"].endswith("/requests")
    assert row["model"] == evaluate_one(inference_case_scenario(case))["samples_per_s"]
    assert row["model"] * 2048 == pytest.approx(
        score_inference_case(_case("trtllm_l70b_h200_tp1_128_2048"))[0]["model"], rel=1e-12
    )


def test_other_servers_published_runs_are_scored_or_skipped_with_a_reason() -> None:
    # the generalisation check of benchmarks/data/serving_holdout_frameworks.json: every case
    # is read, scored where the model represents it, skipped with the reader's reason where not
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "data"
    report = validation_report(path / "serving_holdout_frameworks.json")
    reasons = " ".join(s["reason"] for s in report["skipped"])
    assert len(report["skipped"]) + len({r["id"] for r in report["cases"]}) == 57
    assert "Intel Arc Pro B60" in reasons and "latent" not in reasons
    groups = report["groups"]
    # DeepSeek-V3's latent attention, shared expert and dense first layers are served (§D7)
    assert {"nim_benchmarking_llama33_70b_v180_2xh100_fp8/ttft",
            "vllm_ci_perf_benchmark_latency_2024q4/latency",
            "sglang_repo_benchmark_dsv3_h200_v041/tpot"} <= set(groups)  # fmt: skip
    assert all(g["kind"] == "serving" for g in groups.values())


def test_a_sum_of_one_layers_operator_timings_is_not_read_as_a_serving_run() -> None:
    with pytest.raises(ConfigError, match=r"case 'llmcompass_gpt3_a100_decode_b8_kv3072': "
                       r"measured.layer_latency_s_sum_of_ops sums one layer's operators timed "
                       r"one by one, not a served request's latency or throughput"):  # fmt: skip
        score_inference_case(_case("llmcompass_gpt3_a100_decode_b8_kv3072"))


def test_cpp_engines_allocate_without_the_caching_allocators_fragmentation() -> None:
    # TensorRT-LLM's TensorRT runtime and LMDeploy's TurboMind allocate their buffers once with
    # cudaMalloc / cudaMallocAsync; TensorRT-LLM's PyTorch backend goes through PyTorch's
    for case_id, caching in (("trt061_l2_7b_a100_tp1_b60_128_2048", False),
                             ("trt05_ttft_l2_7b_h100_tp1_128", False),
                             ("lmdeploy_l2_7b_a100_tp1_c64_2048_2048", False),
                             ("trtllm_l70b_h200_tp1_128_2048", True)):  # fmt: skip
        case = _case(case_id)
        assert caching_allocator(case) is caching, case_id
        assert inference_case_scenario(case).workload.caching_allocator is caching
    case = _case("trtllm_l70b_h200_tp1_128_2048")
    case["inference"]["framework"] = "vLLM 0.6.3 (benchmark_throughput.py)"
    assert caching_allocator(case)
    for engine in ("TensorRT-LLM 0.17 (trtllm-bench, TensorRT backend)",
                   "TensorRT-LLM (C++ executor, gptManagerBenchmark)"):  # fmt: skip
        case["inference"]["framework"] = engine
        assert not caching_allocator(case), engine
    # v0.6.1's static batch of 60 Llama 2 7B requests of 128 + 2048 tokens on one A100 80GB
    # ran at once: without the allocator's 5 % on its 13.5 GB of weights and 68 GB of KV
    # cache all 60 fit; with it two would follow in a second wave that streams every weight
    # 2,048 more times
    scenario = inference_case_scenario(_case("trt061_l2_7b_a100_tp1_b60_128_2048"))
    engine = evaluate_one(scenario)
    cached = evaluate_one(dataclasses.replace(scenario, workload=dataclasses.replace(
        scenario.workload, caching_allocator=True)))  # fmt: skip
    assert engine["memory_breakdown_B"]["fragmentation"] == 0
    assert engine["active_batch"] == 60 > cached["active_batch"]
    assert engine["step_time_s"] < 0.9 * cached["step_time_s"]


def _without(section: str, name: str | None = None) -> Any:
    def edit(case: dict[str, Any]) -> None:
        if name is None:
            del case[section]
        else:
            del case[section][name]

    return edit


def _setting(name: str, value: Any) -> Any:
    return lambda case: case["inference"].__setitem__(name, value)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (_without("inference"), r"case 'trtllm_l8b_h100_tp1_128_128'.*inference is missing\."),
        (_setting("weight_precision", "int3"),
         r"inference.weight_precision 'int3' is not one deepflow serves \(known: bf16, fp16, fp4, "
         r"fp8, mxfp4, nvfp4\)\."),
        (_setting("input_len", "variable"),
         r"inference.input_len must be a number >= 1; got 'variable' \(variable lengths are "
         r"not modelled\)\."),
        (_without("inference", "num_requests"),
         r"inference.batch_size \(or max_concurrency\) is missing\."),
    ],
)  # fmt: skip
def test_serving_case_errors_name_the_key(edit: Any, message: str) -> None:
    case = _case("trtllm_l8b_h100_tp1_128_128")
    edit(case)
    with pytest.raises(ConfigError, match=message):
        inference_case_scenario(case)


def test_a_serving_case_without_a_measurement_names_the_keys() -> None:
    case = _case("trtllm_l8b_h100_tp1_128_128")
    case["measured"] = {"note": "nothing measured"}
    with pytest.raises(ConfigError, match=r"measured has none of output_tokens_per_s_total, "):
        score_inference_case(case)


def test_a_case_without_a_batch_or_requests_is_offered_what_its_kv_cache_holds() -> None:
    case = _case("trtllm_l8b_h100_tp1_2048_2048")
    del case["inference"]["num_requests"]
    (row,) = score_inference_case(case)
    assert row["model"] > 0 and row["feasible"]
