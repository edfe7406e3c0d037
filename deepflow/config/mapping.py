"""The transformer mapping's validity rules, written once, and the generator of valid mappings.

Each :class:`Rule` names the mapping key its message is about, the degrees it reads, a
vectorised predicate over arrays of candidate mappings and the message of a violation. The
scenario loader raises the first rule a mapping breaks; the design-space enumerator and
best-mapping generate only mappings that break none (:func:`valid_mappings`), so the three
agree by construction (tests/config/test_mapping_rules.py).

It also holds the knob table (:data:`KNOBS`): every mapping knob as :class:`MappingSpec`
declares it (:func:`deepflow.config._schema.knob`) — name, type, range, default, the workload
kinds that read it, and its input column with the code of each named value. The oracle's
mapping columns, the design-space labeller and best-mapping's result are derived from it
(tests/config/test_knobs.py), so a new knob is a :class:`MappingSpec` field and the formula
that reads it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import NDArray

from deepflow.config.specs import MappingSpec, TransformerSpec

__all__ = [
    "KNOB",
    "KNOBS",
    "RULES",
    "SERVING_KNOBS",
    "SERVING_TP_RULE",
    "STRUCTURAL",
    "Knob",
    "Rule",
    "first_violation",
    "knobs_of",
    "pipeline_slots",
    "rules_for",
    "valid_mappings",
]

F = NDArray[np.float64]
I64 = NDArray[np.int64]

_KNOB_TYPES = {"int": "int", "bool": "bool", "str": "choice"}


@dataclass(frozen=True)
class Knob:
    """One mapping knob, as :class:`MappingSpec` declares it.

    A case's knob value travels through the oracle as one float in the input column
    ``column``: an integer or boolean as its value, a choice as its index in ``choices``
    (:attr:`codes`, e.g. recompute none/selective/full -> 0/1/2).
    """

    name: str  #: the MappingSpec field and YAML key
    type: str  #: "int", "bool" or "choice"
    default: Any
    ge: float | None  #: bounds of an integer knob (None: unbounded)
    le: float | None
    choices: tuple[str, ...]  #: the named values of a choice knob
    column: str  #: the oracle's input column
    workloads: tuple[str, ...]  #: the workload kinds whose step reads it
    framework: bool  #: a framework switch that best-mapping keeps as the scenario sets it
    doc: str

    @property
    def codes(self) -> dict[str, float]:
        """The column code of each named value of a choice knob ({} for the others)."""
        return {c: float(i) for i, c in enumerate(self.choices)}

    def encode(self, value: Any) -> float:
        """A value of the knob (int, bool or one of ``choices``) as its column's float."""
        if self.type == "choice":
            return self.codes[value]
        return float(value)

    def decode(self, code: float) -> Any:
        """A column's float as the knob's value (int, bool or one of ``choices``)."""
        if self.type == "choice":
            return self.choices[int(code)]
        return bool(code) if self.type == "bool" else int(code)


def _knob(field: dataclasses.Field[Any]) -> Knob:
    meta = field.metadata
    return Knob(name=field.name, type=_KNOB_TYPES[str(field.type)], default=field.default,
                ge=meta["ge"], le=meta["le"], choices=tuple(meta["choices"] or ()),
                column=meta["column"], workloads=meta["workloads"], framework=meta["framework"],
                doc=meta["doc"])  # fmt: skip


#: The knob table: every mapping knob, in :class:`MappingSpec`'s declaration order.
KNOBS: tuple[Knob, ...] = tuple(_knob(f) for f in dataclasses.fields(MappingSpec))
#: The knobs by name.
KNOB: Mapping[str, Knob] = {k.name: k for k in KNOBS}


def knobs_of(kind: str) -> tuple[Knob, ...]:
    """The knobs a workload kind's step reads (its mapping columns), in table order."""
    return tuple(k for k in KNOBS if kind in k.workloads)


#: Knobs only a serving workload reads: disaggregated prefill and decode pools
#: (docs/model.md §D6); a training mapping leaves them 0.
SERVING_KNOBS = ("prefill_replicas", "prefill_tensor_parallel")
#: Mapping degrees that must factorise the device count and fit the model (the order of the
#: design spaces' mapping tables).
STRUCTURAL = (
    "tensor_parallel", "pipeline_parallel", "data_parallel", "context_parallel",
    "expert_parallel", "micro_batch_size", "virtual_pipeline_stages",
)  # fmt: skip


class Rule(NamedTuple):
    """One validity rule of a transformer mapping."""

    key: str  #: the mapping key a violation is reported on
    needs: tuple[str, ...]  #: the degrees the rule reads
    ok: Callable[[Mapping[str, Any], TransformerSpec], Any]  #: True where valid (vectorised)
    message: Callable[[Mapping[str, int], TransformerSpec], str]  #: for one violating mapping


def _tp_message(v: Mapping[str, int], m: TransformerSpec) -> str:
    return (f"({v['tensor_parallel']}) must divide the model's num_attention_heads "
            f"({m.num_attention_heads}) and num_kv_heads ({m.num_kv_heads}).")  # fmt: skip


def pipeline_slots(v: Mapping[str, Any], m: TransformerSpec) -> Any:
    """Layer slots the pipeline split divides: the layers, and with ``pipeline_balance:
    ends_as_layers`` one slot each for the input embedding and for the output layer with its
    loss (docs/model.md §C2.3)."""
    return m.num_layers + 2 * (v.get("pipeline_balance") == "ends_as_layers")


def _chunks_message(v: Mapping[str, Any], m: TransformerSpec) -> str:
    pp, vp = v["pipeline_parallel"], v["virtual_pipeline_stages"]
    ends = " + 2 (the embedding and the output layer take a slot each)"
    return (f"pipeline_parallel {pp} × virtual_pipeline_stages {vp} = {pp * vp} must divide "
            f"num_layers ({m.num_layers}"
            f"{ends if v.get('pipeline_balance') == 'ends_as_layers' else ''}).")  # fmt: skip


#: Training's expert parallelism: experts sharded across data-parallel ranks (also serving's
#: rule where experts are split as the dense layers).
_EP_DIVIDES_DP = Rule(
    "expert_parallel", ("expert_parallel", "data_parallel"),
    lambda v, m: (v["expert_parallel"] == 1) | (v["data_parallel"] % v["expert_parallel"] == 0),
    lambda v, m: f"({v['expert_parallel']}) must divide data_parallel ({v['data_parallel']}): "
                 "experts are sharded across data-parallel ranks.",
)  # fmt: skip

#: The rules, in the order the loader reports them.
RULES: tuple[Rule, ...] = (
    Rule("tensor_parallel", ("tensor_parallel",),
         lambda v, m: (m.num_attention_heads % v["tensor_parallel"] == 0)
         & (m.num_kv_heads % v["tensor_parallel"] == 0), _tp_message),
    Rule("pipeline_parallel", ("pipeline_parallel",),
         lambda v, m: v["pipeline_parallel"] <= m.num_layers,
         lambda v, m: f"({v['pipeline_parallel']}) must be <= the model's num_layers "
                      f"({m.num_layers})."),
    Rule("virtual_pipeline_stages", ("pipeline_parallel", "virtual_pipeline_stages"),
         lambda v, m: (v["virtual_pipeline_stages"] == 1) | (v["pipeline_parallel"] > 1),
         lambda v, m: f"({v['virtual_pipeline_stages']}) > 1 needs pipeline_parallel > 1."),
    Rule("virtual_pipeline_stages", ("pipeline_parallel", "virtual_pipeline_stages"),
         lambda v, m: (v["virtual_pipeline_stages"] == 1)
         | (pipeline_slots(v, m) % (v["pipeline_parallel"] * v["virtual_pipeline_stages"])
            == 0),
         _chunks_message),
    Rule("context_parallel", ("context_parallel",),
         lambda v, m: m.seq_length % v["context_parallel"] == 0,
         lambda v, m: f"({v['context_parallel']}) must divide the model's seq_length "
                      f"({m.seq_length})."),
    Rule("expert_parallel", ("expert_parallel",),
         lambda v, m: (v["expert_parallel"] == 1) | (m.num_experts % v["expert_parallel"] == 0),
         lambda v, m: f"({v['expert_parallel']}) must divide the model's num_experts "
                      f"({m.num_experts})."),
    Rule("data_parallel_replicas", ("data_parallel",),
         lambda v, m: v["data_parallel"] % _replicas(v) == 0,
         lambda v, m: f"({_replicas(v)}) must divide data_parallel ({v['data_parallel']}): "
                      "each replica shards over the same number of data-parallel ranks."),
    _EP_DIVIDES_DP,
    Rule("expert_tensor_parallel", ("tensor_parallel",),
         lambda v, m: (_etp(v) == 0) | (_etp(v) == v["tensor_parallel"]),
         lambda v, m: f"({_etp(v)}) must be 0 or tensor_parallel ({v['tensor_parallel']}) in "
                      "training: the model splits each expert as the dense layers (an expert "
                      "tensor-parallel degree of its own is modelled for serving only)."),
)  # fmt: skip


def _replicas(v: Mapping[str, Any]) -> Any:
    """The mapping's ``data_parallel_replicas`` (1: no hybrid sharding)."""
    return v.get("data_parallel_replicas", 1)


def _etp(v: Mapping[str, Any]) -> Any:
    """The mapping's ``expert_tensor_parallel`` as given (0: tensor_parallel)."""
    return v.get("expert_tensor_parallel", 0)


def expert_groups(v: Mapping[str, Any]) -> tuple[Any, Any, Any]:
    """(etp, ep_tp, ep_dp) of a mapping's MoE layers (vectorised): the ranks that split each
    expert's matrices (``expert_tensor_parallel``, 0 meaning ``tensor_parallel``), the
    expert-parallel ranks inside each tensor-parallel group (``tensor_parallel / etp``, at
    least 1: they see the same tokens) and those across data-parallel replicas
    (``expert_parallel / ep_tp``: each brings its own tokens). docs/model.md §D1."""
    tp = np.asarray(v["tensor_parallel"])
    given = np.asarray(_etp(v))
    etp = np.where(given > 0, given, tp)
    ep_tp = np.maximum(tp // np.maximum(etp, 1), 1)
    ep_dp = np.asarray(v["expert_parallel"]) // ep_tp
    return etp, ep_tp, ep_dp


def expert_replicas(v: Mapping[str, Any]) -> Any:
    """The data-parallel replicas each expert's split spans (vectorised): ``etp /
    tensor_parallel`` where ``expert_tensor_parallel`` is a multiple of it above it (serving
    with attention data parallelism and experts split over the replicas' ranks: TensorRT-LLM's
    ``moe_tensor_parallel_size`` with ``enable_attention_dp``, vLLM's data parallelism without
    ``--enable-expert-parallel``, SGLang's DP attention), else 1. docs/model.md §D1."""
    etp, _, _ = expert_groups(v)
    return np.maximum(etp // np.maximum(np.asarray(v["tensor_parallel"]), 1), 1)


def _serving_ep_ok(v: Mapping[str, Any], m: TransformerSpec) -> Any:
    _, ep_tp, ep_dp = expert_groups(v)
    ep, dp = v["expert_parallel"], v["data_parallel"]
    inside = ep % ep_tp == 0
    return (m.num_experts <= 1) | (inside & (dp % np.maximum(ep_dp * expert_replicas(v), 1) == 0))


def _serving_ep_message(v: Mapping[str, Any], m: TransformerSpec) -> str:
    etp, ep_tp, ep_dp = (int(a) for a in expert_groups(v))
    tp, ep, dp = v["tensor_parallel"], v["expert_parallel"], v["data_parallel"]
    replicas = int(expert_replicas(v))
    if replicas > 1:
        return (f"({ep}) × expert_tensor_parallel {etp} / tensor_parallel {tp} = "
                f"{ep * replicas} data-parallel replicas must divide data_parallel ({dp}): "
                "experts split beyond the tensor-parallel group span data-parallel "
                "replicas.")  # fmt: skip
    if ep % ep_tp:
        return (
            f"({ep}) must be a multiple of the expert-parallel ranks in each tensor-"
            f"parallel group, tensor_parallel {tp} / expert_tensor_parallel {etp} = {ep_tp}."
        )
    if ep_tp == 1:  # experts split as the dense layers: training's rule and message
        return _EP_DIVIDES_DP.message(v, m)
    return (f"({ep}) / {ep_tp} (its ranks in each tensor-parallel group) = {ep_dp} must divide "
            f"data_parallel ({dp}): beyond the tensor-parallel group experts are sharded "
            "across data-parallel ranks.")  # fmt: skip


#: Serving's expert tensor parallelism splits each expert over ranks of a tensor-parallel
#: group, or over the ranks of several data-parallel replicas (a multiple of it).
SERVING_ETP_RULE = Rule(
    "expert_tensor_parallel", ("tensor_parallel",),
    lambda v, m: (m.num_experts <= 1) | (_etp(v) == 0)
    | (v["tensor_parallel"] % np.maximum(_etp(v), 1) == 0)
    | (np.maximum(_etp(v), 1) % v["tensor_parallel"] == 0),
    lambda v, m: f"({_etp(v)}) must divide tensor_parallel ({v['tensor_parallel']}) or be a "
                 "multiple of it (each expert then split over the ranks of expert_tensor_"
                 "parallel / tensor_parallel data-parallel replicas).",
)  # fmt: skip
#: Serving's expert-parallel rule: the EP group takes tensor_parallel / expert_tensor_parallel
#: ranks of each tensor-parallel group, then data-parallel replicas (TensorRT-LLM's
#: moe_tensor_parallel_size × moe_expert_parallel_size = tp_size; vLLM's expert parallelism
#: over TP × DP ranks with unsplit experts).
SERVING_EP_RULE = Rule(
    "expert_parallel", ("expert_parallel", "data_parallel", "tensor_parallel"),
    _serving_ep_ok, _serving_ep_message,
)  # fmt: skip


def _serving_tp_message(v: Mapping[str, int], m: TransformerSpec) -> str:
    return (f"({v['tensor_parallel']}) must divide the model's num_attention_heads "
            f"({m.num_attention_heads}), and divide or be a multiple of its num_kv_heads "
            f"({m.num_kv_heads}).")  # fmt: skip


#: Serving replicates a KV head on every rank of its group when tensor parallelism exceeds the
#: KV heads (TensorRT-LLM bench/build/tuning.py: adjusted_num_kv_heads = max(tp, kv); vLLM's
#: QKVParallelLinear "replicate the KV heads" when tp >= num_kv_heads), so tp may be a multiple
#: of the KV heads there; training keeps Megatron's rule (num_query_groups % tp == 0).
SERVING_TP_RULE = Rule(
    "tensor_parallel", ("tensor_parallel",),
    lambda v, m: (m.num_attention_heads % v["tensor_parallel"] == 0)
    & ((m.num_kv_heads % v["tensor_parallel"] == 0)
       | (v["tensor_parallel"] % m.num_kv_heads == 0)), _serving_tp_message,
)  # fmt: skip


def rules_for(serving: bool) -> tuple[Rule, ...]:
    """The rules of a training mapping (:data:`RULES`) or of a serving one (KV heads may be
    replicated: :data:`SERVING_TP_RULE`; experts may be sharded inside the tensor-parallel
    group: :data:`SERVING_ETP_RULE`, :data:`SERVING_EP_RULE`)."""
    return (SERVING_TP_RULE, *RULES[1:-2], SERVING_ETP_RULE, SERVING_EP_RULE) if serving else RULES


def first_violation(
    values: Mapping[str, int], model: TransformerSpec, *, serving: bool = False
) -> tuple[str, str] | None:
    """The (key, message) of the first rule one mapping breaks, or None (``serving``: the
    rules of a serving mapping, :func:`rules_for`)."""
    for rule in rules_for(serving):
        if not bool(rule.ok(values, model)):
            return rule.key, rule.message(values, model)
    return None


def valid_mappings(
    num_devices: int, model: TransformerSpec, batch: int,
    candidates: Mapping[str, Sequence[int] | None],
    order: Sequence[str] = ("tensor_parallel", "pipeline_parallel", "context_parallel",
                            "expert_parallel", "micro_batch_size", "virtual_pipeline_stages"),
    *, serving: bool = False, fixed: Mapping[str, Any] | None = None,
) -> I64:  # fmt: skip
    """Every valid combination of the structural degrees (rows in :data:`STRUCTURAL` order).

    Valid: tensor × pipeline × context × data parallel = devices, the global batch divides
    into data parallel × micro-batch, and no rule of :data:`RULES` is broken. ``candidates``
    gives each degree's allowed values; ``data_parallel`` None means derived from the others.
    Rows come in the lexicographic order of ``order`` (the six degrees other than data
    parallel; tensor, pipeline and context parallel first), each in its candidates' order.
    ``serving``: the rules of a serving mapping (:func:`rules_for`), whose batch is requests
    per replica, so nothing needs to divide it. ``fixed``: knobs the rules read that are not
    enumerated (``pipeline_balance``), one value for every row.
    """
    per_replica = Rule(
        "micro_batch_size", ("micro_batch_size", "data_parallel"),
        lambda v, m: (v["micro_batch_size"] >= 1) if serving
        else (batch // v["data_parallel"]) % v["micro_batch_size"] == 0,
        lambda v, m: f"({v['micro_batch_size']}) must divide the batch per data-parallel rank.",
    )  # fmt: skip
    rules = (*rules_for(serving), per_replica)
    cols: dict[str, I64] = {"__": np.zeros(1, dtype=np.int64)}
    applied: set[int] = set()
    for degree in order:
        values = np.asarray(candidates[degree] or (), dtype=np.int64)
        n_rows = len(next(iter(cols.values())))
        cols = {k: np.repeat(v, len(values)) for k, v in cols.items()}
        cols[degree] = np.tile(values, n_rows)
        if "data_parallel" not in cols and all(
            d in cols for d in ("tensor_parallel", "pipeline_parallel", "context_parallel")
        ):
            cols = _derive_data_parallel(cols, num_devices, batch, candidates["data_parallel"],
                                         serving=serving)  # fmt: skip
        for i, rule in enumerate(rules):
            if i not in applied and all(d in cols for d in rule.needs):
                applied.add(i)
                cols = _keep(cols, np.asarray(rule.ok({**(fixed or {}), **cols}, model),
                                              dtype=bool))  # fmt: skip
    return np.stack([cols[d] for d in STRUCTURAL], axis=1).reshape(-1, len(STRUCTURAL))


def _keep(cols: dict[str, I64], mask: NDArray[np.bool_]) -> dict[str, I64]:
    return {k: v[mask] for k, v in cols.items()}


def _derive_data_parallel(cols: dict[str, I64], num_devices: int, batch: int,
                          allowed: Sequence[int] | None, *,
                          serving: bool = False) -> dict[str, I64]:  # fmt: skip
    """Data parallelism from the others (devices / (tp × pp × cp)), kept where allowed (and,
    for training, where it divides the global batch; a serving batch is per replica)."""
    inner = cols["tensor_parallel"] * cols["pipeline_parallel"] * cols["context_parallel"]
    cols = _keep(cols, num_devices % inner == 0)
    dp = num_devices // (cols["tensor_parallel"] * cols["pipeline_parallel"]
                         * cols["context_parallel"])  # fmt: skip
    cols["data_parallel"] = dp
    keep = np.full(dp.shape, True) if serving else batch % dp == 0
    if allowed is not None:
        keep &= np.isin(dp, np.asarray(allowed, dtype=np.int64))
    return _keep(cols, keep)
