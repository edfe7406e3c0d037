"""The scalar oracle's memoised kernels: a recorder's misses, evaluated together, give what
each kernel model gives alone."""

from __future__ import annotations

from deepflow.config import load_scenario
from deepflow.oracle.evaluate import network_model
from deepflow.oracle.hardware import device_caps
from deepflow.oracle.kernels import gemm, memory_op_time_s
from deepflow.oracle.network import collective_time_s
from deepflow.oracle.workloads.transformer.ops import ScalarOps as _ScalarOps
from tests.conftest import REPO

SCENARIO = REPO / "configs" / "scenarios" / "gpt3-175b-a100.yaml"
GEMMS = [(2048.0, 4608.0, 12288.0, 1.0), (2048.0, 2048.0, 128.0, 96.0), (8.0, 3.0, 5.0, 2.0)]
MEMS = [(1e9, 0.0, 1.0), (3e6, 1e7, 6.0)]
COLLS = [("all_reduce", 1.2e8, 8.0, 1.0), ("all_gather", 3e9, 48.0, 8.0),
         ("reduce_scatter", 3e9, 48.0, 8.0), ("send_recv", 1.2e7, 2.0, 384.0)]  # fmt: skip


def _ops() -> _ScalarOps:
    s = load_scenario(SCENARIO)
    return _ScalarOps(device_caps(s.system.device, "bf16"), network_model(s))


def _alone(ops: _ScalarOps) -> list[float]:
    caps, net = ops.caps, ops.net
    return (
        [float(gemm(caps, *g, detail=False)["time_s"]) for g in GEMMS]
        + [float(memory_op_time_s(caps, b, f, launches=n)) for b, f, n in MEMS]
        + [float(collective_time_s(c, msg, size, net=net, stride=st)) for c, msg, size, st in COLLS]
    )


def _through(ops: _ScalarOps) -> list[float]:
    return (
        [ops.gemm(*g) for g in GEMMS] + [ops.mem(*m) for m in MEMS] + [ops.coll(*c) for c in COLLS]
    )


def test_recorded_misses_evaluated_together_equal_each_kernel_alone() -> None:
    ops = _ops()
    recorder = ops.recorder()
    assert _through(recorder) == [0.0] * 9  # misses are recorded and answered 0
    # all_gather and reduce_scatter of the same message share one entry
    assert ops.flush(recorder) == 8
    assert _through(ops) == _alone(ops)  # bit for bit
    assert ops.flush(ops.recorder()) == 0


def test_a_miss_outside_a_recording_is_evaluated_at_once() -> None:
    ops = _ops()
    assert _through(ops) == _alone(ops)
