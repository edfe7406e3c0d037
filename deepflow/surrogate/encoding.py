"""Feature encoding and target transforms derived from a dataset, stored with the model.

Inputs (``x_*`` columns): strings become one-hot columns (choices in the space's declared
order), booleans 0/1. Numbers whose domain is positive (the space's lower bound, or the data's
minimum for an undeclared column) are encoded twice, as they are and as their log, so that
products of inputs (die area × area share, tensor × pipeline parallelism) are sums of features
and a network or kernel learns them easily; other numbers stay linear. With
``both_scales=False`` a number is either log-scaled (positive and declared ``scale: log`` or
spanning more than ``log_ratio``; not simplex shares) or linear. Every encoded column is then
scaled to the unit cube with the training data's range. Constant columns (``fixed`` variables)
are dropped.

Targets (``y_*``/``c_*``): times, energies, powers and areas (unit suffix ``_s``, ``_J``,
``_W``, ``_mm2``) are modelled in log space when all training values are positive; the
surrogates standardise what this returns.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from deepflow.errors import ConfigError

__all__ = ["LOG_TARGET_SUFFIXES", "FeatureEncoder", "FeatureSpec", "TargetTransform"]

#: Unit suffixes of targets modelled in log space (they span decades and are positive).
LOG_TARGET_SUFFIXES = ("_s", "_J", "_W", "_mm2")
_LOG_RATIO = 100.0  # > 2 decades


@dataclass(frozen=True)
class FeatureSpec:
    """How one ``x_*`` column is encoded.

    ``kind`` is ``numeric`` (one column, optional log, then ``(v - lo) / (hi - lo)``),
    ``bool`` (one 0/1 column) or ``onehot`` (one column per entry of ``choices``).
    """

    column: str
    kind: str
    log: bool = False
    lo: float = 0.0
    hi: float = 1.0
    choices: list[Any] = field(default_factory=list)

    @property
    def width(self) -> int:
        return len(self.choices) if self.kind == "onehot" else 1


class FeatureEncoder:
    """DataFrame ``x_*`` columns -> float64 array in the unit cube.

    Example:
        >>> enc = FeatureEncoder().fit(df)                  # doctest: +SKIP
        >>> X = enc.transform(df)          # (n, enc.num_features_)
    """

    def __init__(self, *, log_ratio: float = _LOG_RATIO, both_scales: bool = True) -> None:
        self.log_ratio = log_ratio
        self.both_scales = both_scales

    def fit(self, df: Any) -> FeatureEncoder:
        """Derive the encoding from a dataset (``df.attrs["deepflow"]["variables"]`` if any)."""
        from pandas.api.types import is_bool_dtype, is_numeric_dtype

        meta = df.attrs.get("deepflow", {}) if hasattr(df, "attrs") else {}
        declared: dict[str, Mapping[str, Any]] = {}
        for var in meta.get("variables", []) or []:
            for col in var.get("columns", []):
                declared[col] = var
        specs: list[FeatureSpec] = []
        for col in [c for c in df.columns if str(c).startswith("x_")]:
            values = df[col]
            var = declared.get(col, {})
            if var.get("type") == "fixed" or values.nunique(dropna=False) <= 1:
                continue
            if is_bool_dtype(values.dtype):
                specs.append(FeatureSpec(col, "bool"))
            elif is_numeric_dtype(values.dtype):
                v = values.to_numpy(dtype=float)
                if not np.isfinite(v).all():
                    raise ConfigError(f"input column '{col}' has NaN or infinite values.")
                positive = bool((v > 0).all())
                if self.both_scales and positive and _declared_positive(var, col):
                    t = np.log(v)
                    specs.append(FeatureSpec(col, "numeric", False, float(v.min()), float(v.max())))
                    specs.append(FeatureSpec(col, "numeric", True, float(t.min()), float(t.max())))
                    continue
                wide = positive and (
                    var.get("scale") == "log" or v.max() / v.min() > self.log_ratio
                )
                log = not self.both_scales and var.get("type") != "simplex" and bool(wide)
                t = np.log(v) if log else v
                specs.append(FeatureSpec(col, "numeric", log, float(t.min()), float(t.max())))
            else:
                present = set(values.unique().tolist())
                declared_choices = [c for c in var.get("choices", []) or [] if c in present]
                choices = declared_choices + sorted(present - set(declared_choices), key=str)
                specs.append(FeatureSpec(col, "onehot", choices=choices))
        if not specs:
            raise ConfigError("the data has no varying x_* input columns to learn from.")
        self.features_ = specs
        self.num_features_ = sum(s.width for s in specs)
        return self

    @property
    def feature_names_(self) -> list[str]:
        names: list[str] = []
        for s in self.features_:
            if s.kind == "onehot":
                names += [f"{s.column}={c}" for c in s.choices]
            else:
                names.append(f"log({s.column})" if s.log else s.column)
        return names

    def transform(self, df: Any) -> NDArray[np.float64]:
        """Encode ``df``'s ``x_*`` columns; shape (n, ``num_features_``).

        Raises:
            ConfigError: a missing column or a category the model never saw.
        """
        from sklearn.exceptions import NotFittedError

        if not hasattr(self, "features_"):
            raise NotFittedError("FeatureEncoder is not fitted yet; call fit(df) first.")
        missing = list(dict.fromkeys(s.column for s in self.features_ if s.column not in df))
        if missing:
            needed = dict.fromkeys(s.column for s in self.features_)
            raise ConfigError(
                f"the points lack input column(s) {', '.join(missing)}; the model needs "
                f"{', '.join(needed)}."
            )
        out = np.empty((len(df), self.num_features_), dtype=np.float64)
        j = 0
        for s in self.features_:
            values = df[s.column]
            if s.kind == "onehot":
                import pandas as pd

                idx = np.asarray(pd.Index(s.choices).get_indexer(values))
                if (idx < 0).any():
                    unknown = sorted(set(values[idx < 0].tolist()), key=str)
                    raise ConfigError(
                        f"column '{s.column}' has value(s) {', '.join(map(repr, unknown))} the "
                        f"model never saw; known: {', '.join(map(repr, s.choices))}."
                    )
                out[:, j : j + s.width] = np.arange(s.width) == idx[:, None]
            else:
                v = values.to_numpy(dtype=float)
                if s.log:
                    if (v <= 0).any():
                        raise ConfigError(f"column '{s.column}' must be > 0 (log-scaled input).")
                    v = np.log(v)
                span = s.hi - s.lo
                out[:, j] = (v - s.lo) / span if s.kind == "numeric" and span > 0 else v
            j += s.width
        return out

    def derivative(self, column: str, values: Any) -> list[tuple[int, NDArray[np.float64]]]:
        """d feature / d value of a numeric ``column`` at ``values`` (n,), per feature it feeds.

        Returns (feature index, derivative (n,)) pairs: none for a column the encoder drops or
        encodes as a category, two for a column encoded linearly and as its log.
        """
        out = []
        j = 0
        v = np.asarray(values, dtype=float)
        for s in self.features_:
            if s.column == column and s.kind == "numeric":
                span = s.hi - s.lo if s.hi > s.lo else 1.0
                out.append((j, 1.0 / (v * span) if s.log else np.full(v.shape, 1.0 / span)))
            j += s.width
        return out

    def fit_transform(self, df: Any) -> NDArray[np.float64]:
        return self.fit(df).transform(df)

    def to_dict(self) -> dict[str, Any]:
        return {"log_ratio": self.log_ratio, "both_scales": self.both_scales,
                "features": [asdict(s) for s in self.features_]}  # fmt: skip

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FeatureEncoder:
        enc = cls(log_ratio=float(data["log_ratio"]), both_scales=data.get("both_scales") is True)
        enc.features_ = [
            FeatureSpec(
                column=str(s["column"]), kind=str(s["kind"]), log=s["log"] is True,
                lo=float(s["lo"]), hi=float(s["hi"]), choices=list(s["choices"]),
            )
            for s in data["features"]
        ]  # fmt: skip
        enc.num_features_ = sum(s.width for s in enc.features_)
        return enc


def _declared_positive(var: Mapping[str, Any], column: str) -> bool:
    """Whether the space's domain of ``column`` excludes 0 (True for undeclared columns)."""
    typ = var.get("type")
    if typ in ("continuous", "integer"):
        return float(var.get("low", 0.0)) > 0
    if typ == "simplex":
        lows, columns = list(var.get("low", [])), list(var.get("columns", []))
        return len(lows) == len(columns) and float(lows[columns.index(column)]) > 0
    if typ == "categorical":
        return all(not isinstance(c, bool) and c > 0 for c in var.get("choices", []))
    return True


class TargetTransform:
    """Log for positive time/energy/power/area targets; identity for the rest."""

    def __init__(self, names: Sequence[str]) -> None:
        self.names = list(names)

    def fit(self, Y: NDArray[np.float64]) -> TargetTransform:
        self.log_ = [
            bool(n.endswith(LOG_TARGET_SUFFIXES) and (Y[:, i] > 0).all())
            for i, n in enumerate(self.names)
        ]
        return self

    def transform(self, Y: NDArray[np.float64]) -> NDArray[np.float64]:
        Z = np.array(Y, dtype=np.float64, copy=True)
        for i, log in enumerate(self.log_):
            if log:
                Z[:, i] = np.log(np.maximum(Z[:, i], np.finfo(float).tiny))
        return Z

    def inverse(self, Z: NDArray[np.float64]) -> NDArray[np.float64]:
        Y = np.array(Z, dtype=np.float64, copy=True)
        for i, log in enumerate(self.log_):
            if log:
                Y[:, i] = np.exp(Y[:, i])
        return Y

    def to_dict(self) -> dict[str, Any]:
        return {"names": self.names, "log": self.log_}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TargetTransform:
        t = cls(data["names"])
        t.log_ = [bool(v) for v in data["log"]]
        return t
