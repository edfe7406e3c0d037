"""Specs -> plain dicts with SI, unit-suffixed keys (for ``deepflow show`` and JSON)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

__all__ = ["resolved_scenario", "to_dict"]


def to_dict(spec: Any) -> Any:
    """Recursively turn a spec dataclass into JSON-ready data; keys are the SI field names."""
    if dataclasses.is_dataclass(spec) and not isinstance(spec, type):
        out: dict[str, Any] = {}
        for f in dataclasses.fields(spec):
            out[f.name] = to_dict(getattr(spec, f.name))
        return out
    if isinstance(spec, Mapping):
        return {str(k): to_dict(v) for k, v in spec.items()}
    if isinstance(spec, tuple | list):
        return [to_dict(v) for v in spec]
    if isinstance(spec, float):
        # 12 significant digits: hides unit-conversion noise (5 µs -> 4.9999999999999996e-06).
        return float(f"{spec:.12g}")
    return spec


def resolved_scenario(scenario: Any) -> dict[str, Any]:
    """The resolved scenario as ``deepflow show`` prints it, with derived system totals."""
    data = to_dict(scenario)
    if scenario.framework is not None:  # its switches as the mapping they set
        data["framework"]["mapping"] = dict(scenario.framework.mapping)
        data["framework"]["sources"] = list(scenario.framework.sources)
    data["derived"] = {"num_devices": scenario.system.num_devices}
    return data
