"""Technology-derived link presets (docs/model.md §A4.2) and the designed links' latency."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from deepflow.config import (
    DesignDeviceSpec,
    Scenario,
    builtin_config_dir,
    load_scenario,
    load_technology,
)
from deepflow.oracle.evaluate import device_network, evaluate_one, evaluate_table
from deepflow.oracle.hardware import design_table, device_caps

LINKS = ("siif-2020", "interposer-cowos", "mcm-organic", "ucie-advanced", "nvlink-serdes",
         "optical-cpo")  # fmt: skip


def test_siif_2020_has_the_papers_parameters() -> None:
    link = load_technology("siif-2020")
    assert link.wires_per_mm == 400
    assert link.area_per_wire_mm2 == pytest.approx(25e-6)  # 25 µm²
    assert link.energy_per_bit_J == pytest.approx(1e-12)
    assert link.nominal_rate_bps == pytest.approx(3e9)


@pytest.mark.parametrize("name", LINKS)
def test_every_link_preset_has_a_latency(name: str) -> None:
    link = load_technology(name)
    assert 0 < link.latency_s <= 5e-6


def test_on_package_links_are_faster_to_reach_than_board_links() -> None:
    on_package = max(load_technology(n).latency_s for n in LINKS[:4])
    off_package = min(load_technology(n).latency_s for n in LINKS[4:])
    assert on_package < off_package


def _wafer(link: str) -> Scenario:
    """The paper's 20-die wafer with its mesh links designed from ``link`` (the budgets of
    configs/spaces/case-packaging-lstm.yaml at 18.75 W)."""
    scenario = load_scenario(builtin_config_dir() / "scenarios/lstm-waferscale-rc20.yaml")
    device = scenario.system.device
    assert isinstance(device, DesignDeviceSpec)
    designed = dataclasses.replace(
        device,
        scale_up_link=load_technology(link),
        tdp_W=340.0,
        area_mm2=dataclasses.replace(device.area_mm2, scale_up=81.5, scale_out=0.0),
        power_W=dataclasses.replace(device.power_W, scale_up=18.75, scale_out=0.0),
        perimeter_fraction=dataclasses.replace(
            device.perimeter_fraction, scale_up=0.5, scale_out=0.0
        ),
    )
    return dataclasses.replace(
        scenario, system=dataclasses.replace(scenario.system, device=designed)
    )


def test_the_network_uses_the_designed_links_latency() -> None:
    scenario = _wafer("siif-2020")
    caps = device_caps(scenario.system.device, "fp16")
    assert caps.scale_up_bandwidth_Bps > 0
    net = device_network(scenario, caps)
    assert float(net.scale_up_latency_s) == pytest.approx(5e-9)
    slow = dataclasses.replace(caps, scale_up_latency_s=5e-6)
    assert float(device_network(scenario, slow).scale_up_latency_s) == pytest.approx(5e-6)


def test_designed_link_latency_never_speeds_a_step_up() -> None:
    scenario = _wafer("siif-2020")
    device = scenario.system.device
    assert isinstance(device, DesignDeviceSpec)
    base = design_table([device])
    latency = base["scale_up_latency_s"][0] * np.array([1.0, 1e3])
    table = evaluate_table(scenario, {"scale_up_latency_s": latency})
    assert table["step_time_s"][1] > table["step_time_s"][0]
    one = evaluate_one(scenario)
    assert one["step_time_s"] == pytest.approx(table["step_time_s"][0], rel=1e-12)
