"""Exception hierarchy. Library code raises these; only the CLI turns them into exit codes."""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "DeepflowError",
    "LockedError",
    "PlausibilityWarning",
    "ReportError",
    "StorageError",
]


class DeepflowError(Exception):
    """Base class of every error deepflow raises on purpose."""


class ConfigError(DeepflowError, ValueError):
    """Bad user input: a YAML file, a key, a value or a combination of values.

    The message names the file and the dotted key, e.g.
    ``configs/devices/x.yaml: hbm_capacity_GiB must be > 0; got -80.``
    """


class ReportError(ConfigError):
    """A result directory the report cannot read: a missing or malformed file.

    Bad input like any ``ConfigError`` (the CLI exits with 2); the message names the file and
    what is wrong, e.g. ``results/pareto.json: objectives[0].direction must be one of minimize,
    maximize; got 'min'.``
    """


class PlausibilityWarning(UserWarning):
    """An input far outside any real device or run, most often a unit slip (not an error).

    The message names the file and the dotted key, and the unit the value looks like, e.g.
    ``s.yaml: system.device.hbm_bandwidth_GBps = 3.35 is far outside the range of real devices
    (900–8000 GB/s); it looks like TB/s (3.35 TB/s = 3350 GB/s).`` The CLI prints it as a
    ``warning:`` line.
    """


class StorageError(DeepflowError):
    """An OS, disk or permission error on a path, or a search storage that cannot be reached
    or written (exit 1): the message names the path or storage and the cause, e.g.
    ``out.parquet.parts: No space left on device.``"""


class LockedError(DeepflowError):
    """An output another running deepflow process holds (exit 1); the message names it."""
