"""The DeepFlow paper's technology-node scaling rule, applied to technology presets.

A technology preset may say ``scale_from: {base: NAME, steps: N}``: it starts from preset
``NAME`` and applies the rule N times, then its own keys override the result.

Source: nanocad-lab/DeepFlow ``case_study/arch_search2/tech-node-scaling.py`` and
``case_study/perf_model/energy_per_flop.py`` (docs/model.md §A1.5,
docs/model.md §B3.7): per node step V_n ×0.9, MCU and SRAM-bit area ×0.67, MCU power
and SRAM energy/bit ×0.54 ("assuming freq. does not scale"), DRAM-controller area ×0.9.
The fact sheet shows where real nodes depart from it (SRAM ×0.67 is too optimistic below
7 nm, ×0.54 energy is more aggressive than foundry claims); the per-node presets in
``configs/technologies/`` use the sourced values instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["CROSSFLOW_RULE", "apply_scaling"]

#: technology kind -> list of (dotted YAML key, factor per node step).
CROSSFLOW_RULE: Mapping[str, tuple[tuple[str, float], ...]] = {
    "logic": (
        ("nominal_voltage_V", 0.9),
        ("mcu_area_mm2", 0.67),
        ("mcu_nominal_power_W", 0.54),
        ("sram.l2.area_per_bit_mm2", 0.67),
        ("sram.l1.area_per_bit_mm2", 0.67),
        ("sram.register_file.area_per_bit_mm2", 0.67),
        # the launcher scales each SRAM level's controller_area_per_link with its bits
        # (helper/perf_model_scripts/energy_per_flop.py, the loop over SRAM-L2/L1/R)
        ("sram.l2.controller_area_per_bank_per_sm_mm2", 0.67),
        ("sram.l2.energy_per_bit_fJ", 0.54),
        ("sram.l1.energy_per_bit_fJ", 0.54),
        ("sram.register_file.energy_per_bit_fJ", 0.54),
    ),
    "dram": (("controller_area_mm2", 0.9),),
}


def apply_scaling(raw: Mapping[str, Any], kind: str, steps: int) -> dict[str, Any]:
    """Apply the CrossFlow per-node rule ``steps`` times to a raw (YAML-keyed) technology.

    Args:
        raw: a technology preset as parsed YAML (units as in its keys).
        kind: ``logic`` or ``dram``; other kinds have no rule and are returned unchanged.
        steps: number of node steps (≥ 0).

    Returns:
        A new raw mapping; keys absent from ``raw`` are left absent.
    """
    out: dict[str, Any] = _copy(raw)
    for dotted, factor in CROSSFLOW_RULE.get(kind, ()):
        *parents, last = dotted.split(".")
        node: Any = out
        for p in parents:
            node = node.get(p) if isinstance(node, dict) else None
        if isinstance(node, dict) and isinstance(node.get(last), int | float):
            node[last] = node[last] * factor**steps
    return out


def _copy(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _copy(v) for k, v in value.items()}
    return value
