"""DeepSeek-V3's serving layers (docs/model.md §D7): multi-head latent attention, a shared
expert beside the routed ones, and dense layers before the MoE ones."""

from __future__ import annotations

import dataclasses
import importlib.util
import re
from pathlib import Path

import numpy as np
import pytest
import yaml

from deepflow.config import load_scenario, scenario_from_mapping
from deepflow.config.calibration import Calibration, current_calibration
from deepflow.config.specs import Scenario
from deepflow.errors import ConfigError
from deepflow.oracle.evaluate import evaluate_one, evaluate_table
from tests.conftest import REPO

PRESET = REPO / "configs" / "scenarios" / "deepseek-v3-serving-h200.yaml"


def with_mapping(s: Scenario, **changes: int) -> Scenario:
    return dataclasses.replace(s, mapping=dataclasses.replace(s.mapping, **changes))


def test_the_latent_is_cached_once_a_token_for_every_head() -> None:
    s = load_scenario(PRESET)
    r = evaluate_one(s)
    held = 1024 + 1024  # TensorRT-LLM-style reservation: the whole context (the default)
    # 61 layers x (512 latent + 64 RoPE key) x 1 byte (FP8) a token, on every rank
    assert r["memory_breakdown_B"]["kv_cache"] == pytest.approx(
        r["active_batch"] * held * 61 * (512 + 64) * 1.0, rel=1e-12
    )
    # 671B parameters in FP8 over 8 GPUs, with the 16-bit router, norms and embeddings and
    # the query and latent compressions every rank holds whole: within 3 % of 671 GB
    assert r["memory_breakdown_B"]["weights"] * 8 == pytest.approx(671e9, rel=0.03)


def test_a_decode_reads_the_latent_once_whatever_the_heads_a_rank_holds() -> None:
    # memory-bound decode attention (16 or 8 heads a rank at TP 8): every head reads the same
    # cached latent (multi-query attention over it), so halving the heads leaves it as it is
    s = load_scenario(PRESET)
    base = {"global_batch_size": 8, "output_tokens": 256}
    s = dataclasses.replace(s, workload=dataclasses.replace(s.workload, **base))
    half = dataclasses.replace(s.workload.model, num_attention_heads=64, num_kv_heads=64)
    fewer = dataclasses.replace(s, workload=dataclasses.replace(s.workload, model=half))
    a, b = (evaluate_one(x)["breakdown_s"]["decode_attention"] for x in (s, fewer))
    assert a == pytest.approx(b, rel=1e-9)
    # while the prefill's expanded keys and values scale with the heads
    a, b = (evaluate_one(x)["breakdown_s"]["prefill_attention"] for x in (s, fewer))
    assert a > 1.5 * b


def test_shared_experts_and_dense_layers_cost_what_they_add() -> None:
    s = load_scenario(PRESET)
    model = s.workload.model

    def run(**changes: int) -> dict:
        workload = dataclasses.replace(s.workload, model=dataclasses.replace(model, **changes))
        return evaluate_one(dataclasses.replace(s, workload=workload))

    full, unshared, all_moe = run(), run(num_shared_experts=0), run(first_dense_layers=0)
    # a shared expert a token adds its weights (split 8 ways) and its GEMMs
    shared_B = 61 * (1 - 3 / 61) * 3 * 7168 * 2048 / 8
    assert full["memory_breakdown_B"]["weights"] - unshared["memory_breakdown_B"][
        "weights"] == pytest.approx(shared_B, rel=1e-9)  # fmt: skip
    assert full["breakdown_s"]["decode_gemm"] > unshared["breakdown_s"]["decode_gemm"]
    # three dense layers of 18,432 hold fewer weights a device than three MoE layers of 256
    # experts (32 a GPU) and the shared one, and read them all every iteration
    assert full["memory_breakdown_B"]["weights"] < all_moe["memory_breakdown_B"]["weights"]


def test_batch_equals_loop_with_latent_and_grouped_query_rows() -> None:
    s = load_scenario(PRESET)
    columns = {
        "kv_lora_rank": np.array([512, 512, 0, 512]),
        "num_shared_experts": np.array([1, 0, 1, 1]),
        "first_dense_layers": np.array([3, 3, 0, 5]),
        "global_batch_size": np.array([64, 8, 16, 128]),
    }
    table = evaluate_table(s, columns)
    for i in range(4):
        model = dataclasses.replace(
            s.workload.model, kv_lora_rank=int(columns["kv_lora_rank"][i]),
            num_shared_experts=int(columns["num_shared_experts"][i]),
            first_dense_layers=int(columns["first_dense_layers"][i]))  # fmt: skip
        batch = int(columns["global_batch_size"][i])
        workload = dataclasses.replace(s.workload, model=model, global_batch_size=batch)
        one = evaluate_one(dataclasses.replace(s, workload=workload))
        for key in ("step_time_s", "ttft_s", "tpot_s", "memory_per_device_B", "tokens_per_s"):
            assert table[key][i] == one[key], (i, key)


@pytest.mark.parametrize(
    ("model", "message"),
    [
        ({"first_dense_layers": 61},
         r"workload.model.first_dense_layers \(61\) must be less than num_layers \(61\)\."),
        ({"num_experts": 1, "experts_per_token": 1},
         r"workload.model.num_shared_experts \(1\) needs a mixture of experts "
         r"\(num_experts > 1\)\."),
    ],
)  # fmt: skip
def test_deepseek_model_errors_name_the_key(model: dict, message: str) -> None:
    preset = yaml.safe_load((REPO / "configs/models/deepseek-v3.yaml").read_text())
    raw = {
        "system": {"device": "h200-sxm-141gb", "network": "dgx-h100", "devices_per_node": 8},
        "workload": {"kind": "inference", "precision": "fp8", "input_tokens": 1024,
                     "output_tokens": 1024, "global_batch_size": 8,
                     "model": {**preset, **model}},
        "mapping": {"tensor_parallel": 8},
    }  # fmt: skip
    with pytest.raises(ConfigError, match=message):
        scenario_from_mapping(raw, file="<deepseek>")


def test_the_latent_decode_kernel_rate_is_flashmlas_fit() -> None:
    spec = importlib.util.spec_from_file_location("fit_mla", REPO / "benchmarks" / "fit_mla.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    fitted = module.fit()
    hopper = current_calibration().kernel("hopper").attention_efficiency_mla
    assert fitted["newest"] == pytest.approx(hopper, abs=5e-4)
    # its memory-bound rate is the family's HBM efficiency within 2 %: checked, not set
    assert fitted["memory_bound_over_hbm"] == pytest.approx(1.0, abs=0.02)


def test_a_compute_bound_latent_decode_runs_at_the_latent_kernels_rate(tmp_path: Path) -> None:
    # attention data parallelism: each GPU holds all 128 heads (2·128 FLOPs a latent byte,
    # compute-bound), decoding at FlashMLA's rate; without that calibration, at the server's
    # FlashAttention-2 rate (0.33 against 0.824 of the peak)
    cal = current_calibration()
    kernels = tmp_path / "kernels.yaml"
    kernels.write_text(re.sub(r"\n\s*attention_efficiency_mla:[^\n]*", "",
                              cal.kernels_path.read_text()))  # fmt: skip
    without = Calibration(cal.frameworks_path, kernels, cal.network_path)
    s = with_mapping(load_scenario(PRESET), tensor_parallel=1, data_parallel=8,
                     expert_parallel=8, expert_tensor_parallel=0)  # fmt: skip
    fast, slow = (evaluate_one(s, calibration=c)["breakdown_s"]["decode_attention"]
                  for c in (cal, without))  # fmt: skip
    assert slow > 2 * fast
    # memory-bound at TP 8 (16 heads a rank): the same either way
    tp8 = load_scenario(PRESET)
    a, b = (evaluate_one(tp8, calibration=c)["breakdown_s"]["decode_attention"]
            for c in (cal, without))  # fmt: skip
    assert a == b
