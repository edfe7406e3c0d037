"""Every bad-input message: exact text, exit code 2, nothing on stdout."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from deepflow.cli import app
from deepflow.config import DeviceSpec, list_presets
from deepflow.config._schema import yaml_keys
from tests.conftest import BASE_SCENARIO

runner = CliRunner()


def scenario(**edits: Any) -> dict[str, Any]:
    """BASE_SCENARIO with dotted-path edits; a value of ``...`` deletes the key."""
    data = copy.deepcopy(BASE_SCENARIO)
    for dotted, value in edits.items():
        *parents, last = dotted.split("__")
        node = data
        for p in parents:
            node = node[p]
        if value is ...:
            del node[last]
        else:
            node[last] = value
    return data


def run_show(path: Path) -> tuple[int, str, str]:
    result = runner.invoke(app, ["show", str(path)])
    return result.exit_code, result.stdout, result.stderr


CASES: list[tuple[str, Any, str]] = [
    (
        "unknown top-level key",
        {**scenario(), "sytem": {}},
        "unknown key 'sytem'; did you mean 'system'? Valid keys: framework, mapping, system, "
        "workload.",
    ),
    (
        "unknown nested key",
        scenario(system__devcies_per_node=8),
        "unknown key 'system.devcies_per_node'; did you mean 'devices_per_node'? "
        "Valid keys: device, devices_per_node, network, num_nodes.",
    ),
    (
        "typo in a device preset name",
        scenario(system__device="a100-sxm4-80g"),
        "system.device names an unknown device preset 'a100-sxm4-80g'; "
        "did you mean 'a100-sxm4-80gb'? Available: {devices}.",
    ),
    (
        "typo in a model preset name",
        scenario(workload__model="gpt3-17b"),
        "workload.model names an unknown model preset 'gpt3-17b'; "
        "did you mean 'gpt3-175b'? Available: {models}.",
    ),
    (
        "negative die area in an inline override",
        scenario(system__device={"base": "a100-sxm4-80gb", "die_area_mm2": -826}),
        "system.device.die_area_mm2 must be a number > 0; got -826.",
    ),
    (
        "negative host link rate in an inline override",
        scenario(system__device={"base": "gb200", "device_to_host_GBps": -182.1}),
        "system.device.device_to_host_GBps must be a number >= 0; got -182.1.",
    ),
    (
        "wrong type for an integer",
        scenario(system__num_nodes="four"),
        "system.num_nodes must be an integer >= 1; got 'four'.",
    ),
    (
        "fractional parallel degree",
        scenario(mapping__tensor_parallel=2.5),
        "mapping.tensor_parallel must be an integer >= 1; got 2.5.",
    ),
    (
        "mapping that does not multiply to the device count",
        scenario(mapping__data_parallel=16),
        "mapping degrees do not match the system: data_parallel 16 × tensor_parallel 8 × "
        "pipeline_parallel 8 × context_parallel 1 = 1024 devices, but system has "
        "devices_per_node 8 × num_nodes 192 = 1536.",
    ),
    (
        "batch not divisible by data parallel × micro-batch",
        scenario(workload__global_batch_size=1000),
        "workload.global_batch_size (1000) must be divisible by data_parallel 24 × "
        "micro_batch_size 1 = 24.",
    ),
    (
        "tensor parallel that does not divide the heads",
        scenario(
            mapping__tensor_parallel=5,
            mapping__data_parallel=1,
            mapping__pipeline_parallel=1,
            system__devices_per_node=5,
            system__num_nodes=1,
        ),
        "mapping.tensor_parallel (5) must divide the model's num_attention_heads (96) "
        "and num_kv_heads (96).",
    ),
    (
        "unknown precision with a suggestion",
        scenario(workload__precision="bf61"),
        "workload.precision must be one of: fp32, fp16, bf16, fp8, fp4; got 'bf61' "
        "(did you mean 'bf16'?).",
    ),
    (
        "precision the device cannot run",
        scenario(workload__precision="fp8"),
        "workload.precision is fp8, which device a100-sxm4-80gb does not support "
        "(it lists: fp64, fp32, tf32, bf16, fp16, int8).",
    ),
    (
        "unknown FP8 recipe with a suggestion",
        scenario(mapping__fp8_recipe="rowise"),
        "mapping.fp8_recipe must be one of: tensorwise, rowwise, mxfp8; got 'rowise' "
        "(did you mean 'rowwise'?).",
    ),
    (
        "boolean given as a string",
        scenario(mapping__sequence_parallel="yes"),
        "mapping.sequence_parallel must be true or false; got 'yes'.",
    ),
    (
        "ZeRO stage out of range",
        scenario(mapping__zero_stage=4),
        "mapping.zero_stage must be an integer >= 0 and <= 3; got 4.",
    ),
    (
        "missing workload section",
        scenario(workload=...),
        "workload is required.",
    ),
    (
        "more devices per node than the scale-up domain",
        scenario(
            system__devices_per_node=16,
            system__num_nodes=96,
        ),
        "system.devices_per_node (16) must be <= the network's scale_up.domain_size (8).",
    ),
    (
        "unknown model kind",
        scenario(workload__model={"kind": "transfomer", "num_layers": 2}),
        "workload.model.kind must be one of: transformer, lstm, gemm; got 'transfomer' "
        "(did you mean 'transformer'?).",
    ),
    (
        "heads that do not divide the hidden size",
        scenario(workload__model={"base": "gpt3-175b", "num_attention_heads": 100}),
        "workload.model.num_attention_heads (100) must divide hidden_size (12288).",
    ),
    (
        "relative preset path that does not exist",
        scenario(system__network="nets/mine.yaml"),
        "system.network refers to 'nets/mine.yaml', but {dir}/nets/mine.yaml does not exist.",
    ),
    (
        "unknown key inside an inline device",
        scenario(system__device={"base": "a100-sxm4-80gb", "hbm_capacity_GB": 96}),
        "unknown key 'system.device.hbm_capacity_GB'; did you mean 'hbm_capacity_GiB'? "
        "Valid keys: {device_keys}.",
    ),
    (
        "unknown attention kernel in a device's attention speed-up",
        scenario(system__device={"base": "a100-sxm4-80gb", "attention_speedup": {"cudnnn": 1.1}}),
        "unknown key 'system.device.attention_speedup.cudnnn'; did you mean 'cudnn'? "
        "Valid keys: cudnn, fa2, fa3, triton, trtllm.",
    ),
    (
        "non-positive attention speed-up",
        scenario(system__device={"base": "a100-sxm4-80gb", "attention_speedup": {"cudnn": 0}}),
        "system.device.attention_speedup.cudnn must be a number > 0; got 0.",
    ),
    (
        "mapping section that is a list",
        scenario(mapping=[1, 2]),
        "mapping must be a mapping; got a list.",
    ),
]


@pytest.mark.parametrize(("label", "data", "expected"), CASES, ids=[c[0] for c in CASES])
def test_bad_scenario_message_and_exit_code(
    label: str, data: Any, expected: str, write_yaml: Callable[..., Path]
) -> None:
    path = write_yaml(data)
    code, out, err = run_show(path)
    assert code == 2, err
    assert out == ""
    message = expected.format(
        devices=", ".join(list_presets("devices")),
        models=", ".join(list_presets("models")),
        dir=path.parent,
        device_keys=", ".join(sorted(yaml_keys(DeviceSpec))),
    )
    assert err == f"error: {path}: {message}\n"


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.yaml"
    code, out, err = run_show(path)
    assert (code, out) == (2, "")
    assert err == f"error: {path}: no such file.\n"


def test_empty_file(write_yaml: Callable[..., Path]) -> None:
    path = write_yaml("")
    code, _, err = run_show(path)
    assert code == 2
    assert err == (
        f"error: {path}: file is empty; expected a scenario mapping with keys system, "
        "workload, mapping.\n"
    )


def test_yaml_syntax_error(write_yaml: Callable[..., Path]) -> None:
    path = write_yaml("system:\n  device: [a100\n")
    code, _, err = run_show(path)
    assert code == 2
    assert err.startswith(f"error: {path}: YAML syntax error at line 3, column 1: ")


def test_top_level_not_a_mapping(write_yaml: Callable[..., Path]) -> None:
    path = write_yaml("- 1\n- 2\n")
    code, _, err = run_show(path)
    assert code == 2
    assert err == (
        f"error: {path}: top level must be a scenario mapping with keys system, workload, "
        "mapping; got a list.\n"
    )


def test_directory_instead_of_file(tmp_path: Path) -> None:
    code, _, err = run_show(tmp_path)
    assert code == 2
    assert err == f"error: {tmp_path}: is a directory, not a YAML file.\n"


def test_error_in_a_referenced_file_names_that_file(write_yaml: Callable[..., Path]) -> None:
    bad = write_yaml({"base": "dgx-a100"}, name="net.yaml")
    bad.write_text(
        "description: mine\nscale_up: {topology: switch, domain_size: 8, bandwidth_GBps: -1,"
        " latency_us: 1}\nscale_out: {topology: fat-tree, bandwidth_GBps: 25, latency_us: 5}\n"
    )
    path = write_yaml(scenario(system__network="net.yaml"))
    code, _, err = run_show(path)
    assert code == 2
    assert err == (f"error: {bad}: scale_up.bandwidth_GBps must be a number > 0; got -1.\n")


@pytest.mark.parametrize(
    ("model", "mapping", "expected"),
    [
        (
            "gemm-example",
            {"pipeline_parallel": 2},
            "mapping.pipeline_parallel must be 1 for a gemm workload (it has no such "
            "dimension); got 2.",
        ),
        (
            "lstm-lm-paper",
            {"pipeline_parallel": 5},
            "mapping.pipeline_parallel (5) must be <= num_layers + 2 (4): the stages are "
            "embedding, the LSTM layers and the softmax.",
        ),
        (
            "lstm-lm-paper",
            {"tensor_parallel": 5, "kernel_partition": "cr", "kernel_parallel_dim2": 5},
            "mapping.kernel_parallel_dim2 must be 1 with kernel_partition cr (K is split "
            "tensor_parallel ways); got 5.",
        ),
        (
            "lstm-lm-paper",
            {"tensor_parallel": 5, "kernel_parallel_dim2": 2},
            "mapping.kernel_parallel_dim2 (2) must divide tensor_parallel (5).",
        ),
    ],
)
def test_crossflow_workload_mapping_errors(
    model: str, mapping: dict[str, Any], expected: str, write_yaml: Callable[..., Path]
) -> None:
    devices = mapping.get("tensor_parallel", 1) * mapping.get("pipeline_parallel", 1)
    data = {
        "system": {"device": "v100-crossflow", "network": "waferscale-20xv100",
                   "devices_per_node": devices},
        "workload": {"model": model, "global_batch_size": 2000, "precision": "fp16"},
        "mapping": mapping,
    }  # fmt: skip
    path = write_yaml(data)
    code, out, err = run_show(path)
    assert (code, out) == (2, "")
    assert err == f"error: {path}: {expected}\n"
