"""Exception hierarchy. Library code raises these; only the CLI turns them into exit codes."""

from __future__ import annotations

__all__ = ["ConfigError", "DeepflowError", "InfeasibleError"]


class DeepflowError(Exception):
    """Base class of every error deepflow raises on purpose."""


class ConfigError(DeepflowError, ValueError):
    """Bad user input: a YAML file, a key, a value or a combination of values.

    The message names the file and the dotted key, e.g.
    ``configs/devices/x.yaml: hbm_capacity_GiB must be > 0; got -80.``
    """


class InfeasibleError(DeepflowError):
    """A single evaluation that cannot run (e.g. it does not fit in memory)."""
