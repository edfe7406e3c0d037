"""The serving model (workload.kind: inference; docs/model.md part D)."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest

from deepflow.config import load_device, load_scenario, scenario_from_mapping
from deepflow.config.calibration import current_calibration
from deepflow.config.specs import Scenario
from deepflow.errors import ConfigError
from deepflow.oracle.evaluate import evaluate_one, evaluate_table
from deepflow.oracle.hardware import device_caps
from deepflow.oracle.workloads import workload_for

SCENARIOS = Path(__file__).resolve().parents[2] / "configs" / "scenarios"


def serving(model: str = "llama3-8b", mapping: dict | None = None, devices: int = 1,
            device: str = "h100-sxm5-80gb", **workload: object) -> Scenario:  # fmt: skip
    """Llama 3 8B in bf16 on one H100 (no communication): the memory-bound baseline."""
    raw = {
        "system": {"device": device, "network": "dgx-h100",
                   "devices_per_node": min(devices, 8), "num_nodes": max(devices // 8, 1)},
        "workload": {"kind": "inference", "model": model, "precision": "bf16",
                     "global_batch_size": 8, "input_tokens": 1024, "output_tokens": 128,
                     **workload},
        "mapping": mapping or {},
    }  # fmt: skip
    return scenario_from_mapping(raw, file="<serving>")


def with_bandwidth(s: Scenario, factor: float) -> Scenario:
    device = dataclasses.replace(
        s.system.device, hbm_bandwidth_Bps=factor * s.system.device.hbm_bandwidth_Bps
    )
    return dataclasses.replace(s, system=dataclasses.replace(s.system, device=device))


@pytest.mark.parametrize("batching", ["continuous", "static"])
def test_the_contract_keys_and_a_request_adds_up(batching: str) -> None:
    # a static batch issued at once (a closed loop's lockstep rounds: the next test)
    r = evaluate_one(serving(batching=batching, arrivals="offline"))
    # a request's first token comes from the iteration carrying its prompt, the other 127
    # from the decode iterations that follow
    assert r["step_time_s"] == pytest.approx(r["ttft_s"] + 127 * r["tpot_s"], rel=1e-12)
    assert sum(r["breakdown_s"].values()) == pytest.approx(r["step_time_s"], rel=1e-12)
    assert r["tokens_per_s"] == pytest.approx(8 * 128 / r["step_time_s"], rel=1e-12)
    assert sum(r["memory_breakdown_B"].values()) == pytest.approx(r["memory_per_device_B"])
    assert r["tokens_per_J"] > 0 and r["usd_per_Mtoken"] > 0 and r["feasible"]
    assert r["queue_wait_s"] == 0 and r["request_latency_s"] == r["step_time_s"]


def test_decode_time_grows_with_context_and_batch_as_the_kv_cache_bytes_do() -> None:
    caps = device_caps(load_device("h100-sxm5-80gb"), "bf16", calibration=current_calibration())
    bandwidth = caps.hbm_efficiency * caps.hbm_bandwidth_Bps
    per_token_B = 2 * 32 * 8 * 128 * 2  # K and V of 32 layers, 8 KV heads of 128, bf16
    # one request: every iteration after its prompt's is a pure decode step at the mean context
    tpot = {n: evaluate_one(serving(input_tokens=n, global_batch_size=1))["tpot_s"]
            for n in (512, 2048, 8192)}  # fmt: skip
    assert tpot[512] < tpot[2048] < tpot[8192]
    # the step grows by exactly the extra KV-cache bytes read at the HBM's streaming rate
    for lo, hi in ((512, 2048), (2048, 8192)):
        assert tpot[hi] - tpot[lo] == pytest.approx((hi - lo) * per_token_B / bandwidth, rel=1e-9)
    # at a fixed context the KV reads grow with the batch: the decode attention is linear in it
    attention = {}
    for b in (1, 16, 64):
        r = evaluate_one(serving(global_batch_size=b, batching="static"))
        attention[b] = r["breakdown_s"]["decode_attention"]
        assert r["active_batch"] == b
    launch = 32 * 127 * caps.kernel_launch_s
    assert (attention[64] - launch) == pytest.approx(64 * (attention[1] - launch), rel=1e-9)
    tpots = [evaluate_one(serving(global_batch_size=b))["tpot_s"] for b in (1, 16, 64)]
    assert tpots[0] < tpots[1] < tpots[2]


def test_hbm_bandwidth_speeds_memory_bound_decode_not_compute_bound_prefill() -> None:
    base, fast = serving(global_batch_size=1), with_bandwidth(serving(global_batch_size=1), 2.0)
    slow_r, fast_r = evaluate_one(base), evaluate_one(fast)
    # the kernel launches (≈ 0.9 ms of 6 ms a token here) do not speed up
    assert 1.7 < slow_r["tpot_s"] / fast_r["tpot_s"] <= 2.0
    prefill = serving(global_batch_size=16, input_tokens=4096, batching="static")
    assert (
        evaluate_one(prefill)["ttft_s"] / evaluate_one(with_bandwidth(prefill, 2.0))["ttft_s"] < 1.1
    )


def test_the_kv_cache_bounds_concurrency_and_the_rest_waits() -> None:
    r = evaluate_one(serving())
    cap = int(r["max_concurrency"])
    fits, over = (
        evaluate_one(serving(global_batch_size=cap)),
        evaluate_one(serving(global_batch_size=2 * cap)),
    )
    # continuous batching runs what the KV cache holds; the rest waits for a slot
    assert fits["active_batch"] == over["active_batch"] == cap
    assert over["tokens_per_s"] == fits["tokens_per_s"] and over["feasible"]
    assert fits["memory_per_device_B"] <= fits["memory_capacity_B"]
    one_more = evaluate_one(serving(global_batch_size=cap + 1))
    assert one_more["memory_per_device_B"] == fits["memory_per_device_B"]
    # a closed loop of 2·cap requests on cap slots: each waits one slot's cycle (Little's law)
    assert over["queue_wait_s"] == pytest.approx(fits["step_time_s"], rel=1e-12)
    assert over["ttft_s"] == pytest.approx(fits["ttft_s"] + fits["step_time_s"], rel=1e-12)
    assert over["request_latency_s"] == pytest.approx(2 * fits["step_time_s"], rel=1e-12)
    # weights that do not fit leave nothing to batch: infeasible
    huge = evaluate_one(serving(model="llama3-405b", global_batch_size=1))
    assert huge["max_concurrency"] == 0 and not huge["feasible"]
    assert "memory_excess_B" in huge["violated_constraints"]
    fp8 = evaluate_one(serving(kv_cache_precision="fp8"))
    kv = "kv_cache"
    assert fp8["memory_breakdown_B"][kv] == pytest.approx(r["memory_breakdown_B"][kv] / 2)
    assert fp8["max_concurrency"] > 1.9 * r["max_concurrency"]


def test_lockstep_rounds_of_a_closed_loop_open_with_the_first_request_alone() -> None:
    # 16 clients of fixed lengths in lockstep: each round the first request back runs alone,
    # the other 15 join at the next iteration (TurboMind's blocking dequeue on an empty batch)
    work = {"batching": "static", "global_batch_size": 16, "output_tokens": 128}
    rounds = evaluate_one(serving(**work))
    batch = evaluate_one(serving(**work, arrivals="offline"))
    alone = evaluate_one(serving(**(work | {"global_batch_size": 1}), arrivals="offline"))
    joined = evaluate_one(serving(**(work | {"global_batch_size": 15}), arrivals="offline"))
    assert rounds["active_batch"] == batch["active_batch"] == 16
    # the 15 wait for the first one's iteration, then run theirs with its decode: between
    # one iteration of 15 prompts and one of 16
    first, rest = alone["ttft_s"], rounds["ttft_s"] - alone["ttft_s"]
    assert joined["ttft_s"] * 15 / 16 < rest < batch["ttft_s"] * 15 / 16
    assert rounds["tpot_s"] == pytest.approx(batch["tpot_s"], rel=1e-12)  # two formulas
    # a round lasts both opening iterations and the 127 decodes of the 16
    assert rounds["step_time_s"] == pytest.approx(
        first + rest * 16 / 15 + 127 * batch["tpot_s"], rel=1e-12
    )
    assert rounds["tokens_per_s"] < batch["tokens_per_s"]
    assert sum(rounds["breakdown_s"].values()) == pytest.approx(rounds["step_time_s"])
    # one client is never in a round with others; continuous batching has no rounds
    one = serving(**(work | {"global_batch_size": 1}))
    assert evaluate_one(one)["ttft_s"] == alone["ttft_s"]
    steady = {k: v for k, v in work.items() if k != "batching"}
    assert evaluate_one(serving(**steady)) == evaluate_one(serving(**steady, arrivals="offline"))


def test_an_offline_run_drains_its_queue_in_waves_and_lasts_the_last_one() -> None:
    cap = int(evaluate_one(serving())["max_concurrency"])

    def both(n: int) -> tuple[dict, dict]:
        return (evaluate_one(serving(global_batch_size=n)),
                evaluate_one(serving(global_batch_size=n, arrivals="offline")))  # fmt: skip

    # what runs at once (one wave), or whole waves: the closed loop's throughput
    for n in (cap // 2, cap, 3 * cap):
        closed, offline = both(n)
        assert offline["tokens_per_s"] == pytest.approx(closed["tokens_per_s"], rel=1e-12)
    # three whole waves: the j-th waits j cycles, a mean of one (the closed loop's: two)
    closed, offline = both(3 * cap)
    cycle = closed["step_time_s"]
    assert offline["step_time_s"] == pytest.approx(3 * cycle, rel=1e-12)
    assert offline["queue_wait_s"] == pytest.approx(cycle, rel=1e-12)
    assert closed["queue_wait_s"] == pytest.approx(2 * cycle, rel=1e-12)
    # two waves and a last of 5 requests: it lasts its own cycle, which still reads every
    # weight each iteration, so the run is slower than the closed loop's steady state
    closed, offline = both(2 * cap + 5)
    last = evaluate_one(serving(global_batch_size=5))
    assert offline["step_time_s"] == pytest.approx(2 * cycle + last["step_time_s"], rel=1e-12)
    assert offline["tokens_per_s"] == pytest.approx(
        (2 * cap + 5) * 128 / (2 * cycle + last["step_time_s"]), rel=1e-12
    )
    assert offline["tokens_per_s"] < closed["tokens_per_s"]
    assert sum(offline["breakdown_s"].values()) == pytest.approx(offline["step_time_s"])
    assert offline["active_batch"] == cap
    assert offline["memory_per_device_B"] == closed["memory_per_device_B"]
    # the requests' mean latency: the 5 wait two cycles, the second wave one
    wait = (cap * 1 + 5 * 2) * cycle / (2 * cap + 5)
    assert offline["queue_wait_s"] == pytest.approx(wait, rel=1e-12)
    mean_cycle = (2 * cap * cycle + 5 * last["step_time_s"]) / (2 * cap + 5)
    assert offline["request_latency_s"] == pytest.approx(wait + mean_cycle, rel=1e-12)


def test_an_unknown_arrivals_mode_is_rejected_with_the_choices() -> None:
    with pytest.raises(ConfigError, match=r"workload.arrivals must be one of: closed_loop, "
                                          r"offline, poisson; got 'bursty'\."):  # fmt: skip
        serving(arrivals="bursty")


def test_on_demand_kv_blocks_admit_more_requests_than_full_context_reservation() -> None:
    # 1024 + 2048 tokens: reserved whole, a request holds 3072 tokens; paged, it holds on
    # average its prompt and half its output, 2048 tokens, so the same memory holds 1.5x as many
    full = evaluate_one(serving(global_batch_size=4096, output_tokens=2048))
    paged = evaluate_one(
        serving(global_batch_size=4096, output_tokens=2048, kv_cache_reservation="on_demand")
    )
    assert full["memory_capacity_B"] == paged["memory_capacity_B"]
    assert paged["max_concurrency"] > 1.45 * full["max_concurrency"]
    assert paged["active_batch"] == paged["max_concurrency"] > full["active_batch"]
    per_request = {r: x["memory_breakdown_B"]["kv_cache"] / x["active_batch"]
                   for r, x in (("full", full), ("paged", paged))}  # fmt: skip
    assert per_request["paged"] == pytest.approx(per_request["full"] * 2048 / 3072)
    # more requests in the same slots: less waiting for one
    assert paged["queue_wait_s"] < full["queue_wait_s"]
    assert paged["memory_per_device_B"] <= paged["memory_capacity_B"]


def test_a_preallocated_kv_pool_holds_its_share_of_the_free_memory() -> None:
    # TensorRT-LLM's KvCacheCreator: the pool is the fraction of what the weights, one
    # iteration's activations and the reserves outside the allocator leave free
    base = dict(global_batch_size=4096, output_tokens=2048)
    r = evaluate_one(serving(**base, kv_cache_memory_fraction=0.9))
    m = r["memory_breakdown_B"]
    used = sum(m[k] for k in ("weights", "activations", "workspace", "cuda_context",
                              "nccl_buffers"))  # fmt: skip
    per_request = m["kv_cache"] / r["active_batch"]
    assert r["max_concurrency"] == np.floor(0.9 * (r["memory_capacity_B"] - used) / per_request)
    # the pool is one block beside the allocator's: fragmentation is the activations' alone
    assert m["fragmentation"] == pytest.approx(
        current_calibration().memory.fragmentation * (m["activations"] + m["workspace"])
    )
    assert r["feasible"] and r["memory_per_device_B"] <= r["memory_capacity_B"]
    half = evaluate_one(serving(**base, kv_cache_memory_fraction=0.45))
    assert half["max_concurrency"] == np.floor(0.45 * (r["memory_capacity_B"] - used)
                                               / per_request)  # fmt: skip
    # the share left out of the pool stays free
    unused = r["memory_capacity_B"] - r["memory_per_device_B"]
    assert unused >= 0.1 * (r["memory_capacity_B"] - used) - m["fragmentation"]


def test_a_cpp_engine_holds_more_requests_without_the_allocators_fragmentation() -> None:
    # the KV cache fills what the weights, activations and reserves leave: PyTorch's caching
    # allocator rounds and splits its blocks (its fragmentation on every allocated byte); a C++
    # engine allocates once, so the same memory holds more requests
    base = dict(global_batch_size=4096, output_tokens=2048)
    cached = evaluate_one(serving(**base))
    engine = evaluate_one(serving(**base, caching_allocator=False))
    frag = current_calibration().memory.fragmentation
    m, e = cached["memory_breakdown_B"], engine["memory_breakdown_B"]
    allocated = sum(m[k] for k in ("weights", "kv_cache", "activations", "workspace"))
    assert m["fragmentation"] == pytest.approx(frag * allocated, rel=1e-12)
    assert e["fragmentation"] == 0 and e["weights"] == m["weights"]
    assert engine["max_concurrency"] > cached["max_concurrency"] * (1 + frag / 2)
    assert engine["memory_per_device_B"] <= engine["memory_capacity_B"]


def test_nccl_buffers_come_with_a_replicas_peers() -> None:
    # one device talks to no peer; tensor parallelism opens a communicator (its buffers)
    nccl = current_calibration().memory.nccl_buffers_B
    alone = evaluate_one(serving())["memory_breakdown_B"]
    pair = evaluate_one(serving(mapping={"tensor_parallel": 2}, devices=2))["memory_breakdown_B"]
    assert alone["nccl_buffers"] == 0 and pair["nccl_buffers"] == nccl


def test_poisson_arrivals_serve_the_offered_rate_until_the_server_saturates() -> None:
    # 2,000 requests of 1024 + 128 tokens offered at λ a second to one H100 serving Llama 3 8B
    def at(rate: float) -> dict:
        return evaluate_one(serving(global_batch_size=2000, arrivals="poisson",
                                    request_rate=rate))  # fmt: skip

    offline = evaluate_one(serving(global_batch_size=2000, arrivals="offline"))
    rates = (0.2, 2.0, 10.0, 40.0, 1000.0)
    runs = [at(rate) for rate in rates]
    for rate, r in zip(rates, runs, strict=True):
        assert sum(r["breakdown_s"].values()) == pytest.approx(r["step_time_s"], rel=1e-12)
        assert r["tokens_per_s"] <= offline["tokens_per_s"] * (1 + 1e-12)
        # the run cannot end before its last request arrives
        assert r["step_time_s"] >= 1999 / rate
    # a slow stream: every request alone on an idle server, served as it comes
    slow = runs[0]
    alone = evaluate_one(serving(global_batch_size=1, arrivals="offline"))
    assert slow["active_batch"] == 1
    assert slow["tokens_per_s"] == pytest.approx(0.2 * 128, rel=0.01)
    assert alone["ttft_s"] <= slow["ttft_s"] <= alone["ttft_s"] + alone["tpot_s"]
    # requests in flight are Poisson with mean λ·C (M/G/∞): the server is empty e^(−λ·C) of
    # the time
    empty = slow["breakdown_s"]["idle"] / slow["step_time_s"]
    assert empty == pytest.approx(math.exp(-0.2 * alone["step_time_s"]), rel=1e-9)
    # more requests in flight as the rate grows; served at the offered rate while it keeps up
    batches = [r["active_batch"] for r in runs]
    assert batches == sorted(batches) and batches[0] < batches[2]
    assert runs[2]["tokens_per_s"] == pytest.approx(10.0 * 128, rel=0.05)
    # a flood: the offline run's throughput, and a backlog in the first token's wait
    flood = runs[-1]
    assert flood["tokens_per_s"] == pytest.approx(offline["tokens_per_s"], rel=1e-9)
    assert flood["queue_wait_s"] > runs[3]["queue_wait_s"] > runs[2]["queue_wait_s"]
    assert flood["breakdown_s"]["idle"] == 0


def test_poisson_arrivals_need_a_rate_and_continuous_batching() -> None:
    with pytest.raises(ConfigError, match=r"workload.request_rate must be > 0 with arrivals: "
                                          r"poisson \(requests per second\); got 0\."):  # fmt: skip
        serving(arrivals="poisson")
    with pytest.raises(ConfigError, match=r"workload.batching is static: arrivals: poisson "
                                          r"needs continuous batching"):  # fmt: skip
        serving(arrivals="poisson", request_rate=1.0, batching="static")


def test_a_kv_pool_fraction_outside_0_to_1_is_rejected() -> None:
    for bad, shown in ((1.0, "1"), (-0.1, "-0.1")):
        with pytest.raises(ConfigError, match=r"workload.kv_cache_memory_fraction must be a "
                                              rf"number >= 0 and < 1; got {shown}\."):  # fmt: skip
            serving(kv_cache_memory_fraction=bad)


def test_an_unknown_kv_cache_reservation_is_rejected_with_the_choices() -> None:
    with pytest.raises(ConfigError, match=r"workload.kv_cache_reservation must be one of: "
                                          r"full_context, on_demand; got 'lazy'\."):  # fmt: skip
        serving(kv_cache_reservation="lazy")


def test_per_query_head_kv_reads_multiply_a_gqa_decodes_cache_bytes() -> None:
    # Llama 3 8B: 32 query heads share 8 KV heads; a bytes-bound decode reads 4x the cache
    base = dict(global_batch_size=64, output_tokens=2048, batching="static", arrivals="offline")
    shared = evaluate_one(serving(**base))
    apart = evaluate_one(serving(**base, decode_kv_reads="per_query_head"))
    attention = "decode_attention"
    launch = 32 * 2047 * device_caps(load_device("h100-sxm5-80gb"), "bf16").kernel_launch_s
    assert apart["breakdown_s"][attention] - launch == pytest.approx(
        4 * (shared["breakdown_s"][attention] - launch), rel=1e-9
    )
    assert apart["breakdown_s"]["decode_gemm"] == shared["breakdown_s"]["decode_gemm"]
    assert apart["ttft_s"] == shared["ttft_s"] and apart["tokens_per_s"] < shared["tokens_per_s"]


@pytest.mark.parametrize("device", ["h100-sxm5-80gb", "b200"])
def test_the_frameworks_attention_kernel_sets_the_prefill_attention_rate(device: str) -> None:
    # long prompts, one output token: the causal prefill attention is FLOP-bound (its kernel
    # launches aside)
    base = dict(global_batch_size=8, input_tokens=8192, output_tokens=1, batching="static",
                arrivals="offline", device=device)  # fmt: skip
    caps = device_caps(load_device(device), "bf16")
    runs = {k: evaluate_one(serving(**base, mapping={"attention_kernel": k}))
            for k in ("fa2", "cudnn", "trtllm")}  # fmt: skip
    t = {k: r["breakdown_s"]["prefill_attention"] for k, r in runs.items()}
    # TensorRT-LLM's own kernels (Hopper's context FMHA, Blackwell's trtllm-gen) at their rate
    assert t["fa2"] / t["trtllm"] == pytest.approx(
        caps.attention_efficiency_trtllm / caps.attention_efficiency, rel=1e-3
    )
    assert t["fa2"] / t["cudnn"] == pytest.approx(
        caps.attention_efficiency_cudnn / caps.attention_efficiency, rel=1e-3
    )
    assert t["trtllm"] < t["fa2"]
    # only the attention core changes
    g = {k: r["breakdown_s"]["prefill_gemm"] for k, r in runs.items()}
    assert g["fa2"] == g["trtllm"] == g["cudnn"]


def test_an_unknown_attention_kernel_is_rejected_with_the_choices() -> None:
    with pytest.raises(ConfigError, match=r"mapping.attention_kernel must be one of: fa2, cudnn, "
                                          r"fa3, trtllm, triton; got 'fa4'"):  # fmt: skip
        serving(mapping={"attention_kernel": "fa4"})


def test_an_unknown_decode_kv_reads_is_rejected_with_the_choices() -> None:
    with pytest.raises(ConfigError, match=r"workload.decode_kv_reads must be one of: "
                                          r"per_kv_head, per_query_head; got 'per_head' "
                                          r"\(did you mean 'per_kv_head'\?\)\."):  # fmt: skip
        serving(decode_kv_reads="per_head")


def test_the_schedulers_caps_bound_the_running_batch() -> None:
    assert evaluate_one(serving(global_batch_size=64, max_batch_size=16))["active_batch"] == 16
    # a token budget T holds B·(1 + s_in/s_out) tokens at steady state: 2304 / (1 + 8) = 256
    capped = evaluate_one(serving(global_batch_size=4096, max_num_tokens=2304))
    assert capped["active_batch"] == 256 < capped["max_concurrency"]
    # fewer requests than s_out: an iteration carries one whole prompt, B + s_in <= T
    long = evaluate_one(serving(global_batch_size=4096, output_tokens=2048, max_num_tokens=1100))
    assert long["active_batch"] == 1100 - 1024


def test_continuous_batching_joins_prompts_to_running_decodes() -> None:
    cont, static = (evaluate_one(serving(global_batch_size=64, batching=b))
                    for b in ("continuous", "static"))  # fmt: skip
    # a request waits for its own prompt only, not for a whole static batch's
    assert cont["ttft_s"] < static["ttft_s"] / 8
    # and the decodes share the prompts' weight reads: more tokens per second
    assert cont["tokens_per_s"] > static["tokens_per_s"]
    # one request: both run the same prefill and the same decode steps
    one = [evaluate_one(serving(global_batch_size=1, batching=b)) for b in ("continuous",
                                                                           "static")]  # fmt: skip
    assert one[0]["ttft_s"] == pytest.approx(one[1]["ttft_s"], rel=1e-12)
    assert one[0]["tpot_s"] == pytest.approx(one[1]["tpot_s"], rel=1e-12)


def test_prompts_that_wait_together_join_in_bursts_of_the_schedulers_tokens() -> None:
    # 8 fixed-length clients that start together, 1,024-token prompts: a budget of 4,096 prompt
    # tokens an iteration takes them 4 at a time, in 2 bursts that stay in phase (§D2)
    apart, bursts = (evaluate_one(serving(global_batch_size=8, prompt_tokens_per_iteration=t))
                     for t in (0, 4096))  # fmt: skip
    iteration = bursts["ttft_s"]
    # a burst's iteration carries 4 prompts and the other 4 requests' decodes; one apart, 1
    assert iteration > 3 * apart["ttft_s"]
    # each request's 127 later tokens wait for the other burst's prompts only, not 7 others'
    assert bursts["tpot_s"] < apart["tpot_s"]
    carrying = 8 / 4  # iterations of a request's 128 that carry prompts
    decode = (bursts["step_time_s"] - carrying * iteration) / (128 - carrying)
    assert bursts["tpot_s"] == pytest.approx((iteration + 126 * decode) / 127, rel=1e-12)
    # a budget below a prompt takes one prompt an iteration: as prompts that arrive apart
    one = evaluate_one(serving(global_batch_size=8, prompt_tokens_per_iteration=512))
    assert one["ttft_s"] == apart["ttft_s"] and one["tpot_s"] == apart["tpot_s"]
    # Poisson arrivals do not wait together
    poisson = {"arrivals": "poisson", "request_rate": 4.0, "global_batch_size": 50}
    assert evaluate_one(serving(**poisson, prompt_tokens_per_iteration=8192)) == evaluate_one(
        serving(**poisson)
    )


def test_cuda_graph_padding_runs_decode_at_the_next_captured_batch() -> None:
    base = {"global_batch_size": 100, "output_tokens": 2048, "batching": "static"}
    padded = evaluate_one(serving(**base, cuda_graph_padding=True))
    plain = evaluate_one(serving(**base))

    assert (
        padded["breakdown_s"]["decode_gemm"]
        == evaluate_one(serving(**{**base, "global_batch_size": 128}))["breakdown_s"]["decode_gemm"]
    )
    assert padded["breakdown_s"]["decode_gemm"] > plain["breakdown_s"]["decode_gemm"]
    assert padded["breakdown_s"]["decode_attention"] == plain["breakdown_s"]["decode_attention"]
    # short requests, so that 300 fit the KV cache
    short = {"input_tokens": 64, "output_tokens": 256, "batching": "static"}

    def decode_gemm(batch: int, **keys: object) -> float:
        run = evaluate_one(serving(**{**short, "global_batch_size": batch, **keys}))
        assert run["active_batch"] == batch
        return float(run["breakdown_s"]["decode_gemm"])

    # the performance overview's capture list has 384 between 256 and 512
    assert decode_gemm(300, cuda_graph_padding=True) == decode_gemm(384)
    # the executor pads to its own largest decode batch, min(max_batch_size, max_num_tokens),
    # where the next captured size is above it
    capped = decode_gemm(300, max_batch_size=320, cuda_graph_padding=True)
    assert capped == decode_gemm(320, max_batch_size=320) < decode_gemm(384)
    assert decode_gemm(300, max_num_tokens=310, cuda_graph_padding=True) == decode_gemm(
        310, max_num_tokens=310
    )


def test_tensor_parallel_beyond_the_kv_heads_replicates_them() -> None:
    # Llama 3 70B has 8 KV heads: at TP 16 each rank keeps one (two ranks per head)
    runs = {tp: evaluate_one(serving(model="llama3-70b", devices=tp,
                                     mapping={"tensor_parallel": tp}))
            for tp in (8, 16)}  # fmt: skip
    assert runs[16]["memory_breakdown_B"]["kv_cache"] == runs[8]["memory_breakdown_B"]["kv_cache"]
    assert runs[16]["memory_breakdown_B"]["weights"] < runs[8]["memory_breakdown_B"]["weights"]
    training = {
        "system": {
            "device": "h100-sxm5-80gb",
            "network": "dgx-h100",
            "devices_per_node": 8,
            "num_nodes": 2,
        },
        "workload": {"model": "llama3-70b", "global_batch_size": 16},
        "mapping": {"tensor_parallel": 16},
    }
    with pytest.raises(ConfigError, match=r"mapping.tensor_parallel \(16\) must divide the "
                                          r"model's num_attention_heads \(64\) and num_kv_heads "
                                          r"\(8\)\."):  # fmt: skip
        scenario_from_mapping(training, file="<t>")
    with pytest.raises(ConfigError, match=r"mapping.tensor_parallel \(3\) must divide the "
                                          r"model's num_attention_heads \(64\), and divide or be "
                                          r"a multiple of its num_kv_heads \(8\)\."):  # fmt: skip
        serving(model="llama3-70b", devices=3, mapping={"tensor_parallel": 3})


def test_a_head_wider_than_hidden_over_heads_serves_and_trains() -> None:
    qwen = evaluate_one(serving(model="qwen3-235b-a22b", devices=8,
                                mapping={"data_parallel": 8, "expert_parallel": 8},
                                precision="fp8", kv_cache_precision="fp8"))  # fmt: skip
    assert qwen["feasible"] and qwen["tpot_s"] > 0
    training = {
        "system": {"device": "h100-sxm5-80gb", "network": "dgx-h100", "devices_per_node": 8},
        "workload": {"model": "qwen3-235b-a22b", "global_batch_size": 8},
        "mapping": {"data_parallel": 8, "expert_parallel": 8, "zero_stage": 3,
                    "activation_recompute": "full"},
    }  # fmt: skip
    wide = evaluate_one(scenario_from_mapping(training, file="<t>"))
    narrow = {**training, "workload": {**training["workload"], "model": {
        "base": "qwen3-235b-a22b", "head_dim": 64}}}  # fmt: skip
    # heads x head_dim = 8192 against 4096: the QKV and projection GEMMs and attention grow
    narrower = evaluate_one(scenario_from_mapping(narrow, file="<t>"))
    assert wide["breakdown_s"]["gemm"] > narrower["breakdown_s"]["gemm"]
    assert wide["breakdown_s"]["attention"] > narrower["breakdown_s"]["attention"]
    assert wide["memory_breakdown_B"]["weights"] > narrower["memory_breakdown_B"]["weights"]


def test_moe_decode_reads_only_the_experts_its_tokens_use() -> None:
    # Mixtral 8x7B: one request picks 2 of 8 experts a layer; 64 requests use nearly all 8
    one = evaluate_one(serving(model="mixtral-8x7b", global_batch_size=1, batching="static"))
    many = evaluate_one(serving(model="mixtral-8x7b", global_batch_size=64, batching="static"))
    weights = one["memory_breakdown_B"]["weights"]
    caps = device_caps(load_device("h100-sxm5-80gb"), "bf16", calibration=current_calibration())
    read_all = weights / (caps.hbm_efficiency * caps.hbm_bandwidth_Bps)
    steps = 127
    assert one["breakdown_s"]["decode_gemm"] / steps < 0.5 * read_all
    assert many["breakdown_s"]["decode_gemm"] / steps > 0.95 * read_all


def test_experts_sharded_inside_the_tensor_parallel_group_need_no_all_to_all() -> None:
    # Mixtral 8x7B on two GPUs: TP 2 splitting every expert (expert_tensor_parallel 0, as the
    # dense layers) or TP 2 attention with each GPU holding 4 whole experts (vLLM's
    # --enable-expert-parallel, TensorRT-LLM's moe_expert_parallel_size 2): the same weight
    # bytes and FLOPs, and both sum the experts' outputs in the MLP's all-reduce
    kw = {"model": "mixtral-8x7b", "global_batch_size": 32, "batching": "static"}
    split = evaluate_one(serving(mapping={"tensor_parallel": 2}, devices=2, **kw))
    inside = {"tensor_parallel": 2, "expert_parallel": 2, "expert_tensor_parallel": 1}
    whole = evaluate_one(serving(mapping=inside, devices=2, **kw))
    assert whole["memory_breakdown_B"]["weights"] == split["memory_breakdown_B"]["weights"]
    assert whole["breakdown_s"]["decode_comm"] == split["breakdown_s"]["decode_comm"]
    assert whole["breakdown_s"]["decode_gemm"] == pytest.approx(
        split["breakdown_s"]["decode_gemm"], rel=0.02
    )

    # beyond the tensor-parallel group the expert-parallel group spans replicas, whose tokens
    # an all-to-all exchanges; each GPU then holds half as many experts
    def four(ep: int) -> dict:
        mapping = {"tensor_parallel": 2, "data_parallel": 2, "expert_parallel": ep,
                   "expert_tensor_parallel": 1}  # fmt: skip
        return evaluate_one(serving(mapping=mapping, devices=4, **kw))

    inside, across = four(2), four(4)
    assert across["breakdown_s"]["decode_comm"] > inside["breakdown_s"]["decode_comm"]
    expert_bytes = 32 * 3 * 4096 * 14336 * 2  # a whole expert in all 32 layers, bf16
    saved = inside["memory_breakdown_B"]["weights"] - across["memory_breakdown_B"]["weights"]
    assert saved == pytest.approx(2 * expert_bytes, rel=1e-9)  # 4 experts -> 2
    # the MoE layer runs the tokens of both replicas together: its expert rows (every pick of
    # every token, 2 of the 8 experts each: SwiGLU's gate and up, bf16) for twice the budget
    budget = {**kw, "max_num_tokens": 2048}
    one, two = (evaluate_one(serving(mapping={**m, "expert_parallel": ep}, devices=4, **budget))
                for m, ep in (({"tensor_parallel": 2, "data_parallel": 2,
                                "expert_tensor_parallel": 1}, e) for e in (2, 4)))  # fmt: skip
    grown = two["memory_breakdown_B"]["activations"] - one["memory_breakdown_B"]["activations"]
    assert grown == pytest.approx(2048 * 2 * 14336 * 2 * 2, rel=1e-9)


def test_experts_split_over_attention_data_parallel_replicas_gather_their_tokens() -> None:
    # Mixtral 8x7B on four GPUs with attention data parallelism: whole experts, two a GPU
    # (expert parallelism, TensorRT-LLM moe_expert_parallel_size 4), or every expert split over
    # the four (expert_tensor_parallel 4: moe_tensor_parallel_size 4, TensorRT-LLM's default
    # without --ep; vLLM's data parallelism without --enable-expert-parallel)
    kw = {"model": "mixtral-8x7b", "global_batch_size": 32, "batching": "static",
          "devices": 4}  # fmt: skip
    ep = evaluate_one(serving(mapping={"data_parallel": 4, "expert_parallel": 4}, **kw))
    split = evaluate_one(serving(mapping={"data_parallel": 4, "expert_tensor_parallel": 4}, **kw))
    assert split["feasible"] and ep["feasible"]
    # the same expert bytes a GPU: 2 whole experts or a quarter of all 8
    assert split["memory_breakdown_B"]["weights"] == pytest.approx(
        ep["memory_breakdown_B"]["weights"], rel=1e-12)  # fmt: skip
    # a batch of 32 decodes touches every expert: both read all their expert bytes a step
    assert split["breakdown_s"]["decode_gemm"] == pytest.approx(
        ep["breakdown_s"]["decode_gemm"], rel=0.05)  # fmt: skip
    # the replicas' hidden states are all-gathered and the partial outputs reduce-scattered:
    # four tokens' worth of hidden states a token, against the all-to-all's two picks
    assert split["breakdown_s"]["decode_comm"] > 0 and ep["breakdown_s"]["decode_comm"] > 0
    kw1 = {**kw, "global_batch_size": 1}
    alone = evaluate_one(serving(mapping={"data_parallel": 4, "expert_tensor_parallel": 4}, **kw1))
    assert alone["breakdown_s"]["decode_comm"] < split["breakdown_s"]["decode_comm"]
    # and their expert rows are as long as the four replicas' tokens together: the activation
    # memory of a token budget grows with them
    budget = {**kw, "max_num_tokens": 2048}
    one, four = (evaluate_one(serving(mapping={"data_parallel": 4, "expert_tensor_parallel": e},
                                      **budget)) for e in (1, 4))  # fmt: skip
    assert four["memory_breakdown_B"]["activations"] > one["memory_breakdown_B"]["activations"]


def test_pipeline_stages_keep_micro_batches_in_flight() -> None:
    pp = evaluate_one(serving(model="llama3-70b", devices=4, global_batch_size=64,
                              mapping={"pipeline_parallel": 4}))  # fmt: skip
    tp = evaluate_one(serving(model="llama3-70b", devices=4, global_batch_size=64,
                              mapping={"tensor_parallel": 4}))  # fmt: skip
    assert pp["feasible"] and tp["feasible"]
    # four micro-batches of 16 on four stages: as fast per token as TP within a factor 2
    assert 0.5 < pp["tokens_per_s"] / tp["tokens_per_s"] < 2.0


def test_batch_equals_loop_of_singles() -> None:
    s = load_scenario(SCENARIOS / "llama3-70b-serving-h100.yaml")
    columns = {
        "global_batch_size": [1, 8, 64, 256, 3000],
        "input_tokens": [128, 2048, 2048, 4096, 128],
        "output_tokens": [128, 1, 256, 2048, 128],
        "static_batching": [0, 1, 0, 1, 0],
        "kv_on_demand": [0, 0, 1, 1, 0],
        "max_num_tokens": [0, 0, 8192, 0, 0],
        "cuda_graph_padding": [1, 0, 1, 0, 0],
        "max_batch_size": [0, 0, 0, 0, 1024],
        "kv_reads_per_query_head": [0, 1, 0, 1, 1],
        "first_token_from_decode": [0, 1, 1, 0, 0],
        "offline": [1, 0, 1, 0, 1],
        "caching_allocator": [1, 0, 1, 1, 0],
        "poisson": [0, 0, 1, 0, 1],
        "request_rate": [0, 0, 0.5, 0, 40.0],
    }
    table = evaluate_table(s, {k: np.array(v, dtype=float) for k, v in columns.items()})
    keys = {"global_batch_size": "global_batch_size", "input_tokens": "input_tokens",
            "output_tokens": "output_tokens", "max_num_tokens": "max_num_tokens",
            "max_batch_size": "max_batch_size"}  # fmt: skip
    for i in range(5):
        changes = {keys[k]: int(v[i]) for k, v in columns.items() if k in keys}
        changes["batching"] = "static" if columns["static_batching"][i] else "continuous"
        changes["cuda_graph_padding"] = bool(columns["cuda_graph_padding"][i])
        changes["first_token_from_decode"] = bool(columns["first_token_from_decode"][i])
        changes["caching_allocator"] = bool(columns["caching_allocator"][i])
        changes["arrivals"] = ("poisson" if columns["poisson"][i] else
                               "offline" if columns["offline"][i] else "closed_loop")  # fmt: skip
        changes["request_rate"] = float(columns["request_rate"][i])
        changes["decode_kv_reads"] = ("per_query_head" if columns["kv_reads_per_query_head"][i]
                                      else "per_kv_head")  # fmt: skip
        changes["kv_cache_reservation"] = ("on_demand" if columns["kv_on_demand"][i]
                                           else "full_context")  # fmt: skip
        one = evaluate_one(
            dataclasses.replace(s, workload=dataclasses.replace(s.workload, **changes))
        )
        for key in ("step_time_s", "ttft_s", "tpot_s", "queue_wait_s", "max_concurrency",
                    "active_batch", "memory_per_device_B", "system_power_W"):  # fmt: skip
            assert table[key][i] == one[key], (key, i)
        assert bool(table["feasible"][i]) == one["feasible"]


def test_batch_equals_loop_over_expert_layouts() -> None:
    s = load_scenario(SCENARIOS / "qwen3-235b-serving-h200.yaml")
    columns = {"tensor_parallel": [1, 8, 8, 2, 1, 2], "data_parallel": [8, 1, 1, 4, 8, 4],
               "expert_parallel": [8, 8, 4, 8, 1, 2],
               "expert_tensor_parallel": [0, 1, 2, 1, 8, 4]}  # fmt: skip
    table = evaluate_table(s, {k: np.array(v, dtype=float) for k, v in columns.items()})
    for i in range(6):
        mapping = dataclasses.replace(s.mapping, **{k: v[i] for k, v in columns.items()})
        one = evaluate_one(dataclasses.replace(s, mapping=mapping))
        for key in ("step_time_s", "ttft_s", "tpot_s", "memory_per_device_B"):
            assert table[key][i] == one[key], (key, i)


#: Llama 3 8B: the linear layers' elements (QKV + output projection + SwiGLU MLP, 32 layers)
#: and the 16-bit rest (embedding and output layer, two norms a layer).
_LINEAR = 32 * (4096 * (32 + 2 * 8) * 128 + 32 * 128 * 4096 + 3 * 4096 * 14336)
_SIXTEEN = 2 * 128256 * 4096 + 32 * 4 * 4096


def test_quantized_weights_keep_the_embedding_output_layer_and_norms_16_bit() -> None:
    weights = {p: evaluate_one(serving(device="b200", precision=p))["memory_breakdown_B"][
        "weights"] for p in ("bf16", "fp8", "fp4")}  # fmt: skip
    assert weights["bf16"] == pytest.approx(2 * (_LINEAR + _SIXTEEN), rel=1e-12)
    assert weights["fp8"] == pytest.approx(_LINEAR + 2 * _SIXTEEN, rel=1e-12)
    # NVFP4: half a byte an element and an E4M3 scale per 16 of them
    assert weights["fp4"] == pytest.approx((0.5 + 1 / 16) * _LINEAR + 2 * _SIXTEEN, rel=1e-12)
    assert evaluate_one(serving(precision="fp8"))["tpot_s"] < evaluate_one(serving())["tpot_s"]


def test_a_stated_scale_block_sets_the_scale_bytes_of_the_weights_and_their_reads() -> None:
    # MXFP4: an E8M0 scale per 32 elements, half NVFP4's scale bytes
    base = {"device": "b200", "precision": "fp4", "global_batch_size": 1}
    nv, mx = evaluate_one(serving(**base)), evaluate_one(serving(**base, weight_scale_block=32))
    assert nv["memory_breakdown_B"]["weights"] - mx["memory_breakdown_B"]["weights"] == (
        pytest.approx(_LINEAR / 32, rel=1e-12))  # fmt: skip
    # one request's decode reads every weight: its GEMMs read fewer scale bytes
    assert mx["breakdown_s"]["decode_gemm"] < nv["breakdown_s"]["decode_gemm"]
    # a stated block on 8-bit weights adds its scales; by default they have none
    fp8 = {"precision": "fp8"}
    assert evaluate_one(serving(**fp8, weight_scale_block=32))["memory_breakdown_B"][
        "weights"] > evaluate_one(serving(**fp8))["memory_breakdown_B"]["weights"]  # fmt: skip


def test_serving_a_model_kind_without_a_serving_model_is_a_clear_error() -> None:
    lstm = load_scenario(SCENARIOS / "lstm-a100.yaml").workload.model
    with pytest.raises(ConfigError, match=r"no serving model for 'lstm' models \(serving is "
                                          r"modelled for: transformer\)\."):  # fmt: skip
        workload_for(lstm, "inference")


def test_an_unknown_batching_mode_is_rejected_with_the_choices() -> None:
    with pytest.raises(ConfigError, match=r"workload.batching must be one of: continuous, "
                                          r"static; got 'dynamic'\."):  # fmt: skip
        serving(batching="dynamic")


def test_best_mapping_ranks_every_serving_split_by_tokens_per_second() -> None:
    from deepflow.oracle.best_mapping import best_mappings

    s = serving(
        model="llama3-70b",
        devices=16,
        global_batch_size=64,
        mapping={"tensor_parallel": 8, "data_parallel": 2},
    )
    result = best_mappings(s, top=1000)
    colocated = [m["mapping"] for m in result["mappings"] if m["mapping"]["prefill_replicas"] == 0]
    splits = {(m["tensor_parallel"], m["pipeline_parallel"], m["data_parallel"])
              for m in colocated}  # fmt: skip
    # TP 16 replicates the 8 KV heads; every split multiplies to the 16 devices
    assert (16, 1, 1) in splits and all(t * p * d == 16 for t, p, d in splits)
    # tp in 1..16 dividing 64 heads x pp dividing the rest: 15 co-located splits; and every
    # split of a stage's 16/pp devices into P prefill replicas of t_p and D decode ones of t
    # (t, t_p among that pp's degrees; docs/model.md §D6)
    tps = {pp: [tp for tp in (1, 2, 4, 8, 16) if tp * pp <= 16] for pp in (1, 2, 4, 8, 16)}
    pools = sum(
        1
        for pp, ts in tps.items()
        for t in ts
        for t_p in ts
        for p in range(1, 17)
        if 16 // pp - p * t_p >= t and (16 // pp - p * t_p) % t == 0
    )
    assert result["num_valid"] == 15 + pools
    for m in (r["mapping"] for r in result["mappings"]):
        prefill = m["prefill_replicas"] * (m["prefill_tensor_parallel"] or m["tensor_parallel"])
        decode = (m["data_parallel"] - m["prefill_replicas"]) * m["tensor_parallel"]
        assert m["pipeline_parallel"] * (prefill + decode) == 16
    rates = [m["tokens_per_s"] for m in result["mappings"]]
    assert rates == sorted(rates, reverse=True)
    one = evaluate_one(dataclasses.replace(s, mapping=dataclasses.replace(
        s.mapping, tensor_parallel=16, data_parallel=1)))  # fmt: skip
    (best16,) = [m for m in result["mappings"] if m["mapping"]["tensor_parallel"] == 16]
    assert best16["tokens_per_s"] == one["tokens_per_s"]


def test_best_mapping_lays_a_moes_experts_out_both_ways() -> None:
    from deepflow.oracle.best_mapping import best_mappings

    s = load_scenario(SCENARIOS / "qwen3-235b-serving-h200.yaml")  # 8 GPUs, EP 8
    result = best_mappings(s, top=50)
    layouts = [(m["mapping"]["tensor_parallel"], m["mapping"]["data_parallel"],
                m["mapping"]["expert_parallel"], m["mapping"]["expert_tensor_parallel"])
               for m in result["mappings"]]  # fmt: skip
    # attention DP with EP across the replicas (TP 1: both layouts are the same, listed once),
    # TP 2, 4, 8 attention with the EP group inside the tensor-parallel group first, and every
    # expert split over all 8 GPUs (EP 1) under each attention split
    assert sorted(layouts) == [(1, 8, 1, 8), (1, 8, 8, 0), (2, 4, 1, 8), (2, 4, 8, 1),
                               (4, 2, 1, 8), (4, 2, 8, 1), (8, 1, 1, 8), (8, 1, 8, 1)]  # fmt: skip
    assert result["num_valid"] == 8
    for ep, etp in ((8, 1), (1, 8)):
        (tp8,) = [m for m in result["mappings"] if m["mapping"]["tensor_parallel"] == 8
                  and m["mapping"]["expert_parallel"] == ep]  # fmt: skip
        mapping = dataclasses.replace(s.mapping, tensor_parallel=8, data_parallel=1,
                                      expert_parallel=ep, expert_tensor_parallel=etp)  # fmt: skip
        one = evaluate_one(dataclasses.replace(s, mapping=mapping))
        assert tp8["tokens_per_s"] == one["tokens_per_s"] and tp8["tpot_s"] == one["tpot_s"]


def test_the_framework_host_time_bounds_each_iteration() -> None:
    base = evaluate_one(serving(global_batch_size=256))
    assert base["breakdown_s"]["decode_host"] == base["breakdown_s"]["prefill_host"] == 0
    # 256 running requests at 400 µs each: 102 ms an iteration, more than the GPU's ≈ 20 ms
    slow = evaluate_one(serving(global_batch_size=256, host_us_per_request=400))
    assert slow["tpot_s"] == pytest.approx(256 * 400e-6, rel=1e-9)
    assert slow["tokens_per_s"] == pytest.approx(1 / 400e-6, rel=0.02)
    # a host time within the GPU's hides behind it (the overlap scheduler)
    hidden = evaluate_one(serving(global_batch_size=256, host_us_per_request=1))
    assert hidden["step_time_s"] == base["step_time_s"]


def test_moe_decode_reads_more_experts_as_the_batch_grows_and_saturates_at_all() -> None:
    # Mixtral 8x7B (E = 8, k = 2) in the memory-bound decode of a few requests: under uniform
    # routing a step touches E·(1 − (1 − k/E)^B) distinct experts of a layer, so each extra
    # request adds the grouped-GEMM time of the experts it newly touches (their weight bytes,
    # with the routed row's FLOPs overlapping them only in part, §D1), and 64 requests read all 8
    from deepflow.oracle.workloads.inference import serving_gemm_time_s

    caps = device_caps(load_device("h100-sxm5-80gb"), "bf16", calibration=current_calibration())
    expert_s = 32 * float(  # 32 layers of SwiGLU experts in bf16, one routed row each
        serving_gemm_time_s(caps, 1, 2 * 14336, 4096, 1, launch=False)
        + serving_gemm_time_s(caps, 1, 4096, 14336, 1, launch=False)
    )
    bandwidth = caps.hbm_efficiency * caps.hbm_bandwidth_Bps
    assert expert_s > 32 * 3 * 4096 * 14336 * 2 / bandwidth  # more than the bytes alone

    def step_s(batch: int) -> float:
        r = evaluate_one(serving(model="mixtral-8x7b", global_batch_size=batch, batching="static"))
        return float(r["breakdown_s"]["decode_gemm"]) / 127

    def touched(batch: int) -> float:
        return 8 * (1 - (1 - 2 / 8) ** batch)

    steps = {b: step_s(b) for b in (1, 2, 4, 8, 64, 256)}
    assert list(steps.values()) == sorted(steps.values())
    for b in (2, 4):
        added = (touched(b) - touched(1)) * expert_s
        assert steps[b] - steps[1] == pytest.approx(added, rel=0.02)
    assert touched(64) == pytest.approx(8.0, rel=1e-7)
    # past saturation only the rows grow: the weight reads stop adding time, and the rows'
    # FLOPs, overlapping them in part, add far less than the reads did
    assert 0 < steps[256] - steps[64] < 0.5 * (steps[64] - steps[1])


# ------------------------------------------------------------------ serving GEMMs (§D1)
def test_grouped_gemm_is_the_dense_roofline_bent_by_its_two_constants() -> None:
    """Hand-computable: 4 experts × 256 rows × 4096 × 7168 in FP8 on an H100 at microbenchmark
    clocks, launch excluded: FLOP time 2·4·256·4096·7168 / (peak · gemm_efficiency · η), byte
    time (weights + inputs + 16-bit outputs) / (HBM · hbm_efficiency), joined as a p-norm."""
    from deepflow.oracle.workloads.inference import serving_gemm_time_s

    caps = device_caps(load_device("h100-sxm5-80gb"), "fp8")
    g, m, n, k = 4, 256, 4096, 7168
    flops_s = 2 * g * m * n * k / (caps.peak_flops * caps.gemm_efficiency)
    bytes_s = (g * (n * k + m * k) + 2 * g * m * n) / (caps.hbm_bandwidth_Bps * caps.hbm_efficiency)

    def time(eta: float, p: float, grouped: bool = True, blockwise: bool = False,
             dense_p: float = 3.0) -> float:  # fmt: skip
        bent = dataclasses.replace(caps, grouped_gemm_efficiency=eta, gemm_overlap_exponent=p,
                                   gemm_overlap_exponent_dense=dense_p)  # fmt: skip
        return float(serving_gemm_time_s(bent, m, n, k, g, grouped=grouped, sustained=False,
                                         launch=False, blockwise=blockwise))  # fmt: skip

    assert time(1.0, np.inf) == pytest.approx(max(flops_s, bytes_s), rel=1e-12)
    assert time(0.9, 2.0) == pytest.approx(np.hypot(flops_s / 0.9, bytes_s), rel=1e-12)
    # a block-scaled dense GEMM takes the same overlap at the dense rate: η is the grouped
    # kernel's alone; one without block scales overlaps at its own p
    assert time(0.9, 2.0, grouped=False, blockwise=True) == pytest.approx(
        np.hypot(flops_s, bytes_s), rel=1e-12
    )
    assert time(0.9, 3.0, grouped=False, dense_p=2.0) == pytest.approx(
        np.hypot(flops_s, bytes_s), rel=1e-12
    )
    # the calibrated hopper constants (DeepGEMM fit) make it slower than the plain roofline,
    # and the job's sustained clocks and the launch only add
    fitted = float(serving_gemm_time_s(caps, m, n, k, g, sustained=False, launch=False))
    assert fitted > max(flops_s, bytes_s)
    assert float(serving_gemm_time_s(caps, m, n, k, g)) > fitted
    assert np.isfinite(caps.gemm_overlap_exponent)


def test_deepgemms_k_loop_floor_binds_one_narrow_tile_per_sm_over_a_deep_k() -> None:
    # DeepGEMM does not split K: its JIT fills the 132 SMs with one 64 x 16 tile each for
    # DeepSeek-V3's 2112 x 7168 projection at 64 rows (get_best_configs @ 55ab91f), so each SM
    # runs all 56 K blocks through its 8 stages; the floor is 56 round trips / 8
    from deepflow.oracle.workloads.inference import (
        deepgemm_tiling,
        deepgemm_time_s,
        serving_gemm_time_s,
    )
    from deepflow.validation import serving_gemm_microbenchmarks

    assert deepgemm_tiling(64, 2112, 7168) == (64, 16, 1, 8)
    assert deepgemm_tiling(4096, 2112, 7168) == (128, 144, 4, 5)  # 480 tiles in 4 waves
    caps = device_caps(load_device("h100-sxm5-80gb"), "fp8", calibration=current_calibration())
    trip = caps.gemm_pipeline_round_trip_s
    assert 0.5e-6 < trip < 3e-6
    t = deepgemm_time_s(caps, 64, 2112, 7168, sustained=False, launch=False)
    assert t == pytest.approx(56 * trip / 8)
    body = float(serving_gemm_time_s(caps, 64, 2112, 7168, sustained=False, launch=False))
    assert body < t
    # among DeepGEMM's 28 published shapes it binds only those of one narrow tile per SM
    bound = []
    for case in serving_gemm_microbenchmarks():
        g = case["gemm"]
        if "deep_gemm." not in g["op"]:
            continue
        groups, contiguous = g.get("groups", 1), g.get("layout") == "contiguous"
        grouped = "layout" in g
        args = (caps, g["M"], g["N"], g["K"], groups)
        with_floor = deepgemm_time_s(*args, grouped=grouped, contiguous=contiguous,
                                     sustained=False, launch=False)  # fmt: skip
        plain = float(serving_gemm_time_s(*args, grouped=grouped, sustained=False, launch=False,
                                          blockwise=True))  # fmt: skip
        if with_floor > plain:
            bound.append((g["M"], g["N"], g["K"]))
    assert sorted(bound) == [(64, 2112, 7168), (128, 2112, 7168)]


def test_a_gemm_tiles_padding_rows_do_not_bend_its_roofline() -> None:
    """A decode GEMM of one row runs in a 64-row MMA tile: the padded tile's FLOP time sets the
    roofline's max where it dominates, but only the row's own FLOPs overlap the byte time (a
    tile's padding rows are issued with its rows), so a weight-read-bound GEMV stays at its
    byte time and twice the bandwidth halves it."""
    from deepflow.oracle.workloads.inference import serving_gemm_time_s

    caps = device_caps(load_device("h100-sxm5-80gb"), "fp8")
    n, k = 14336, 4096
    row_s = 2 * n * k / (caps.peak_flops * caps.gemm_efficiency)
    bytes_s = (n * k + k + 2 * n) / (caps.hbm_bandwidth_Bps * caps.hbm_efficiency)
    p = caps.gemm_overlap_exponent_dense  # a per-tensor FP8 weight: no block scales
    gemv = float(serving_gemm_time_s(caps, 1, n, k, grouped=False, sustained=False, launch=False))
    assert gemv == pytest.approx(bytes_s * (1 + (row_s / bytes_s) ** p) ** (1 / p), rel=1e-12)
    assert gemv < 1.01 * bytes_s
    fast = dataclasses.replace(caps, hbm_bandwidth_Bps=2 * caps.hbm_bandwidth_Bps)
    halved = float(serving_gemm_time_s(fast, 1, n, k, grouped=False, sustained=False,
                                       launch=False))  # fmt: skip
    assert gemv / halved == pytest.approx(2.0, rel=0.01)


def test_a_dense_gemm_without_block_scales_overlaps_further_than_deepgemms() -> None:
    """Hopper's dense GEMMs without block scales (cuBLAS bf16, CUTLASS per-tensor FP8) bend
    their roofline at the p vLLM's H100 table fits, above the p of DeepGEMM's block-scaled and
    grouped kernels: near the ridge point a per-tensor GEMM is faster than a block-scaled one of
    the same shape, and the two meet where one time dominates (a GEMV's weight read)."""
    from deepflow.oracle.workloads.inference import serving_gemm_time_s
    from deepflow.validation import score_serving_gemm_cases, serving_gemm_microbenchmarks

    caps = device_caps(load_device("h100-sxm5-80gb"), "fp8", calibration=current_calibration())
    assert caps.gemm_overlap_exponent_dense > caps.gemm_overlap_exponent

    def t(m: int, blockwise: bool) -> float:
        return float(serving_gemm_time_s(caps, m, 43008, 5376, grouped=False, sustained=False,
                                         launch=False, blockwise=blockwise))  # fmt: skip

    assert t(128, blockwise=False) < 0.9 * t(128, blockwise=True)
    assert t(1, blockwise=False) == pytest.approx(t(1, blockwise=True), rel=0.01)
    # a family without a table of its own takes its one p for both (Blackwell's estimate)
    b200 = device_caps(load_device("b200"), "fp8", calibration=current_calibration())
    assert b200.gemm_overlap_exponent_dense == b200.gemm_overlap_exponent
    # the table itself: within 15 % everywhere at the fitted p
    vllm = [c for c in serving_gemm_microbenchmarks() if c["group"] == "vllm_bench_fp8_gemm_h100"]
    rows = score_serving_gemm_cases(vllm)
    assert len(rows) == 17 and max(abs(r["error"]) for r in rows) < 0.15


def test_moe_serving_runs_its_experts_as_grouped_gemms() -> None:
    """Only MoE serving changes with the grouped-GEMM constants: a dense model's figures are
    the same whatever they are, an MoE model's decode is slower with a less efficient one."""
    from deepflow.oracle.evaluate import network_model
    from deepflow.oracle.workloads.inference import inference_step

    def tpot(model: str, eta: float) -> float:
        scenario = serving(model, {"tensor_parallel": 2}, devices=2, global_batch_size=64)
        caps = device_caps(scenario.system.device, scenario.workload.precision)
        bent = dataclasses.replace(caps, grouped_gemm_efficiency=eta)
        workload = workload_for(scenario.workload.model, "inference")
        columns = workload.columns(scenario.workload, scenario.mapping)
        x = {k: np.array([v]) for k, v in columns.items()}
        out = inference_step(bent, network_model(scenario), x, current_calibration().memory)
        return float(out["tpot_s"][0])

    assert tpot("llama3-8b", 0.5) == tpot("llama3-8b", 1.0)
    assert tpot("mixtral-8x7b", 0.5) > tpot("mixtral-8x7b", 1.0)


def test_tensorrt_llm_prefill_attention_runs_slower_per_flop_over_short_prompts() -> None:
    """TensorRT-LLM's context attention carries a query block's fixed work (its family's
    ``attention_block_overhead_trtllm``): a prompt's attention time scales by the length
    factor, 1 at 8k tokens and above 1 below; other kernels keep their stated rate
    (docs/model.md §D1)."""
    from deepflow.oracle.evaluate import network_model
    from deepflow.oracle.workloads.inference import inference_step
    from deepflow.oracle.workloads.transformer.layer import attention_length_factor

    def breakdown(prompt: int, kernel: str, overhead: float) -> dict[str, float]:
        scenario = serving(input_tokens=prompt, output_tokens=2, global_batch_size=1,
                           mapping={"attention_kernel": kernel})  # fmt: skip
        caps = device_caps(scenario.system.device, scenario.workload.precision)
        bent = dataclasses.replace(caps, attention_block_overhead_trtllm=overhead)
        workload = workload_for(scenario.workload.model, "inference")
        x = {
            k: np.array([v])
            for k, v in workload.columns(scenario.workload, scenario.mapping).items()
        }
        out = inference_step(bent, network_model(scenario), x, current_calibration().memory)
        return {k: float(v[0]) for k, v in out["breakdown_s"].items()}

    hopper = current_calibration().kernel("hopper").attention_block_overhead_trtllm
    assert hopper > 0
    launch = device_caps(serving().system.device, "bf16").kernel_launch_s
    for prompt in (1024, 8192):
        slow = breakdown(prompt, "trtllm", hopper)["prefill_attention"]
        flat = breakdown(prompt, "trtllm", 0.0)["prefill_attention"]
        factor = float(attention_length_factor(float(prompt), hopper))
        layers = 32  # Llama 3 8B
        assert (slow / layers - launch) == pytest.approx((flat / layers - launch) * factor,
                                                         rel=1e-9)  # fmt: skip
        assert factor > 1.0 if prompt < 8192 else factor == pytest.approx(1.0)
        fa2 = [breakdown(prompt, "fa2", o)["prefill_attention"] for o in (0.0, hopper)]
        assert fa2[0] == fa2[1]


def test_a_tied_model_serves_from_one_vocabulary_matrix() -> None:
    untied = serving()
    model = dataclasses.replace(untied.workload.model, tied_embeddings=True)
    tied = dataclasses.replace(untied, workload=dataclasses.replace(untied.workload, model=model))
    saved = (evaluate_one(untied)["memory_breakdown_B"]["weights"]
             - evaluate_one(tied)["memory_breakdown_B"]["weights"])  # fmt: skip
    assert saved == pytest.approx(model.vocab_size * model.hidden_size * 2.0, rel=1e-9)  # bf16
