"""Collectives over a scale-up domain and a scale-out network: placement, topologies, α–β costs.

What a collective costs follows from where its ranks sit, not from hand-set derates (the
original's ``scale_down`` hack and hand-written derates, docs/model.md §B4.5 and §8 items
7–8). A parallel group is given by its size and its *stride*, the product of the degrees of
the parallel dimensions placed inside it (tensor parallel innermost, stride 1). From
(group size, stride, devices per node) follow the members per node and the nodes spanned
(:func:`group_placement`); a group inside one node uses only the scale-up fabric, a group
spanning nodes also uses every member's own share of the scale-out network.

Cost model (docs/model.md §C5.1; Thakur, Rabenseifner & Gropp 2005; NCCL
``src/graph/tuning.cc``). For every algorithm a and protocol p the time is

    t = λ + Σ_levels steps_a · α_p + Σ_phases g_p(V) / (η_p · B)

with λ the per-collective launch latency, α_p the per-step latency, V the bytes each rank
puts on the wire in a phase, B the raw per-device bandwidth of the level, η_p the achievable
fraction of it, and g_p(V) = max(V_min, V + min(V, V_fill)) a protocol's granularity: below
V_min bytes a protocol's transfer does not get faster (NCCL runs fewer channels on small
messages), and a pipelined protocol pays a fill of up to V_fill bytes before it streams.
``algorithm="auto"`` takes the fastest (algorithm, protocol), as NCCL's tuner does with its
own model. The three protocols are NCCL's: LL (8-byte flag per 8 bytes: low latency, low
bandwidth), LL128 (120 of 128 bytes) and Simple (bulk copies); the calibration data of a link
class (``configs/calibration/network.yaml``) says which exist and what they achieve.

Algorithms:

* ``ring``: one ring through all ranks (Patarasuk & Yuan 2009: bandwidth-optimal). Across
  nodes it is NCCL's flat ring: one channel per NIC, so the node's members reach the
  aggregate of their NICs; intra- and inter-node hops stream concurrently.
* ``tree``: all-reduce only; NCCL's double binary tree across nodes (Sanders, Speck & Träff
  2009) with a chain inside each node: log-depth latency, ~2·S per rank on the wire.
* ``hierarchical``: intra-node reduce-scatter, inter-node collective on 1/m of the data over
  every member's own NIC (m rails in parallel), intra-node all-gather, one after the other
  (docs/model.md §C5.1).
* ``in_network``: all-reduce reduced inside the switch (NVLink SHARP / NVLS on Hopper
  NVSwitch, docs/model.md §C5.1): each rank sends and receives S once. Single-node groups
  on a switch whose link class has an ``in_network`` entry.

Topologies: ``switch`` and ``fat-tree`` are non-blocking (every device its full bandwidth to
any peer). ``ring``, ``torus-2d``, ``torus-3d`` and ``mesh-2d`` are direct networks: a
device's bandwidth is split evenly over its links (2 for a ring, 2·dims for a torus, 4 for a
2-D mesh interior). A group placed on such a grid occupies a sub-grid (row-major placement,
:func:`_grid_dims`); ring collectives there run one ring per spanned dimension, on slices of
the data that take the dimensions in rotated orders so that all dimensions work at once (the
dimension-ordered torus all-reduce: Ying et al. 2018, 2-D torus all-reduce; scaling-book
``sharding.md``): a ring along a dimension with wrap-around links is bidirectional (2 links'
worth), one without (a mesh line, a partial torus dimension) gets 1 link, and a group with
stride s inside a dimension shares each link with s−1 interleaved groups (÷ s).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from deepflow.config.calibration import (
    InNetworkCalibration,
    LinkCalibration,
    NetworkCalibration,
    ProtocolCalibration,
    network_calibration,
)
from deepflow.config.specs import GRID_AXES, TOPOLOGIES, NetworkSpec
from deepflow.errors import ConfigError

__all__ = [
    "ALGORITHMS",
    "COLLECTIVES",
    "PROTOCOLS",
    "TOPOLOGIES",
    "InNetworkCalibration",
    "LinkCalibration",
    "NetworkCalibration",
    "NetworkModel",
    "ProtocolCalibration",
    "bus_bandwidth_Bps",
    "collective_time_s",
    "group_placement",
    "network_calibration",
]

F = NDArray[np.float64]

COLLECTIVES = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all", "send_recv")
ALGORITHMS = ("auto", "ring", "tree", "hierarchical", "in_network")
#: NCCL's protocols, in the order of the trailing axis of the ``*_protocol_*`` fields.
PROTOCOLS = ("ll", "ll128", "simple")
#: Algorithms each collective can run ("auto" picks among them).
_ALGORITHMS_FOR: dict[str, tuple[str, ...]] = {
    "all_reduce": ("ring", "tree", "hierarchical", "in_network"),
    "reduce_scatter": ("ring", "hierarchical"),
    "all_gather": ("ring", "hierarchical"),
    "all_to_all": (),
    "send_recv": (),
}
#: The ring-family collectives and their factor: an all-reduce is a reduce-scatter and an
#: all-gather, twice the steps and the wire bytes (Thakur et al. 2005 §4).
_RING_FACTOR = {"all_reduce": 2.0, "reduce_scatter": 1.0, "all_gather": 1.0}
_RING_FACTORS = np.array([_RING_FACTOR.get(name, 1.0) for name in COLLECTIVES])  # by index
_SWITCHED = ("switch", "fat-tree")
_GRID = ("ring", "torus-2d", "torus-3d", "mesh-2d")
_SIMPLE = PROTOCOLS.index("simple")


# ------------------------------------------------------------------------------- the model
@dataclass(frozen=True, kw_only=True)
class NetworkModel:
    """Numbers the collective model needs; numeric fields may be floats or equal-length arrays.

    Bandwidths are per device per direction (raw link rate, before efficiency). The
    ``*_efficiency`` and ``*_latency_s`` fields are those of the bulk protocol (NCCL's
    Simple). The ``*_protocol_*`` fields have a trailing axis over :data:`PROTOCOLS` (shape
    ``(3,)`` or ``(n, 3)``): efficiencies and step latencies relative to the bulk protocol's
    (0 efficiency = protocol not available), and granularities in bytes. In-network
    reduction: efficiency relative to ``scale_up_efficiency`` (0 = none), latency in s per
    collective, fill in bytes. The defaults give a plain α–β model with only the bulk
    protocol, no launch latency and no in-network reduction; :meth:`from_spec` fills
    everything from the calibration data.
    """

    devices_per_node: ArrayLike
    scale_up_topology: str
    scale_up_shape: tuple[int, ...] = ()
    scale_up_bandwidth_Bps: ArrayLike
    scale_up_latency_s: ArrayLike
    scale_up_efficiency: ArrayLike
    scale_out_topology: str
    scale_out_bandwidth_Bps: ArrayLike
    scale_out_latency_s: ArrayLike
    scale_out_efficiency: ArrayLike
    scale_out_shape: tuple[int, ...] = ()
    scale_up_launch_latency_s: ArrayLike = 0.0
    scale_up_protocol_efficiency: ArrayLike = (0.0, 0.0, 1.0)
    scale_up_protocol_latency: ArrayLike = (1.0, 1.0, 1.0)
    scale_up_protocol_min_B: ArrayLike = (0.0, 0.0, 0.0)
    scale_up_protocol_fill_B: ArrayLike = (0.0, 0.0, 0.0)
    scale_up_in_network_efficiency: ArrayLike = 0.0  # relative to scale_up_efficiency
    scale_up_in_network_latency_s: ArrayLike = 0.0
    scale_up_in_network_fill_B: ArrayLike = 0.0
    scale_out_launch_latency_s: ArrayLike = 0.0
    scale_out_protocol_efficiency: ArrayLike = (0.0, 0.0, 1.0)
    scale_out_protocol_latency: ArrayLike = (1.0, 1.0, 1.0)
    scale_out_protocol_min_B: ArrayLike = (0.0, 0.0, 0.0)
    scale_out_protocol_fill_B: ArrayLike = (0.0, 0.0, 0.0)
    _prepared: _Prepared = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        for level in ("scale_up", "scale_out"):
            topo = getattr(self, f"{level}_topology")
            if topo not in TOPOLOGIES:
                raise ConfigError(
                    f"NetworkModel: {level}_topology must be one of: {', '.join(TOPOLOGIES)}; "
                    f"got {topo!r}."
                )
            shape = getattr(self, f"{level}_shape")
            if any(int(x) < 1 for x in shape):
                raise ConfigError(f"NetworkModel: {level}_shape must be >= 1; got {list(shape)}.")
            for name in ("efficiency", "latency", "min_B", "fill_B"):
                arr = np.asarray(getattr(self, f"{level}_protocol_{name}"), dtype=float)
                if arr.ndim == 0 or arr.shape[-1] != len(PROTOCOLS):
                    raise ConfigError(
                        f"NetworkModel: {level}_protocol_{name} needs a trailing axis of "
                        f"{len(PROTOCOLS)} ({', '.join(PROTOCOLS)}); got shape {arr.shape}."
                    )
        try:
            prepared = _prepare(self)
        except ValueError as exc:
            raise ConfigError(f"NetworkModel: array fields of unequal lengths ({exc}).") from exc
        object.__setattr__(self, "_prepared", prepared)

    @classmethod
    def from_spec(
        cls,
        network: NetworkSpec,
        devices_per_node: int,
        *,
        scale_up_bandwidth_Bps: float | None = None,
        scale_out_bandwidth_Bps: float | None = None,
        calibration: NetworkCalibration | None = None,
    ) -> NetworkModel:
        """The model of a network preset; efficiencies and latencies from the calibration.

        Args:
            network: the network spec (topologies, raw bandwidths, latencies, shapes).
            devices_per_node: devices in one scale-up domain of the system (≥ 1).
            scale_up_bandwidth_Bps: overrides the spec's scale-up bandwidth (a design-mode
                device's own links), B/s per device per direction.
            scale_out_bandwidth_Bps: the same for scale-out.
            calibration: link classes to use instead of :func:`network_calibration` (fits).

        The link class of each level comes from ``networks:`` in
        ``configs/calibration/network.yaml`` (by preset name; ``base+overrides`` networks use
        their base's); unknown networks use ``default_class``. A class whose step latency is
        null takes the spec's ``latency_us``.
        """
        cal = calibration if calibration is not None else network_calibration()
        up_cls, out_cls = cal.classes_for(network)
        up = _level_fields("scale_up", up_cls, network.scale_up.latency_s)
        out = _level_fields("scale_out", out_cls, network.scale_out.latency_s)
        up_bw = network.scale_up.bandwidth_Bps
        out_bw = network.scale_out.bandwidth_Bps
        red = up_cls.in_network
        return cls(
            devices_per_node=float(devices_per_node),
            scale_up_topology=network.scale_up.topology,
            scale_up_shape=tuple(network.scale_up.shape),
            scale_up_bandwidth_Bps=float(scale_up_bandwidth_Bps or up_bw),
            scale_out_topology=network.scale_out.topology,
            scale_out_shape=tuple(network.scale_out.shape),
            scale_out_bandwidth_Bps=float(scale_out_bandwidth_Bps or out_bw),
            scale_up_in_network_efficiency=red.efficiency / up_cls.simple.efficiency,
            scale_up_in_network_latency_s=red.latency_s,
            scale_up_in_network_fill_B=red.fill_wire_B,
            **up,
            **out,
        )


def _level_fields(level: str, c: LinkCalibration, spec_latency_s: float) -> dict[str, Any]:
    """NetworkModel fields of one level from its link class (relative protocol tables)."""

    def step(p: ProtocolCalibration) -> float:
        return spec_latency_s if math.isnan(p.step_latency_s) else p.step_latency_s

    simple_eff, simple_lat = c.simple.efficiency, step(c.simple)
    return {
        f"{level}_efficiency": simple_eff,
        f"{level}_latency_s": simple_lat,
        f"{level}_launch_latency_s": c.launch_latency_s,
        f"{level}_protocol_efficiency": tuple(p.efficiency / simple_eff for p in c.protocols),
        f"{level}_protocol_latency": tuple(
            step(p) / simple_lat if simple_lat > 0 else 1.0 for p in c.protocols
        ),
        f"{level}_protocol_min_B": tuple(p.min_wire_B for p in c.protocols),
        f"{level}_protocol_fill_B": tuple(p.fill_wire_B for p in c.protocols),
    }


# ------------------------------------------------------------------------------- placement
def group_placement(
    group_size: ArrayLike, stride: ArrayLike, devices_per_node: ArrayLike
) -> tuple[F, F]:
    """Members per node and nodes spanned by a parallel group.

    A group of ``group_size`` ranks with ``stride`` (rank i is device r0 + i·stride, devices
    numbered node by node) has min(group_size, devices_per_node // stride) members in each
    node it touches when stride < devices_per_node, else one (docs/model.md §C3;
    Megatron-LM ``RankGenerator`` order). Strides and node sizes that do not divide each
    other are rounded down (a placement the mapping would not normally produce).

    Returns:
        (members_per_node, num_nodes), float arrays broadcast over the inputs.
    """
    n = np.maximum(np.asarray(group_size, dtype=float), 1.0)
    s = np.maximum(np.asarray(stride, dtype=float), 1.0)
    d = np.maximum(np.asarray(devices_per_node, dtype=float), 1.0)
    return _placement(n, s, d)


def _placement(n: F, s: F, d: F) -> tuple[F, F]:
    """:func:`group_placement` of inputs already at least 1."""
    # floor(d / s) clipped to [1, n]: one member per node where s ≥ d (floor(d / s) ≤ 1)
    m = np.minimum(np.maximum(np.floor(d / s), 1.0), n)
    return m, np.ceil(n / m)


# ----------------------------------------------------------------------- internal: levels
@dataclass(frozen=True)
class _Level:
    """One level's numbers broadcast to the batch shape (protocol arrays: shape + (3,))."""

    topology: str
    shape: tuple[int, ...]
    bw: F  # B/s per device per direction
    launch: F  # s per collective
    eff: F  # (..., 3) achievable fraction of bw per protocol
    lat: F  # (..., 3) s per step per protocol
    vmin: F  # (..., 3) B
    vfill: F  # (..., 3) B
    rate: F  # (..., 3) eff · bw: B/s per protocol at the device's full bandwidth
    plain: bool  # no protocol has a floor or a fill: g(V) = V
    axes: F | None = None  # GRID_AXES code per element (None: row-major over shape, "xyz")

    @property
    def links(self) -> int:
        """Links a device's bandwidth is split over (direct topologies)."""
        return {"ring": 2, "torus-2d": 4, "torus-3d": 6, "mesh-2d": 4}.get(self.topology, 1)


def _level(net: NetworkModel, lv: str) -> _Level:
    """One level's arrays in their own shapes (they broadcast against the batch)."""

    def a(name: str) -> F:
        return np.asarray(getattr(net, f"{lv}_{name}"), dtype=float)

    def p(name: str) -> F:
        return np.asarray(getattr(net, f"{lv}_protocol_{name}"), dtype=float)

    bw, eff = a("bandwidth_Bps"), a("efficiency")[..., None] * p("efficiency")
    return _Level(
        topology=getattr(net, f"{lv}_topology"),
        shape=tuple(int(x) for x in getattr(net, f"{lv}_shape")),
        bw=bw,
        launch=a("launch_latency_s"),
        eff=eff,
        lat=a("latency_s")[..., None] * p("latency"),
        vmin=p("min_B"),
        vfill=p("fill_B"),
        rate=eff * bw[..., None],
        plain=not (np.any(p("min_B")) or np.any(p("fill_B"))),
    )


@dataclass(frozen=True)
class _Prepared:
    """A NetworkModel's numbers as float arrays, computed once per model."""

    up: _Level
    out: _Level
    devices_per_node: F
    in_network_efficiency: F  # absolute: bulk efficiency × the relative in-network one
    in_network_latency_s: F
    in_network_fill_B: F
    has_in_network: bool  # some row has in-switch reduction on a switch
    launch_multi_node: F  # launch latency of a collective spanning nodes: the slower level's
    batch_shape: tuple[int, ...]


def _prepare(net: NetworkModel) -> _Prepared:
    up, out = _level(net, "scale_up"), _level(net, "scale_out")
    red = {
        name: np.asarray(getattr(net, f"scale_up_in_network_{name}"), dtype=float)
        for name in ("efficiency", "latency_s", "fill_B")
    }
    d = np.maximum(np.asarray(net.devices_per_node, dtype=float), 1.0)
    shapes = [lv.bw.shape for lv in (up, out)] + [lv.launch.shape for lv in (up, out)]
    shapes += [arr.shape[:-1] for lv in (up, out) for arr in (lv.eff, lv.lat, lv.vmin, lv.vfill)]
    shapes += [arr.shape for arr in red.values()] + [d.shape]
    in_network_efficiency = up.eff[..., _SIMPLE] * red["efficiency"]
    return _Prepared(
        up=up,
        out=out,
        devices_per_node=d,
        in_network_efficiency=in_network_efficiency,
        in_network_latency_s=red["latency_s"],
        in_network_fill_B=red["fill_B"],
        has_in_network=up.topology == "switch" and bool(np.any(in_network_efficiency > 0)),
        launch_multi_node=np.maximum(up.launch, out.launch),
        batch_shape=tuple(np.broadcast_shapes(*shapes)),
    )


def _transfer_s(volume_B: F, level: _Level, bw_factor: F | None = None) -> F:
    """Seconds to move ``volume_B`` wire bytes per rank, per protocol: g(V) / (η·B·factor).

    g(V) = max(V_min, V + min(V, V_fill)) (module docstring); zero bytes take zero time; a
    protocol with zero efficiency takes infinite time (the caller ignores division by zero:
    :func:`collective_time_s`). ``bw_factor`` None: the device's full bandwidth (factor 1).
    """
    v = volume_B[..., None]
    # (with neither floor nor fill, g(V) = V wherever V > 0, the only volumes kept)
    g = v if level.plain else np.maximum(level.vmin, v + np.minimum(v, level.vfill))
    rate = level.rate if bw_factor is None else level.eff * (level.bw * bw_factor)[..., None]
    t = g / rate  # rate 0 -> inf; 0/0 only where v == 0, masked below
    return np.where(v > 0, t, 0.0)


# -------------------------------------------------------------- internal: grid placement
@dataclass(frozen=True)
class _Dim:
    extent: F  # members of the group along this dimension
    stride: F  # hop distance between consecutive members along it
    wrap: F  # 1.0 where the group's ring along it closes through wrap-around links


def _grid_dims(level: _Level, members: F, stride: F, units: F) -> list[_Dim]:
    """The sub-grid a group occupies on a direct topology.

    The level holds ``units`` devices (or nodes) laid out row-major over its shape (a ring
    is a 1-D torus of ``units``; a torus or mesh without a shape is taken as 1-D). A group
    with ``stride`` spans, dimension by dimension: strides that cover a whole dimension pass
    it; otherwise the group takes min(extent // stride, remaining members) positions with that
    stride, and stride 1 in the next dimensions (row-major order, docs/model.md §C3).
    Wrap-around links exist on full-size torus dimensions only (scaling-book ``tpus.md``).
    """
    torus = level.topology in ("ring", "torus-2d", "torus-3d")
    if level.topology == "ring" or not level.shape:
        sizes: list[F] = [units]
        full: list[F] = [np.ones_like(units)]
    else:
        sizes, full, below = [], [], 1.0
        for x in _axis_extents(level):
            ext = np.clip(np.ceil(units / below), 1.0, x)
            sizes.append(ext)
            full.append((ext == x).astype(float))
            below = below * x
    dims: list[_Dim] = []
    rem_s = np.maximum(stride, 1.0)
    rem_m = np.maximum(members, 1.0)
    for size, is_full in zip(sizes, full, strict=True):
        passes = rem_s >= size
        local_s = np.where(passes, 1.0, rem_s)
        e = np.where(passes, 1.0, np.clip(np.floor(size / local_s), 1.0, rem_m))
        wrap = torus * is_full * (e * local_s >= size) * (e > 2)
        dims.append(_Dim(extent=e, stride=local_s, wrap=wrap))
        rem_m = np.ceil(rem_m / e)
        rem_s = np.where(passes, np.floor(rem_s / np.maximum(size, 1.0)), 1.0)
    return dims


def _axis_extents(level: _Level) -> list[Any]:
    """The extents of a grid level's axes from the fastest-varying rank index to the slowest:
    the shape as written, or per element in its ``grid_axes`` order (docs/model.md §C3)."""
    if level.axes is None:
        return [float(x) for x in level.shape]
    ndim = len(level.shape)
    orders = [[axis for axis in order if axis < ndim] for order in _AXIS_ORDERS]
    code = level.axes.astype(int)
    return [np.choose(code, [float(level.shape[o[k]]) for o in orders]) for k in range(ndim)]


#: Each GRID_AXES code's axes (0 = x, the shape's first) from the fastest-varying to the slowest.
_AXIS_ORDERS = tuple(tuple("xyz".index(c) for c in name) for name in GRID_AXES)


def _ring_bw_factor(level: _Level, dim: _Dim) -> F:
    """Share of a device's bandwidth a ring along ``dim`` gets (÷ links, ×2 with wrap, ÷ stride)."""
    return (1.0 + dim.wrap) / (level.links * dim.stride)


def _link_bw_factor(level: _Level, dims: Sequence[_Dim]) -> F:
    """One link direction along the worst spanned dimension (chains, snakes, shifts)."""
    out = np.ones_like(dims[0].extent) * np.inf
    for d in dims:
        out = np.where(d.extent > 1, np.minimum(out, 1.0 / (level.links * d.stride)), out)
    return np.where(np.isinf(out), 1.0 / level.links, out)


# ------------------------------------------------------------ internal: level primitives
def _ring_pass(
    level: _Level, message_B: F, members: F, stride: F, units: F, factor: float | F
) -> tuple[F, F]:
    """(steps, seconds per protocol) of ring reduce-scatter/all-gather (factor 1) or
    all-reduce (factor 2) of ``message_B`` per rank over ``members`` ranks of one level.

    Ring: factor·(m − 1) steps and factor·(m − 1)/m·S wire bytes per rank (Thakur et al.
    2005 §4; docs/model.md §C5.1). On a grid the group runs one ring per spanned
    dimension, the message shrinking by each dimension's extent (dimension-ordered torus
    all-reduce, Ying et al. 2018); the data is cut into one slice per spanned dimension and
    slice j takes the dimensions in the order j, j+1, ..., so every dimension's links work
    at once: time = max over dimensions of that dimension's total bytes / its ring bandwidth
    (scaling-book ``sharding.md``: collectives over k axes are k times faster). Latency: each
    slice still walks every dimension, Σ factor·(e − 1) steps.
    """
    if level.topology in _SWITCHED:
        steps = factor * (members - 1.0)
        return steps, _transfer_s(steps / members * message_B, level)
    dims = _grid_dims(level, members, stride, units)
    spanned = [(d.extent > 1).astype(float) for d in dims]
    num_spanned = np.maximum(sum(spanned, np.zeros_like(message_B)), 1.0)
    loads = [np.zeros_like(message_B) for _ in dims]
    for j in range(len(dims)):
        size = message_B * spanned[j] / num_spanned
        for i in range(len(dims)):
            k = (j + i) % len(dims)
            e = dims[k].extent
            loads[k] = loads[k] + factor * (e - 1.0) / e * size
            size = size / e
    steps = sum((factor * (d.extent - 1.0) for d in dims), np.zeros_like(message_B))
    t = np.zeros((*message_B.shape, len(PROTOCOLS)))
    for dim, load in zip(dims, loads, strict=True):
        t = np.maximum(t, _transfer_s(load, level, _ring_bw_factor(level, dim)))
    return steps, t


def _chain_bw_factor(level: _Level, members: F, stride: F, units: F) -> F | None:
    """A chain's share of the device bandwidth (None: all of it, non-blocking topologies)."""
    if level.topology in _SWITCHED:
        return None
    return _link_bw_factor(level, _grid_dims(level, members, stride, units))


def _all_to_all_s(level: _Level, message_B: F, members: F, stride: F, units: F) -> F:
    """Seconds of an all-to-all of ``message_B`` per rank among ``members`` of one level.

    Injection bound (m − 1)/m·S/(η·B) (docs/model.md §C3, §5.1); on a grid also the
    bisection of each spanned dimension: e·S/8 per link direction with wrap-around, e·S/4 on
    a line (uniform traffic, dimension-ordered routing; derived).
    """
    inj = _transfer_s((members - 1.0) / members * message_B, level)
    if level.topology in _SWITCHED:
        return inj
    t = inj
    for dim in _grid_dims(level, members, stride, units):
        per_link = dim.extent * message_B / np.where(dim.wrap > 0, 8.0, 4.0)
        per_link = np.where(dim.extent > 1, per_link, 0.0)
        bw = 1.0 / (level.links * dim.stride)
        t = np.maximum(t, _transfer_s(per_link, level, bw))
    return t


def _shift_bw_factor(level: _Level, members: F, stride: F, units: F) -> F | None:
    """A shift's share of the device bandwidth (None: all of it, non-blocking topologies)."""
    if level.topology in _SWITCHED:
        return None
    dims = _grid_dims(level, members, stride, units)
    # The first spanned dimension carries the shift to the next member (docs/model.md §C3).
    out = np.full_like(members, 1.0 / level.links)
    for d in reversed(dims):
        out = np.where(d.extent > 1, 1.0 / (level.links * d.stride), out)
    return out


# ----------------------------------------------------------------------- public functions
def _check(collective: str, algorithm: str) -> None:
    if collective not in COLLECTIVES:
        raise ConfigError(
            f"unknown collective {collective!r}; valid collectives: {', '.join(COLLECTIVES)}."
        )
    valid = ("auto", *_ALGORITHMS_FOR[collective])
    if algorithm not in valid:
        if algorithm in ALGORITHMS:
            raise ConfigError(
                f"algorithm {algorithm!r} does not apply to {collective}; valid algorithms "
                f"for it: {', '.join(valid)}."
            )
        raise ConfigError(
            f"unknown algorithm {algorithm!r}; valid algorithms: {', '.join(ALGORITHMS)}."
        )


def collective_time_s(
    collective: str | Sequence[str],
    message_B: ArrayLike,
    group_size: ArrayLike,
    *,
    net: NetworkModel,
    stride: ArrayLike = 1,
    axes: ArrayLike = 0,
    algorithm: str = "auto",
) -> F:
    """Seconds for one collective (or for each element's own).

    Args:
        collective: one of :data:`COLLECTIVES`, or a sequence of them, one per element of the
            broadcast inputs (a model's distinct collectives in one call; element i equals
            the call for ``collective[i]`` alone).
        message_B: bytes, following nccl-tests' "size" (``doc/PERFORMANCE.md``): all_reduce:
            the buffer per rank; all_gather: the gathered output per rank; reduce_scatter: the
            input per rank; all_to_all: total bytes each rank sends + keeps; send_recv: bytes
            sent. Shape broadcast with the other arrays; ≥ 0.
        group_size: ranks in the group (≥ 1); 1 → 0 s (as is an empty message).
        net: the network (:meth:`NetworkModel.from_spec`).
        stride: device-index distance between consecutive ranks of the group (product of the
            degrees of the parallel dimensions placed inside it; 1 for tensor parallel).
        axes: on a direct topology (ring excepted), the order in which device indices run over
            the level's axes: a code into :data:`GRID_AXES` (0, "xyz": row-major over the
            shape as written); broadcast with the other inputs.
        algorithm: ``auto`` (fastest) or one of :data:`ALGORITHMS` valid for the collective
            (all_to_all and send_recv: ``auto`` only). An algorithm that cannot run on a
            placement (``in_network`` across nodes or without switch reduction) takes
            ``inf`` seconds there.

    Returns:
        Seconds, float64, shape of the broadcast inputs (0-d for scalars).

    Raises:
        ConfigError: unknown collective or algorithm; the message lists the valid names.

    Example:
        >>> from deepflow.config import load_network
        >>> net = NetworkModel.from_spec(load_network("dgx-a100"), 8)
        >>> t = collective_time_s("all_reduce", 2**30, 8, net=net)  # ≈ 8 ms, ~230 GB/s busbw
    """
    names = (collective,) if isinstance(collective, str) else tuple(collective)
    for name in sorted(set(names)):
        _check(name, algorithm)
    code = None if isinstance(collective, str) else np.array([COLLECTIVES.index(c) for c in names])
    kinds = _Kinds(frozenset(names), code)
    prep = net._prepared
    msg = np.asarray(message_B, dtype=float)
    n = np.maximum(np.asarray(group_size, dtype=float), 1.0)
    s = np.maximum(np.asarray(stride, dtype=float), 1.0)
    codes = np.asarray(axes, dtype=float)
    rows = () if code is None else code.shape
    shape = np.broadcast(msg, n, s, codes, np.empty(prep.batch_shape), np.empty(rows)).shape
    msg, n, s = (x if x.shape == shape else np.full(shape, x) for x in (msg, n, s))
    d = prep.devices_per_node  # one value or one per network: broadcasts in the arithmetic
    up, out = prep.up, prep.out
    if np.any(codes != 0):  # another embedding than row-major somewhere: per element
        codes = np.broadcast_to(codes, shape)
        up, out = (replace(lv, axes=codes) for lv in (up, out))
    m, nodes = _placement(n, s, d)
    node_stride = np.maximum(np.floor(s / d), 1.0)  # 1 where s < d
    multi = nodes > 1
    launch = np.where(multi, prep.launch_multi_node, up.launch)[..., None]
    num_multi = int(np.count_nonzero(multi))
    ctx = _Ctx(msg, n, m, nodes, s, node_stride, nodes * node_stride, d, up, out, multi,
               num_multi > 0, num_multi == multi.size)  # fmt: skip
    # A protocol without bandwidth divides by zero (inf seconds): not an error here.
    with np.errstate(divide="ignore", invalid="ignore"):
        candidates = _candidates(ctx, kinds, algorithm, prep)
    best = candidates[0]
    for c in candidates[1:]:
        best = np.minimum(best, c)
    t = np.minimum.reduce(best + launch, axis=-1)
    return np.asarray(np.where((n <= 1) | (msg <= 0), 0.0, t), dtype=np.float64)


@dataclass(frozen=True)
class _Ctx:
    msg: F
    n: F
    m: F
    nodes: F
    stride: F
    node_stride: F
    node_units: F  # positions of the scale-out level the group's nodes lie in
    d: F
    up: _Level
    out: _Level
    multi: NDArray[np.bool_]  # the group spans nodes
    any_multi: bool
    all_multi: bool

    def latency(self, steps_up: F, steps_out: F) -> F:
        """Seconds of latency per protocol: Σ steps·α (NCCL ``tuning.cc`` ring/tree latencies)."""
        return steps_up[..., None] * self.up.lat + steps_out[..., None] * self.out.lat

    def by_nodes(self, multi: Callable[[], F], single: Callable[[], F]) -> F:
        """Per protocol, ``multi()`` where the group spans nodes, else ``single()``; a side
        that no group takes is not evaluated (the result is the same)."""
        if self.all_multi:
            return multi()
        if not self.any_multi:
            return single()
        return np.where(self.multi[..., None], multi(), single())


def _flat_ring(c: _Ctx, factor: float | F) -> F:
    """NCCL's flat ring over all n ranks, per protocol (seconds, without launch latency).

    One node: the level's ring pass. Several nodes: every rank puts V = factor·(n − 1)/n·S on
    the wire; each node's traffic leaves through its m members' NICs (one channel per NIC,
    docs/model.md §C5.1: 8×HDR DGX-A100 nodes reach 192 GB/s busbw) while the other
    (m − 1)/m of the hops stay on the scale-up fabric; both stream concurrently. Of the
    factor·(n − 1) steps, a fraction nodes/n crosses nodes (NCCL ``tuning.cc``: 2·nNodes
    inter steps of 2(n − 1) for all-reduce).
    """

    def single() -> F:
        steps, t = _ring_pass(c.up, c.msg, c.n, c.stride, c.d, factor)
        return t + steps[..., None] * c.up.lat

    def multi() -> F:
        v = factor * (c.n - 1.0) / c.n * c.msg
        snake_up = _chain_bw_factor(c.up, c.m, c.stride, c.d)
        snake_out = _chain_bw_factor(c.out, c.nodes, c.node_stride, c.node_units)
        t_intra = _transfer_s((c.m - 1.0) / c.m * v, c.up, snake_up)
        t_inter = _transfer_s(v, c.out, c.m if snake_out is None else c.m * snake_out)
        steps = factor * (c.n - 1.0)
        steps_out = steps * c.nodes / c.n
        return np.maximum(t_intra, t_inter) + c.latency(steps - steps_out, steps_out)

    return c.by_nodes(multi, single)


def _hierarchical(c: _Ctx, factor: float | F) -> F:
    """Intra-node reduce-scatter → inter-node collective on S/m over every member's NIC →
    intra-node all-gather, in sequence (docs/model.md §C5.1, hierarchical all-reduce);
    ``factor`` as in :func:`_ring_pass` (the intra-node part of an all-reduce is a
    reduce-scatter + all-gather of the same size)."""
    steps_up, t_up = _ring_pass(c.up, c.msg, c.m, c.stride, c.d, factor)
    steps_out, t_out = _ring_pass(c.out, c.msg / c.m, c.nodes, c.node_stride, c.node_units, factor)
    steps_out = np.where(c.multi, steps_out, 0.0)
    t_out = np.where(c.multi[..., None], t_out, 0.0)
    return t_up + t_out + c.latency(steps_up, steps_out)


def _tree(c: _Ctx) -> F:
    """NCCL tree all-reduce: chain inside each node, double binary tree across nodes.

    Latency 2·((m − 1)·α_intra + ⌈log2 nodes⌉·α_inter) (NCCL ``tuning.cc``). Bandwidth: a
    chain rank sends S up and S down (2S per rank); in a double binary tree a node is interior
    in one tree and a leaf in the other, 2S per node, spread over its m NICs (Sanders, Speck &
    Träff 2009); both stream concurrently.
    """
    chain = _chain_bw_factor(c.up, c.m, c.stride, c.d)
    t_intra = np.where((c.m > 1)[..., None], _transfer_s(2.0 * c.msg, c.up, chain), 0.0)
    link_out = _chain_bw_factor(c.out, c.nodes, c.node_stride, c.node_units)
    steps_up = 2.0 * (c.m - 1.0)
    if not c.any_multi:  # every group in one node: no inter-node part (t_intra ≥ 0)
        return t_intra + steps_up[..., None] * c.up.lat
    t_inter = _transfer_s(2.0 * c.msg / c.m, c.out, link_out)
    t_inter = np.where(c.multi[..., None], t_inter, 0.0)
    steps_out = 2.0 * np.ceil(np.log2(c.nodes))  # 0 in one node
    return np.maximum(t_intra, t_inter) + c.latency(steps_up, steps_out)


def _in_network(c: _Ctx, prep: _Prepared) -> F:
    """In-switch reduction: each rank sends S to the switch and receives S back, once
    (docs/model.md §C5.1 NVLS; NCCL applies its Simple protocol only)."""
    g = c.msg + np.minimum(c.msg, prep.in_network_fill_B)
    rate = prep.in_network_efficiency * c.up.bw
    ok = (rate > 0) & (c.nodes <= 1) & (c.up.topology == "switch")
    t = np.where(ok, g / rate + prep.in_network_latency_s, np.inf)  # rate 0 -> inf
    out = np.full((*c.msg.shape, len(PROTOCOLS)), np.inf)
    out[..., _SIMPLE] = t
    return out


def _skippable(c: _Ctx, prep: _Prepared) -> set[str]:
    """Algorithms 'auto' need not evaluate: hierarchical equals ring when every group sits in
    one node; in-network reduction is unavailable without a reducing switch, and across nodes."""
    skip = set()
    if not c.any_multi:
        skip.add("hierarchical")
    if not prep.has_in_network or c.all_multi:
        skip.add("in_network")
    return skip


@dataclass(frozen=True)
class _Kinds:
    """Which collective each element is: one for all (``code`` None) or one per element."""

    names: frozenset[str]
    code: NDArray[np.intp] | None  # index into COLLECTIVES

    def only(self, t: F, names: Sequence[str]) -> F:
        """``t`` (seconds per protocol) on the elements of ``names``, inf on the others."""
        if self.code is None or self.names.issubset(names):
            return t
        rows = np.array([c in names for c in COLLECTIVES])[self.code]
        return np.where(rows[..., None], t, np.inf)

    def ring_factor(self) -> float | F:
        """:data:`_RING_FACTOR` of each element (other collectives: 1, unused)."""
        factors = {_RING_FACTOR.get(name, 1.0) for name in self.names}
        if self.code is None or len(factors) == 1:
            return factors.pop()
        return _RING_FACTORS[self.code]


def _candidates(c: _Ctx, kinds: _Kinds, algorithm: str, prep: _Prepared) -> list[F]:
    """Seconds per protocol of every algorithm that may serve an element (without launch
    latency); inf where it does not apply. ``auto`` evaluates each algorithm once for all the
    collectives it serves, and none that :func:`_skippable` rules out."""
    factor = kinds.ring_factor()
    makers = {
        "ring": lambda: _flat_ring(c, factor),
        "tree": lambda: _tree(c),
        "hierarchical": lambda: _hierarchical(c, factor),
        "in_network": lambda: _in_network(c, prep),
    }
    if algorithm != "auto":  # valid for every collective present (_check)
        return [makers[algorithm]()]
    skip = _skippable(c, prep)
    out = []
    for algo, make in makers.items():
        served = [name for name in kinds.names if algo in _ALGORITHMS_FOR[name]]
        if served and algo not in skip:
            out.append(kinds.only(make(), served))
    if "all_to_all" in kinds.names:
        out.append(kinds.only(_all_to_all(c), ["all_to_all"]))
    if "send_recv" in kinds.names:
        out.append(kinds.only(_send_recv(c), ["send_recv"]))
    return out or [np.full((*c.msg.shape, len(PROTOCOLS)), np.inf)]  # no collective: no element


def _all_to_all(c: _Ctx) -> F:
    """All-to-all: concurrent pairwise exchanges (NCCL grouped send/recv).

    Off-node bytes (n − m)/n·S leave through each rank's own NIC (an all-to-all cannot pool
    NICs: nccl-tests reports N/(N − 1) × NIC bandwidth on N nodes, docs/model.md §C5.1);
    the (m − 1)/n·S for node-local peers cross the scale-up fabric at the same time. Latency:
    one step per peer.
    """
    local = _all_to_all_s(c.up, c.msg * c.m / c.n, c.m, c.stride, c.d)
    remote = _all_to_all_s(c.out, c.msg, c.nodes, c.node_stride, c.node_units)
    remote = np.where(c.multi[..., None], remote, 0.0)
    return np.maximum(local, remote) + c.latency(c.m - 1.0, c.n - c.m)


def _send_recv(c: _Ctx) -> F:
    """Each rank sends S to the next rank of its group (a pipeline boundary): one step over
    scale-up when the group stays in a node, else over the sender's own NIC."""

    def intra() -> F:  # one step on the scale-up fabric
        shift_up = _shift_bw_factor(c.up, c.m, c.stride, c.d)
        return _transfer_s(c.msg, c.up, shift_up) + c.up.lat

    def inter() -> F:  # one step over the sender's NIC
        shift_out = _shift_bw_factor(c.out, c.nodes, c.node_stride, c.node_units)
        return _transfer_s(c.msg, c.out, shift_out) + c.out.lat

    return c.by_nodes(inter, intra)


def bus_bandwidth_Bps(
    collective: str, message_B: ArrayLike, time_s: ArrayLike, group_size: ArrayLike
) -> F:
    """Bus bandwidth, B/s, in the nccl-tests convention (``doc/PERFORMANCE.md``).

    busbw = message_B / time_s × factor: all_reduce 2(n − 1)/n; reduce_scatter, all_gather
    and all_to_all (n − 1)/n; send_recv 1 (docs/model.md §C5.2). 0 where group_size ≤ 1
    or time_s ≤ 0.

    Raises:
        ConfigError: unknown collective.
    """
    _check(collective, "auto")
    n = np.maximum(np.asarray(group_size, dtype=float), 1.0)
    if collective == "all_reduce":
        factor = 2.0 * (n - 1.0) / n
    elif collective == "send_recv":
        factor = np.where(n > 1, 1.0, 0.0)
    else:
        factor = (n - 1.0) / n
    msg = np.asarray(message_B, dtype=float)
    t = np.asarray(time_s, dtype=float)
    shape = np.broadcast_shapes(msg.shape, t.shape, n.shape)
    algbw = np.divide(msg, t, out=np.zeros(shape), where=t > 0)
    return np.asarray(algbw * factor, dtype=np.float64)
