"""Surrogate models of the oracle: MLP deep ensemble, exact and variational GPs, boosting.

Every surrogate follows scikit-learn (``fit(X, Y) -> self``, ``predict(X, return_std=False)``,
learned attributes end in ``_``, ``NotFittedError`` before ``fit``, ``random_state``) on
encoded arrays; :class:`SurrogateModel` adds the dataset's encoding, log targets and the
feasibility classifier, and saves to / loads from a folder. torch and BoTorch are imported
only when a torch surrogate is fitted or loaded.

Example:
    >>> from deepflow.datasets import load                            # doctest: +SKIP
    >>> from deepflow.surrogate import fit_surrogate, SurrogateModel
    >>> model, report = fit_surrogate(load("d.parquet"), "mlp", random_state=0)
    >>> model.save("surrogate/"); SurrogateModel.load("surrogate/").predict(points)
"""

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
    score,
)
from deepflow.surrogate.registry import SURROGATES, make_surrogate, surrogate_class
from deepflow.surrogate.svgp import SVGP

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
    "TargetTransform",
    "check_X",
    "fit_surrogate",
    "make_surrogate",
    "score",
    "surrogate_class",
]
