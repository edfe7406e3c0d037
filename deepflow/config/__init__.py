"""Configuration: YAML files and presets -> frozen, validated specs (SI units inside)."""

from deepflow.config.loader import (
    builtin_config_dir,
    list_presets,
    load_device,
    load_model,
    load_network,
    load_scenario,
    load_technology,
    read_yaml,
    scenario_from_mapping,
)
from deepflow.config.serialize import to_dict
from deepflow.config.specs import (
    DeviceSpec,
    GemmSpec,
    LstmSpec,
    MappingSpec,
    ModelSpec,
    NetworkSpec,
    ScaleOutSpec,
    ScaleUpSpec,
    Scenario,
    SystemSpec,
    TransformerSpec,
    WorkloadSpec,
)

__all__ = [
    "DeviceSpec",
    "GemmSpec",
    "LstmSpec",
    "MappingSpec",
    "ModelSpec",
    "NetworkSpec",
    "ScaleOutSpec",
    "ScaleUpSpec",
    "Scenario",
    "SystemSpec",
    "TransformerSpec",
    "WorkloadSpec",
    "builtin_config_dir",
    "list_presets",
    "load_device",
    "load_model",
    "load_network",
    "load_scenario",
    "load_technology",
    "read_yaml",
    "scenario_from_mapping",
    "to_dict",
]
