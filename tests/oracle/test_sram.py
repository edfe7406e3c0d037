"""On-chip SRAM budgets reach the kernel model: tile fit, occupancy, register-file operand
bandwidth and the ``sram_excess_B`` constraint (docs/model.md §C6.1a)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deepflow.config import DesignDeviceSpec, builtin_config_dir, load_device, load_scenario
from deepflow.config.loader import list_presets
from deepflow.oracle.evaluate import evaluate_one, evaluate_table
from deepflow.oracle.hardware import (
    DeviceCaps,
    derive,
    derived_caps_fields,
    design_table,
    device_caps,
)
from deepflow.oracle.kernels import BOUND_LEVELS, TILE_SHAPES, gemm, sram_excess_B

# One shape per regime: compute-bound square, skinny (HBM), mid-size (L2 reuse matters).
SHAPES = ((8192, 8192, 8192), (524288, 8, 128), (4096, 12288, 4096), (2048, 2048, 2048))
# Budget columns of each SRAM level, shrunk from the V100 budgets towards zero.
BUDGETS = (
    "area_register_file_mm2",
    "power_register_file_W",
    "area_l1_mm2",
    "power_l1_W",
    "area_l2_mm2",
    "power_l2_W",
)
FACTORS = (1.0, 0.5, 0.25, 0.1, 0.05, 0.02, 0.01, 0.003, 0.001)


def _v100() -> DesignDeviceSpec:
    spec = load_device("v100-crossflow")
    assert isinstance(spec, DesignDeviceSpec)
    return spec


def _caps_with(column: str, values: np.ndarray) -> DeviceCaps:
    """The V100 design with one budget column replaced by ``values`` (a batch of designs)."""
    spec = _v100()
    base = design_table([spec])
    table = {c: np.broadcast_to(base[c], values.shape) for c in base}
    table[column] = values
    scalar = device_caps(spec, "fp16")
    return dataclasses.replace(scalar, **derived_caps_fields(derive(table), "fp16"))


@pytest.mark.parametrize("column", BUDGETS)
@pytest.mark.parametrize("shape", SHAPES)
def test_shrinking_an_sram_budget_never_speeds_a_gemm_up(
    column: str, shape: tuple[int, int, int]
) -> None:
    base = float(design_table([_v100()])[column][0])
    caps = _caps_with(column, base * np.array(FACTORS))
    times = gemm(caps, *shape, detail=False)["time_s"]
    assert np.all(np.diff(times) >= -1e-12 * times[:-1]), times


@pytest.mark.parametrize("column", BUDGETS)
def test_shrinking_an_sram_budget_eventually_slows_a_gemm_or_makes_it_infeasible(
    column: str,
) -> None:
    base = float(design_table([_v100()])[column][0])
    caps = _caps_with(column, base * np.array(FACTORS))
    # L2 capacity matters where the tiles alone reuse too little: a narrow output (n = 128)
    # whose B operand (4 MiB) stays in a 6 MiB L2 but is re-read per block without one.
    shape = (16384, 128, 16384) if column == "area_l2_mm2" else SHAPES[0]
    times = gemm(caps, *shape, detail=False)["time_s"]
    excess = sram_excess_B(caps)
    assert times[-1] > 1.25 * times[0] or excess[-1] > 0, (times, excess)


def test_a_design_without_register_file_is_infeasible_and_slower() -> None:
    scenario = load_scenario(builtin_config_dir() / "scenarios/lstm-v100-crossflow.yaml")
    device = scenario.system.device
    assert isinstance(device, DesignDeviceSpec)
    no_rf = dataclasses.replace(
        device, area_mm2=dataclasses.replace(device.area_mm2, register_file=0.0)
    )
    stripped = dataclasses.replace(
        scenario, system=dataclasses.replace(scenario.system, device=no_rf)
    )
    before, after = evaluate_one(scenario), evaluate_one(stripped)
    assert before["sram_excess_B"] <= 0
    assert after["sram_excess_B"] == 8 * 256 * 4  # the 8×256 tile's accumulators, no RF
    assert not after["feasible"]
    assert after["step_time_s"] > before["step_time_s"]
    table = evaluate_table(scenario, {"area_register_file_mm2": np.array([17.93, 0.0])})
    assert table["sram_excess_B"][0] <= 0 < table["sram_excess_B"][1]
    assert not table["feasible"][1]
    assert table["step_time_s"][1] == pytest.approx(after["step_time_s"], rel=1e-12)


def test_an_l1_too_small_for_the_smallest_tile_is_infeasible() -> None:
    caps = _caps_with("area_l1_mm2", np.array([8.3945, 1e-3]))
    excess = sram_excess_B(caps)
    assert excess[0] <= 0 < excess[1]
    # the smallest need: a 16-column tile's fp16 k-slices, (256 + 16) × 32 × 2 stages × 2 B
    smallest = min((tm + tn) * 32 * 2 * 2 for tm, tn in TILE_SHAPES)
    assert excess[1] == pytest.approx(smallest - caps.l1_capacity_per_sm_B[1])  # type: ignore[index]


@pytest.mark.parametrize("name", list_presets("devices"))
def test_every_shipped_device_runs_every_tile_class(name: str) -> None:
    device = load_device(name)
    for precision in device.precisions:
        assert float(sram_excess_B(device_caps(device, precision))) <= 0, (name, precision)


def test_occupancy_falls_as_the_register_file_shrinks() -> None:
    caps = _caps_with("area_register_file_mm2", np.array([17.93, 2.0]))
    r = gemm(caps, 8192, 8192, 8192)
    assert r["ctas_per_sm"][1] <= r["ctas_per_sm"][0]
    assert r["tile_m"][1] * r["tile_n"][1] < r["tile_m"][0] * r["tile_n"][0]
    assert r["l2_bytes"][1] > r["l2_bytes"][0]  # smaller tiles: less reuse, more L2 traffic


def test_register_file_bandwidth_bounds_the_gemm() -> None:
    caps = _caps_with("power_register_file_W", np.array([90.66, 0.5]))
    r = gemm(caps, 8192, 8192, 8192)
    assert r["bound"][1] == 4  # BOUND_LEVELS[4] == "register_file"
    # operand bytes: T_M·T_N·k·(1/8 + 1/16) fp16 elements per tile (PTX mma.m16n8k16)
    flops = 2 * 8192**3
    assert r["register_file_bytes"][1] == pytest.approx(flops / 2 * (1 / 8 + 1 / 16) * 2)
    assert r["time_s"][1] >= r["register_file_bytes"][1] / caps.register_file_bandwidth_Bps[1]  # type: ignore[index]


@given(
    column=st.sampled_from(BUDGETS),
    factor=st.floats(0.001, 1.0),
    shape=st.sampled_from(SHAPES),
)
@settings(max_examples=60, deadline=None)
def test_less_sram_budget_is_never_faster(
    column: str, factor: float, shape: tuple[int, int, int]
) -> None:
    base = float(design_table([_v100()])[column][0])
    caps = _caps_with(column, np.array([base, base * factor]))
    t = gemm(caps, *shape, detail=False)["time_s"]
    assert t[1] >= t[0] * (1 - 1e-12)


def _llama_on_h100_like():  # type: ignore[no-untyped-def]
    from deepflow.config.loader import scenario_from_mapping

    raw = {
        "system": {"device": "h100-like-4nm", "network": "dgx-h100", "devices_per_node": 8,
                   "num_nodes": 1},
        "workload": {"model": "llama3-8b", "global_batch_size": 64, "precision": "bf16"},
        "mapping": {"data_parallel": 8, "micro_batch_size": 1, "activation_recompute": "full",
                    "zero_stage": 3, "flash_attention": True},
    }  # fmt: skip
    return scenario_from_mapping(raw, file="<test>", base_dir=builtin_config_dir())


def test_flash_attention_slows_down_as_the_shared_memory_shrinks() -> None:
    scenario = _llama_on_h100_like()
    base = float(design_table([scenario.system.device])["area_l1_mm2"][0])
    table = evaluate_table(scenario, {"area_l1_mm2": base * np.array([1.0, 0.25, 0.05, 0.01])})
    attention = table["breakdown_attention_s"]
    assert np.all(np.diff(attention) >= 0), attention
    assert attention[-1] > 1.5 * attention[0]
    assert np.all(np.diff(table["step_time_s"]) >= 0)


def test_evaluate_says_when_the_sram_is_too_small(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from typer.testing import CliRunner

    from deepflow.cli import app

    scenario = tmp_path / "no-rf.yaml"
    scenario.write_text(
        "system:\n"
        "  device: {base: v100-crossflow, area_mm2: {register_file: 0.0}}\n"
        "  network: dgx-v100\n  devices_per_node: 1\n  num_nodes: 1\n"
        "workload: {model: gemm-example, global_batch_size: 1, precision: fp16}\n"
        "mapping: {}\n",
        encoding="utf-8",
    )
    result = CliRunner().invoke(app, ["evaluate", str(scenario)])
    assert result.exit_code == 0, result.output
    assert "on-chip SRAM too small: the smallest GEMM tile needs 8 KiB more per SM" in (
        " ".join(result.output.split())
    )


def test_a_scratchpad_holds_a_large_block_where_a_register_file_does_not() -> None:
    """A TPU v5e's VMEM holds the fp32 accumulators of a 512 × 512 block, so its 8192³ bf16
    matmul runs with that block and is compute-bound (the JAX Pallas TPU guide's large
    blocks); an H100's register file cannot hold them and a GPU-sized tile wins there."""
    tpu = gemm(device_caps(load_device("tpu-v5e"), "bf16"), 8192, 8192, 8192)
    assert (float(tpu["tile_m"]), float(tpu["tile_n"])) == (512.0, 512.0)
    assert BOUND_LEVELS[int(tpu["bound"])] == "compute"
    h100 = gemm(device_caps(load_device("h100-sxm5-80gb"), "bf16"), 8192, 8192, 8192)
    assert float(h100["tile_m"] * h100["tile_n"]) <= 256 * 256
