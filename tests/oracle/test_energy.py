"""Energy per step summed per operation (deepflow/oracle/energy.py, docs/model.md §A6.3)."""

from __future__ import annotations

import dataclasses
import json

import pytest
from typer.testing import CliRunner

from deepflow.cli import app
from deepflow.config import DesignDeviceSpec, builtin_config_dir, load_scenario, load_technology
from deepflow.oracle.energy import ENERGY_PARTS
from deepflow.oracle.evaluate import evaluate_one, evaluate_table, network_model
from deepflow.oracle.hardware import derive_one, device_caps

SCENARIOS = ("gemm-a100", "lstm-v100-crossflow", "lstm-waferscale-rc20", "gpt3-175b-a100",
             "llama3-8b-h100")  # fmt: skip


def _scenario(name: str):  # type: ignore[no-untyped-def]
    return load_scenario(builtin_config_dir() / f"scenarios/{name}.yaml")


@pytest.mark.parametrize("name", SCENARIOS)
def test_parts_sum_to_the_total_and_table_equals_one(name: str) -> None:
    scenario = _scenario(name)
    one = evaluate_one(scenario)
    parts = one["energy_ops_breakdown_J"]
    assert set(parts) == set(ENERGY_PARTS)
    assert all(v >= 0 for v in parts.values())
    assert one["energy_per_step_ops_J"] == pytest.approx(sum(parts.values()), rel=1e-12)
    table = evaluate_table(scenario, {})
    assert table["energy_per_step_ops_J"][0] == pytest.approx(one["energy_per_step_ops_J"])
    for part in ENERGY_PARTS:
        assert table[f"energy_ops_{part}_J"][0] == pytest.approx(parts[part], rel=1e-12)


@pytest.mark.parametrize("name", SCENARIOS)
def test_the_activity_estimate_cross_checks_the_per_operation_sum(name: str) -> None:
    # The activity model charges TDP (or the derived draw) whenever the device is busy; the
    # operation sum leaves out clocks, control and on-chip wires, so it is lower, but within
    # a factor of ~3 (docs/model.md §A6.3).
    one = evaluate_one(_scenario(name))
    ratio = one["energy_per_step_ops_J"] / one["energy_per_step_J"]
    assert 0.08 < ratio <= 1.0, ratio


def test_compute_energy_is_flops_times_the_nodes_energy_per_flop() -> None:
    scenario = _scenario("gemm-a100")  # one 8192³ bf16 GEMM on an A100 (7 nm, HBM2e)
    one = evaluate_one(scenario)
    n7 = load_technology("n7")
    e_flop = n7.mcu_nominal_power_W / (n7.mcu_flops_per_cycle * n7.nominal_freq_Hz)  # type: ignore[union-attr]
    assert one["energy_ops_breakdown_J"]["compute"] == pytest.approx(
        one["model_flops_per_step"] * e_flop, rel=1e-12
    )
    caps = device_caps(scenario.system.device, "bf16")
    static = caps.idle_power_fraction * scenario.system.device.tdp_W  # type: ignore[union-attr]
    assert one["energy_ops_breakdown_J"]["static"] == pytest.approx(
        static * one["step_time_s"], rel=1e-12
    )


def test_design_mode_uses_the_derived_energies() -> None:
    scenario = _scenario("lstm-v100-crossflow")
    device = scenario.system.device
    assert isinstance(device, DesignDeviceSpec)
    one = evaluate_one(scenario)
    d = derive_one(device)
    flops = one["model_flops_per_step"] / scenario.system.num_devices
    assert one["energy_ops_breakdown_J"]["compute"] == pytest.approx(
        flops * d["energy_per_flop_J"], rel=1e-12
    )
    # a core at a lower voltage (less core power) spends less energy per FLOP
    frugal = dataclasses.replace(device, power_W=dataclasses.replace(device.power_W, core=60.0))
    cheaper = evaluate_one(
        dataclasses.replace(scenario, system=dataclasses.replace(scenario.system, device=frugal))
    )
    assert cheaper["energy_ops_breakdown_J"]["compute"] < one["energy_ops_breakdown_J"]["compute"]


def test_link_energy_is_exposed_traffic_times_energy_per_bit() -> None:
    scenario = _scenario("gpt3-175b-a100")  # 1,024 A100s: NVLink nodes, InfiniBand between
    one = evaluate_one(scenario)
    b = one["breakdown_s"]
    net = network_model(scenario)
    up_J = load_technology("nvlink-serdes").energy_per_bit_J  # type: ignore[union-attr]
    out_J = load_technology("optical-cpo").energy_per_bit_J  # type: ignore[union-attr]
    up_s = b["tensor_parallel_comm"] + b["context_parallel_comm"] + b["expert_parallel_comm"]
    up_s += b["pipeline_p2p"]
    out_s = b["data_parallel_comm"] + b["embedding_sync"]
    devices = scenario.system.num_devices
    up_Bps = float(net.scale_up_bandwidth_Bps) * float(net.scale_up_efficiency)
    out_Bps = float(net.scale_out_bandwidth_Bps) * float(net.scale_out_efficiency)
    parts = one["energy_ops_breakdown_J"]
    assert parts["scale_up"] == pytest.approx(up_s * up_Bps * 8 * up_J * devices, rel=1e-9)
    assert parts["scale_out"] == pytest.approx(out_s * out_Bps * 8 * out_J * devices, rel=1e-9)
    assert parts["scale_up"] > 0 and parts["scale_out"] > 0


def test_evaluate_json_reports_both_energies() -> None:
    path = builtin_config_dir() / "scenarios/gemm-a100.yaml"
    result = CliRunner().invoke(app, ["evaluate", str(path), "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["energy_per_step_J"] > out["energy_per_step_ops_J"] > 0
    assert set(out["energy_ops_breakdown_J"]) == set(ENERGY_PARTS)
