"""Which oracle computed a result: the package version and a hash of the model's sources and
of the calibration files in use."""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

from deepflow import __version__

__all__ = ["oracle_version"]


def oracle_version() -> str:
    """``<package version>+<hash>`` of the oracle's sources and the calibration files in use.

    Any edit to ``deepflow/oracle`` or to a calibration file the oracle reads (the built-in
    one, or its override under ``DEEPFLOW_CONFIG_PATH``) changes it, so datasets and search
    results record which oracle labelled them and a resumed run refuses to mix two oracles.
    """
    from deepflow.config.calibration import calibration_files

    return _oracle_version(calibration_files())


@functools.lru_cache(maxsize=8)
def _oracle_version(calibration: tuple[Path, ...]) -> str:
    files = sorted(Path(__file__).resolve().parent.rglob("*.py"))
    digest = hashlib.sha256()
    for f in [*files, *calibration]:
        digest.update(f.name.encode())
        digest.update(f.read_bytes() if f.is_file() else b"")
    return f"{__version__}+{digest.hexdigest()[:12]}"
