"""A fitted surrogate with its encoding: fit from a dataset, score, save, load, query.

:class:`SurrogateModel` bundles the feature encoder, the target transform, one multi-output
surrogate and the feasibility classifier, so it predicts straight from a DataFrame of ``x_*``
columns in the dataset's units. Saved as a folder::

    DIR/metadata.json     format, kind, space hash, feature schema, targets, versions, metrics
    DIR/model/            surrogate.json + weights.safetensors (torch surrogates) or
                          trees.npz (gradient boosting)
    DIR/feasibility.npz   the feasibility classifier's trees

No pickles: loading a folder runs no code from it (:mod:`deepflow.surrogate.weights`).
"""

from __future__ import annotations

import json
import platform
import shutil
import time
import warnings
from collections.abc import Sequence
from importlib import metadata as importlib_metadata
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from deepflow import __version__
from deepflow.errors import ConfigError
from deepflow.surrogate.base import Surrogate, read_json
from deepflow.surrogate.encoding import FeatureEncoder, TargetTransform
from deepflow.surrogate.gbt import FeasibilityClassifier
from deepflow.surrogate.registry import make_surrogate

__all__ = ["DEFAULT_TARGETS", "SURROGATE_FORMAT", "SurrogateModel", "fit_surrogate", "load",
           "score"]  # fmt: skip

SURROGATE_FORMAT = 1
#: The feasibility classifier's trees (numpy, no pickle).
FEASIBILITY = "feasibility.npz"
#: Targets fitted when none are named (those the dataset has).
DEFAULT_TARGETS = ("y_step_time_s", "y_area_mm2", "y_power_W", "y_energy_per_step_J")
_Z95 = 1.959963984540054


def _versions() -> dict[str, str]:
    out = {"python": platform.python_version(), "deepflow": __version__}
    for name in ("numpy", "scikit-learn", "torch", "botorch", "gpytorch"):
        try:
            out[name] = importlib_metadata.version(name)
        except importlib_metadata.PackageNotFoundError:  # pragma: no cover
            out[name] = "missing"
    return out


class SurrogateModel:
    """Encoder + target transform + surrogate + feasibility classifier.

    Attributes:
        kind: the surrogate's name (``mlp``, ``gp``, ``gbt``).
        targets: the modelled columns, in order.
        space_sha256: hash of the design space the training data came from ("" if unknown).
        info: what :func:`fit_surrogate` recorded: ``metrics`` (held-out scores per target),
            ``fit_seconds``, ``num_train``, ``seed``, ``oracle_version`` and ``variables``
            (the space's variable descriptions, used to check query points).
    """

    def __init__(
        self,
        *,
        encoder: FeatureEncoder,
        target_transform: TargetTransform,
        model: Surrogate,
        classifier: FeasibilityClassifier | None,
        space_sha256: str = "",
        info: dict[str, Any] | None = None,
    ) -> None:
        self.encoder = encoder
        self.target_transform = target_transform
        self.model = model
        self.classifier = classifier
        self.space_sha256 = space_sha256
        self.info = dict(info or {})

    @property
    def kind(self) -> str:
        return self.model.kind

    @property
    def targets(self) -> list[str]:
        return list(self.target_transform.names)

    def predict_transformed(self, df: Any) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """Mean and std (n, q) in the model's space (log for log targets)."""
        X = self.encoder.transform(df)
        mean, std = self.model.predict(X, return_std=True)
        return np.atleast_2d(mean.T).T, np.atleast_2d(std.T).T

    def predict(self, df: Any, *, return_std: bool = True, level: float = 0.95) -> Any:
        """Predictions in the dataset's units, as a DataFrame.

        Args:
            df: a DataFrame with the model's ``x_*`` columns (a dataset from
                :func:`deepflow.datasets.load`, or designs of your own in the same units).
            return_std: add the uncertainty columns (``t_std``, ``t_lo``, ``t_hi``).
            level: the central interval's probability.

        Returns:
            Columns per target ``t``: ``t`` (the median: ``exp(mean)`` for log targets); with
            ``return_std``, ``t_std`` (for log targets the delta-method ``median × std_log``),
            ``t_lo`` and ``t_hi`` (the central ``level`` interval); then ``p_feasible`` if a
            classifier exists.

        Raises:
            ConfigError: ``df`` is a dataset of another design space (its
                ``attrs["deepflow"]["space_sha256"]``), or lacks an input column.
        """
        import pandas as pd
        from scipy.stats import norm

        theirs = str((getattr(df, "attrs", {}) or {}).get("deepflow", {}).get("space_sha256", ""))
        if theirs and self.space_sha256 and theirs != self.space_sha256:
            raise ConfigError(_other_space(self.space_sha256, theirs))
        mean, std = self.predict_transformed(df)
        z = float(norm.ppf(0.5 + level / 2))
        t = self.target_transform
        median = t.inverse(mean)
        lo, hi = t.inverse(mean - z * std), t.inverse(mean + z * std)
        out: dict[str, Any] = {}
        for j, name in enumerate(t.names):
            out[name] = median[:, j]
            if not return_std:
                continue
            out[f"{name}_std"] = std[:, j] * (np.abs(median[:, j]) if t.log_[j] else 1.0)
            out[f"{name}_lo"] = lo[:, j]
            out[f"{name}_hi"] = hi[:, j]
        if self.classifier is not None:
            out["p_feasible"] = self.classifier.predict_proba(self.encoder.transform(df))
        return pd.DataFrame(out, index=getattr(df, "index", None))

    # ---------------------------------------------------------------- persistence
    def save(self, path: str | Path) -> Path:
        """Write the folder ``path`` (created if needed); returns it. Nothing in it is a
        pickle: JSON, safetensors and numpy ``.npz`` (:mod:`deepflow.surrogate.weights`)."""

        p = Path(path)
        if p.exists() and not p.is_dir():
            raise ConfigError(f"{p}: exists and is not a directory.")
        created = not p.exists()
        try:
            self._save(p)
        except BaseException:  # a full disk, a signal: no half-written model folder is left
            if created:
                shutil.rmtree(p, ignore_errors=True)
            raise
        return p

    def _save(self, p: Path) -> None:

        p.mkdir(parents=True, exist_ok=True)
        self.model.save(p / "model")
        if self.classifier is not None:
            self.classifier.save(p / FEASIBILITY)
        meta = {
            "format": SURROGATE_FORMAT,
            "kind": self.kind,
            "space_sha256": self.space_sha256,
            "targets": self.targets,
            "target_transform": self.target_transform.to_dict(),
            "features": self.encoder.to_dict(),
            "has_classifier": self.classifier is not None,
            "versions": _versions(),
            **self.info,
        }
        (p / "metadata.json").write_text(json.dumps(meta, indent=2), "utf-8")

    @classmethod
    def load(cls, path: str | Path, *, space_sha256: str | None = None) -> SurrogateModel:
        """Read a folder written by :meth:`save`.

        Args:
            path: the folder.
            space_sha256: if given, the design space the caller's data comes from; a model
                fitted on another space is refused.

        Raises:
            ConfigError: a missing or corrupted folder, or a different design space.
        """
        p = Path(path)
        meta = read_json(p / "metadata.json")
        if meta.get("format") != SURROGATE_FORMAT:
            raise ConfigError(
                f"{p}: surrogate format {meta.get('format')!r} is not supported "
                f"(this deepflow reads format {SURROGATE_FORMAT}); refit the model."
            )
        fitted = str(meta.get("space_sha256", ""))
        if space_sha256 and fitted and space_sha256 != fitted:
            raise ConfigError(f"{p}: {_other_space(fitted, space_sha256)}")
        try:
            encoder = FeatureEncoder.from_dict(meta["features"])
            transform = TargetTransform.from_dict(meta["target_transform"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"{p}/metadata.json: corrupted ({exc}).") from exc
        model = Surrogate.load(p / "model")
        if model.n_features_in_ != encoder.num_features_ or model.n_outputs_ != len(
            transform.names
        ):
            raise ConfigError(f"{p}: the weights do not match metadata.json (corrupted).")
        classifier = None
        if meta.get("has_classifier"):
            name = FEASIBILITY if (p / FEASIBILITY).is_file() or not (
                p / "feasibility.joblib").is_file() else "feasibility.joblib"  # fmt: skip
            try:
                if name == FEASIBILITY:
                    classifier = FeasibilityClassifier.load(p / name)
                else:  # a folder saved before the classifier was arrays
                    import joblib

                    classifier = joblib.load(p / name)
            except Exception as exc:  # a damaged file raises many types
                raise ConfigError(
                    f"{p}: cannot read {name} ({str(exc) or type(exc).__name__}); "
                    "the file is damaged: refit the model."
                ) from exc
        kept = ("metrics", "fit_seconds", "num_train", "oracle_version", "seed", "variables",
                "space_yaml")  # fmt: skip
        info = {k: v for k, v in meta.items() if k in kept}
        return cls(encoder=encoder, target_transform=transform, model=model,
                   classifier=classifier, space_sha256=fitted, info=info)  # fmt: skip


def _other_space(fitted: str, theirs: str) -> str:
    return (f"the surrogate was fitted on design space {fitted[:12]}, but the points come "
            f"from space {theirs[:12]}; refit on data from this space.")  # fmt: skip


def load(path: str | Path, *, space: Any = None) -> SurrogateModel:
    """A surrogate saved by ``deepflow fit --out DIR`` (or :meth:`SurrogateModel.save`).

    Args:
        path: the folder.
        space: the design space the caller's points come from (a
            :class:`~deepflow.datasets.DesignSpace`, a space YAML path or preset name); a
            surrogate fitted on another space is refused. Without it, ``predict`` still
            refuses a dataset whose metadata names another space.

    Returns:
        The :class:`SurrogateModel`; ``predict(df, return_std=True)`` gives the medians,
        standard deviations and 95 % intervals of its targets and ``p_feasible``.

    Raises:
        ConfigError: a missing, damaged or unsupported folder, or another design space.

    Example:
        >>> import deepflow.surrogate as ds                                 # doctest: +SKIP
        >>> from deepflow.datasets import load as load_data
        >>> model = ds.load("llm-mlp", space="llm-pathfinding")
        >>> model.predict(load_data("points.parquet"), return_std=True)
    """
    sha = None
    if space is not None:
        from deepflow.datasets.space import DesignSpace, load_space

        sha = (space if isinstance(space, DesignSpace) else load_space(space)).sha256
    return SurrogateModel.load(path, space_sha256=sha)


# ------------------------------------------------------------------------------- scoring
def score(y: NDArray[np.float64], pred: NDArray[np.float64], lo: NDArray[np.float64],
          hi: NDArray[np.float64]) -> dict[str, float]:  # fmt: skip
    """MAPE, R², Spearman ρ and interval coverage of one target (NaN where undefined)."""
    from scipy.stats import spearmanr

    with np.errstate(divide="ignore", invalid="ignore"):
        ape = np.abs(pred - y) / np.abs(y)
        mape = float(np.mean(ape[np.isfinite(ape)])) if np.isfinite(ape).any() else float("nan")
        ss_tot = float(np.sum((y - y.mean()) ** 2))
        r2 = 1.0 - float(np.sum((y - pred) ** 2)) / ss_tot if ss_tot > 0 else float("nan")
    if np.ptp(y) > 0 and np.ptp(pred) > 0:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            rho = float(spearmanr(y, pred).statistic)
    else:
        rho = float("nan")
    tol = 1e-9 * np.abs(y)  # a constant target is predicted to rounding error
    coverage = float(np.mean((y >= lo - tol) & (y <= hi + tol))) if y.size else float("nan")
    return {"mape": mape, "r2": r2, "spearman": rho, "coverage95": coverage}


def fit_surrogate(
    df: Any,
    surrogate: str = "mlp",
    *,
    targets: Sequence[str] | None = None,
    test_fraction: float = 0.2,
    max_train_rows: int | None = None,
    random_state: int = 0,
    params: dict[str, Any] | None = None,
    log_ratio: float = 100.0,
    both_scales: bool = True,
) -> tuple[SurrogateModel, dict[str, Any]]:
    """Fit a surrogate on a dataset and score it on a held-out split.

    Args:
        df: a DataFrame from :func:`deepflow.datasets.load`.
        surrogate: ``mlp``, ``gp``, ``svgp`` or ``gbt``.
        targets: ``y_*``/``c_*`` columns (default: those of :data:`DEFAULT_TARGETS` present).
        test_fraction: share of rows held out for the scores (0 fits on everything).
        max_train_rows: subsample the training split to this many rows (e.g. for ``gp``).
        random_state: seed of the split, the subsample and the surrogate.
        params: extra hyperparameters for the surrogate's constructor.
        log_ratio: with ``both_scales=False``, log-scale positive inputs whose max/min
            exceeds this (besides those the space declares ``scale: log``).
        both_scales: encode inputs with a positive domain both linearly and as logs (see
            :class:`~deepflow.surrogate.encoding.FeatureEncoder`).

    Returns:
        The fitted model and a report: ``metrics`` (per target: ``mape``, ``r2``,
        ``spearman``, ``coverage95``), ``feasibility_accuracy``, ``num_train``,
        ``num_test``, ``num_dropped`` (rows with non-finite targets) and ``fit_seconds``.

    Raises:
        ConfigError: an unknown surrogate or target, too few rows, a bad split.
    """
    make_surrogate(surrogate)  # validate the name before any work
    columns = [str(c) for c in df.columns]
    if targets is None:
        targets = [t for t in DEFAULT_TARGETS if t in columns]
        if not targets:
            targets = [c for c in columns if c.startswith("y_")]
    targets = list(targets)
    valid = [c for c in columns if c.startswith(("y_", "c_"))]
    for t in targets:
        if t not in valid:
            raise ConfigError(f"unknown target column '{t}'. Valid: {', '.join(valid)}.")
    if not targets:
        raise ConfigError("no targets to fit: the data has no y_* columns.")
    if not 0.0 <= test_fraction < 1.0:
        raise ConfigError(f"test_fraction must be in [0, 1); got {test_fraction}.")
    meta = df.attrs.get("deepflow", {}) if hasattr(df, "attrs") else {}
    Y_all = df[targets].to_numpy(dtype=float)
    finite = np.isfinite(Y_all).all(axis=1)
    data = df[finite]
    Y_all = Y_all[finite]
    n = len(data)
    rng = np.random.default_rng(random_state)
    order = rng.permutation(n)
    num_test = round(test_fraction * n)
    test, train = order[:num_test], order[num_test:]
    if max_train_rows is not None and train.size > max_train_rows:
        train = train[:max_train_rows]
    if train.size < 2:
        raise ConfigError(f"too few rows to fit: {train.size} training rows (need >= 2).")

    start = time.perf_counter()
    train_df = data.iloc[train]
    train_df.attrs = dict(getattr(df, "attrs", {}))
    encoder = FeatureEncoder(log_ratio=log_ratio, both_scales=both_scales).fit(train_df)
    transform = TargetTransform(targets).fit(Y_all[train])
    X_train = encoder.transform(train_df)
    model = make_surrogate(surrogate, random_state=random_state, **(params or {}))
    model.fit(X_train, transform.transform(Y_all[train]))
    classifier = None
    if "feasible" in columns:
        classifier = FeasibilityClassifier(random_state=random_state).fit(
            X_train, train_df["feasible"].to_numpy(dtype=bool)
        )
    fit_seconds = time.perf_counter() - start

    info = {"fit_seconds": fit_seconds, "num_train": int(train.size), "seed": random_state,
            "oracle_version": meta.get("oracle_version", ""),
            "variables": list(meta.get("variables", []) or []),
            "space_yaml": str(meta.get("space_yaml", ""))}  # fmt: skip
    result = SurrogateModel(encoder=encoder, target_transform=transform, model=model,
                            classifier=classifier, space_sha256=str(meta.get("space_sha256", "")),
                            info=info)  # fmt: skip
    metrics: dict[str, dict[str, float]] = {}
    accuracy = float("nan")
    if num_test:
        test_df = data.iloc[test]
        pred = result.predict(test_df)
        for j, t in enumerate(targets):
            metrics[t] = score(Y_all[test, j], pred[t].to_numpy(), pred[f"{t}_lo"].to_numpy(),
                               pred[f"{t}_hi"].to_numpy())  # fmt: skip
        if classifier is not None:
            truth = test_df["feasible"].to_numpy(dtype=bool)
            accuracy = float(np.mean((pred["p_feasible"].to_numpy() >= 0.5) == truth))
    result.info["metrics"] = metrics
    report = {
        "surrogate": surrogate, "targets": targets, "metrics": metrics,
        "feasibility_accuracy": accuracy, "num_train": int(train.size), "num_test": num_test,
        "num_dropped": int((~finite).sum()), "fit_seconds": fit_seconds,
    }  # fmt: skip
    return result, report
