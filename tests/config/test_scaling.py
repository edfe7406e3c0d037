"""The CrossFlow node-scaling rule (docs/model.md §A1.5)."""

from __future__ import annotations

import pytest

from deepflow.config.loader import builtin_config_dir, load_yaml
from deepflow.config.scaling import apply_scaling


def test_each_step_shrinks_the_l2_bits_and_their_controllers_alike() -> None:
    # The original's launcher (helper/perf_model_scripts/energy_per_flop.py) scales each SRAM
    # level's area_per_bit and controller_area_per_link by the same 0.67 per step; without
    # the controllers the scaled V100's L2 fell from 6.0 to 0.56 MiB by 1 nm
    raw = load_yaml(builtin_config_dir() / "technologies" / "crossflow-12nm.yaml")
    scaled = apply_scaling(raw, "logic", 6)
    l2, l2_scaled = raw["sram"]["l2"], scaled["sram"]["l2"]
    for key in ("area_per_bit_mm2", "controller_area_per_bank_per_sm_mm2"):
        assert l2_scaled[key] == pytest.approx(l2[key] * 0.67**6)
    assert raw["sram"]["l2"]["controller_area_per_bank_per_sm_mm2"] == 0.004  # not mutated
