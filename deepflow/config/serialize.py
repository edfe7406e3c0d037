"""Specs -> plain dicts with SI, unit-suffixed keys (for ``deepflow show`` and JSON)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

__all__ = ["resolved_scenario", "scenario_yaml", "to_dict", "to_yaml_keys"]


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


def to_yaml_keys(spec: Any, *, omit_defaults: bool = False) -> Any:
    """A spec dataclass as the YAML it loads from: YAML keys in their units (``80 GiB`` ->
    ``hbm_capacity_GiB: 80.0``), nested specs (device, network, model, technologies) inline.

    Names given by presets (``name``) and the scenario's ``source`` are left out, so the
    result is what ``deepflow evaluate`` reads (:func:`scenario_yaml`). ``omit_defaults``
    also leaves out every key at its default (the loader gives it back), as a spec written
    out whole must: a default can be a value its YAML key does not take (an empty
    description, a head width of 0 for "hidden / heads").
    """
    if not (dataclasses.is_dataclass(spec) and not isinstance(spec, type)):
        return spec
    out: dict[str, Any] = {}
    for f in dataclasses.fields(spec):
        value = getattr(spec, f.name)
        if "yaml" not in f.metadata:
            if dataclasses.is_dataclass(value):  # device, network, model, technology
                out[f.name] = to_yaml_keys(value, omit_defaults=omit_defaults)
            continue
        if isinstance(value, tuple | list | Mapping) and not value:  # an empty default
            continue
        if omit_defaults and f.default is not dataclasses.MISSING and value == f.default:
            continue
        out[f.metadata["yaml"]] = _in_yaml_unit(value, float(f.metadata["scale"]))
    return out


def _in_yaml_unit(value: Any, scale: float) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return to_yaml_keys(value)
    if isinstance(value, bool) or isinstance(value, str) or value is None:
        return value
    if isinstance(value, int):
        return value // int(scale) if scale != 1 else value
    if isinstance(value, float):
        return value / scale if scale != 1 else value
    if isinstance(value, Mapping):
        return {str(k): _in_yaml_unit(v, scale) for k, v in value.items()}
    if isinstance(value, tuple | list):
        return [_in_yaml_unit(v, scale) for v in value]
    return value


def scenario_yaml(scenario: Any) -> dict[str, Any]:
    """A resolved scenario as a scenario YAML mapping that ``deepflow evaluate`` reads back
    into the same scenario: the device, network and model by preset name where they are the
    preset, else as ``{base: PRESET, <the keys that differ>}`` (a network's calibration is
    its base preset's), else written out inline; technologies likewise. Keys at their
    default are left out."""
    from deepflow.config.loader import load_device, load_model, load_network

    system, workload = scenario.system, scenario.workload
    # the keys at their default are left to the loader (a file holds what the scenario sets)
    data: dict[str, Any] = {k: to_yaml_keys(getattr(scenario, k), omit_defaults=True)
                            for k in ("system", "workload", "mapping")}  # fmt: skip
    data["system"]["device"] = _ref(system.device, "devices", load_device)
    data["system"]["network"] = _ref(system.network, "networks", load_network)
    data["workload"]["model"] = _ref(workload.model, "models", load_model)
    return data


#: Design-mode keys that name technology presets.
_TECH_REFS = ("technology", "dram_technology", "scale_up_link", "scale_out_link")


def _ref(spec: Any, kind: str, loader: Any) -> Any:
    """A preset name, ``{base: NAME, <differing keys>}``, or the full mapping."""
    from deepflow.config.loader import load_technology, preset_path
    from deepflow.errors import ConfigError

    full = to_yaml_keys(spec)
    for key in _TECH_REFS:
        tech = getattr(spec, key, None)
        if key in full and tech is not None:
            full[key] = _ref(tech, "technologies", load_technology)
    base = str(getattr(spec, "name", "")).split("+", 1)[0]
    if not base or preset_path(kind, base) is None:
        # written out whole: the keys at their default left to the loader
        inline = to_yaml_keys(spec, omit_defaults=True)
        return {k: full[k] for k in full if k in inline or k in _TECH_REFS}
    try:
        preset = loader(base)
    except ConfigError:  # pragma: no cover - a preset that no longer loads
        return full
    if dataclasses.replace(preset, name=spec.name) == spec:
        return base
    diff = _differences(full, _ref_keys(preset))
    return {"base": base, **diff}


def _ref_keys(preset: Any) -> dict[str, Any]:
    from deepflow.config.loader import load_technology

    full = to_yaml_keys(preset)
    for key in _TECH_REFS:
        tech = getattr(preset, key, None)
        if key in full and tech is not None:
            full[key] = _ref(tech, "technologies", load_technology)
    return full


def _differences(value: dict[str, Any], base: dict[str, Any]) -> dict[str, Any]:
    """The keys of ``value`` that differ from ``base`` (nested mappings: only what differs;
    a technology given by name or inline replaces the base's whole)."""
    out: dict[str, Any] = {}
    for k, v in value.items():
        b = base.get(k)
        if v == b:
            continue
        if isinstance(v, dict) and isinstance(b, dict) and k not in _TECH_REFS:
            out[k] = _differences(v, b)
        else:
            out[k] = v
    return out
