"""Disaggregated prefill and decode pools (docs/model.md §D6): a prefill pool runs prompts, a
decode pool the tokens after them, each prompt's KV cache sent between them."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from deepflow.config import load_network, scenario_from_mapping
from deepflow.config.specs import Scenario
from deepflow.errors import ConfigError
from deepflow.oracle.evaluate import evaluate_one, evaluate_table
from deepflow.oracle.network import NetworkModel, collective_time_s


def pools(prefill: int, decode: int, *, tp: int = 1, prefill_tp: int = 0, devices: int = 0,
          model: str = "llama3-8b", precision: str = "bf16",
          **workload: object) -> Scenario:  # fmt: skip
    """``prefill`` replicas of ``prefill_tp`` (0: ``tp``) H100s and ``decode`` of ``tp``."""
    n = devices or prefill * (prefill_tp or tp) + decode * tp
    raw = {
        "system": {"device": "h100-sxm5-80gb", "network": "dgx-h100",
                   "devices_per_node": min(n, 8), "num_nodes": max(n // 8, 1)},
        "workload": {"kind": "inference", "model": model, "precision": precision,
                     "global_batch_size": 4, "input_tokens": 1024, "output_tokens": 128,
                     **workload},
        "mapping": {"tensor_parallel": tp, "data_parallel": prefill + decode,
                    "prefill_replicas": prefill, "prefill_tensor_parallel": prefill_tp},
    }  # fmt: skip
    return scenario_from_mapping(raw, file="<pools>")


def colocated(s: Scenario) -> Scenario:
    mapping = dataclasses.replace(s.mapping, prefill_replicas=0, prefill_tensor_parallel=0)
    return dataclasses.replace(s, mapping=mapping)


def test_a_request_passes_its_prompt_the_transfer_and_its_decodes() -> None:
    # four clients on one prefill and one decode GPU: no pool is full, no one waits
    r = evaluate_one(pools(1, 1))
    parts = r["breakdown_s"]
    prefill = sum(v for k, v in parts.items() if k.startswith("prefill_"))
    decode = sum(v for k, v in parts.items() if k.startswith("decode_"))
    assert r["queue_wait_s"] == 0 and parts["idle"] == 0
    assert r["ttft_s"] == pytest.approx(prefill + parts["kv_transfer"], rel=1e-12)
    # the first token comes from the prefill pool, the other 127 from decode iterations
    assert decode == pytest.approx(127 * r["tpot_s"], rel=1e-12)
    assert r["request_latency_s"] == pytest.approx(r["step_time_s"], rel=1e-12)
    assert sum(parts.values()) == pytest.approx(r["step_time_s"], rel=1e-12)
    # a closed loop of the decode replica's 4 clients, each through its path in turn
    assert r["tokens_per_s"] == pytest.approx(4 * 128 / r["request_latency_s"], rel=1e-12)
    assert r["pools"] == {"prefill_replicas": 1, "prefill_tensor_parallel": 1,
                          "decode_replicas": 1, "decode_tensor_parallel": 1}  # fmt: skip


def test_no_prompt_stalls_the_decode_pool() -> None:
    # the decode replica's iterations are those of a co-located replica's decode-only ones at
    # the same batch and context; the co-located replica's prompts lengthen its tokens
    s = pools(1, 1)
    split, joint = evaluate_one(s), evaluate_one(colocated(s))
    assert split["active_batch"] == joint["active_batch"] == 4
    parts = joint["breakdown_s"]
    decode_only = sum(v for k, v in parts.items() if k.startswith("decode_"))
    iterations = 128 - 4  # continuous batching: 4 of the 128 iterations carry a prompt
    assert split["tpot_s"] == pytest.approx(decode_only / iterations, rel=1e-12)
    assert split["tpot_s"] < joint["tpot_s"]


def test_the_kv_cache_goes_over_the_link_between_the_pools() -> None:
    # each device sends its shard: 32 layers x 1,024 tokens x 8 KV heads of 128, K and V, bf16,
    # as a send_recv at the distance of the prefill pool's ranks
    shard = 2 * 32 * 1024 * 8 * 128 * 2
    for prefill, devices, stride in ((1, 2, 1), (8, 16, 8)):
        s = pools(prefill, devices - prefill, devices=devices)
        net = NetworkModel.from_spec(load_network("dgx-h100"), 8)
        expected = float(collective_time_s("send_recv", shard, 2, net=net, stride=stride))
        assert evaluate_one(s)["breakdown_s"]["kv_transfer"] == pytest.approx(expected, rel=1e-12)
    # beside each other over NVLink, eight GPUs apart over the scale-out network: slower
    near = evaluate_one(pools(1, 1))["breakdown_s"]["kv_transfer"]
    far = evaluate_one(pools(8, 8))["breakdown_s"]["kv_transfer"]
    assert far > 2 * near
    # tensor parallelism splits the KV heads: a TP 2 decode pool takes half a shard a device
    # from prefill devices that hold whole ones, so the larger shard sets the time
    mixed = evaluate_one(pools(2, 1, tp=2, prefill_tp=1))["breakdown_s"]["kv_transfer"]
    assert mixed == pytest.approx(near, rel=1e-12)


def test_throughput_is_the_slower_pools() -> None:
    # long prompts, short answers, many clients: the prefill pool bounds the system, and a
    # second prefill replica in place of a decode one nearly doubles it
    heavy = {"input_tokens": 8192, "output_tokens": 16, "global_batch_size": 64}
    one, two = (evaluate_one(pools(p, 8 - p, **heavy))["tokens_per_s"] for p in (1, 2))
    assert 1.8 < two / one <= 2.0
    # short prompts, long answers: the decode pool bounds it, so a replica moved from prefill
    # to decode raises it
    light = {"input_tokens": 128, "output_tokens": 1024, "global_batch_size": 256}
    many, few = (evaluate_one(pools(p, 8 - p, **light))["tokens_per_s"] for p in (4, 1))
    assert few > 1.5 * many


def test_a_prefill_iteration_takes_the_prompts_its_budget_holds() -> None:
    # a prefill-bound loop (8,192-token prompts, one prefill GPU for seven decoding): without a
    # budget the prefill replica batches what its memory holds; with 8,192 prompt tokens an
    # iteration, one prompt at a time, and its activations shrink to one prompt's
    heavy = {"input_tokens": 8192, "output_tokens": 16, "global_batch_size": 64}
    free, budget = (evaluate_one(pools(1, 7, **heavy, prompt_tokens_per_iteration=t))
                    for t in (0, 8192))  # fmt: skip
    assert budget["breakdown_s"]["prefill_gemm"] < free["breakdown_s"]["prefill_gemm"]
    assert budget["memory_per_device_B"] < free["memory_per_device_B"]


def test_each_pool_must_hold_its_weights() -> None:
    # Llama 3 70B in bf16 (141 GB): a decode pool of TP 8 holds it; prefill replicas of one GPU
    # do not, and the design is infeasible though the decode pool fits
    fits = evaluate_one(pools(1, 1, tp=8, model="llama3-70b"))
    assert fits["feasible"]
    single = evaluate_one(pools(8, 1, tp=8, prefill_tp=1, model="llama3-70b"))
    assert not single["feasible"]
    assert single["memory_breakdown_B"]["weights"] > 80e9


def test_poisson_arrivals_the_pools_keep_up_with_flow_at_their_rate() -> None:
    s = pools(1, 1, arrivals="poisson", request_rate=2.0, global_batch_size=100)
    r = evaluate_one(s)
    path = r["ttft_s"] - r["queue_wait_s"] + 127 * r["tpot_s"]
    # the run: the last of 100 requests arrives at 99 / 2 s and runs its path
    assert r["step_time_s"] == pytest.approx(99 / 2.0 + path, rel=1e-12)
    assert r["tokens_per_s"] == pytest.approx(100 * 128 / r["step_time_s"], rel=1e-12)
    # beyond what the pools serve, requests wait more the faster they come
    waits = [evaluate_one(dataclasses.replace(s, workload=dataclasses.replace(
        s.workload, request_rate=rate)))["queue_wait_s"] for rate in (50.0, 100.0)]  # fmt: skip
    assert 0 < waits[0] < waits[1]


def test_an_offline_queue_drains_at_the_slowest_stage() -> None:
    # (more requests than the decode replica's KV cache holds: both runs fill it)
    short, long = (evaluate_one(pools(1, 1, arrivals="offline", global_batch_size=n))
                   for n in (1000, 2000))  # fmt: skip
    assert short["active_batch"] == long["active_batch"] < 1000
    # 1,000 more requests through the same capacity take the same time again
    rate = 1000 * 128 / (long["step_time_s"] - short["step_time_s"])
    assert long["tokens_per_s"] < rate and rate == pytest.approx(long["tokens_per_s"], rel=0.05)


def test_batch_equals_loop_across_pools_and_arrivals() -> None:
    s = pools(2, 2, tp=2, devices=8)
    columns = {
        "prefill_replicas": np.array([0, 1, 2, 3, 2, 2]),
        "prefill_tensor_parallel": np.array([0, 0, 4, 0, 1, 0]),
        "data_parallel": np.array([4, 4, 3, 4, 6, 4]),
        "poisson": np.array([0, 0, 0, 1, 0, 0]),
        "request_rate": np.array([0, 0, 0, 3, 0, 0]),
        "offline": np.array([0, 0, 0, 0, 0, 1]),
    }
    table = evaluate_table(s, columns)
    arrivals = ["closed_loop"] * 3 + ["poisson", "closed_loop", "offline"]
    for i, arrival in enumerate(arrivals):
        mapping = dataclasses.replace(
            s.mapping, prefill_replicas=int(columns["prefill_replicas"][i]),
            prefill_tensor_parallel=int(columns["prefill_tensor_parallel"][i]),
            data_parallel=int(columns["data_parallel"][i]))  # fmt: skip
        workload = dataclasses.replace(s.workload, arrivals=arrival,
                                       request_rate=float(columns["request_rate"][i]))  # fmt: skip
        one = evaluate_one(dataclasses.replace(s, mapping=mapping, workload=workload))
        for key in ("step_time_s", "tokens_per_s", "ttft_s", "tpot_s", "queue_wait_s",
                    "memory_per_device_B", "breakdown_kv_transfer_s"):  # fmt: skip
            got = one["breakdown_s"]["kv_transfer"] if key.startswith("breakdown") else one[key]
            assert table[key][i] == got, (i, key)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"mapping": {"prefill_replicas": 2}},
         r"mapping.prefill_replicas \(2\) must be less than data_parallel \(2\): the decode "
         r"pool needs at least one replica\."),
        ({"workload": {"batching": "static"}},
         r"workload.batching is static: a disaggregated pool \(prefill_replicas > 0\) batches "
         r"continuously"),
        ({"mapping": {"prefill_replicas": 0, "prefill_tensor_parallel": 2}},
         r"mapping.prefill_tensor_parallel \(2\) is the prefill pool's degree; it needs "
         r"prefill_replicas > 0\."),
        ({"mapping": {"prefill_tensor_parallel": 3}},
         r"mapping.prefill_tensor_parallel \(3\) must divide the model's num_attention_heads"),
        ({"mapping": {"prefill_tensor_parallel": 2}},
         r"mapping degrees do not match the system: \(prefill_replicas 1 × "
         r"prefill_tensor_parallel 2 \+ 1 decode replicas × tensor_parallel 1\) × "
         r"pipeline_parallel 1 × context_parallel 1 = 3 devices, but system has "
         r"devices_per_node 2 × num_nodes 1 = 2\."),
    ],
)  # fmt: skip
def test_pool_errors_name_the_key(changes: dict, message: str) -> None:
    raw = {
        "system": {"device": "h100-sxm5-80gb", "network": "dgx-h100", "devices_per_node": 2},
        "workload": {"kind": "inference", "model": "llama3-8b", "precision": "bf16",
                     "global_batch_size": 4, "input_tokens": 1024, "output_tokens": 128},
        "mapping": {"data_parallel": 2, "prefill_replicas": 1},
    }  # fmt: skip
    for section, values in changes.items():
        raw[section] = {**raw[section], **values}
    with pytest.raises(ConfigError, match=message):
        scenario_from_mapping(raw, file="<pools>")


def test_training_and_moe_pools_are_refused_with_the_reason() -> None:
    training = {
        "system": {"device": "h100-sxm5-80gb", "network": "dgx-h100", "devices_per_node": 2},
        "workload": {"model": "llama3-8b", "precision": "bf16", "global_batch_size": 4},
        "mapping": {"data_parallel": 2, "prefill_replicas": 1},
    }  # fmt: skip
    with pytest.raises(ConfigError, match=r"mapping.prefill_replicas \(1\) splits serving "
                       r"replicas into a prefill and a decode pool; a training workload takes "
                       r"0\."):  # fmt: skip
        scenario_from_mapping(training, file="<pools>")
    moe = {
        "system": {"device": "h100-sxm5-80gb", "network": "dgx-h100", "devices_per_node": 8},
        "workload": {"kind": "inference", "model": "mixtral-8x7b", "precision": "bf16",
                     "global_batch_size": 4, "input_tokens": 1024, "output_tokens": 128},
        "mapping": {"tensor_parallel": 2, "data_parallel": 4, "expert_parallel": 4,
                    "expert_tensor_parallel": 0, "prefill_replicas": 1},
    }  # fmt: skip
    with pytest.raises(ConfigError, match=r"mapping.prefill_replicas \(1\) and the decode "
                       r"pool's 3 replicas must each be a multiple of the 4 replicas an expert "
                       r"group spans"):  # fmt: skip
        scenario_from_mapping(moe, file="<pools>")
    # an expert layout the EP rules reject is reported by them, pools or not
    moe["mapping"] = {"tensor_parallel": 4, "data_parallel": 2, "expert_parallel": 2,
                      "expert_tensor_parallel": 1, "prefill_replicas": 1}  # fmt: skip
    with pytest.raises(ConfigError, match=r"mapping.expert_parallel \(2\) must be a multiple "
                       r"of the expert-parallel ranks in each tensor-parallel group"):  # fmt: skip
        scenario_from_mapping(moe, file="<pools>")
    moe["mapping"] = {"tensor_parallel": 2, "data_parallel": 4, "expert_parallel": 2,
                      "expert_tensor_parallel": 1, "prefill_replicas": 2,
                      "prefill_tensor_parallel": 1}  # fmt: skip
    moe["system"]["devices_per_node"] = 6
    with pytest.raises(ConfigError, match=r"mapping.prefill_tensor_parallel \(1\) differs from "
                       r"tensor_parallel \(2\): the pools then split each expert as their dense "
                       r"layers"):  # fmt: skip
        scenario_from_mapping(moe, file="<pools>")


def test_best_mapping_keeps_the_splits_within_a_latency_slo() -> None:
    from deepflow.config import load_scenario
    from deepflow.oracle.best_mapping import best_mappings
    from tests.conftest import REPO

    scenario = load_scenario(REPO / "configs/scenarios/llama3-70b-serving-h100-disaggregated.yaml")
    every = best_mappings(scenario, top=1000)
    slo = best_mappings(scenario, top=1000, max_tpot_s=0.020)
    within = [m for m in every["mappings"] if m["tpot_s"] <= 0.020]
    # the same evaluations, those within the SLO kept, still ranked by tokens/s
    assert slo["mappings"] == within and slo["num_within_slo"] == len(within) > 0
    assert slo["slo"] == {"max_tpot_s": 0.020} and slo["num_feasible"] == every["num_feasible"]
    # at 20 ms a token only decode pools free of prompts serve Llama 3 70B on one DGX H100
    assert all(m["mapping"]["prefill_replicas"] > 0 for m in slo["mappings"])
    assert every["mappings"][0]["mapping"]["prefill_replicas"] == 0  # the fastest overall
    both = best_mappings(scenario, top=1000, max_tpot_s=0.020, max_ttft_s=1.0)
    assert all(m["ttft_s"] <= 1.0 for m in both["mappings"])
    assert both["num_within_slo"] < slo["num_within_slo"]


def test_a_latency_slo_is_refused_for_training_and_when_not_positive() -> None:
    from deepflow.config import load_scenario
    from deepflow.oracle.best_mapping import best_mappings
    from tests.conftest import REPO

    training = load_scenario(REPO / "configs/scenarios/llama3-8b-h100.yaml")
    with pytest.raises(ConfigError, match=r"llama3-8b-h100.yaml: a latency SLO \(max_tpot_s\) "
                       r"applies to serving scenarios \(workload.kind: inference\); this one "
                       r"trains\."):  # fmt: skip
        best_mappings(training, max_tpot_s=0.05)
    serving = load_scenario(REPO / "configs/scenarios/llama3-70b-serving-h100.yaml")
    with pytest.raises(ConfigError, match=r"max_ttft_s must be > 0; got 0\."):
        best_mappings(serving, max_ttft_s=0.0)
