"""The knob table (deepflow.config.mapping.KNOBS) is MappingSpec's declarations, and a knob's
oracle column, its design-space label input and its best-mapping entry all come from it."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest
import yaml

from deepflow.config import load_scenario
from deepflow.config.mapping import KNOB, KNOBS, SERVING_KNOBS, STRUCTURAL, Knob, knobs_of
from deepflow.config.specs import MappingSpec
from deepflow.datasets.label import _transformer_inputs, decode, decode_x, point_scenarios
from deepflow.datasets.space import MAPPING_KNOBS, space_from_text
from deepflow.oracle.best_mapping import best_mappings, enumerate_mappings
from deepflow.oracle.evaluate import evaluate_one
from deepflow.oracle.workloads import workload_for
from deepflow.oracle.workloads.transformer import MAPPING_COLUMNS, RECOMPUTE_CODES
from tests.conftest import REPO

SCENARIO = REPO / "configs" / "scenarios" / "llama3-8b-h100.yaml"
GEMM = REPO / "configs" / "scenarios" / "gemm-waferscale-rc20.yaml"
TRANSFORMER = knobs_of("transformer")


def _values(k: Knob) -> list[Any]:
    """A few values of a knob's domain: every choice, both booleans, integers from its bound."""
    if k.type == "choice":
        return list(k.choices)
    if k.type == "bool":
        return [False, True]
    low = int(k.ge if k.ge is not None else 0)
    return list(range(low, int(k.le) + 1)) if k.le is not None else [low, low + 1, low + 7]


def test_the_table_is_mapping_spec() -> None:
    fields = dataclasses.fields(MappingSpec)
    assert [k.name for k in KNOBS] == [f.name for f in fields]
    for k, f in zip(KNOBS, fields, strict=True):
        assert k.default == f.default
        assert (k.ge, k.le) == (f.metadata["ge"], f.metadata["le"])
        assert k.choices == tuple(f.metadata["choices"] or ())
        assert k.type == {"int": "int", "bool": "bool", "str": "choice"}[str(f.type)]
    # a choice's named values are codes 0, 1, 2, ... in declaration order
    assert KNOB["activation_recompute"].codes == {"none": 0.0, "selective": 1.0, "full": 2.0,
                                                  "selective_op": 3.0,
                                                  "selective_dots": 4.0}  # fmt: skip
    assert RECOMPUTE_CODES == KNOB["activation_recompute"].codes
    assert KNOB["activation_recompute"].column == "recompute"
    assert KNOB["kernel_partition"].codes == {"rc": 0.0, "cr": 1.0}


@pytest.mark.parametrize("k", KNOBS, ids=lambda k: k.name)
def test_encoding_round_trips(k: Knob) -> None:
    for value in _values(k):
        code = k.encode(value)
        assert isinstance(code, float)
        decoded = k.decode(np.float64(code))
        assert decoded == value and type(decoded) is type(value)


@pytest.mark.parametrize("k", TRANSFORMER, ids=lambda k: k.name)
def test_a_knobs_oracle_column_comes_from_the_table(k: Knob) -> None:
    scenario = load_scenario(SCENARIO)
    kind = workload_for(scenario.workload.model)
    assert MAPPING_COLUMNS == tuple(t.column for t in TRANSFORMER)
    for value in _values(k):
        mapping = dataclasses.replace(scenario.mapping, **{k.name: value})
        columns = kind.columns(scenario.workload, mapping)
        assert columns[k.column] == k.encode(value)


@pytest.mark.parametrize("path", [SCENARIO, GEMM, REPO / "configs/scenarios/lstm-a100.yaml"])
def test_each_kind_takes_exactly_its_knobs(path: Any) -> None:
    scenario = load_scenario(path)
    kind = workload_for(scenario.workload.model)
    columns = kind.columns(scenario.workload, scenario.mapping)
    mine = knobs_of(kind.kind)
    assert mine
    assert {k.column: columns[k.column] for k in mine} == {
        k.column: k.encode(getattr(scenario.mapping, k.name)) for k in mine
    }
    others = {k.column for k in KNOBS} - {k.column for k in mine}
    assert not others & set(columns)


#: A space over llama3-8b on 8 devices that varies every transformer knob the space may vary.
SPACE = {
    "description": "test: every mapping knob",
    "base": {
        "system": {"device": "h100-sxm5-80gb", "network": "dgx-h100", "devices_per_node": 8},
        "workload": {"model": "llama3-8b", "global_batch_size": 64, "precision": "bf16"},
        "mapping": {"data_parallel": 8},
    },
    "sampler": "sobol",
    "variables": {
        "tensor_parallel": {"type": "categorical", "choices": [1, 2, 4, 8]},
        "pipeline_parallel": {"type": "categorical", "choices": [1, 2]},
        "micro_batch_size": {"type": "categorical", "choices": [1, 2]},
        "sequence_parallel": {"type": "categorical", "choices": [False, True]},
        "activation_recompute": {
            "type": "categorical",
            "choices": ["full", "none", "selective", "selective_op", "selective_dots"],
        },
        "fp32_main_grads": {"type": "categorical", "choices": [False, True]},
        "fp8_weight_cache": {"type": "categorical", "choices": [False, True]},
        "overlap_p2p_comm": {"type": "categorical", "choices": [False, True]},
        "cross_entropy": {"type": "categorical", "choices": ["vocab_parallel", "unfused", "fused"]},
        "zero_stage": {"type": "integer", "low": 0, "high": 3},
        "recompute_num_layers": {"type": "integer", "low": 0, "high": 4},
        "activation_offload_layers": {"type": "integer", "low": 0, "high": 2},
        "flash_attention": {"type": "categorical", "choices": [True, False]},
        "tp_comm_overlap": {"type": "fixed", "value": True},
        "tp_async_backward": {"type": "categorical", "choices": [False, True]},
        "recorded_tp_gradients": {"type": "categorical", "choices": [False, True]},
        "master_weights": {"type": "categorical", "choices": ["fp32", "remainders"]},
        "gradient_buffers": {"type": "categorical", "choices": ["main", "fp32_accumulator"]},
        "fused_swiglu": {"type": "categorical", "choices": [False, True]},
        "fused_norm": {"type": "categorical", "choices": [False, True]},
        "fused_rotary": {"type": "categorical", "choices": [False, True]},
        "pipeline_balance": {
            "type": "categorical",
            "choices": ["layers", "compute", "ends_as_layers"],
        },
        "attention_kernel": {"type": "categorical", "choices": ["fa2", "cudnn", "fa3"]},
        "fp8_params": {"type": "categorical", "choices": [False, True]},
        "fp8_recipe": {"type": "categorical", "choices": ["tensorwise", "rowwise", "mxfp8"]},
        "overlap_grad_reduce": {"type": "categorical", "choices": [False, True]},
        "fsdp_implementation": {"type": "categorical", "choices": ["none", "fsdp1", "fsdp2"]},
        "fsdp_reduce_fp32": {"type": "categorical", "choices": [False, True]},
        "grad_accumulation": {"type": "categorical", "choices": ["fused", "unfused_fp32"]},
        "rank_order": {"type": "categorical", "choices": ["tp-cp-dp-pp", "dp-tp-cp-pp"]},
        "grid_axes": {"type": "categorical", "choices": ["xyz", "yxz"]},
    },
}


def test_a_knobs_label_input_comes_from_the_table() -> None:
    space = space_from_text(yaml.safe_dump(SPACE))
    assert set(MAPPING_KNOBS) == {k.name for k in TRANSFORMER}
    u = np.random.default_rng(0).random((64, space.num_dims))
    dec = decode(space, u)
    rows = np.arange(64)
    cols = _transformer_inputs(space, dec, rows, 64)
    xs = decode_x(space, u)
    scenarios = point_scenarios(space, u)
    varied = [k for k in TRANSFORMER if f"x_{k.name}" in xs]
    # a space cannot vary expert_tensor_parallel or data_parallel_replicas: the valid degrees
    # depend on them; nor a training space the serving pools
    fixed = {*STRUCTURAL, "expert_tensor_parallel", "data_parallel_replicas", *SERVING_KNOBS}
    assert {k.name for k in TRANSFORMER} - {k.name for k in varied} <= fixed
    for k in varied:
        x = xs[f"x_{k.name}"]
        assert len({str(v) for v in x}) > 1 or k.name == "tp_comm_overlap", k.name  # varied
        assert np.array_equal(cols[k.column], [k.encode(v) for v in x.tolist()]), k.name
        decoded = [k.decode(c) for c in cols[k.column]]
        assert [getattr(s.mapping, k.name) for s in scenarios] == decoded, k.name


def test_a_knobs_best_mapping_entry_comes_from_the_table() -> None:
    scenario = load_scenario(SCENARIO)
    columns = enumerate_mappings(scenario)
    assert tuple(columns) == MAPPING_COLUMNS
    # dense model, short sequence; a switched network has no axes to order
    fixed_by_model = ("context_parallel", "expert_parallel", "expert_tensor_parallel", "grid_axes")
    # not searched: the oracle charges no time for offload copies (they overlap compute), so
    # a search would always offload; partial recompute and hybrid-sharding replicas are the
    # scenario's choice (the valid data-parallel degrees depend on the replicas)
    # (the serving pools, §D6, are a training mapping's 0)
    as_set = (
        "recompute_num_layers",
        "activation_offload_layers",
        "data_parallel_replicas",
        *SERVING_KNOBS,
    )
    for k in TRANSFORMER:  # framework switches stay as the scenario sets them
        if k.framework or k.name in as_set:
            assert set(columns[k.column]) == {k.encode(getattr(scenario.mapping, k.name))}
        else:
            assert len(set(columns[k.column])) > 1 or k.name in fixed_by_model, k.name
    result = best_mappings(scenario, top=3)
    chosen = [k for k in TRANSFORMER if not k.framework and k.name not in SERVING_KNOBS]
    for entry in result["mappings"]:
        assert list(entry["mapping"]) == [k.name for k in chosen]
        for k in chosen:
            assert type(entry["mapping"][k.name]) is type(k.default)
        # the entry, put back into the scenario, is the mapping that was evaluated
        mapping = dataclasses.replace(scenario.mapping, **entry["mapping"])
        again = evaluate_one(dataclasses.replace(scenario, mapping=mapping))
        assert again["step_time_s"] == entry["step_time_s"]
