"""The mapping rules exist once: the loader, the design-space enumerator and best-mapping
apply the same rules (deepflow.config.mapping) to the same invalid mapping."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import yaml

from deepflow.config import load_model, load_scenario
from deepflow.config.mapping import RULES, STRUCTURAL, first_violation
from deepflow.config.specs import TransformerSpec
from deepflow.datasets.space import valid_mappings
from deepflow.errors import ConfigError
from deepflow.oracle.best_mapping import enumerate_mappings
from tests.conftest import REPO

SCENARIO = REPO / "configs" / "scenarios" / "llama3-8b-h100.yaml"
#: pipeline 2 × virtual stages 3 = 6 does not divide Llama-3-8B's 32 layers.
INVALID = {"tensor_parallel": 1, "pipeline_parallel": 2, "data_parallel": 4,
           "context_parallel": 1, "expert_parallel": 1, "micro_batch_size": 1,
           "virtual_pipeline_stages": 3}  # fmt: skip
MESSAGE = "pipeline_parallel 2 × virtual_pipeline_stages 3 = 6 must divide num_layers (32)."


def test_one_rule_everywhere(write_yaml: Callable[..., Path]) -> None:
    raw = yaml.safe_load(SCENARIO.read_text())
    raw["mapping"].update({k: v for k, v in INVALID.items() if k != "expert_parallel"})
    path = write_yaml(raw)
    with pytest.raises(ConfigError) as err:  # the loader
        load_scenario(path)
    assert str(err.value) == f"{path}: mapping.virtual_pipeline_stages {MESSAGE}"
    model = load_scenario(SCENARIO).workload.model
    assert first_violation(INVALID, model) == ("virtual_pipeline_stages", MESSAGE)
    # the design-space enumerator: only the interleave the rule admits survives
    candidates = {d: (v,) for d, v in INVALID.items()} | {"virtual_pipeline_stages": (1, 3),
                                                          "data_parallel": None}  # fmt: skip
    table = valid_mappings(8, model, 64, candidates)  # type: ignore[arg-type]
    assert table[:, STRUCTURAL.index("virtual_pipeline_stages")].tolist() == [1]
    # best-mapping: every mapping it enumerates passes every rule; the invalid one is absent
    columns = enumerate_mappings(load_scenario(SCENARIO))
    rows = np.stack([columns[d] for d in STRUCTURAL], axis=1).astype(int)
    assert not any(r.tolist() == list(INVALID.values()) for r in rows)
    distinct = {tuple(r) for r in rows.tolist()}
    assert all(first_violation(dict(zip(STRUCTURAL, r, strict=True)), model) is None  # type: ignore[arg-type]
               for r in distinct)  # fmt: skip


def test_rules_are_vectorised_predicates() -> None:
    model = load_scenario(SCENARIO).workload.model
    cols = {d: np.array([v, v]) for d, v in INVALID.items()}
    cols["virtual_pipeline_stages"] = np.array([3, 4])  # 2 × 4 = 8 divides 32
    oks = [np.asarray(rule.ok(cols, model)) for rule in RULES]  # type: ignore[arg-type]
    assert np.logical_and.reduce(oks).tolist() == [False, True]


def test_serving_rules_replicate_kv_heads_everywhere() -> None:
    from deepflow.config.mapping import SERVING_TP_RULE, rules_for

    model = load_model("llama3-70b")  # 64 heads, 8 KV heads
    assert isinstance(model, TransformerSpec)
    assert rules_for(False) == RULES and rules_for(True)[0] is SERVING_TP_RULE
    values = {"tensor_parallel": 16, "pipeline_parallel": 1, "data_parallel": 1,
              "context_parallel": 1, "expert_parallel": 1, "micro_batch_size": 1,
              "virtual_pipeline_stages": 1}  # fmt: skip
    assert first_violation(values, model, serving=True) is None
    assert first_violation(values, model)[0] == "tensor_parallel"  # type: ignore[index]
    candidates = {"tensor_parallel": (8, 16, 32), "pipeline_parallel": (1,),
                  "data_parallel": None, "context_parallel": (1,), "expert_parallel": (1,),
                  "micro_batch_size": (1,), "virtual_pipeline_stages": (1,)}  # fmt: skip
    served = valid_mappings(32, model, 3, candidates, serving=True)  # type: ignore[arg-type]
    trained = valid_mappings(32, model, 4, candidates)  # type: ignore[arg-type]
    # training keeps tp 8 only (tp must divide the 8 KV heads; dp 4 divides the batch of 4);
    # serving also replicates them at 16 and 32, and its 3 requests per replica divide nothing
    assert sorted(served[:, 0].tolist()) == [8, 16, 32] and trained[:, 0].tolist() == [8]


def _moe(**degrees: int) -> dict[str, int]:
    return {"tensor_parallel": 1, "pipeline_parallel": 1, "data_parallel": 1,
            "context_parallel": 1, "expert_parallel": 1, "micro_batch_size": 1,
            "virtual_pipeline_stages": 1, "expert_tensor_parallel": 0, **degrees}  # fmt: skip


def test_serving_shards_experts_inside_the_tensor_parallel_group_first() -> None:
    model = load_model("qwen3-235b-a22b")  # 128 experts, 64 heads, 4 KV heads
    assert isinstance(model, TransformerSpec)
    inside = _moe(tensor_parallel=8, expert_parallel=8, expert_tensor_parallel=1)
    assert first_violation(inside, model, serving=True) is None  # vLLM / TensorRT-LLM EP
    assert (
        first_violation(
            _moe(tensor_parallel=8, expert_parallel=4, expert_tensor_parallel=2),
            model,
            serving=True,
        )
        is None
    )  # moe_tp 2 × moe_ep 4 = tp 8
    # beyond the tensor-parallel group, across replicas: 2 here × 4 replicas
    across = _moe(tensor_parallel=2, data_parallel=4, expert_parallel=8, expert_tensor_parallel=1)
    assert first_violation(across, model, serving=True) is None
    # the default (0: experts split as the dense layers) keeps EP across replicas only
    assert first_violation(_moe(data_parallel=8, expert_parallel=8), model, serving=True) is None
    assert first_violation(_moe(tensor_parallel=8, expert_parallel=8), model, serving=True) == (
        "expert_parallel", "(8) must divide data_parallel (1): experts are sharded across "
        "data-parallel ranks.")  # fmt: skip
    assert first_violation(_moe(tensor_parallel=8, expert_parallel=4, expert_tensor_parallel=1),
                           model, serving=True) == (
        "expert_parallel", "(4) must be a multiple of the expert-parallel ranks in each "
        "tensor-parallel group, tensor_parallel 8 / expert_tensor_parallel 1 = 8.")  # fmt: skip
    assert first_violation(_moe(tensor_parallel=8, expert_parallel=8, expert_tensor_parallel=3),
                           model, serving=True) == (
        "expert_tensor_parallel", "(3) must divide tensor_parallel (8) or be a multiple of it "
        "(each expert then split over the ranks of expert_tensor_parallel / tensor_parallel "
        "data-parallel replicas).")  # fmt: skip
    assert first_violation(
        _moe(tensor_parallel=2, data_parallel=2, expert_parallel=8, expert_tensor_parallel=1),
        model, serving=True,
    ) == ("expert_parallel", "(8) / 2 (its ranks in each tensor-parallel group) = 4 must divide "
          "data_parallel (2): beyond the tensor-parallel group experts are sharded across "
          "data-parallel ranks.")  # fmt: skip
    # attention data parallelism with every expert split over the replicas' ranks (TensorRT-LLM
    # moe_tensor_parallel_size with enable_attention_dp), alone or beside expert parallelism
    assert first_violation(_moe(data_parallel=8, expert_tensor_parallel=8), model,
                           serving=True) is None  # fmt: skip
    assert first_violation(_moe(tensor_parallel=2, data_parallel=4, expert_parallel=2,
                                expert_tensor_parallel=4), model, serving=True) is None  # fmt: skip
    assert first_violation(_moe(data_parallel=4, expert_parallel=2, expert_tensor_parallel=4),
                           model, serving=True) == (
        "expert_parallel", "(2) × expert_tensor_parallel 4 / tensor_parallel 1 = 8 data-parallel "
        "replicas must divide data_parallel (4): experts split beyond the tensor-parallel group "
        "span data-parallel replicas.")  # fmt: skip
    # training splits every expert as its dense layers do
    trained = _moe(tensor_parallel=4, data_parallel=4, expert_parallel=4, expert_tensor_parallel=1)
    assert first_violation(trained, model) == (
        "expert_tensor_parallel", "(1) must be 0 or tensor_parallel (4) in training: the model "
        "splits each expert as the dense layers (an expert tensor-parallel degree of its own is "
        "modelled for serving only).")  # fmt: skip
    # the enumerator applies the same rule with the knob fixed
    candidates = {"tensor_parallel": (1, 2, 4, 8), "pipeline_parallel": (1,),
                  "data_parallel": None, "context_parallel": (1,), "expert_parallel": (8,),
                  "micro_batch_size": (1,), "virtual_pipeline_stages": (1,)}  # fmt: skip
    for etp, tps in ((0, [1]), (1, [1, 2, 4, 8])):
        table = valid_mappings(8, model, 1, candidates, serving=True,  # type: ignore[arg-type]
                               expert_tensor_parallel=etp)  # fmt: skip
        assert sorted(table[:, 0].tolist()) == tps, etp


def test_a_scenario_and_a_space_name_the_expert_tensor_parallel_they_cannot_take(
    write_yaml: Callable[..., Path],
) -> None:
    raw = {"workload": {"model": "mixtral-8x7b", "global_batch_size": 8, "precision": "bf16"},
           "system": {"device": "h100-sxm5-80gb", "network": "dgx-h100", "devices_per_node": 2},
           "mapping": {"tensor_parallel": 2, "expert_tensor_parallel": 1}}  # fmt: skip
    path = write_yaml(raw)
    with pytest.raises(ConfigError) as err:
        load_scenario(path)
    assert str(err.value) == (
        f"{path}: mapping.expert_tensor_parallel (1) must be 0 or tensor_parallel (2) in "
        "training: the model splits each expert as the dense layers (an expert tensor-parallel "
        "degree of its own is modelled for serving only)."
    )
    raw["workload"] |= {"kind": "inference", "input_tokens": 128, "output_tokens": 128}
    raw["mapping"]["expert_parallel"] = 2
    assert load_scenario(write_yaml(raw)).mapping.expert_tensor_parallel == 1
    assert _space_varying_error(raw, "expert_tensor_parallel") == (
        "space.yaml: variables.expert_tensor_parallel cannot vary: which expert-parallel "
        "degrees are valid depends on it; set it in base.mapping (one space per expert layout)."
    )


def _space_varying_error(base: dict, key: str) -> str:
    """The error of a design space over ``base`` that varies the fixed mapping key ``key``."""
    from deepflow.datasets.space import space_from_text

    space = {"description": "t", "base": base, "sampler": "sobol",
             "variables": {key: {"type": "categorical", "choices": [1, 2]}}}  # fmt: skip
    with pytest.raises(ConfigError) as err:
        space_from_text(yaml.safe_dump(space), file="space.yaml")
    return str(err.value)


def test_a_scenario_and_a_space_name_the_hybrid_sharding_replicas_they_cannot_take(
    write_yaml: Callable[..., Path],
) -> None:
    mapping = {"data_parallel": 8, "zero_stage": 3, "data_parallel_replicas": 3}
    raw = {"workload": {"model": "llama3-8b", "global_batch_size": 64, "precision": "bf16"},
           "system": {"device": "h100-sxm5-80gb", "network": "dgx-h100", "devices_per_node": 8},
           "mapping": mapping}  # fmt: skip
    path = write_yaml(raw)
    with pytest.raises(ConfigError) as err:
        load_scenario(path)
    assert str(err.value) == (
        f"{path}: mapping.data_parallel_replicas (3) must divide data_parallel (8): each "
        "replica shards over the same number of data-parallel ranks."
    )
    raw["mapping"]["data_parallel_replicas"] = 2
    assert load_scenario(write_yaml(raw)).mapping.data_parallel_replicas == 2
    assert _space_varying_error(raw, "data_parallel_replicas") == (
        "space.yaml: variables.data_parallel_replicas cannot vary: which data-parallel "
        "degrees are valid depends on it; set it in base.mapping (one space per "
        "hybrid-sharding layout)."
    )
