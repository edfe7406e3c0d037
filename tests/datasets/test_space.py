"""Design-space YAML: the default spaces load; every rejected input has an exact message."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from deepflow.config import list_presets, load_model
from deepflow.config.specs import TransformerSpec
from deepflow.datasets import load_space, valid_mappings
from deepflow.errors import ConfigError
from tests.conftest import REPO

SPACES = REPO / "configs" / "spaces"


@pytest.mark.parametrize(
    "name", ["llm-pathfinding", "lstm-paper", "mapping-spec", "inference-pathfinding"]
)
def test_default_spaces_load(name: str) -> None:
    space = load_space(SPACES / f"{name}.yaml")
    assert space.num_dims > 0
    assert space.x_columns()
    assert load_space(name).sha256 == space.sha256  # a bare name finds the preset


def test_llm_space_is_gpt3_on_1024_design_devices_over_three_nodes() -> None:
    space = load_space(SPACES / "llm-pathfinding.yaml")
    assert space.base.system.num_devices == 1024
    assert space.base.workload.model.name == "gpt3-175b"
    nodes = {t.process_node_nm for t in space.resolved["technology"]}
    assert nodes == {7, 5, 3}
    # Only valid factorisations: every table row multiplies to 1,024 and TP divides 96 heads.
    for (devices, _, batch), table in space.mapping_tables.items():
        tp, pp, dp, cp = table[:, 0], table[:, 1], table[:, 2], table[:, 3]
        assert (tp * pp * dp * cp == devices).all()
        assert (96 % tp == 0).all() and (batch % (dp * table[:, 5]) == 0).all()


def test_valid_mappings_follow_the_loader_rules() -> None:
    model = load_model("llama3-70b")  # 64 heads, 8 KV heads, 80 layers
    assert isinstance(model, TransformerSpec)
    cands: dict[str, Any] = {
        "tensor_parallel": tuple(range(1, 17)), "pipeline_parallel": tuple(range(1, 9)),
        "data_parallel": None, "context_parallel": (1, 2), "expert_parallel": (1,),
        "micro_batch_size": (1, 2, 3), "virtual_pipeline_stages": (1, 2, 3),
    }  # fmt: skip
    table = valid_mappings(64, model, 96, cands)
    tp, pp, dp, cp, _, mb, vp = table.T
    assert len(table) > 0
    assert set(tp) <= {1, 2, 4, 8}  # divides 64 devices and the 8 KV heads
    assert (tp * pp * dp * cp == 64).all()
    assert (96 % (dp * mb) == 0).all()
    assert ((vp == 1) | ((pp > 1) & (80 % (pp * vp) == 0))).all()
    # every valid combination appears exactly once
    assert len({tuple(r) for r in table}) == len(table)
    brute = sum(
        1 for t in range(1, 17) for p in range(1, 9) for c in (1, 2) for m in (1, 2, 3)
        for v in (1, 2, 3)
        if 64 % (t * p * c) == 0 and 8 % t == 0 and 96 % (64 // (t * p * c) * m) == 0
        and (v == 1 or (p > 1 and 80 % (p * v) == 0))
    )  # fmt: skip
    assert brute == len(table)


# --------------------------------------------------------------------------- exact errors
def _edit(space: dict[str, Any], path: str, value: Any) -> None:
    *parents, last = path.split(".")
    node = space
    for key in parents:
        node = node[key]
    if value is _DELETE:
        del node[last]
    else:
        node[last] = value


_DELETE = object()
PARTS = "core, l1, l2, memory_controller, other, register_file, scale_out, scale_up"

CASES: list[tuple[str, Any, str]] = [
    ("variables.die_area_mm2.type", "gaussian",
     "variables.die_area_mm2.type must be one of: continuous, integer, categorical, simplex, "
     "fixed; got 'gaussian'."),
    ("variables.die_area_mm2.type", "continous",
     "variables.die_area_mm2.type must be one of: continuous, integer, categorical, simplex, "
     "fixed; got 'continous' (did you mean 'continuous'?)."),
    ("variables.die_area_mm2.high", 500,
     "variables.die_area_mm2.high must be > low (600); got 500: the range is empty."),
    ("variables.die_area_mm2.high", 600,
     "variables.die_area_mm2.high must be > low (600); got 600: the range is empty."),
    ("variables.zero_stage", {"type": "integer", "low": 3, "high": 1},
     "variables.zero_stage.high must be >= low (3); got 1: the range is empty."),
    ("variables.pipeline_parallel", {"type": "integer", "low": 4, "high": 2},
     "variables.pipeline_parallel.high must be >= low (4); got 2: the range is empty."),
    ("variables.die_area_mm2.low", -5,
     "variables.die_area_mm2.low must be a number > 0; got -5."),
    ("variables.tdp_W.scale", "log10",
     "variables.tdp_W.scale must be one of: linear, log; got 'log10'."),
    ("variables.die_area_mm2", {"type": "continuous", "low": 600},
     "variables.die_area_mm2.high is required."),
    ("variables.area_split.parts.core", [0.9, 0.95],
     "variables.area_split.parts lower bounds sum to 1.056 > 1; the parts cannot sum to 1."),
    ("variables.area_split.parts", {"core": [0.1, 0.5], "l2": [0.0, 0.3]},
     "variables.area_split.parts upper bounds sum to 0.8 < 1; the parts cannot sum to 1."),
    ("variables.area_split.parts.core", [0.7, 0.6],
     "variables.area_split.parts.core must be [low, high] with 0 <= low <= high <= 1; "
     "got [0.7, 0.6]."),
    ("variables.area_split.parts", ["core", "cor"],
     f"unknown key 'variables.area_split.parts.cor'; did you mean 'core'? Valid keys: {PARTS}."),
    ("variables.area_split.parts", ["core"],
     "variables.area_split.parts must name at least 2 parts; got 1."),
    ("variables.technology.choices", ["n7", "n4"],
     "variables.technology.choices[1] names an unknown technology preset 'n4'. Available: "
     + ", ".join(list_presets("technologies")) + "."),
    ("variables.technology.choices", ["n7", "hbm3"],
     "variables.technology.choices[1] must name a logic technology; 'hbm3' is a dram "
     "technology."),
    ("variables.technology.type", "continuous",
     "variables.technology.type must be categorical or fixed for technology; got 'continuous'."),
    ("variables.zero_stage", {"type": "categorical", "choices": [0, 5]},
     "variables.zero_stage.choices[1] must be an integer >= 0 and <= 3; got 5."),
    ("variables.micro_batch_size.choices", [1, 1],
     "variables.micro_batch_size.choices[1] repeats 1."),
    ("variables.activation_recompute.choices", ["none", "ful"],
     "variables.activation_recompute.choices[1] must be one of: none, selective, full, "
     "selective_op, selective_dots; got 'ful' (did you mean 'full'?)."),
    ("variables.die_are_mm2", 700, "unknown key 'variables.die_are_mm2'; did you mean "
     "'die_area_mm2'? Valid keys: "),
    ("variabels", {}, "unknown key 'variabels'; did you mean 'variables'? Valid keys: base, "
     "chunk_size, description, sampler, variables."),
    ("variables", {}, "variables must be a non-empty mapping of variables; got a mapping."),
    ("sampler", "halton",
     "sampler must be one of: sobol, lhs, uniform, grid; got 'halton'."),
    ("chunk_size", 0, "chunk_size must be an integer >= 1; got 0."),
    ("base", _DELETE,
     "base is required (a scenario preset name, a .yaml path or a mapping)."),
    ("base", "gpt3-175b-a10",
     "base names an unknown scenario preset 'gpt3-175b-a10'; did you mean 'gpt3-175b-a100'? "
     "Available: " + ", ".join(list_presets("scenarios")) + "."),
    ("base.system.device", "h100-like",
     "base: system.device names an unknown device preset 'h100-like'; did you mean "),
    ("base.system.devcies_per_node", 8,
     "base: unknown key 'system.devcies_per_node'; did you mean 'devices_per_node'?"),
    ("base.system.device", "h100-sxm5-80gb",
     "variables.technology needs a design-mode device; h100-sxm5-80gb is a spec-mode device."),
    ("variables.tensor_parallel.choices", [3, 5],
     "variables admit no valid mapping for 8 devices, model llama3-8b, global_batch_size 64 within "
     "the declared mapping variables: tensor_parallel, pipeline_parallel, micro_batch_size."),
    ("variables.area_core_mm2", 500,
     "variables.area_core_mm2 conflicts with variables.area_split, which also sets the core "
     "share."),
    ("variables.devices_per_node", {"type": "categorical", "choices": [8, 16]},
     "variables.devices_per_node (16) exceeds network dgx-h100's scale_up.domain_size (8)."),
    ("variables.precision", "fp8",
     "variables.technology (n7) does not support precision fp8 (it lists: fp16, bf16, tf32, "
     "fp32, int8)."),
]  # fmt: skip


@pytest.mark.parametrize(("path", "value", "message"), CASES, ids=[c[2][:60] for c in CASES])
def test_bad_space_has_an_exact_message(
    design_space: dict[str, Any], write_yaml: Callable[..., Path], path: str, value: Any,
    message: str,
) -> None:  # fmt: skip
    _edit(design_space, path, value)
    file = write_yaml(design_space, name="space.yaml")
    with pytest.raises(ConfigError) as info:
        load_space(file)
    text = str(info.value)
    expected = f"{file}: {message}"
    if message.endswith(". ") or message.endswith(("Valid keys: ", "did you mean ", "?")):
        assert text.startswith(expected), text  # the rest lists presets or keys
    else:
        assert text == expected


def test_mapping_variables_need_a_transformer(write_yaml: Callable[..., Path]) -> None:
    file = write_yaml({"base": "lstm-v100-crossflow",
                       "variables": {"zero_stage": {"type": "integer", "low": 0, "high": 1}}},
                      name="space.yaml")  # fmt: skip
    with pytest.raises(ConfigError, match=re.escape(
            f"{file}: variables.zero_stage needs a transformer workload; model lstm-lm-paper "
            "is a lstm model.")):  # fmt: skip
        load_space(file)


def test_space_file_errors(tmp_path: Path, write_yaml: Callable[..., Path]) -> None:
    with pytest.raises(ConfigError, match=r"^nope: no such file or space preset\."):
        load_space("nope")
    missing = tmp_path / "missing.yaml"
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(missing))}: no such file\.$"):
        load_space(missing)
    file = write_yaml("- a\n- b\n", name="list.yaml")
    with pytest.raises(ConfigError, match="top level must be a design-space mapping; got a list"):
        load_space(file)


def test_fixed_shorthand_and_grid_levels(write_yaml: Callable[..., Path]) -> None:
    file = write_yaml({
        "base": "llama3-8b-h100",
        "sampler": "grid",
        "variables": {
            "zero_stage": {"type": "categorical", "choices": [1, 2, 3]},
            "micro_batch_size": {"type": "fixed", "value": 2},
            "sequence_parallel": False,
        },
    }, name="space.yaml")  # fmt: skip
    space = load_space(file)
    assert [v.type for v in space.variables] == ["categorical", "fixed", "fixed"]
    assert space.num_dims == 1 and space.grid_size() == 3
    with pytest.raises(ConfigError, match=re.escape(
            f"{file}: sampler grid has 3 points; --num-samples 4 asks for more.")):  # fmt: skip
        space.check_num_samples(4)
    assert np.array_equal(space.mapping_tables[(8, 0, 64)][0], [1, 1, 8, 1, 1, 2, 1])


def test_the_serving_space_splits_its_devices_into_replicas_and_offers_them_requests() -> None:
    space = load_space(SPACES / "inference-pathfinding.yaml")
    assert space.base_is_serving and space.base.workload.model.name == "llama3-70b"
    for (devices, _, _), table in space.mapping_tables.items():
        tp, pp, dp, cp, ep, mb, vp = table.T
        assert devices == 8 and (tp * pp * dp == 8).all()
        assert (cp == 1).all() and (ep == 1).all() and (mb == 1).all() and (vp == 1).all()
        # a serving batch is requests per replica: nothing needs to divide it
        assert set(dp) == {1, 2, 4, 8}


def test_a_serving_space_uses_the_serving_mapping_rules(write_yaml: Callable[..., Path]) -> None:
    base = {"system": {"device": "h100-sxm5-80gb", "network": "dgx-h100",
                       "devices_per_node": 8, "num_nodes": 2},
            "workload": {"kind": "inference", "model": "llama3-70b", "global_batch_size": 7},
            "mapping": {"tensor_parallel": 8, "data_parallel": 2}}  # fmt: skip
    variables = {"tensor_parallel": {"type": "categorical", "choices": [8, 16]}}
    file = write_yaml({"base": base, "variables": variables}, name="s.yaml")
    (table,) = load_space(file).mapping_tables.values()
    # TP 16 replicates the 8 KV heads; DP 2 need not divide the 7 requests of each replica
    assert sorted(map(tuple, table[:, :3].tolist())) == [(8, 1, 2), (16, 1, 1)]


def test_a_serving_space_rejects_what_the_serving_model_does_not_read(
    write_yaml: Callable[..., Path],
) -> None:
    file = write_yaml({"base": "llama3-70b-serving-h100",
                       "variables": {"zero_stage": {"type": "integer", "low": 0, "high": 1}}},
                      name="space.yaml")  # fmt: skip
    with pytest.raises(ConfigError, match=re.escape(
            f"{file}: variables.zero_stage is not read by the serving model (workload.kind: "
            "inference varies tensor_parallel, pipeline_parallel, data_parallel, "
            "expert_parallel).")):  # fmt: skip
        load_space(file)


def test_a_serving_space_refuses_a_base_of_disaggregated_pools(
    write_yaml: Callable[..., Path],
) -> None:
    file = write_yaml({"base": "llama3-70b-serving-h100-disaggregated",
                       "variables": {"tdp_W": {"type": "fixed", "value": 700}}},
                      name="space.yaml")  # fmt: skip
    with pytest.raises(ConfigError, match=re.escape(
            f"{file}: base.mapping.prefill_replicas (4) splits the replicas into disaggregated "
            "pools, but a space's mappings are co-located splits of its devices; evaluate pools "
            "one scenario at a time (deepflow evaluate, deepflow best-mapping).")):  # fmt: skip
        load_space(file)


def test_serving_space_rows_equal_one_evaluation_each() -> None:
    from deepflow.datasets.label import label_points, point_scenarios
    from deepflow.oracle.evaluate import evaluate_one

    space = load_space("inference-pathfinding")
    u = np.random.default_rng(3).random((16, space.num_dims))
    rows = label_points(space, u, oracle_version="").to_pandas()
    for i, scenario in enumerate(point_scenarios(space, u)):
        one = evaluate_one(scenario)
        for name in ("tpot_s", "ttft_s", "tokens_per_s", "tokens_per_J", "usd_per_Mtoken",
                     "active_batch"):  # fmt: skip
            assert rows[f"y_{name}"][i] == one[name], (name, i)
        assert rows["y_area_mm2"][i] == one["device"]["area_mm2"]
        assert bool(rows["feasible"][i]) == one["feasible"]
