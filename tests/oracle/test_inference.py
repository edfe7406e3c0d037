"""The serving model (workload.kind: inference; docs/model.md part D)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from deepflow.config import load_scenario, scenario_from_mapping
from deepflow.config.specs import Scenario
from deepflow.errors import ConfigError
from deepflow.oracle.evaluate import evaluate_one, evaluate_table
from deepflow.oracle.workloads import workload_for

SCENARIOS = Path(__file__).resolve().parents[2] / "configs" / "scenarios"


def serving(**workload: object) -> Scenario:
    """Llama 3 8B in bf16 on one H100 (no communication): the memory-bound baseline."""
    raw = {
        "system": {"device": "h100-sxm5-80gb", "network": "dgx-h100", "devices_per_node": 1},
        "workload": {"kind": "inference", "model": "llama3-8b", "precision": "bf16",
                     "global_batch_size": 8, "input_tokens": 1024, "output_tokens": 128,
                     **workload},
        "mapping": {},
    }  # fmt: skip
    return scenario_from_mapping(raw, file="<serving>")


def serving_model(model: str) -> Scenario:
    s = serving()
    raw = {
        "system": {"device": "h100-sxm5-80gb", "network": "dgx-h100", "devices_per_node": 1},
        "workload": {"kind": "inference", "model": model, "global_batch_size": 1},
        "mapping": {},
    }
    return dataclasses.replace(s, workload=scenario_from_mapping(raw).workload)


def with_bandwidth(s: Scenario, factor: float) -> Scenario:
    device = dataclasses.replace(
        s.system.device, hbm_bandwidth_Bps=factor * s.system.device.hbm_bandwidth_Bps
    )
    return dataclasses.replace(s, system=dataclasses.replace(s.system, device=device))


def test_the_contract_keys_and_a_request_adds_up() -> None:
    r = evaluate_one(serving())
    assert r["step_time_s"] == pytest.approx(r["ttft_s"] + 127 * r["tpot_s"], rel=1e-12)
    assert sum(r["breakdown_s"].values()) == pytest.approx(r["step_time_s"], rel=1e-12)
    assert r["tokens_per_s"] == pytest.approx(8 * 128 / r["step_time_s"], rel=1e-12)
    assert sum(r["memory_breakdown_B"].values()) == pytest.approx(r["memory_per_device_B"])
    assert r["tokens_per_J"] > 0 and r["usd_per_Mtoken"] > 0 and r["feasible"]


def test_decode_time_grows_with_context_and_batch_as_the_kv_cache_does() -> None:
    tpot = [evaluate_one(serving(input_tokens=n))["tpot_s"] for n in (512, 2048, 8192)]
    assert tpot[0] < tpot[1] < tpot[2]
    batches = [evaluate_one(serving(global_batch_size=b))["tpot_s"] for b in (1, 16, 64)]
    assert batches[0] < batches[1] < batches[2]


def test_hbm_bandwidth_speeds_memory_bound_decode_not_compute_bound_prefill() -> None:
    base, fast = serving(global_batch_size=1), with_bandwidth(serving(global_batch_size=1), 2.0)
    slow_r, fast_r = evaluate_one(base), evaluate_one(fast)
    assert 1.7 < slow_r["tpot_s"] / fast_r["tpot_s"] <= 2.0
    prefill = serving(global_batch_size=16, input_tokens=4096)
    assert (
        evaluate_one(prefill)["ttft_s"] / evaluate_one(with_bandwidth(prefill, 2.0))["ttft_s"]
        < 1.15
    )


def test_the_kv_cache_bounds_concurrency() -> None:
    r = evaluate_one(serving())
    cap = int(r["max_concurrency"])
    fits, over = (
        evaluate_one(serving(global_batch_size=cap)),
        evaluate_one(serving(global_batch_size=cap + 100)),
    )
    # continuous batching runs what the KV cache holds; the rest waits
    assert fits["active_batch"] == over["active_batch"] == cap
    assert over["tokens_per_s"] == fits["tokens_per_s"] and over["feasible"]
    assert fits["memory_per_device_B"] <= fits["memory_capacity_B"]
    # weights that do not fit leave nothing to batch: infeasible
    huge = evaluate_one(serving_model("llama3-405b"))
    assert huge["max_concurrency"] == 0 and not huge["feasible"]
    assert "memory_excess_B" in huge["violated_constraints"]
    fp8 = evaluate_one(serving(kv_cache_precision="fp8"))
    kv = "kv_cache"
    assert fp8["memory_breakdown_B"][kv] == pytest.approx(r["memory_breakdown_B"][kv] / 2)
    assert fp8["max_concurrency"] > 1.3 * r["max_concurrency"]  # prefill transients stay


def test_batch_equals_loop_of_singles() -> None:
    s = load_scenario(SCENARIOS / "llama3-70b-serving-h100.yaml")
    batches, prompts = [1, 8, 64, 256], [128, 2048, 2048, 4096]
    table = evaluate_table(s, {"global_batch_size": np.array(batches, dtype=float),
                               "input_tokens": np.array(prompts, dtype=float)})  # fmt: skip
    for i, (b, n) in enumerate(zip(batches, prompts, strict=True)):
        one = evaluate_one(
            dataclasses.replace(
                s, workload=dataclasses.replace(s.workload, global_batch_size=b, input_tokens=n)
            )
        )
        for key in ("step_time_s", "ttft_s", "tpot_s", "max_concurrency", "memory_per_device_B"):
            assert table[key][i] == one[key], key
        assert bool(table["feasible"][i]) == one["feasible"]


def test_fp8_weights_halve_the_weight_bytes() -> None:
    bf16, fp8 = evaluate_one(serving()), evaluate_one(serving(precision="fp8"))
    assert fp8["memory_breakdown_B"]["weights"] == pytest.approx(
        bf16["memory_breakdown_B"]["weights"] / 2
    )
    assert fp8["tpot_s"] < bf16["tpot_s"]


def test_serving_a_model_kind_without_a_serving_model_is_a_clear_error() -> None:
    lstm = load_scenario(SCENARIOS / "lstm-a100.yaml").workload.model
    with pytest.raises(ConfigError, match=r"no serving model for 'lstm' models \(serving is "
                                          r"modelled for: transformer\)\."):  # fmt: skip
        workload_for(lstm, "inference")
