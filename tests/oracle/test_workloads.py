"""gemm and lstm workloads through evaluate: hand-computable cases, breakdowns, CLI."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from deepflow.cli import app
from deepflow.config import load_scenario
from deepflow.config.specs import Scenario
from deepflow.oracle.evaluate import evaluate_one
from deepflow.oracle.hardware import device_caps
from deepflow.oracle.kernels import gemm_one
from deepflow.oracle.workloads.lstm import lstm_stages
from tests.conftest import REPO

SCENARIOS = REPO / "configs" / "scenarios"
CONTRACT_KEYS = {
    "step_time_s", "tokens_per_s", "samples_per_s", "model_flops_per_step", "mfu",
    "memory_per_device_B", "memory_capacity_B", "feasible", "breakdown_s", "device",
    "system_power_W", "energy_per_step_J",
}  # fmt: skip


def scenario(name: str) -> Scenario:
    return load_scenario(SCENARIOS / f"{name}.yaml")


@pytest.mark.parametrize(
    "name",
    ["gemm-a100", "gemm-waferscale-rc20", "lstm-v100-crossflow", "lstm-a100", "lstm-h100",
     "lstm-waferscale-rc20"],
)  # fmt: skip
def test_contract_keys_and_breakdown_sums_to_step_time(name: str) -> None:
    r = evaluate_one(scenario(name))
    assert CONTRACT_KEYS <= set(r)
    assert sum(r["breakdown_s"].values()) == pytest.approx(r["step_time_s"], rel=1e-12)
    assert all(v >= 0 for v in r["breakdown_s"].values())
    assert 0 < r["mfu"] < 1
    assert r["energy_per_step_J"] == pytest.approx(r["system_power_W"] * r["step_time_s"])
    assert {"peak_flops", "hbm_bandwidth_Bps", "area_mm2", "power_W"} <= set(r["device"])


def test_single_device_gemm_is_one_kernel() -> None:
    s = scenario("gemm-a100")
    caps = device_caps(s.system.device, "fp16")
    r = evaluate_one(s)
    assert r["step_time_s"] == pytest.approx(gemm_one(caps, 524288, 8, 128))
    assert r["breakdown_s"]["communication_tensor"] == 0.0


def test_rc_split_shrinks_the_local_gemm() -> None:
    s = scenario("gemm-waferscale-rc20")
    caps = device_caps(s.system.device, "fp16")
    r = evaluate_one(s)
    # RC kp1 = 20, kp2 = 1: each die runs ⌈524288/20⌉ = 26215 rows; no collective needed.
    assert r["breakdown_s"]["gemm"] == pytest.approx(gemm_one(caps, 26215, 8, 128))
    assert r["breakdown_s"]["communication_tensor"] == 0.0


def test_rc_with_an_n_split_all_gathers_the_output() -> None:
    s = scenario("gemm-waferscale-rc20")
    s = replace(s, mapping=replace(s.mapping, kernel_parallel_dim2=2))
    r = evaluate_one(s)
    assert r["breakdown_s"]["communication_tensor"] > 0


def test_lstm_on_a_single_device_has_no_communication() -> None:
    r = evaluate_one(scenario("lstm-v100-crossflow"))
    b = r["breakdown_s"]
    assert b["forward_communication"] == b["backward_communication"] == 0.0
    assert b["gradient_sync_exposed"] == 0.0
    assert b["backward_compute"] == pytest.approx(2 * b["forward_compute"], rel=0.15)
    # The 38.4 B-parameter model does not fit a 16 GiB V100 (CrossFlow reports 19.8x overflow).
    assert not r["feasible"]


def test_lstm_gets_faster_on_newer_devices() -> None:
    times = [
        evaluate_one(scenario(n))["step_time_s"]
        for n in ("lstm-v100-crossflow", "lstm-a100", "lstm-h100")
    ]
    assert times[0] > times[1] > times[2]


@pytest.mark.parametrize("pp", [2, 3, 4])
def test_lstm_layer_pipelining_works_for_every_depth(pp: int) -> None:
    # The original crashes at pipeline_parallel = 2 (docs/model.md §B4.8).
    base = scenario("lstm-waferscale-rc20")
    mapping = replace(base.mapping, tensor_parallel=20 // pp if 20 % pp == 0 else 1,
                      pipeline_parallel=pp)  # fmt: skip
    system = replace(base.system, devices_per_node=mapping.tensor_parallel * pp)
    r = evaluate_one(replace(base, mapping=mapping, system=system))
    assert r["breakdown_s"]["forward_pipeline_bubble"] > 0
    assert sum(r["breakdown_s"].values()) == pytest.approx(r["step_time_s"])


def test_lstm_stage_layout() -> None:
    assert lstm_stages(2, 1) == [["embedding", "layer0", "layer1", "softmax"]]
    assert lstm_stages(2, 2) == [["embedding", "layer0", "layer1"], ["softmax"]]
    assert lstm_stages(4, 4) == [["embedding"], ["layer0", "layer1"], ["layer2", "layer3"],
                                 ["softmax"]]  # fmt: skip


def test_evaluate_cli_json_and_table(tmp_path: Path) -> None:
    runner = CliRunner()
    path = SCENARIOS / "lstm-waferscale-rc20.yaml"
    result = runner.invoke(app, ["evaluate", str(path), "--json"])
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert CONTRACT_KEYS <= set(data)
    human = runner.invoke(app, ["evaluate", str(path)])
    assert human.exit_code == 0
    assert "where the step time goes" in human.stdout
    assert "gradient_sync_exposed" in human.stdout


def test_evaluate_cli_rejects_a_bad_mapping(write_yaml) -> None:  # type: ignore[no-untyped-def]
    data = {
        "system": {"device": "a100-sxm4-80gb", "network": "dgx-a100", "devices_per_node": 1},
        "workload": {"model": "gemm-example"},
        "mapping": {"pipeline_parallel": 1, "context_parallel": 2},
    }
    path = write_yaml(data)
    result = CliRunner().invoke(app, ["evaluate", str(path)])
    assert result.exit_code == 2
    assert result.stdout == ""
    assert "mapping degrees do not match the system" in result.stderr
