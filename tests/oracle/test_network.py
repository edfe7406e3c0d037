"""Collectives: hand-computable α–β times, placement, properties, the NCCL calibration, errors."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deepflow.config import list_presets, load_network
from deepflow.data import load_measurements
from deepflow.errors import ConfigError
from deepflow.oracle.network import (
    COLLECTIVES,
    NetworkModel,
    bus_bandwidth_Bps,
    collective_time_s,
    group_placement,
    network_calibration,
)

GB = 1e9
#: measurement group -> the network preset it ran on (DGX H200 = DGX H100 fabric).
NCCL_GROUPS = {"nccl_tests_a100_node": "dgx-a100", "allreduce_bench_h200_node": "dgx-h100"}
NETS = {name: NetworkModel.from_spec(load_network(name), 8) for name in ("dgx-a100", "dgx-h100")}
PROPERTY_NETS = {
    "dgx-a100": NETS["dgx-a100"],
    "dgx-h100": NETS["dgx-h100"],
    "dgx-v100": NetworkModel.from_spec(load_network("dgx-v100"), 8),
    "tpu-v4-pod": NetworkModel.from_spec(load_network("tpu-v4-pod"), 64),
    "waferscale-20xv100": NetworkModel.from_spec(load_network("waferscale-20xv100"), 20),
}
ALGOS = {
    "all_reduce": ("auto", "ring", "tree", "hierarchical"),
    "reduce_scatter": ("auto", "ring", "hierarchical"),
    "all_gather": ("auto", "ring", "hierarchical"),
    "all_to_all": ("auto",),
    "send_recv": ("auto",),
}


def _plain(**kw: Any) -> NetworkModel:
    """A bare α–β network: bulk protocol only, no launch latency (the NetworkModel defaults)."""
    base: dict[str, Any] = {
        "devices_per_node": 8,
        "scale_up_topology": "switch",
        "scale_up_bandwidth_Bps": 100 * GB,
        "scale_up_latency_s": 2e-6,
        "scale_up_efficiency": 0.5,
        "scale_out_topology": "fat-tree",
        "scale_out_bandwidth_Bps": 25 * GB,
        "scale_out_latency_s": 5e-6,
        "scale_out_efficiency": 0.8,
    }
    return NetworkModel(**{**base, **kw})


# ------------------------------------------------------------------------- hand-computable
def test_ring_all_reduce_is_the_alpha_beta_formula() -> None:
    # Thakur et al. 2005 / docs/model.md §C5.1: 2(n−1)·α + 2(n−1)/n·S/(η·B).
    net, size = _plain(), 1e9
    expected = 2 * 7 * 2e-6 + 2 * 7 / 8 * size / (0.5 * 100 * GB)
    assert float(collective_time_s("all_reduce", size, 8, net=net, algorithm="ring")) == (
        pytest.approx(expected, rel=1e-12)
    )
    assert float(collective_time_s("all_reduce", size, 8, net=net)) == pytest.approx(expected)


def test_ring_reduce_scatter_and_all_gather_are_half_an_all_reduce_of_steps() -> None:
    net, size = _plain(), 3e8
    expected = 7 * 2e-6 + 7 / 8 * size / (0.5 * 100 * GB)
    for coll in ("reduce_scatter", "all_gather"):
        assert float(collective_time_s(coll, size, 8, net=net)) == pytest.approx(expected)


def test_data_parallel_group_across_nodes_is_a_scale_out_ring() -> None:
    # TP=8, PP=8, DP=24 on 8-GPU nodes: the DP group has stride 64, one member per node.
    net, size = _plain(), 2e9
    expected = 2 * 23 * 5e-6 + 2 * 23 / 24 * size / (0.8 * 25 * GB)
    got = collective_time_s("all_reduce", size, 24, net=net, stride=64, algorithm="ring")
    assert float(got) == pytest.approx(expected)


def test_flat_ring_across_nodes_reaches_the_node_nic_aggregate() -> None:
    # 8×HDR DGX-A100 nodes: multi-node all-reduce busbw ≈ 192 GB/s (docs/model.md §C5.1).
    size = 2**33
    t = collective_time_s("all_reduce", size, 16, net=NETS["dgx-a100"])
    busbw = float(bus_bandwidth_Bps("all_reduce", size, t, 16))
    assert busbw == pytest.approx(192 * GB, rel=0.05)


def test_all_to_all_across_nodes_cannot_pool_nics() -> None:
    # nccl-tests: all-to-all busbw on N nodes ≈ N/(N−1) × the per-GPU NIC bandwidth (§5.1).
    size = 2**32
    t = collective_time_s("all_to_all", size, 16, net=NETS["dgx-a100"])
    busbw = float(bus_bandwidth_Bps("all_to_all", size, t, 16))
    assert busbw == pytest.approx(2 * 0.96 * 25 * GB, rel=0.08)


def test_torus_ring_along_a_full_dimension_is_bidirectional() -> None:
    # 16 chips along one wrapped axis of a 16×16×16 torus: 2 of 6 links, both directions.
    net = dataclasses.replace(
        PROPERTY_NETS["tpu-v4-pod"],
        devices_per_node=4096.0,
        scale_up_latency_s=0.0,
        scale_up_launch_latency_s=0.0,
    )
    size = 1e9
    expected = 2 * 15 / 16 * size / (0.9 * 300 * GB * 2 / 6)
    assert float(collective_time_s("all_reduce", size, 16, net=net)) == pytest.approx(expected)


@pytest.mark.parametrize("collective", COLLECTIVES)
def test_group_of_one_costs_nothing(collective: str) -> None:
    for net in PROPERTY_NETS.values():
        assert float(collective_time_s(collective, 1e9, 1, net=net)) == 0.0


# -------------------------------------------------------------------------------- placement
def test_placement_members_per_node_and_nodes() -> None:
    m, n = group_placement([8, 24, 8, 16, 4], [1, 64, 8, 1, 2], 8)
    assert m.tolist() == [8, 1, 1, 8, 4]
    assert n.tolist() == [1, 24, 8, 2, 1]


def _scaled(net: NetworkModel, level: str, factor: float) -> NetworkModel:
    return dataclasses.replace(
        net,
        **{
            f"{level}_bandwidth_Bps": np.asarray(getattr(net, f"{level}_bandwidth_Bps")) * factor,
            f"{level}_latency_s": np.asarray(getattr(net, f"{level}_latency_s")) * factor,
            f"{level}_launch_latency_s": 0.0,
        },
    )


@pytest.mark.parametrize("collective", COLLECTIVES)
def test_tensor_parallel_group_in_a_node_never_touches_scale_out(collective: str) -> None:
    net = NETS["dgx-a100"]
    sizes = np.logspace(3, 10, 15)
    n = 2 if collective == "send_recv" else 8
    base = collective_time_s(collective, sizes, n, net=net)
    other = collective_time_s(collective, sizes, n, net=_scaled(net, "scale_out", 0.01))
    np.testing.assert_array_equal(base, other)


@pytest.mark.parametrize("collective", COLLECTIVES)
def test_stride_64_data_parallel_group_is_all_scale_out(collective: str) -> None:
    net = dataclasses.replace(NETS["dgx-a100"], scale_up_launch_latency_s=0.0)
    sizes = np.logspace(3, 10, 15)
    base = collective_time_s(collective, sizes, 24, net=net, stride=64)
    other = collective_time_s(collective, sizes, 24, net=_scaled(net, "scale_up", 100.0), stride=64)
    np.testing.assert_array_equal(base, other)


# ------------------------------------------------------------------------------- properties
cases = st.fixed_dictionaries(
    {
        "net": st.sampled_from(sorted(PROPERTY_NETS)),
        "collective": st.sampled_from(COLLECTIVES),
        "size": st.floats(1.0, 1e11),
        "grow": st.floats(1.0, 1e4),
        "group": st.sampled_from([2, 3, 4, 8, 16, 20, 24, 64, 256]),
        "stride": st.sampled_from([1, 2, 4, 8, 16, 64]),
        "faster": st.floats(1.0, 100.0),
    }
)


def _algorithm(case: dict[str, Any]) -> str:
    algos = ALGOS[case["collective"]]
    return algos[int(case["size"]) % len(algos)]


@settings(max_examples=60, deadline=None)
@given(cases)
def test_time_is_non_decreasing_in_message_size(case: dict[str, Any]) -> None:
    net, coll = PROPERTY_NETS[case["net"]], case["collective"]
    kw = {"net": net, "stride": case["stride"], "algorithm": _algorithm(case)}
    small = float(collective_time_s(coll, case["size"], case["group"], **kw))
    large = float(collective_time_s(coll, case["size"] * case["grow"], case["group"], **kw))
    assert large >= small


@settings(max_examples=60, deadline=None)
@given(cases)
def test_more_bandwidth_is_never_slower(case: dict[str, Any]) -> None:
    net, coll, f = PROPERTY_NETS[case["net"]], case["collective"], case["faster"]
    kw = {"stride": case["stride"], "algorithm": _algorithm(case)}
    slow = float(collective_time_s(coll, case["size"], case["group"], net=net, **kw))
    for level in ("scale_up", "scale_out"):
        bw = np.asarray(getattr(net, f"{level}_bandwidth_Bps")) * f
        fast_net = dataclasses.replace(net, **{f"{level}_bandwidth_Bps": bw})
        fast = float(collective_time_s(coll, case["size"], case["group"], net=fast_net, **kw))
        assert fast <= slow


@settings(max_examples=15, deadline=None)
@given(st.sampled_from(sorted(PROPERTY_NETS)), st.sampled_from(COLLECTIVES), st.integers(0, 2**31))
def test_batch_equals_loop_of_singles(net_name: str, collective: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    k = 12
    size = 10 ** rng.uniform(0, 11, k)
    group = rng.choice([1, 2, 4, 8, 16, 24, 64], k)
    stride = rng.choice([1, 2, 8, 64], k)
    one = PROPERTY_NETS[net_name]
    scale_up = float(np.asarray(one.scale_up_bandwidth_Bps)) * rng.uniform(0.5, 2.0, k)
    nodes = rng.choice([4, 8, 16], k).astype(float)
    net = dataclasses.replace(one, scale_up_bandwidth_Bps=scale_up, devices_per_node=nodes)
    batch = collective_time_s(collective, size, group, net=net, stride=stride)
    assert batch.shape == (k,)
    for i in range(k):
        single = dataclasses.replace(
            one, scale_up_bandwidth_Bps=scale_up[i], devices_per_node=nodes[i]
        )
        t = collective_time_s(collective, size[i], group[i], net=single, stride=stride[i])
        assert t.shape == ()
        assert float(t) == pytest.approx(batch[i], rel=1e-12)


@settings(max_examples=20, deadline=None)
@given(st.sampled_from(sorted(PROPERTY_NETS)), st.integers(0, 2**31))
def test_mixed_collectives_in_one_call_equal_each_alone(net_name: str, seed: int) -> None:
    # The scalar oracle evaluates a step's new collectives, of every kind, in one call.
    rng = np.random.default_rng(seed)
    k = 16
    kinds = list(rng.choice(COLLECTIVES, k))
    size = 10 ** rng.uniform(0, 11, k)
    size[rng.random(k) < 0.1] = 0.0
    group = rng.choice([1, 2, 4, 8, 16, 24, 64], k)
    stride = rng.choice([1, 2, 8, 64], k)
    net = PROPERTY_NETS[net_name]
    mixed = collective_time_s(kinds, size, group, net=net, stride=stride)
    alone = [collective_time_s(c, size[i], group[i], net=net, stride=stride[i])
             for i, c in enumerate(kinds)]  # fmt: skip
    assert mixed.shape == (k,)
    np.testing.assert_array_equal(mixed, alone)  # bit for bit
    ring = list(rng.choice(["all_reduce", "reduce_scatter", "all_gather"], k))
    for algorithm in ("ring", "hierarchical"):
        kw = {"net": net, "algorithm": algorithm}
        mixed = collective_time_s(ring, size, group, stride=stride, **kw)
        alone = [collective_time_s(c, size[i], group[i], stride=stride[i], **kw)
                 for i, c in enumerate(ring)]  # fmt: skip
        np.testing.assert_array_equal(mixed, alone)


@pytest.mark.parametrize("net_name", sorted(PROPERTY_NETS))
def test_all_gather_costs_what_reduce_scatter_costs(net_name: str) -> None:
    # One cost model (Thakur et al. 2005 §4): the scalar oracle memoises them under one key.
    net = PROPERTY_NETS[net_name]
    sizes = np.logspace(0, 11, 23)[:, None, None]
    group, stride = np.array([1, 2, 3, 8, 16, 24, 256])[:, None], np.array([1, 2, 8, 64])
    for algorithm in ALGOS["all_gather"]:
        kw = {"net": net, "stride": stride, "algorithm": algorithm}
        np.testing.assert_array_equal(
            collective_time_s("all_gather", sizes, group, **kw),
            collective_time_s("reduce_scatter", sizes, group, **kw),
        )


def test_every_network_preset_gives_finite_times() -> None:
    for name in list_presets("networks"):
        spec = load_network(name)
        net = NetworkModel.from_spec(spec, spec.scale_up.domain_size)
        for coll in COLLECTIVES:
            t = collective_time_s(coll, np.logspace(3, 10, 8)[:, None], [2, 8], net=net)
            assert np.all(np.isfinite(t)) and np.all(t > 0), (name, coll)


# ---------------------------------------------------------------------- NCCL calibration
def _nccl_cases(min_size_B: float = 2**20) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for group, network in NCCL_GROUPS.items():
        for case in load_measurements(group):
            if case["collective"]["payload_bytes"] >= min_size_B:
                out.append((network, case))
    return out


@pytest.mark.parametrize(
    ("network", "case"), _nccl_cases(), ids=[c["id"] for _, c in _nccl_cases()]
)
def test_calibrated_all_reduce_within_15_percent_busbw(network: str, case: dict[str, Any]) -> None:
    # Issue acceptance: all-reduce bus bandwidth within 15 % for messages ≥ 1 MiB.
    coll = case["collective"]
    t = collective_time_s("all_reduce", coll["payload_bytes"], coll["ranks"], net=NETS[network])
    busbw = float(bus_bandwidth_Bps("all_reduce", coll["payload_bytes"], t, coll["ranks"]))
    assert busbw == pytest.approx(case["measured"]["busbw_GBps"] * GB, rel=0.15)


@pytest.mark.parametrize("network", sorted(NETS))
def test_small_messages_are_latency_bound(network: str) -> None:
    sizes = np.array([32 * 2**10, 16 * 2**30])
    busbw = bus_bandwidth_Bps(
        "all_reduce", sizes, collective_time_s("all_reduce", sizes, 8, net=NETS[network]), 8
    )
    assert busbw[0] < 0.01 * busbw[1]


def test_bus_bandwidth_factors_follow_nccl_tests() -> None:
    # nccl-tests doc/PERFORMANCE.md: all-reduce 2(n−1)/n, gather/scatter/all-to-all (n−1)/n.
    assert float(bus_bandwidth_Bps("all_reduce", 8.0, 1.0, 8)) == pytest.approx(14.0)
    for coll in ("reduce_scatter", "all_gather", "all_to_all"):
        assert float(bus_bandwidth_Bps(coll, 8.0, 1.0, 8)) == pytest.approx(7.0)
    assert float(bus_bandwidth_Bps("send_recv", 8.0, 1.0, 2)) == pytest.approx(8.0)
    assert float(bus_bandwidth_Bps("all_reduce", 8.0, 1.0, 1)) == 0.0


# ------------------------------------------------------------------------------------ errors
def test_unknown_collective_message() -> None:
    with pytest.raises(ConfigError) as err:
        collective_time_s("allreduce", 1e6, 8, net=NETS["dgx-a100"])
    assert str(err.value) == (
        "unknown collective 'allreduce'; valid collectives: all_reduce, reduce_scatter, "
        "all_gather, all_to_all, send_recv."
    )


def test_unknown_collective_in_a_sequence_message() -> None:
    with pytest.raises(ConfigError) as err:
        collective_time_s(["all_reduce", "allgather"], 1e6, 8, net=NETS["dgx-a100"])
    assert str(err.value) == (
        "unknown collective 'allgather'; valid collectives: all_reduce, reduce_scatter, "
        "all_gather, all_to_all, send_recv."
    )


def test_unknown_algorithm_message() -> None:
    with pytest.raises(ConfigError) as err:
        collective_time_s("all_reduce", 1e6, 8, net=NETS["dgx-a100"], algorithm="butterfly")
    assert str(err.value) == (
        "unknown algorithm 'butterfly'; valid algorithms: auto, ring, tree, hierarchical, "
        "in_network."
    )


def test_algorithm_that_does_not_apply_message() -> None:
    with pytest.raises(ConfigError) as err:
        collective_time_s("all_gather", 1e6, 8, net=NETS["dgx-a100"], algorithm="tree")
    assert str(err.value) == (
        "algorithm 'tree' does not apply to all_gather; valid algorithms for it: auto, ring, "
        "hierarchical."
    )


def test_in_network_reduction_only_where_the_switch_has_it() -> None:
    a100 = collective_time_s("all_reduce", 1e9, 8, net=NETS["dgx-a100"], algorithm="in_network")
    h100 = collective_time_s("all_reduce", 1e9, 8, net=NETS["dgx-h100"], algorithm="in_network")
    across = collective_time_s("all_reduce", 1e9, 16, net=NETS["dgx-h100"], algorithm="in_network")
    assert np.isinf(a100) and np.isfinite(h100) and np.isinf(across)


def test_calibration_file_unknown_key(tmp_path: Path) -> None:
    path = tmp_path / "network.yaml"
    path.write_text(
        "link_classes:\n  generic:\n    launch_latency_us: 1\n    simple: {efficency: 0.8}\n"
        "default_class: generic\n",
        encoding="utf-8",
    )
    with pytest.raises(ConfigError) as err:
        network_calibration(str(path))
    assert str(err.value) == (
        f"{path}: unknown key 'link_classes.generic.simple.efficency'; did you mean "
        "'efficiency'? Valid keys: efficiency, fill_wire_MiB, min_wire_MiB, step_latency_us."
    )
