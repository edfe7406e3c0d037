"""Surrogate kinds by name (the CLI's ``--surrogate``)."""

from __future__ import annotations

from typing import Any

from deepflow.errors import ConfigError

__all__ = ["SURROGATES", "make_surrogate", "surrogate_class"]

#: CLI name -> class path (imported on demand so torch stays out of light imports).
SURROGATES = {
    "gbt": "deepflow.surrogate.gbt:GradientBoosting",
    "gp": "deepflow.surrogate.gp:ExactGP",
    "mlp": "deepflow.surrogate.mlp:MLPEnsemble",
    "svgp": "deepflow.surrogate.svgp:SVGP",
}


def surrogate_class(name: str) -> Any:
    """The class behind a surrogate name.

    Raises:
        ConfigError: ``unknown surrogate 'x'. Valid: gbt, gp, mlp, svgp.``
    """
    if name not in SURROGATES:
        raise ConfigError(f"unknown surrogate '{name}'. Valid: {', '.join(sorted(SURROGATES))}.")
    import importlib

    module, attr = SURROGATES[name].split(":")
    return getattr(importlib.import_module(module), attr)


def make_surrogate(name: str, *, random_state: int | None = 0, **params: Any) -> Any:
    """A new, unfitted surrogate of kind ``name``."""
    return surrogate_class(name)(random_state=random_state, **params)
