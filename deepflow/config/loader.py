"""YAML files and presets -> validated specs.

Presets are looked up by name in ``<kind>/<name>.yaml`` under each directory of
``$DEEPFLOW_CONFIG_PATH`` (``os.pathsep``-separated, first match wins) and then in the built-in
presets: ``deepflow/configs/`` inside an installed package (the build copies the repository's
``configs/`` there), else the checkout's ``configs/`` (an editable install). A reference
ending in ``.yaml`` is a path relative to the file that names it. An inline mapping may start
from a preset with ``base: NAME`` and override keys.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from deepflow.config._schema import (
    Ctx,
    build,
    check_keys,
    describe_value,
    require_mapping,
    suggest,
    yaml_keys,
)
from deepflow.config.mapping import (
    SERVING_TP_RULE,
    STRUCTURAL,
    expert_groups,
    expert_replicas,
    first_violation,
)
from deepflow.config.scaling import apply_scaling
from deepflow.config.specs import (
    DesignDeviceSpec,
    DeviceSpec,
    DramTechSpec,
    FrameworkSpec,
    GemmSpec,
    LinkTechSpec,
    LogicTechSpec,
    LstmSpec,
    MappingSpec,
    ModelSpec,
    NetworkSpec,
    Scenario,
    SystemSpec,
    TechSpec,
    TransformerSpec,
    WorkloadSpec,
)
from deepflow.errors import ConfigError

__all__ = [
    "PRESET_KINDS",
    "builtin_config_dir",
    "list_presets",
    "load_device",
    "load_framework",
    "load_model",
    "load_network",
    "load_scenario",
    "load_technology",
    "load_yaml",
    "preset_path",
    "read_yaml",
    "register_model_kind",
    "scenario_from_mapping",
]

PRESET_KINDS = ("devices", "networks", "models", "technologies", "frameworks", "scenarios",
                "spaces", "studies")  # fmt: skip
_KIND_NOUN = {
    "frameworks": "framework",
    "devices": "device",
    "networks": "network",
    "models": "model",
    "technologies": "technology",
}
TECH_CLASSES: dict[str, type[LogicTechSpec] | type[DramTechSpec] | type[LinkTechSpec]] = {
    "logic": LogicTechSpec,
    "dram": DramTechSpec,
    "link": LinkTechSpec,
}
#: design-mode keys that name technology presets, and the kind each must be.
DESIGN_REFS = {
    "technology": "logic",
    "dram_technology": "dram",
    "scale_up_link": "link",
    "scale_out_link": "link",
}
SCENARIO_KEYS = ("system", "workload", "mapping", "framework")
#: Keys of a framework profile (``configs/frameworks/NAME.yaml``).
FRAMEWORK_KEYS = ("description", "mapping", "sources")
SYSTEM_KEYS = ("device", "network", "devices_per_node", "num_nodes")
WORKLOAD_KEYS = ("model", "kind", "global_batch_size", "precision", "input_tokens",
                 "output_tokens", "kv_cache_precision", "batching", "arrivals", "request_rate",
                 "max_batch_size",
                 "max_num_tokens", "prompt_tokens_per_iteration", "kv_cache_reservation",
                 "caching_allocator",
                 "cuda_graph_padding", "decode_kv_reads", "first_token_from_decode",
                 "weight_scale_block",
                 "kv_cache_memory_fraction", "host_us_per_request",
                 "electricity_usd_per_kWh",
                 "amortization_years")  # fmt: skip
#: Model spec class per ``kind``; workload kinds registered with the oracle add theirs
#: (:func:`deepflow.oracle.workloads.register_workload`).
MODEL_CLASSES: dict[str, type[Any]] = {
    "transformer": TransformerSpec,
    "lstm": LstmSpec,
    "gemm": GemmSpec,
}


def register_model_kind(kind: str, spec_class: type[Any]) -> None:
    """Make ``workload.model`` of ``kind`` load into ``spec_class`` (a key()-declared
    frozen dataclass with a ``name`` field)."""
    MODEL_CLASSES[kind] = spec_class


#: libyaml's safe loader where PyYAML was built with it (about 10x faster), else PyYAML's own.
_SAFE_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _DuplicateKey(Exception):
    """A mapping names a key twice (PyYAML would silently keep the last)."""

    def __init__(self, key: object, line: int, first_line: int) -> None:
        super().__init__(key, line, first_line)
        self.key, self.line, self.first_line = key, line, first_line


def _unique_keys_loader(base: Any) -> Any:
    class Loader(base):
        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":  # '<<' merges may override
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.setdefault(key, key_node.start_mark.line)
                except TypeError:  # an unhashable key: PyYAML reports it
                    continue
                if first != key_node.start_mark.line:
                    raise _DuplicateKey(key, key_node.start_mark.line + 1, first + 1)
            return super().construct_mapping(node, deep=deep)

    return Loader


_UNIQUE_LOADER = _unique_keys_loader(_SAFE_LOADER)
_UNIQUE_PURE_LOADER = _unique_keys_loader(yaml.SafeLoader)


def parse_yaml(text: str, shown: str) -> Any:
    """Parse YAML text; ``shown`` names its file in messages.

    Raises:
        ConfigError: a YAML syntax error, or a key given twice in one mapping (YAML keeps the
            last silently: a second ``mapping:`` would replace the first).
    """
    try:
        try:
            return yaml.load(text, Loader=_UNIQUE_LOADER)
        except yaml.YAMLError:
            return _load_pure(text, shown)  # PyYAML's own loader words the error as always
    except _DuplicateKey as dup:
        raise ConfigError(
            f"{shown}: duplicate key {dup.key!r} at line {dup.line} (first given at line "
            f"{dup.first_line}); give each key once."
        ) from None


@functools.cache
def builtin_config_dir() -> Path:
    """The built-in presets: ``deepflow/configs/`` of an installed package (package data, read
    through :mod:`importlib.resources`), else the checkout's ``configs/`` next to the
    ``deepflow`` package (an editable install or a source tree on ``PYTHONPATH``)."""
    packaged = resources.files("deepflow").joinpath("configs")
    if isinstance(packaged, Path) and packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parents[2] / "configs"


def _search_dirs() -> list[Path]:
    extra = [Path(p) for p in os.environ.get("DEEPFLOW_CONFIG_PATH", "").split(os.pathsep) if p]
    return [*extra, builtin_config_dir()]


def list_presets(kind: str) -> list[str]:
    """Names of the presets of one kind (``devices``, ``networks``, ``models``, ...)."""
    names: set[str] = set()
    for root in _search_dirs():
        folder = root / kind
        if folder.is_dir():
            names.update(p.stem for p in folder.glob("*.yaml"))
    return sorted(names)


def preset_path(kind: str, name: str) -> Path | None:
    """The file of preset ``name`` of ``kind``, or None."""
    for root in _search_dirs():
        candidate = root / kind / f"{name}.yaml"
        if candidate.is_file():
            return candidate
    return None


def preset_file(kind: str, noun: str, path: str | Path) -> Path:
    """``path`` itself, or, for a bare name that is not a file, the preset of that name in
    ``configs/<kind>/``.

    Raises:
        ConfigError: neither a file nor a preset (lists the presets, with the closest).
    """
    from deepflow.config._schema import suggest

    p = Path(path)
    if p.exists() or str(path).endswith((".yaml", ".yml")):
        return p
    found = preset_path(kind, str(path))
    if found is None:
        names = list_presets(kind)
        near = suggest(str(path), names)
        hint = f"; did you mean '{near}'?" if near else "."
        raise ConfigError(
            f"{path}: no such file or {noun} preset{hint} Available: {', '.join(names)}."
        )
    return found


def _display(path: Path) -> str:
    """A path as shown in messages: relative to the working directory when inside it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def load_yaml(path: str | Path) -> Any:
    """Parse a YAML file (any top level; None for an empty file).

    Raises:
        ConfigError: missing file, a directory, an unreadable file or a YAML syntax error.
            The message starts with the file name.
    """
    p = Path(path)
    shown = str(path)
    if not p.exists():
        raise ConfigError(f"{shown}: no such file.")
    if p.is_dir():
        raise ConfigError(f"{shown}: is a directory, not a YAML file.")
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{shown}: cannot be read ({exc}).") from exc
    return parse_yaml(text, shown)


def _load_pure(text: str, shown: str) -> Any:
    """Parse with PyYAML's pure-Python safe loader, turning its error into a ConfigError."""
    try:
        return yaml.load(text, Loader=_UNIQUE_PURE_LOADER)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise ConfigError(f"{shown}: YAML syntax error{where}: {problem}.") from exc


def read_yaml(path: str | Path, *, what: str = "a YAML mapping") -> Mapping[str, Any]:
    """Read a YAML file whose top level must be a mapping.

    Raises:
        ConfigError: missing file, a directory, empty file, YAML syntax error, or a top level
            that is not a mapping. The message starts with the file name.
    """
    shown = str(path)
    data = load_yaml(path)
    if data is None:
        raise ConfigError(f"{shown}: file is empty; expected {what}.")
    if not isinstance(data, Mapping):
        raise ConfigError(f"{shown}: top level must be {what}; got {describe_value(data)}.")
    return data


def _deep_merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in override.items():
        if isinstance(v, Mapping) and isinstance(out.get(k), Mapping):
            out[k] = _deep_merge(out[k], v)
        else:
            out[k] = v
    return out


def _resolve(
    kind: str, value: object, ctx: Ctx, base_dir: Path
) -> tuple[Mapping[str, Any], Ctx, str]:
    """A reference (preset name, relative ``.yaml`` path or inline mapping) -> raw mapping.

    Returns the raw mapping, the context its keys are reported against, and a display name.
    """
    noun = _KIND_NOUN.get(kind, kind)
    if isinstance(value, str) and value.endswith((".yaml", ".yml")):
        path = base_dir / value
        if not path.is_file():
            raise ctx.error(f"refers to {value!r}, but {_display(path)} does not exist.")
        return read_yaml(path, what=f"a {noun} mapping"), Ctx(_display(path)), path.stem
    if isinstance(value, str):
        path_or_none = preset_path(kind, value)
        if path_or_none is None:
            names = list_presets(kind)
            near = suggest(value, names)
            hint = f"; did you mean '{near}'?" if near else "."
            raise ctx.error(
                f"names an unknown {noun} preset {value!r}{hint} Available: {', '.join(names)}."
            )
        return read_yaml(path_or_none, what=f"a {noun} mapping"), Ctx(_display(path_or_none)), value
    if isinstance(value, Mapping):
        if "base" not in value:
            return value, ctx, str(value.get("name", f"inline-{noun}"))
        base_raw, base_ctx, base_name = _resolve(kind, value["base"], ctx.child("base"), base_dir)
        override = {k: v for k, v in value.items() if k != "base"}
        # Validate the base on its own first, so its own errors name its own file.
        _validate_base(kind, base_raw, base_ctx, base_name, _file_dir(base_ctx, base_dir))
        return _deep_merge(base_raw, override), ctx, f"{base_name}+overrides"
    raise ctx.invalid(f"a {noun} preset name or a mapping", value)


def _framework_from_raw(raw: Mapping[str, Any], ctx: Ctx, name: str) -> FrameworkSpec:
    """A framework profile: its ``mapping`` sets only the knob table's framework switches; an
    inline profile may also give them at its top level, over its ``base``
    (``{base: nemo-24.07, tp_comm_overlap: false}``)."""
    from deepflow.config.mapping import KNOBS

    switches = [k.name for k in KNOBS if k.framework]
    check_keys(raw, (*FRAMEWORK_KEYS, *switches), ctx)
    mapping = {**require_mapping(raw.get("mapping") or {}, ctx.child("mapping")),
               **{k: v for k, v in raw.items() if k in switches}}  # fmt: skip
    check_keys(mapping, switches, ctx.child("mapping"))
    build(MappingSpec, mapping, ctx.child("mapping"))  # each value's type and range
    sources = raw.get("sources") or []
    if not isinstance(sources, list) or not all(isinstance(s, str) for s in sources):
        raise ctx.child("sources").invalid("a list of strings", sources)
    description = raw.get("description") or ""
    if not isinstance(description, str):
        raise ctx.child("description").invalid("a string", description)
    return FrameworkSpec(name=name, description=description, mapping=tuple(mapping.items()),
                         sources=tuple(sources))  # fmt: skip


def _validate_base(kind: str, raw: Mapping[str, Any], ctx: Ctx, name: str, base_dir: Path) -> None:
    if kind == "frameworks":
        _framework_from_raw(raw, ctx, name)
    elif kind == "devices":
        _device_from_raw(raw, ctx, name, base_dir)
    elif kind == "networks":
        _network_from_raw(raw, ctx, name)
    elif kind == "models":
        _model_from_raw(raw, ctx, name)


def _file_dir(ctx: Ctx, fallback: Path) -> Path:
    """Directory of the file a context points at (for relative references inside it)."""
    path = Path(ctx.file)
    return path.resolve().parent if path.is_file() else fallback


def _device_from_raw(
    raw: Mapping[str, Any], ctx: Ctx, name: str, base_dir: Path
) -> DeviceSpec | DesignDeviceSpec:
    mode = raw.get("mode", "spec")
    if mode == "spec":
        return build(DeviceSpec, raw, ctx, extra={"name": name})
    if mode != "design":
        raise ctx.child("mode").error(f"must be one of: spec, design; got {describe_value(mode)}.")
    check_keys(raw, [*yaml_keys(DesignDeviceSpec), *DESIGN_REFS], ctx)
    refs: dict[str, TechSpec | None] = {}
    for ref_key, tech_kind in DESIGN_REFS.items():
        value = raw.get(ref_key)
        if value is None:
            if ref_key in ("technology", "dram_technology"):
                raise ctx.child(ref_key).error(f"is required (a {tech_kind} technology preset).")
            refs[ref_key] = None
            continue
        refs[ref_key] = load_technology_ref(value, ctx.child(ref_key), base_dir, kind=tech_kind)
    rest = {k: v for k, v in raw.items() if k not in DESIGN_REFS}
    spec = build(DesignDeviceSpec, rest, ctx, extra={"name": name, **refs})
    for part in ("scale_up", "scale_out"):
        uses = getattr(spec.area_mm2, part) > 0 or getattr(spec.power_W, part) > 0
        if uses and refs[f"{part}_link"] is None:
            raise ctx.child(f"{part}_link").error(
                f"is required: area_mm2.{part} or power_W.{part} is > 0."
            )
    return spec


def load_technology_ref(
    value: object, ctx: Ctx, base_dir: Path, *, kind: str | None = None
) -> TechSpec:
    """A technology from a preset name, ``.yaml`` path or inline mapping.

    Presets may derive from another with ``scale_from: {base: NAME, steps: N}`` (the DeepFlow
    per-node scaling rule, :mod:`deepflow.config.scaling`), then override keys.
    """
    raw, rctx, name = _resolve("technologies", value, ctx, base_dir)
    tech_kind = raw.get("kind")
    if tech_kind not in TECH_CLASSES:
        raise rctx.child("kind").error(
            f"must be one of: logic, dram, link; got {describe_value(tech_kind)}."
        )
    if kind is not None and tech_kind != kind:
        raise ctx.error(f"must name a {kind} technology; {name!r} is a {tech_kind} technology.")
    if "scale_from" in raw:
        raw = _scaled_raw(raw, rctx, str(tech_kind), _file_dir(rctx, base_dir))
    return build(TECH_CLASSES[str(tech_kind)], raw, rctx, extra={"name": name})


def _scaled_raw(raw: Mapping[str, Any], ctx: Ctx, kind: str, base_dir: Path) -> dict[str, Any]:
    sctx = ctx.child("scale_from")
    spec = require_mapping(raw["scale_from"], sctx)
    check_keys(spec, ("base", "steps"), sctx)
    steps = spec.get("steps")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
        raise sctx.child("steps").invalid("an integer >= 0", steps)
    if not isinstance(spec.get("base"), str):
        raise sctx.child("base").invalid("a technology preset name", spec.get("base"))
    base_raw, base_ctx, _ = _resolve("technologies", spec["base"], sctx.child("base"), base_dir)
    if base_raw.get("kind") != kind:
        raise sctx.child("base").error(
            f"must be a {kind} technology; got {describe_value(base_raw.get('kind'))}."
        )
    if "scale_from" in base_raw:
        base_raw = _scaled_raw(base_raw, base_ctx, kind, _file_dir(base_ctx, base_dir))
    scaled = apply_scaling(base_raw, kind, steps)
    overrides = {k: v for k, v in raw.items() if k != "scale_from"}
    return _deep_merge(scaled, overrides)


def _network_from_raw(raw: Mapping[str, Any], ctx: Ctx, name: str) -> NetworkSpec:
    net = build(NetworkSpec, raw, ctx, extra={"name": name})
    for part in ("scale_up", "scale_out"):
        link = getattr(net, part)
        part_ctx = ctx.child(part)
        needs_shape = link.topology in ("torus-2d", "torus-3d", "mesh-2d")
        if needs_shape and link.shape:
            dims = {"torus-2d": 2, "torus-3d": 3, "mesh-2d": 2}[link.topology]
            if len(link.shape) != dims:
                raise part_ctx.child("shape").error(
                    f"must have {dims} dimensions for topology {link.topology}; "
                    f"got {list(link.shape)}."
                )
        elif link.shape and not needs_shape:
            raise part_ctx.child("shape").error(
                f"is only used by torus-2d, torus-3d and mesh-2d; topology is {link.topology}."
            )
    up = net.scale_up
    if up.shape:
        product = 1
        for d in up.shape:
            product *= d
        if product != up.domain_size:
            raise ctx.child("scale_up.shape").error(
                f"{list(up.shape)} holds {product} devices but scale_up.domain_size is "
                f"{up.domain_size}."
            )
    return net


def _model_from_raw(raw: Mapping[str, Any], ctx: Ctx, name: str) -> ModelSpec:
    kind = raw.get("kind")
    if kind not in MODEL_CLASSES:
        near = suggest(kind, list(MODEL_CLASSES)) if isinstance(kind, str) else None
        hint = f" (did you mean '{near}'?)" if near else ""
        kinds = ", ".join(MODEL_CLASSES)
        if kind is None:
            raise ctx.child("kind").error(f"is required (one of: {kinds}).")
        raise ctx.child("kind").error(f"must be one of: {kinds}; got {describe_value(kind)}{hint}.")
    model: ModelSpec = build(MODEL_CLASSES[kind], raw, ctx, extra={"name": name})
    if isinstance(model, TransformerSpec):
        model = _complete_transformer(model, ctx)
    return model


def _complete_transformer(m: TransformerSpec, ctx: Ctx) -> TransformerSpec:
    kv = m.num_kv_heads or m.num_attention_heads
    ffn = m.ffn_hidden_size or 4 * m.hidden_size
    if m.hidden_size % m.num_attention_heads:
        raise ctx.child("num_attention_heads").error(
            f"({m.num_attention_heads}) must divide hidden_size ({m.hidden_size})."
        )
    if m.num_attention_heads % kv:
        raise ctx.child("num_kv_heads").error(
            f"({kv}) must divide num_attention_heads ({m.num_attention_heads})."
        )
    if m.experts_per_token > m.num_experts:
        raise ctx.child("experts_per_token").error(
            f"({m.experts_per_token}) must be <= num_experts ({m.num_experts})."
        )
    return dataclasses.replace(m, num_kv_heads=kv, ffn_hidden_size=ffn)


def load_device(
    ref: str | Mapping[str, Any], *, base_dir: Path | None = None
) -> DeviceSpec | DesignDeviceSpec:
    """A device spec (spec or design mode) from a preset name, ``.yaml`` path or mapping."""
    base = base_dir or Path.cwd()
    raw, rctx, name = _resolve("devices", ref, Ctx("<device>"), base)
    return _device_from_raw(raw, rctx, name, _file_dir(rctx, base))


def load_technology(ref: str | Mapping[str, Any], *, base_dir: Path | None = None) -> TechSpec:
    """A logic, DRAM or link technology from a preset name, ``.yaml`` path or mapping."""
    return load_technology_ref(ref, Ctx("<technology>"), base_dir or Path.cwd())


def load_network(ref: str | Mapping[str, Any], *, base_dir: Path | None = None) -> NetworkSpec:
    """A network spec from a preset name, a ``.yaml`` path or an inline mapping."""
    raw, rctx, name = _resolve("networks", ref, Ctx("<network>"), base_dir or Path.cwd())
    return _network_from_raw(raw, rctx, name)


def load_framework(ref: str | Mapping[str, Any], *, base_dir: Path | None = None) -> FrameworkSpec:
    """A framework profile from a preset name, a ``.yaml`` path or an inline mapping."""
    raw, rctx, name = _resolve("frameworks", ref, Ctx("<framework>"), base_dir or Path.cwd())
    return _framework_from_raw(raw, rctx, name)


def load_model(ref: str | Mapping[str, Any], *, base_dir: Path | None = None) -> ModelSpec:
    """A model spec from a preset name, a ``.yaml`` path or an inline mapping."""
    raw, rctx, name = _resolve("models", ref, Ctx("<model>"), base_dir or Path.cwd())
    return _model_from_raw(raw, rctx, name)


def _section(raw: Mapping[str, Any], name: str, ctx: Ctx, *, required: bool) -> Mapping[str, Any]:
    if name not in raw:
        if required:
            raise ctx.child(name).error("is required.")
        return {}
    value = raw[name]
    if value is None:
        if required:
            raise ctx.child(name).error("is empty; give a mapping.")
        return {}
    return require_mapping(value, ctx.child(name))


def scenario_from_mapping(
    raw: Mapping[str, Any], *, file: str = "<scenario>", base_dir: Path | None = None
) -> Scenario:
    """Build a :class:`Scenario` from an already parsed YAML mapping.

    Raises:
        ConfigError: naming ``file`` and the dotted key of the first problem found.
    """
    top = Ctx(file)
    base = base_dir or Path.cwd()
    check_keys(raw, SCENARIO_KEYS, top)

    sys_raw = _section(raw, "system", top, required=True)
    sys_ctx = top.child("system")
    check_keys(sys_raw, SYSTEM_KEYS, sys_ctx)
    for name in ("device", "network"):
        if sys_raw.get(name) is None:
            raise sys_ctx.child(name).error("is required.")
    d_raw, d_ctx, d_name = _resolve("devices", sys_raw["device"], sys_ctx.child("device"), base)
    device = _device_from_raw(d_raw, d_ctx, d_name, _file_dir(d_ctx, base))
    n_raw, n_ctx, n_name = _resolve("networks", sys_raw["network"], sys_ctx.child("network"), base)
    network = _network_from_raw(n_raw, n_ctx, n_name)
    counts = {k: sys_raw[k] for k in ("devices_per_node", "num_nodes") if k in sys_raw}
    system = build(SystemSpec, counts, sys_ctx, extra={"device": device, "network": network})

    wl_raw = _section(raw, "workload", top, required=True)
    wl_ctx = top.child("workload")
    check_keys(wl_raw, WORKLOAD_KEYS, wl_ctx)
    if wl_raw.get("model") is None:
        raise wl_ctx.child("model").error("is required.")
    m_raw, m_ctx, m_name = _resolve("models", wl_raw["model"], wl_ctx.child("model"), base)
    model = _model_from_raw(m_raw, m_ctx, m_name)
    rest = {k: v for k, v in wl_raw.items() if k != "model"}
    workload = build(WorkloadSpec, rest, wl_ctx, extra={"model": model})

    framework = None
    if raw.get("framework") is not None:
        f_raw, f_ctx, f_name = _resolve("frameworks", raw["framework"], top.child("framework"),
                                        base)  # fmt: skip
        framework = _framework_from_raw(f_raw, f_ctx, f_name)
    # the profile's framework switches, then the scenario's own mapping keys over them
    mapping_raw = {**dict(framework.mapping if framework else ()),
                   **_section(raw, "mapping", top, required=False)}  # fmt: skip
    mapping = build(MappingSpec, mapping_raw, top.child("mapping"))
    scenario = Scenario(system=system, workload=workload, mapping=mapping, source=file,
                        framework=framework)  # fmt: skip
    _check_consistency(scenario, top)
    return scenario


def _check_consistency(s: Scenario, top: Ctx) -> None:
    """Cross-field rules: mapping vs system, mapping vs model, precision vs device."""
    m, sysm, wl = s.mapping, s.system, s.workload
    _check_pools(s, top)
    _check_serving_architecture(s, top)
    if m.num_devices != sysm.num_devices:
        replicas = (
            f"data_parallel {m.data_parallel} × tensor_parallel {m.tensor_parallel}"
            if m.prefill_replicas == 0 or m.prefill_tensor_parallel in (0, m.tensor_parallel)
            else f"(prefill_replicas {m.prefill_replicas} × prefill_tensor_parallel "
            f"{m.prefill_tensor_parallel} + {m.data_parallel - m.prefill_replicas} decode "
            f"replicas × tensor_parallel {m.tensor_parallel})"
        )
        raise top.child("mapping").error(
            f"degrees do not match the system: {replicas} × pipeline_parallel "
            f"{m.pipeline_parallel} × context_parallel {m.context_parallel} = {m.num_devices} "
            f"devices, but system has devices_per_node {sysm.devices_per_node} × num_nodes "
            f"{sysm.num_nodes} = {sysm.num_devices}."
        )
    domain = sysm.network.scale_up.domain_size
    if sysm.devices_per_node > domain:
        raise top.child("system.devices_per_node").error(
            f"({sysm.devices_per_node}) must be <= the network's scale_up.domain_size ({domain})."
        )
    if wl.precision not in sysm.device.precisions:
        listed = ", ".join(sysm.device.precisions)
        raise top.child("workload.precision").error(
            f"is {wl.precision}, which device {sysm.device.name} does not support "
            f"(it lists: {listed})."
        )
    per_step = m.data_parallel * m.micro_batch_size
    if wl.kind == "inference" and wl.arrivals == "poisson":
        if wl.request_rate <= 0:
            raise top.child("workload.request_rate").error(
                f"must be > 0 with arrivals: poisson (requests per second); got "
                f"{wl.request_rate:g}."
            )
        if wl.batching != "continuous":
            raise top.child("workload.batching").error(
                f"is {wl.batching}: arrivals: poisson needs continuous batching (a static batch "
                "starts together and takes no request that arrives while it runs)."
            )
    if wl.kind == "training" and wl.global_batch_size % per_step:
        raise top.child("workload.global_batch_size").error(
            f"({wl.global_batch_size}) must be divisible by data_parallel {m.data_parallel} × "
            f"micro_batch_size {m.micro_batch_size} = {per_step}."
        )
    model = wl.model
    mctx = top.child("mapping")
    if not isinstance(model, TransformerSpec):
        _check_kernel_parallel(s, mctx)
        return
    if wl.kind == "training" and m.attention_kernel == "trtllm":
        raise mctx.child("attention_kernel").error(
            "('trtllm') is TensorRT-LLM's serving kernel, a forward pass only; training takes "
            "fa2, cudnn, fa3 or triton."
        )
    values = {
        d: getattr(m, d)
        for d in (
            *STRUCTURAL,
            "pipeline_balance",
            "expert_tensor_parallel",
            "data_parallel_replicas",
        )
    }
    broken = first_violation(values, model, serving=wl.kind == "inference")
    if broken is not None:
        key_name, message = broken
        raise mctx.child(key_name).error(message)


#: Model keys the serving model reads and the training model does not (docs/model.md §D7).
SERVING_MODEL_KEYS = ("kv_lora_rank", "q_lora_rank", "rope_head_dim", "moe_ffn_hidden_size",
                      "num_shared_experts", "first_dense_layers")  # fmt: skip


def _check_serving_architecture(s: Scenario, top: Ctx) -> None:
    """Latent attention, shared experts and dense layers before MoE ones are served only, and
    the last two belong to an MoE model with MoE layers left."""
    model, wl = s.workload.model, s.workload
    if not isinstance(model, TransformerSpec):
        return
    mctx = top.child("workload.model")
    if wl.kind != "inference":
        for name in SERVING_MODEL_KEYS:
            if getattr(model, name):
                raise mctx.child(name).error(
                    f"({getattr(model, name)}) is modelled for serving (workload.kind: "
                    "inference) only."
                )
    for name in ("num_shared_experts", "first_dense_layers", "moe_ffn_hidden_size"):
        if getattr(model, name) and model.num_experts <= 1:
            raise mctx.child(name).error(
                f"({getattr(model, name)}) needs a mixture of experts (num_experts > 1)."
            )
    if model.first_dense_layers >= model.num_layers:
        raise mctx.child("first_dense_layers").error(
            f"({model.first_dense_layers}) must be less than num_layers ({model.num_layers})."
        )


def _check_pools(s: Scenario, top: Ctx) -> None:
    """Disaggregated serving (``prefill_replicas``, docs/model.md §D6): a prefill pool and a
    decode pool of whole replicas, continuous batching, experts grouped inside each pool."""
    m, wl = s.mapping, s.workload
    pctx = top.child("mapping.prefill_replicas")
    if m.prefill_replicas == 0:
        if m.prefill_tensor_parallel:
            raise top.child("mapping.prefill_tensor_parallel").error(
                f"({m.prefill_tensor_parallel}) is the prefill pool's degree; it needs "
                "prefill_replicas > 0."
            )
        return
    if wl.kind != "inference":
        raise pctx.error(
            f"({m.prefill_replicas}) splits serving replicas into a prefill and a decode pool; "
            "a training workload takes 0."
        )
    if m.prefill_replicas >= m.data_parallel:
        raise pctx.error(
            f"({m.prefill_replicas}) must be less than data_parallel ({m.data_parallel}): the "
            "decode pool needs at least one replica."
        )
    if wl.batching != "continuous":
        raise top.child("workload.batching").error(
            f"is {wl.batching}: a disaggregated pool (prefill_replicas > 0) batches "
            "continuously (prompts and decodes run on different replicas)."
        )
    model = wl.model
    tp_p = m.prefill_tensor_parallel
    if isinstance(model, TransformerSpec) and tp_p not in (0, m.tensor_parallel):
        tctx = top.child("mapping.prefill_tensor_parallel")
        if not SERVING_TP_RULE.ok({"tensor_parallel": tp_p}, model):
            raise tctx.error(SERVING_TP_RULE.message({"tensor_parallel": tp_p}, model))
        if model.num_experts > 1 and (m.expert_parallel > 1 or m.expert_tensor_parallel):
            raise tctx.error(
                f"({tp_p}) differs from tensor_parallel ({m.tensor_parallel}): the pools then "
                "split each expert as their dense layers (expert_parallel 1, "
                "expert_tensor_parallel 0)."
            )
    if isinstance(model, TransformerSpec) and model.num_experts > 1:
        values = {"tensor_parallel": m.tensor_parallel, "expert_parallel": m.expert_parallel,
                  "expert_tensor_parallel": m.expert_tensor_parallel}  # fmt: skip
        _, _, ep_dp = expert_groups(values)
        # (at least one: an expert layout the EP rules reject is reported by them, below)
        group = max(int(ep_dp) * int(expert_replicas(values)), 1)
        decode = m.data_parallel - m.prefill_replicas
        if m.prefill_replicas % group or decode % group:
            raise pctx.error(
                f"({m.prefill_replicas}) and the decode pool's {decode} replicas must each be "
                f"a multiple of the {group} replicas an expert group spans: each pool routes "
                "its own tokens to its own experts."
            )


def _check_kernel_parallel(s: Scenario, mctx: Ctx) -> None:
    """gemm/lstm mappings: CrossFlow's CR/RC kernel parallelism (docs/model.md §B4.6)."""
    m, model = s.mapping, s.workload.model
    if m.kernel_partition == "cr" and m.kernel_parallel_dim2 != 1:
        raise mctx.child("kernel_parallel_dim2").error(
            f"must be 1 with kernel_partition cr (K is split tensor_parallel ways); "
            f"got {m.kernel_parallel_dim2}."
        )
    if m.tensor_parallel % m.kernel_parallel_dim2:
        raise mctx.child("kernel_parallel_dim2").error(
            f"({m.kernel_parallel_dim2}) must divide tensor_parallel ({m.tensor_parallel})."
        )
    unused = {
        "context_parallel": m.context_parallel,
        "expert_parallel": m.expert_parallel,
        "virtual_pipeline_stages": m.virtual_pipeline_stages,
    }
    if isinstance(model, GemmSpec):
        unused["pipeline_parallel"] = m.pipeline_parallel
    elif isinstance(model, LstmSpec) and m.pipeline_parallel > model.num_layers + 2:
        raise mctx.child("pipeline_parallel").error(
            f"({m.pipeline_parallel}) must be <= num_layers + 2 ({model.num_layers + 2}): "
            "the stages are embedding, the LSTM layers and the softmax."
        )
    for name, value in unused.items():
        if value != 1:
            raise mctx.child(name).error(
                f"must be 1 for a {model.kind} workload (it has no such dimension); got {value}."
            )


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate a scenario YAML file (contract: system, workload, mapping).

    A bare name (no ``.yaml``) that is not a file is looked up as a preset in
    ``scenarios/`` (``DEEPFLOW_CONFIG_PATH``, then the built-in presets), so an installed
    package runs ``deepflow evaluate gpt3-175b-a100`` from any folder.

    Warns:
        PlausibilityWarning: a value far outside any real device or run (a likely unit slip).

    Raises:
        ConfigError: the message names the file and the dotted key of the problem.
    """
    from deepflow.config.plausibility import warn_implausible

    found = preset_file("scenarios", "scenario", path)
    source = path if found == Path(path) else _display(found)
    raw = read_yaml(source, what="a scenario mapping with keys system, workload, mapping")
    scenario = scenario_from_mapping(raw, file=str(source), base_dir=found.resolve().parent)
    warn_implausible(scenario)
    return scenario
