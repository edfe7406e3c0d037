"""Framework profiles (configs/frameworks/): a scenario's training stack, overridable key by key."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from deepflow.cli import app
from deepflow.config import list_presets, load_framework, load_scenario
from deepflow.config.mapping import KNOBS
from deepflow.errors import ConfigError

SCENARIOS = Path(__file__).resolve().parents[2] / "configs" / "scenarios"
SWITCHES = {k.name for k in KNOBS if k.framework}


def _write(tmp_path: Path, framework: object, mapping: dict | None = None) -> Path:
    raw = {
        "framework": framework,
        "system": {"device": "h100-sxm5-80gb", "network": "dgx-h100", "devices_per_node": 8},
        "workload": {"model": "llama3-8b", "global_batch_size": 64, "precision": "bf16"},
        "mapping": {"data_parallel": 8, **(mapping or {})},
    }
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    return path


def test_every_profile_sets_only_framework_switches_and_cites_sources() -> None:
    names = list_presets("frameworks")
    assert {
        "megatron-lm-2021",
        "deepspeed-zero3-2021",
        "megatron-core-2024",
        "nemo-24.07",
        "megatron-bridge-2025",
        "torchtitan-2024",
        "torchtitan-2025",
        "llm-foundry",
        "maxtext-tpu",
    } <= set(names)
    for name in names:
        profile = load_framework(name)
        assert profile.description and profile.sources, name
        assert {k for k, _ in profile.mapping} <= SWITCHES, name


def test_every_profile_has_a_scenario_preset() -> None:
    used = {load_scenario(p).framework for p in SCENARIOS.glob("*.yaml")}
    names = {f.name.split("+")[0] for f in used if f is not None}
    assert names == set(list_presets("frameworks"))


def test_a_scenario_takes_its_profiles_switches_and_its_own_mapping_over_them(
    tmp_path: Path,
) -> None:
    s = load_scenario(_write(tmp_path, "torchtitan-2024"))
    assert (s.mapping.cross_entropy, s.mapping.fp8_weight_cache) == ("unfused", False)
    s = load_scenario(_write(tmp_path, "torchtitan-2024", {"cross_entropy": "fused"}))
    assert s.mapping.cross_entropy == "fused"
    inline = {"base": "nemo-24.07", "tp_comm_overlap": True}
    s = load_scenario(_write(tmp_path, inline))
    assert s.mapping.tp_comm_overlap is True and s.mapping.fp32_main_grads is False
    assert s.framework is not None and s.framework.name == "nemo-24.07+overrides"


def test_unknown_profile_and_non_switch_keys_are_rejected(tmp_path: Path) -> None:
    unknown = (
        r"framework names an unknown framework preset 'nemo-24\.7'; did you mean 'nemo-24\.07'\?"
    )
    with pytest.raises(ConfigError, match=unknown):
        load_scenario(_write(tmp_path, "nemo-24.7"))
    valid = (
        r"unknown key 'framework.tensor_parallel'. Valid keys: attention_kernel, cross_entropy, "
    )
    with pytest.raises(ConfigError, match=valid):
        load_scenario(_write(tmp_path, {"base": "nemo-24.07", "tensor_parallel": 2}))


def test_evaluate_prints_the_profiles_behaviours(tmp_path: Path) -> None:
    path = str(SCENARIOS / "llama3-8b-nemo-fp8-h100.yaml")
    human = CliRunner().invoke(app, ["evaluate", path])
    assert human.exit_code == 0, human.output
    assert "framework nemo-24.07:" in human.stdout
    data = CliRunner().invoke(app, ["evaluate", path, "--json"])
    import json

    result = json.loads(data.stdout)
    assert result["framework"]["name"] == "nemo-24.07"
    assert result["framework"]["behaviours"]["fp32_main_grads"] is False
    assert result["oracle_version"].startswith("0.")
