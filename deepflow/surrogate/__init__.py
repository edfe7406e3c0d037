"""Surrogate models of the oracle: MLP deep ensemble, exact and variational GPs, boosting.

Every surrogate follows scikit-learn (``fit(X, Y) -> self``, ``predict(X, return_std=False)``,
learned attributes end in ``_``, ``NotFittedError`` before ``fit``, ``random_state``) on
encoded arrays; :class:`SurrogateModel` adds the dataset's encoding, log targets and the
feasibility classifier, and saves to / loads from a folder; :func:`read_points` reads query
points from YAML; :class:`SurrogatePosteriorModel` (in ``botorch_adapter``) turns a fitted model
into a BoTorch ``Model`` over the design space's unit cube. torch and BoTorch are imported only
when a torch surrogate is fitted or loaded, or the adapter is used.

Example:
    >>> from deepflow.datasets import load                            # doctest: +SKIP
    >>> from deepflow.surrogate import fit_surrogate, SurrogateModel
    >>> model, report = fit_surrogate(load("d.parquet"), "mlp", random_state=0)
    >>> model.save("surrogate/")
    >>> load("surrogate/", space="mapping-spec").predict(points, return_std=True)

A saved folder holds no pickle (JSON, safetensors, numpy ``.npz``): :func:`load` runs no code
from it.
"""

from typing import TYPE_CHECKING, Any

from deepflow.surrogate.base import Surrogate, check_X
from deepflow.surrogate.encoding import FeatureEncoder, FeatureSpec, TargetTransform
from deepflow.surrogate.gbt import FeasibilityClassifier, GradientBoosting
from deepflow.surrogate.gp import ExactGP
from deepflow.surrogate.mlp import MLPEnsemble
from deepflow.surrogate.model import (
    DEFAULT_TARGETS,
    SURROGATE_FORMAT,
    SurrogateModel,
    fit_surrogate,
    load,
    score,
)
from deepflow.surrogate.onnx_export import export_onnx
from deepflow.surrogate.points import read_points
from deepflow.surrogate.registry import SURROGATES, make_surrogate, surrogate_class
from deepflow.surrogate.svgp import SVGP

if TYPE_CHECKING:  # imported on first use (BoTorch takes about a second to import)
    from deepflow.surrogate.botorch_adapter import SurrogatePosteriorModel

__all__ = [
    "DEFAULT_TARGETS",
    "SURROGATES",
    "SURROGATE_FORMAT",
    "SVGP",
    "ExactGP",
    "FeasibilityClassifier",
    "FeatureEncoder",
    "FeatureSpec",
    "GradientBoosting",
    "MLPEnsemble",
    "Surrogate",
    "SurrogateModel",
    "SurrogatePosteriorModel",
    "TargetTransform",
    "check_X",
    "export_onnx",
    "fit_surrogate",
    "load",
    "make_surrogate",
    "read_points",
    "score",
    "surrogate_class",
]


def __getattr__(name: str) -> Any:
    """``SurrogatePosteriorModel`` on first use: it imports BoTorch (about a second)."""
    if name == "SurrogatePosteriorModel":
        from deepflow.surrogate.botorch_adapter import SurrogatePosteriorModel

        return SurrogatePosteriorModel
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
