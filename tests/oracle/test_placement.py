"""Placement: the rank order of the parallel dimensions and the axis order of a direct topology
change where the groups sit and so what their collectives cost (docs/model.md §C3);
best-mapping finds the best placement by branch and bound, as an exhaustive search would."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from deepflow.cli import app
from deepflow.config import load_scenario, scenario_from_mapping
from deepflow.config.mapping import KNOB
from deepflow.config.specs import GRID_AXES, RANK_ORDERS, Scenario
from deepflow.errors import ConfigError
from deepflow.oracle.best_mapping import best_mappings, enumerate_mappings
from deepflow.oracle.evaluate import device_network, evaluate_one, evaluate_table, network_model
from deepflow.oracle.hardware import device_caps
from deepflow.oracle.network import collective_time_s, group_placement
from deepflow.oracle.workloads.transformer import transformer_columns, transformer_step
from tests.conftest import REPO

runner = CliRunner()


def _h100(num_nodes: int = 2, **mapping: Any) -> Scenario:
    raw = {
        "system": {"device": "h100-sxm5-80gb", "network": "dgx-h100", "devices_per_node": 8,
                   "num_nodes": num_nodes},
        "workload": {"model": "llama3-8b", "global_batch_size": 64, "precision": "bf16"},
        "mapping": {"activation_recompute": "full", "zero_stage": 1, **mapping},
    }  # fmt: skip
    return scenario_from_mapping(raw, file="<placement>")


def test_the_default_order_is_megatrons_and_keeps_tensor_parallel_in_a_node() -> None:
    assert RANK_ORDERS[0] == KNOB["rank_order"].default == "tp-cp-dp-pp"
    r = evaluate_one(_h100(tensor_parallel=8, data_parallel=2))
    assert r["placement"] == {
        "rank_order": "tp-cp-dp-pp",
        "grid_axes": "xyz",
        "groups": {
            "tensor_parallel": {"size": 8, "stride": 1, "members_per_node": 8, "nodes": 1},
            "data_parallel": {"size": 2, "stride": 8, "members_per_node": 1, "nodes": 2},
        },
    }


def test_data_parallel_innermost_sends_tensor_parallel_across_nodes() -> None:
    inner = evaluate_one(_h100(tensor_parallel=8, data_parallel=2))
    outer = evaluate_one(_h100(tensor_parallel=8, data_parallel=2, rank_order="dp-tp-cp-pp"))
    groups = outer["placement"]["groups"]
    assert groups["tensor_parallel"] == {"size": 8, "stride": 2, "members_per_node": 4,
                                         "nodes": 2}  # fmt: skip
    assert groups["data_parallel"]["nodes"] == 1
    tp = "tensor_parallel_comm"
    assert outer["breakdown_s"][tp] > 1.5 * inner["breakdown_s"][tp]
    assert outer["step_time_s"] > inner["step_time_s"]
    # placement moves no byte in memory
    assert outer["memory_breakdown_B"] == inner["memory_breakdown_B"]


def test_megatrons_tp_pp_dp_mapping_keeps_the_pipeline_in_a_node() -> None:
    # --use-tp-pp-dp-mapping (Megatron-Core order tp-cp-ep-pp-dp): pipeline neighbours share
    # a node, data-parallel peers are a node apart.
    megatron = dict(tensor_parallel=2, pipeline_parallel=4, data_parallel=2)
    default = evaluate_one(_h100(**megatron))["placement"]["groups"]
    tp_pp_dp = evaluate_one(_h100(**megatron, rank_order="tp-cp-pp-dp"))["placement"]["groups"]
    assert default["pipeline_parallel"] == {"size": 4, "stride": 4, "members_per_node": 2,
                                            "nodes": 2}  # fmt: skip
    assert tp_pp_dp["pipeline_parallel"] == {"size": 4, "stride": 2, "members_per_node": 4,
                                             "nodes": 1}  # fmt: skip
    assert tp_pp_dp["data_parallel"] == {"size": 2, "stride": 8, "members_per_node": 1,
                                         "nodes": 2}  # fmt: skip


def test_orders_that_differ_only_in_groups_of_one_rank_are_the_same_placement() -> None:
    a = evaluate_one(_h100(num_nodes=1, tensor_parallel=8, data_parallel=1))
    b = evaluate_one(_h100(num_nodes=1, tensor_parallel=8, data_parallel=1,
                           rank_order="cp-dp-pp-tp"))  # fmt: skip
    assert a["step_time_s"] == b["step_time_s"]


def test_a_batch_of_placements_equals_their_single_evaluations() -> None:
    base = _h100(tensor_parallel=4, pipeline_parallel=2, data_parallel=2, context_parallel=1)
    orders = ["tp-cp-dp-pp", "dp-tp-cp-pp", "tp-cp-pp-dp", "pp-dp-cp-tp"]
    codes = np.array([KNOB["rank_order"].encode(o) for o in orders])
    table = evaluate_table(base, {"rank_order": codes})
    for i, order in enumerate(orders):
        one = evaluate_one(_h100(tensor_parallel=4, pipeline_parallel=2, data_parallel=2,
                                 rank_order=order))  # fmt: skip
        assert table["step_time_s"][i] == one["step_time_s"], order
    assert len(set(table["step_time_s"].tolist())) > 1


def test_grid_axes_choose_which_torus_axis_a_group_runs_along() -> None:
    # 64 devices on a 4 x 16 torus: a group of 4 along the first axis closes its ring through
    # the wrap-around links (both directions); along the second it is a line of 4 of 16.
    net = network_model(_torus_scenario((4, 16)), 0.0, 0.0)
    xyz, yxz = (GRID_AXES.index(a) for a in ("xyz", "yxz"))
    ring = [float(collective_time_s("all_reduce", 2**26, 4, net=net, axes=a)) for a in (xyz, yxz)]
    assert ring[0] < ring[1]
    # a square torus has no preferred axis
    square = network_model(_torus_scenario((8, 8)), 0.0, 0.0)
    times = collective_time_s("all_reduce", 2**26, 8, net=square, axes=np.arange(6))
    assert len(set(times.tolist())) == 1
    # the default is row-major: code 0 equals leaving axes out
    assert float(collective_time_s("all_reduce", 2**26, 4, net=net)) == ring[0]


def _torus_scenario(shape: tuple[int, int]) -> Scenario:
    n = shape[0] * shape[1]
    raw = {
        "system": {"device": "tpu-v5e", "devices_per_node": n, "num_nodes": 1,
                   "network": {"base": "tpu-v5e-pod",
                               "scale_up": {"shape": list(shape), "domain_size": n}}},
        "workload": {"model": "llama3-8b", "global_batch_size": 256, "precision": "bf16"},
        "mapping": {"data_parallel": n // 4, "tensor_parallel": 4},
    }  # fmt: skip
    return scenario_from_mapping(raw, file="<torus>")


def test_a_scenario_on_a_torus_reads_its_grid_axes() -> None:
    s = _torus_scenario((4, 16))
    a = evaluate_one(s)
    b = evaluate_one(scenario_from_mapping(
        {**_raw(s), "mapping": {"data_parallel": 16, "tensor_parallel": 4, "grid_axes": "yxz"}},
        file="<torus>"))  # fmt: skip
    assert b["placement"]["grid_axes"] == "yxz"
    tp = "tensor_parallel_comm"
    assert a["breakdown_s"][tp] < b["breakdown_s"][tp]


def _raw(s: Scenario) -> dict[str, Any]:
    n = s.system.devices_per_node
    return {
        "system": {"device": "tpu-v5e", "devices_per_node": n, "num_nodes": 1,
                   "network": {"base": "tpu-v5e-pod",
                               "scale_up": {"shape": list(s.system.network.scale_up.shape),
                                            "domain_size": n}}},
        "workload": {"model": "llama3-8b", "global_batch_size": 256, "precision": "bf16"},
    }  # fmt: skip


@pytest.mark.parametrize("name", ["llama3-8b-maxtext-tpu-v5e", "llama3-8b-h100"])
def test_best_mapping_by_branch_and_bound_equals_the_exhaustive_search(name: str) -> None:
    s = load_scenario(REPO / "configs" / "scenarios" / f"{name}.yaml")
    every = enumerate_mappings(s)
    n = len(every["tensor_parallel"])
    model = s.workload.model
    base = transformer_columns(model, s.mapping, s.workload.global_batch_size)  # type: ignore[arg-type]
    x = {k: np.broadcast_to(v, (n,)) for k, v in base.items()} | every
    caps = device_caps(s.system.device, s.workload.precision)
    result = transformer_step(caps, device_network(s, caps), x)
    fits = result["memory_per_device_B"] <= caps.hbm_capacity_B
    exhaustive = np.sort(result["step_time_s"][fits])[:5]
    found = best_mappings(s, top=5)
    assert found["num_valid"] == n
    assert found["num_feasible"] == int(fits.sum())
    assert [m["step_time_s"] for m in found["mappings"]] == exhaustive.tolist()
    # the bound: a placement changes only collective times, so no placement's step is faster
    # than the step without any communication
    free = best_mappings.__globals__["_without_communication"](device_network(s, caps))
    bound = transformer_step(caps, free, x)["step_time_s"]
    assert np.all(bound <= result["step_time_s"])


def test_best_mapping_reports_the_placement_it_chose() -> None:
    found = best_mappings(load_scenario(REPO / "configs" / "scenarios" /
                                        "llama3-8b-maxtext-tpu-v5e.yaml"), top=1)  # fmt: skip
    mapping = found["mappings"][0]["mapping"]
    assert mapping["rank_order"] in RANK_ORDERS and mapping["grid_axes"] in GRID_AXES


def test_an_unknown_rank_order_is_refused_with_the_orders() -> None:
    with pytest.raises(ConfigError) as err:
        _h100(tensor_parallel=8, data_parallel=2, rank_order="tp-dp")
    message = str(err.value)
    assert "mapping.rank_order must be one of: tp-cp-dp-pp, tp-cp-pp-dp," in message
    assert "got 'tp-dp'" in message
    with pytest.raises(ConfigError, match=r"mapping\.grid_axes must be one of: xyz, xzy"):
        _h100(tensor_parallel=8, data_parallel=2, grid_axes="xy")


def test_evaluate_prints_the_placement(tmp_path: Any) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(
        "system: {device: h100-sxm5-80gb, network: dgx-h100, devices_per_node: 8, num_nodes: 2}\n"
        "workload: {model: llama3-8b, global_batch_size: 64, precision: bf16}\n"
        "mapping: {data_parallel: 2, tensor_parallel: 8, rank_order: dp-tp-cp-pp}\n",
        encoding="utf-8",
    )
    out = runner.invoke(app, ["evaluate", str(path)], terminal_width=200)
    assert out.exit_code == 0, out.output
    assert "placement dp-tp-cp-pp: tensor_parallel 8 over 2 nodes, 4 per node" in out.output


@pytest.mark.parametrize("order", ["tp-cp-dp-pp", "dp-tp-cp-pp", "tp-cp-pp-dp", "pp-dp-cp-tp"])
def test_the_reported_placement_is_the_network_models(order: str) -> None:
    r = evaluate_one(_h100(num_nodes=4, tensor_parallel=4, pipeline_parallel=2, data_parallel=4,
                           rank_order=order))  # fmt: skip
    for g in r["placement"]["groups"].values():
        members, nodes = group_placement(g["size"], g["stride"], 8)
        assert (g["members_per_node"], g["nodes"]) == (int(members), int(nodes))


def test_crossflow_kinds_place_their_groups_on_the_wafer_mesh() -> None:
    # The paper's wafer (20 dies, 4 x 5 mesh), the LSTM with 4-way kernel and 5-way data
    # parallelism: the layout the original's deviceMapping enumerates (docs/model.md §B4.10).
    s = load_scenario(REPO / "configs" / "scenarios" / "lstm-waferscale-rc20.yaml")
    orders, axes = ["tp-cp-dp-pp", "dp-cp-tp-pp"], ["xyz", "yxz"]
    rows = [(o, a) for o in orders for a in axes]
    steps = []
    for order, ax in rows:
        mapping = {"tensor_parallel": 4, "data_parallel": 5, "rank_order": order, "grid_axes": ax}
        one = evaluate_one(_replace_mapping(s, mapping))
        steps.append(one["step_time_s"])
        tp = one["placement"]["groups"]["tensor_parallel"]
        assert tp["stride"] == (1 if order == "tp-cp-dp-pp" else 5)
    assert len(set(steps)) > 2  # order and axes both move the step
    base = _replace_mapping(s, {"tensor_parallel": 4, "data_parallel": 5})
    table = evaluate_table(base, {
        "rank_order": np.array([KNOB["rank_order"].encode(o) for o, _ in rows]),
        "grid_axes": np.array([KNOB["grid_axes"].encode(a) for _, a in rows]),
    })  # fmt: skip
    assert table["step_time_s"].tolist() == steps


def _replace_mapping(s: Scenario, values: dict[str, Any]) -> Scenario:
    from dataclasses import replace

    return replace(s, mapping=replace(s.mapping, **values))


def test_best_mapping_prints_the_placement_with_wide(monkeypatch: Any) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    path = str(REPO / "configs" / "scenarios" / "llama3-8b-maxtext-tpu-v5e.yaml")
    narrow = runner.invoke(app, ["best-mapping", path, "--top", "2"])
    assert narrow.exit_code == 0, narrow.output
    assert "ranks, axes; --wide shows them" in narrow.stdout
    wide = runner.invoke(app, ["best-mapping", path, "--top", "2", "--wide"])
    header = next(line for line in wide.stdout.splitlines() if line.startswith("┃"))
    assert "ranks" in header and "axes" in header
    assert "tp-dp-cp-pp" in wide.stdout  # FSDP ranks innermost beat CP's on the v5e torus
