"""Budgets -> device: the CrossFlow V100 reproduction, A100/H100-like designs, properties."""

from __future__ import annotations

import itertools
import json
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from deepflow.cli import app
from deepflow.config import DesignDeviceSpec, LogicTechSpec, load_device, load_technology
from deepflow.oracle.hardware import DESIGN_COLUMNS, derive, derive_one, design_table
from tests.conftest import REPO


def _v100() -> DesignDeviceSpec:
    spec = load_device("v100-crossflow")
    assert isinstance(spec, DesignDeviceSpec)
    return spec


# docs/model.md §B3.6b (and golden lstm_v100_single.json): the V100 from budgets.
V100_GOLDEN = {
    "num_mcus": 643,
    "num_sms": 80,
    "core_voltage_V": 0.868,
    "clock_Hz": 1.519e9,
    "peak_flops_fp16": 125.0e12,
    "l2_capacity_B": 6 * 2**20,
    "hbm_num_stacks": 4,
    "hbm_capacity_B": 16 * 2**30,
    "dram_voltage_V": 1.438,
    "dram_pin_rate_bps": 1.939e9,
    "hbm_bandwidth_Bps": 993e9,
    "scale_out_num_wires": 1141,
    "scale_out_bandwidth_Bps": 51.6e9,
    # more digits from the golden JSON
    "l2_bandwidth_Bps": 2.307e12,
    "l1_capacity_B": 10 * 2**20,
    "register_file_capacity_B": 21004288,
    "register_file_bandwidth_Bps": 1.030e14,
    "energy_per_flop_J": 0.899e-12,
}


@pytest.mark.parametrize(("name", "golden"), V100_GOLDEN.items())
def test_v100_from_budgets_reproduces_crossflow(name: str, golden: float) -> None:
    d = derive_one(_v100())
    assert d[name] == pytest.approx(golden, rel=0.005)


def test_v100_design_is_feasible_and_within_budgets() -> None:
    d = derive_one(_v100())
    assert d["feasible"] == 1.0
    assert d["area_excess_mm2"] == pytest.approx(-15.0)  # 815 − Σ area budgets (800.0 mm²)
    assert d["power_excess_W"] == pytest.approx(287.445 - 300)
    assert d["power_W"] <= d["tdp_W"]
    assert d["die_cost_usd"] > 0 and d["device_cost_usd"] > d["die_cost_usd"]


def test_v100_scale_out_link_sits_on_the_voltage_floor() -> None:
    # CrossFlow HEAD leaves the link at V = 0.4806 V below V_min = 0.85 V (reference §3.6b);
    # we report the floor voltage and the same clock (power = budget), so bandwidth agrees.
    d = derive_one(_v100())
    assert d["scale_out_voltage_V"] == pytest.approx(0.85)
    assert d["scale_out_power_W"] == pytest.approx(2.805)
    assert d["scale_out_rate_bps"] == pytest.approx(0.377e9, rel=0.005)


@pytest.mark.parametrize(
    ("preset", "peak_bf16", "hbm_Bps"),
    [
        ("a100-like-7nm", 312e12, 2039e9),  # A100 SXM4 80GB datasheet [A100]
        ("h100-like-4nm", 989.4e12, 3350e9),  # H100 SXM5 datasheet [H100]
    ],
)
def test_modern_designs_land_near_their_datasheets(
    preset: str, peak_bf16: float, hbm_Bps: float
) -> None:
    spec = load_device(preset)
    assert isinstance(spec, DesignDeviceSpec)
    d = derive_one(spec)
    assert d["peak_flops_bf16"] == pytest.approx(peak_bf16, rel=0.10)
    assert d["hbm_bandwidth_Bps"] == pytest.approx(hbm_Bps, rel=0.10)
    assert d["feasible"] == 1.0


def test_show_json_prints_derived_capabilities_area_and_power() -> None:
    result = CliRunner().invoke(
        app, ["show", str(REPO / "configs/scenarios/lstm-v100-crossflow.yaml"), "--json"]
    )
    assert result.exit_code == 0, result.stderr
    device = json.loads(result.stdout)["derived"]["device"]
    assert device["mode"] == "design"
    assert device["peak_flops"]["fp16"] == pytest.approx(125.0e12, rel=0.005)
    assert device["num_sms"] == 80
    assert device["area_mm2"] == 815
    assert device["power_W"] == pytest.approx(287.445)
    assert device["constraints"]["feasible"] is True


def test_batch_equals_loop_of_singles() -> None:
    specs = [load_device(n) for n in ("v100-crossflow", "a100-like-7nm", "h100-like-4nm")]
    designs = [s for s in specs if isinstance(s, DesignDeviceSpec)]
    batch = derive(design_table(designs))
    for i, spec in enumerate(designs):
        single = derive_one(spec)
        for name, value in single.items():
            assert batch[name][i] == value, name


# ------------------------------------------------------------------------------ properties
def _base_table(n: int) -> dict[str, np.ndarray]:
    spec = load_device("h100-like-4nm")
    assert isinstance(spec, DesignDeviceSpec)
    one = design_table([spec])
    return {c: np.repeat(one[c], n) for c in DESIGN_COLUMNS}


def _random_budgets(rng: np.random.Generator, n: int) -> dict[str, np.ndarray]:
    t = _base_table(n)
    t["die_area_mm2"] = rng.uniform(50, 900, n)
    t["package_area_mm2"] = t["die_area_mm2"] + rng.uniform(0, 2000, n)
    t["tdp_W"] = rng.uniform(10, 1500, n)
    for part in ("core", "l2", "l1", "register_file", "memory_controller", "scale_up", "scale_out"):
        t[f"area_{part}_mm2"] = rng.uniform(0, 1, n) * t["die_area_mm2"] / 2
    for part in ("core", "dram", "l2", "l1", "register_file", "scale_up", "scale_out"):
        t[f"power_{part}_W"] = rng.uniform(0, 1, n) * t["tdp_W"] / 2
    for part in ("dram", "scale_up", "scale_out"):
        t[f"perimeter_{part}"] = rng.uniform(0, 0.6, n)
    return t


def test_no_nan_inf_or_negative_over_1e5_random_budgets() -> None:
    out = derive(_random_budgets(np.random.default_rng(0), 100_000))
    constraint = ("area_excess_mm2", "power_excess_W", "perimeter_excess", "reticle_excess_mm2")
    for name, values in out.items():
        assert np.isfinite(values).all(), name
        if name not in constraint:
            assert (values >= 0).all(), name


def _grow(t: dict[str, Any], column: str, factor: float) -> dict[str, Any]:
    grown = dict(t)
    grown[column] = t[column] * factor
    return grown


@given(seed=st.integers(0, 2**32 - 1), factor=st.floats(1.0, 10.0))
@settings(max_examples=40, deadline=None)
def test_more_power_never_lowers_clock_or_bandwidth(seed: int, factor: float) -> None:
    t = _random_budgets(np.random.default_rng(seed), 64)
    pairs = {
        "power_core_W": ["clock_Hz", "peak_flops_bf16"],
        "power_dram_W": ["hbm_bandwidth_Bps"],
        "power_l2_W": ["l2_bandwidth_Bps"],
        "power_l1_W": ["l1_bandwidth_Bps"],
        "power_register_file_W": ["register_file_bandwidth_Bps"],
        "power_scale_up_W": ["scale_up_bandwidth_Bps"],
        "power_scale_out_W": ["scale_out_bandwidth_Bps"],
    }
    before = derive(t)
    for column, outputs in pairs.items():
        after = derive(_grow(t, column, factor))
        for name in outputs:
            assert (after[name] >= before[name] * (1 - 1e-12)).all(), (column, name)


@given(seed=st.integers(0, 2**32 - 1), factor=st.floats(1.0, 10.0))
@settings(max_examples=40, deadline=None)
def test_more_area_never_fewer_mcus_or_less_sram(seed: int, factor: float) -> None:
    t = _random_budgets(np.random.default_rng(seed), 64)
    pairs = {
        "area_core_mm2": ["num_mcus", "num_sms"],
        "area_l2_mm2": ["l2_capacity_B"],
        "area_l1_mm2": ["l1_capacity_B"],
        "area_register_file_mm2": ["register_file_capacity_B"],
        "area_memory_controller_mm2": ["hbm_num_stacks", "hbm_capacity_B"],
        "area_scale_out_mm2": ["scale_out_num_wires"],
    }
    before = derive(t)
    for column, outputs in pairs.items():
        after = derive(_grow(t, column, factor))
        for name in outputs:
            assert (after[name] >= before[name]).all(), (column, name)


FAMILIES = {
    "sourced": ["n12", "n7", "n5", "n3", "n2"],
    "crossflow-rule": [
        "crossflow-12nm", "crossflow-7nm", "crossflow-5nm", "crossflow-3nm", "crossflow-2nm"
    ],
}  # fmt: skip


@pytest.mark.parametrize("family", FAMILIES.values(), ids=FAMILIES.keys())
@given(power_ratio=st.floats(0.02, 4.0))
@settings(max_examples=50, deadline=None)
def test_a_newer_node_never_raises_energy_per_flop(family: list[str], power_ratio: float) -> None:
    """Same die, same core power relative to each node's nominal: energy/FLOP falls node by node."""
    base = load_device("h100-like-4nm")
    assert isinstance(base, DesignDeviceSpec)
    energies = []
    for node in family:
        tech = load_technology(node)
        assert isinstance(tech, LogicTechSpec)
        mcus = int(base.area_mm2.core / tech.mcu_area_mm2)
        power = replace(base.power_W, core=power_ratio * mcus * tech.mcu_nominal_power_W)
        energies.append(
            derive_one(replace(base, technology=tech, power_W=power))["energy_per_flop_J"]
        )
    assert all(newer <= older for older, newer in itertools.pairwise(energies))


def test_a_power_limit_lowers_the_clock_along_the_nodes_v_f_p_law() -> None:
    from deepflow.oracle.hardware import device_caps, power_limit_clock_ratio
    from deepflow.oracle.technology import operating_point

    h100 = load_device("h100-sxm5-80gb")
    assert not isinstance(h100, DesignDeviceSpec)
    full = device_caps(h100, "bf16")
    assert power_limit_clock_ratio(h100, 0.09) == 1.0
    assert power_limit_clock_ratio(replace(h100, power_limit_W=900.0), 0.09) == 1.0
    capped = replace(h100, power_limit_W=500.0)
    ratio = power_limit_clock_ratio(capped, full.idle_power_fraction)
    # by hand: dynamic budget (500 - 63) / (700 - 63) on n5's V-f-P law (V_n 0.75, V_t 0.2)
    n5 = load_technology("n5")
    assert isinstance(n5, LogicTechSpec)
    r = (500 - 0.09 * 700) / (700 - 0.09 * 700)
    expect = operating_point(r, 1.0, 1.0, n5.nominal_voltage_V, n5.threshold_voltage_V,
                             n5.margin_voltage_V)[1]  # fmt: skip
    assert ratio == pytest.approx(float(expect), rel=1e-12)
    assert 0.80 < ratio < 0.88
    caps = device_caps(capped, "bf16")
    assert caps.vector_flops == pytest.approx(full.vector_flops * ratio)
    assert caps.l2_bandwidth_Bps == pytest.approx(full.l2_bandwidth_Bps * ratio)
    assert caps.hbm_bandwidth_Bps == full.hbm_bandwidth_Bps  # HBM keeps its clock
    assert capped.power_W == 500.0
    # lower limits, lower clocks
    ratios = [power_limit_clock_ratio(replace(h100, power_limit_W=w), 0.09)
              for w in (700, 600, 500, 400, 300, 150)]  # fmt: skip
    assert ratios == sorted(ratios, reverse=True)


def test_the_matrix_units_under_a_power_limit_run_at_the_rate_their_dynamic_power_allows() -> None:
    """A large GEMM under a limit sits on the voltage floor, linear in the dynamic power
    (docs/model.md §A6.2): rate / TDP rate = min(1, (limit - static) / (P_full - static)), P_full
    the family's fitted full-clock power (Hopper BF16 0.972, FP8 0.900 of the TDP; FBGEMM PR
    #2546 at 500 W); 1 at and above the TDP, never rising as the limit falls; FP8, which draws
    less at full clock, keeps more of its rate; a family without a fit is power-bound (1)."""
    from deepflow.config.calibration import current_calibration
    from deepflow.oracle.hardware import (
        device_caps,
        power_limit_clock_ratio,
        power_limit_matrix_ratio,
    )

    h100 = load_device("h100-sxm5-80gb")
    assert not isinstance(h100, DesignDeviceSpec)
    cal = current_calibration().kernel("hopper")
    assert (cal.gemm_full_clock_power_for("bf16"), cal.gemm_full_clock_power_for("fp8")) == (
        0.972, 0.900)  # fmt: skip
    assert cal.gemm_full_clock_power_for("fp16") == 0.972  # 16-bit formats share it
    assert cal.gemm_full_clock_power_for("int8") == 0.900  # as FP8: the same low-bit units
    assert current_calibration().kernel("ampere").gemm_full_clock_power_for("bf16") == 1.0
    capped = replace(h100, power_limit_W=500.0)
    static = 0.09 * 700
    for precision, full_power in (("bf16", 0.972), ("fp8", 0.900)):
        ratio = power_limit_matrix_ratio(capped, 0.09, full_power)
        assert ratio == pytest.approx((500 - static) / (full_power * 700 - static), rel=1e-12)
        at_tdp, capped_caps = device_caps(h100, precision), device_caps(capped, precision)
        assert capped_caps.peak_flops == pytest.approx(at_tdp.peak_flops * ratio, rel=1e-12)
        assert capped_caps.peak_flops_16bit == pytest.approx(
            at_tdp.peak_flops_16bit * power_limit_matrix_ratio(capped, 0.09, 0.972), rel=1e-12
        )
    bf16 = power_limit_matrix_ratio(capped, 0.09, 0.972)
    fp8 = power_limit_matrix_ratio(capped, 0.09, 0.900)
    assert 0.70 < bf16 < fp8 < power_limit_clock_ratio(capped, 0.09)
    assert power_limit_matrix_ratio(h100, 0.09, 0.9) == 1.0
    assert power_limit_matrix_ratio(replace(h100, power_limit_W=650.0), 0.09, 0.9) == 1.0
    # power-bound at the TDP (1 and above): linear in the dynamic budget
    assert power_limit_matrix_ratio(capped, 0.09, 1.3) == pytest.approx(437 / 637, rel=1e-12)
    ratios = [power_limit_matrix_ratio(replace(h100, power_limit_W=w), 0.09, 0.9)
              for w in (700, 650, 600, 500, 400, 200, 50)]  # fmt: skip
    assert ratios == sorted(ratios, reverse=True) and ratios[-1] == 0.0
