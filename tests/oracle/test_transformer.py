"""Transformer training step: FLOPs, breakdown, validation, best-mapping, properties, CLI."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from deepflow.cli import app
from deepflow.config import load_scenario
from deepflow.config.specs import Scenario, TransformerSpec
from deepflow.oracle.best_mapping import best_mappings, enumerate_mappings
from deepflow.oracle.evaluate import evaluate_one, network_model
from deepflow.oracle.hardware import device_caps
from deepflow.oracle.workloads.transformer import (
    model_flops_per_step,
    transformer_columns,
    transformer_step,
)
from deepflow.validation import validation_report
from tests.conftest import REPO

SCENARIOS = REPO / "configs" / "scenarios"
runner = CliRunner()


def llama() -> Scenario:
    return load_scenario(SCENARIOS / "llama3-8b-h100.yaml")


def test_model_flops_match_the_closed_form_for_gpt3() -> None:
    # Narayanan et al. 2021 / Korthikanti et al. 2022: 72·B·s·L·h²·(1 + s/(6h) + V/(12·L·h)).
    s = load_scenario(SCENARIOS / "gpt3-175b-a100.yaml")
    assert isinstance(s.workload.model, TransformerSpec)
    x = transformer_columns(s.workload.model, s.mapping, 1536)
    big_b, seq, layers, h, v = 1536, 2048, 96, 12288, 51200
    closed = 72 * big_b * seq * layers * h**2 * (1 + seq / (6 * h) + v / (12 * layers * h))
    assert float(model_flops_per_step(x)[0]) == pytest.approx(closed, rel=1e-12)


def test_breakdown_sums_to_step_and_contract_keys() -> None:
    r = evaluate_one(llama())
    assert sum(r["breakdown_s"].values()) == pytest.approx(r["step_time_s"], rel=1e-12)
    assert 0.2 < r["mfu"] < 0.8
    assert r["feasible"]
    assert 0 < r["device"]["average_power_W"] <= r["device"]["power_W"]


def test_public_validation_figures() -> None:
    report = validation_report()
    groups = report["groups"]
    assert groups["mamf_ml_engineering"]["max_abs_error"] <= 0.10
    assert groups["narayanan2021_table1"]["mean_abs_error"] <= 0.05
    assert groups["korthikanti2022_table5"]["mean_abs_error"] <= 0.05
    # 7.8 %: with TE's cuDNN attention (preferred on Hopper since TE 1.8) its 1.7B and 7.1B
    # runs of unstated micro-batch and recompute are 17-20 % fast (they were 11 % with FA2)
    assert groups["megatron_core_h100_2024"]["mean_abs_error"] <= 0.08
    # its 32B case (+21 %) runs 4 micro-batches of an unstated size (1 assumed): the fp32
    # gradient reduce-scatter through one NIC per rank hides only under the last one (README)
    assert groups["megatron_core_h100_2024"]["max_abs_error"] <= 0.22
    assert groups["llm_foundry_a100_80"]["mean_abs_error"] <= 0.06
    # Targets of the groups the training model was calibrated on (no group over 15 %,
    # group-weighted mean <= 6 %). The PTD-P rows of Narayanan Table 2 within a few %; its
    # DeepSpeed ZeRO-3 rows are bound by the framework's per-parameter collectives
    # (frameworks.yaml) and run 6-40 % slow (README).
    # (XLA's TPU matmuls calibrate only the TPU family, no training group: tests/oracle/
    # test_kernels.py bounds them)
    calibrated = {k: g for k, g in groups.items()
                  if k not in (*_MODERN_GROUPS, "jax_xla_matmul_tpu_v5e")
                  and g["kind"] == "performance"}  # fmt: skip
    assert max(g["mean_abs_error"] for g in calibrated.values()) <= 0.15
    # (4.2 % at most since Ampere's sustained fraction, 0.85 -> 0.86, is fitted jointly with
    # llm-foundry's Triton attention rate: benchmarks/fit_training.py)
    ptdp = [abs(r["error"]) for r in report["cases"] if "_t2_ptdp_" in r["id"]]
    assert max(ptdp) <= 0.045
    assert sum(g["mean_abs_error"] for g in calibrated.values()) / len(calibrated) <= 0.06
    # Every configuration in those groups really ran: none may be reported infeasible.
    assert all(row.get("feasible", True) for row in report["cases"]
               if row["group"] in calibrated)  # fmt: skip
    # The NeMo 24.07 FP8 and torchtitan async-TP groups (added with the 127-case set): NeMo
    # with FP8 as Transformer Engine runs it (5 %); torchtitan on its 500 W, 2.4 TB/s H100s
    # with DTensor's waited-on TP collectives and async TP's fused forward (8 %: its float8
    # rowwise runs' casts at the efficiency torchao's own microbenchmark gives them, and no
    # async-TP all-gather fused into a rowwise GEMM; its 8B TP-8 runs 10-14 % fast; README)
    assert groups["nemo_24.07_dgx_h100_fp8"]["mean_abs_error"] <= 0.06
    assert groups["torchtitan_asynctp_h100_2025"]["mean_abs_error"] <= 0.09


_MODERN_GROUPS = ("nemo_24.07_dgx_h100_fp8", "torchtitan_asynctp_h100_2025")


def test_best_mapping_ranks_feasible_mappings() -> None:
    result = best_mappings(llama(), top=5)
    assert result["num_feasible"] <= result["num_valid"]
    times = [m["step_time_s"] for m in result["mappings"]]
    assert times == sorted(times)
    caps = device_caps(llama().system.device, "bf16")
    assert all(m["memory_per_device_B"] <= caps.hbm_capacity_B for m in result["mappings"])
    # The scenario's own mapping is one of the valid ones, so the best is at least as fast.
    assert times[0] <= evaluate_one(llama())["step_time_s"] * (1 + 1e-9)


def test_batch_equals_loop_of_singles() -> None:
    s = llama()
    model = s.workload.model
    assert isinstance(model, TransformerSpec)
    mappings = enumerate_mappings(s)
    pick = np.linspace(0, len(mappings["tensor_parallel"]) - 1, 12).astype(int)
    base = transformer_columns(model, s.mapping, 64)
    x = {k: np.broadcast_to(v, (len(pick),)) for k, v in base.items()}
    x |= {k: v[pick] for k, v in mappings.items()}
    caps = device_caps(s.system.device, "bf16")
    batch = transformer_step(caps, network_model(s), x)
    for j in range(len(pick)):
        one = {k: np.asarray([v[j]]) for k, v in x.items()}
        single = transformer_step(caps, network_model(s), one)
        assert float(single["step_time_s"][0]) == pytest.approx(batch["step_time_s"][j], rel=1e-9)
        assert float(single["memory_per_device_B"][0]) == pytest.approx(
            batch["memory_per_device_B"][j], rel=1e-9
        )


def _all_mappings() -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    s = llama()
    model = s.workload.model
    assert isinstance(model, TransformerSpec)
    mappings = enumerate_mappings(s)
    n = len(mappings["tensor_parallel"])
    base = transformer_columns(model, s.mapping, 64)
    return {k: np.broadcast_to(v, (n,)) for k, v in base.items()}, mappings


def test_a_higher_zero_stage_never_raises_memory() -> None:
    base, mappings = _all_mappings()
    s = llama()
    caps = device_caps(s.system.device, "bf16")
    x = base | mappings
    memory = {}
    for zero in range(4):
        memory[zero] = transformer_step(caps, network_model(s), x | {
            "zero_stage": np.full_like(x["zero_stage"], zero)})["memory_per_device_B"]  # fmt: skip
    for lower, higher in ((0, 1), (1, 2), (2, 3)):
        assert (memory[higher] <= memory[lower] * (1 + 1e-12)).all()


@given(factor=st.floats(1.0, 16.0), which=st.sampled_from(["hbm", "scale_up", "scale_out"]))
@settings(max_examples=25, deadline=None)
def test_higher_bandwidth_is_never_slower(factor: float, which: str) -> None:
    s = llama()
    base, mappings = _all_mappings()
    x = base | mappings
    caps = device_caps(s.system.device, "bf16")
    net = network_model(s)
    before = transformer_step(caps, net, x)["step_time_s"]
    if which == "hbm":
        caps = replace(caps, hbm_bandwidth_Bps=caps.hbm_bandwidth_Bps * factor)
    else:
        field = f"{which}_bandwidth_Bps"
        net = replace(net, **{field: np.asarray(getattr(net, field)) * factor})
    after = transformer_step(caps, net, x)["step_time_s"]
    assert (after <= before * (1 + 1e-9)).all()


@pytest.mark.parametrize("scale", [2, 4, 8])
def test_more_devices_with_the_same_per_device_batch_never_lower_throughput(scale: int) -> None:
    s = llama()
    bigger = replace(
        s,
        system=replace(s.system, num_nodes=scale),
        workload=replace(s.workload, global_batch_size=64 * scale),
        mapping=replace(s.mapping, data_parallel=8 * scale),
    )
    assert evaluate_one(bigger)["tokens_per_s"] >= evaluate_one(s)["tokens_per_s"]


# ------------------------------------------------------------------------------------ CLI
def test_validate_cli_json_and_table() -> None:
    result = runner.invoke(app, ["validate", "--json"])
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    kinds = {g["kind"] for g in data["groups"].values()}
    assert kinds == {"performance", "memory", "serving"}  # public, peak-memory, serving sets
    assert len(data["cases"]) > 127 + 66
    assert set(data["groups"]) >= {"mamf_ml_engineering", "korthikanti2022_table5"}
    table = runner.invoke(app, ["validate"])
    assert table.exit_code == 0
    assert "group-weighted mean |error|" in table.stdout


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("{", "invalid JSON at line 1: Expecting property name enclosed in double quotes."),
        ('{"a": 1}', "must be a JSON list of measurement cases with a 'group'."),
        (
            '[{"group": "mystery"}]',
            "no case could be scored (case '?': category None is not one deepflow scores",
        ),
    ],
)
def test_validate_rejects_bad_case_files(
    content: str, expected: str, write_yaml: Callable[..., Path]
) -> None:
    path = write_yaml(content, name="cases.json")
    result = runner.invoke(app, ["validate", "--cases", str(path)])
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.startswith(f"error: {path}: {expected}")


def test_validate_missing_case_file(tmp_path: Path) -> None:
    result = runner.invoke(app, ["validate", "--cases", str(tmp_path / "none.json")])
    assert result.exit_code == 2
    assert result.stderr == f"error: {tmp_path / 'none.json'}: no such file.\n"


def test_best_mapping_cli() -> None:
    path = SCENARIOS / "llama3-8b-h100.yaml"
    result = runner.invoke(app, ["best-mapping", str(path), "--top", "3", "--json"])
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert len(data["mappings"]) == 3
    table = runner.invoke(app, ["best-mapping", str(path), "--top", "2"])
    assert table.exit_code == 0
    assert "feasible of" in table.stdout


def test_best_mapping_rejects_non_transformer_workloads() -> None:
    path = SCENARIOS / "lstm-a100.yaml"
    result = runner.invoke(app, ["best-mapping", str(path)])
    assert result.exit_code == 2
    assert result.stderr == (
        f"error: {path}: best-mapping enumerates transformer mappings; workload.model is a "
        "lstm model.\n"
    )


# ------------------------------------------------------------------------- evaluate_table
def _design_scenario() -> Scenario:
    from deepflow.config import scenario_from_mapping

    return scenario_from_mapping({
        "system": {"device": "h100-like-4nm", "network": "dgx-h100", "devices_per_node": 8},
        "workload": {"model": "llama3-8b", "global_batch_size": 64, "precision": "bf16"},
        "mapping": {"data_parallel": 8, "activation_recompute": "full", "zero_stage": 3},
    })  # fmt: skip


def test_evaluate_table_rows_equal_evaluate_one_for_design_sweeps() -> None:
    from deepflow.config.specs import DesignDeviceSpec
    from deepflow.oracle.evaluate import evaluate_table

    base = _design_scenario()
    power = np.array([207.8, 120.0, 320.0])
    area = np.array([531.0, 420.0, 531.0])
    zero = np.array([3, 1, 0])
    table = evaluate_table(base, {"power_core_W": power, "area_core_mm2": area,
                                  "zero_stage": zero})  # fmt: skip
    for i in range(3):
        device = base.system.device
        assert isinstance(device, DesignDeviceSpec)
        one = replace(
            base,
            system=replace(base.system, device=replace(
                device,
                power_W=replace(device.power_W, core=float(power[i])),
                area_mm2=replace(device.area_mm2, core=float(area[i])),
            )),
            mapping=replace(base.mapping, zero_stage=int(zero[i])),
        )  # fmt: skip
        single = evaluate_one(one)
        assert table["step_time_s"][i] == pytest.approx(single["step_time_s"], rel=1e-9)
        assert table["memory_per_device_B"][i] == pytest.approx(
            single["memory_per_device_B"], rel=1e-9
        )
        assert table["energy_per_step_J"][i] == pytest.approx(single["energy_per_step_J"], rel=1e-9)
    assert table["step_time_s"][2] < table["step_time_s"][0] < table["step_time_s"][1]


def test_evaluate_table_rejects_unknown_columns() -> None:
    from deepflow.errors import ConfigError
    from deepflow.oracle.evaluate import evaluate_table

    with pytest.raises(ConfigError, match=r"^evaluate_table: unknown columns tensor_paralel\.$"):
        evaluate_table(llama(), {"tensor_paralel": np.array([1])})


def _moe_scenario(expert_parallel: int) -> Scenario:
    from deepflow.config import scenario_from_mapping

    return scenario_from_mapping({
        "system": {"device": "h100-sxm5-80gb", "network": "dgx-h100", "devices_per_node": 8,
                   "num_nodes": 2},
        "workload": {
            "model": {"kind": "transformer", "num_layers": 32, "hidden_size": 4096,
                      "num_attention_heads": 32, "num_kv_heads": 8, "ffn_hidden_size": 14336,
                      "ffn_activation": "swiglu", "seq_length": 4096, "vocab_size": 32000,
                      "num_experts": 8, "experts_per_token": 2},
            "global_batch_size": 64, "precision": "bf16",
        },
        "mapping": {"data_parallel": 8, "tensor_parallel": 2, "expert_parallel": expert_parallel,
                    "activation_recompute": "full", "zero_stage": 1},
    })  # fmt: skip


def test_mixture_of_experts_counts_top_k_flops_and_all_to_all() -> None:
    # Mixtral-8x7B-like: model FLOPs use experts_per_token = 2 of 8 experts (§1.1).
    sharded = evaluate_one(_moe_scenario(expert_parallel=8))
    replicated = evaluate_one(_moe_scenario(expert_parallel=1))
    assert sharded["breakdown_s"]["expert_parallel_comm"] > 0
    assert replicated["breakdown_s"]["expert_parallel_comm"] == 0
    # Sharding the experts over 8 ranks cuts the weights (and optimizer state) per device.
    assert sharded["memory_per_device_B"] < replicated["memory_per_device_B"]
    dense_equivalent = 6 * 64 * 4096 * 32 * 3 * 4096 * 14336 * 2  # MLP share at top-2
    assert sharded["model_flops_per_step"] > dense_equivalent


def test_grouped_query_attention_shrinks_kv_activations() -> None:
    from deepflow.oracle.workloads.transformer import activation_bytes_per_layer

    base = {
        "hidden_size": 8192, "num_attention_heads": 64, "ffn_hidden_size": 28672,
        "swiglu": 1.0, "seq_length": 4096, "micro_batch_size": 1, "context_parallel": 1,
        "dropout": 0.0, "flash_attention": 1.0, "tensor_parallel": 8.0,
        "sequence_parallel": 1.0, "recompute": 0.0,
    }  # fmt: skip
    mha = float(activation_bytes_per_layer({**base, "num_kv_heads": 64}))
    gqa = float(activation_bytes_per_layer({**base, "num_kv_heads": 8}))
    sbh = 4096 * 8192
    # K and V shrink by g = 8/64: 2·2·(1 − g) bytes per s·b·h, split over t = 8 (§2.2).
    assert mha - gqa == pytest.approx(sbh * 4 * (1 - 8 / 64) / 8, rel=1e-12)
