"""Write a fitted constant back into a calibration file (the fit scripts' ``--write``)."""

from __future__ import annotations

import re
from pathlib import Path

from deepflow.config.loader import builtin_config_dir


def write_value(file: str, pattern: str, value: str) -> Path:
    """Replace, in ``configs/calibration/<file>``, the number after ``pattern``'s one group
    (its first match) by ``value``; returns the file's path."""
    path = builtin_config_dir() / "calibration" / file
    text = path.read_text(encoding="utf-8")
    new, count = re.subn(pattern + r"[0-9.]+", rf"\g<1>{value}", text, count=1)
    if count != 1:
        raise SystemExit(f"{path}: no match for {pattern!r}; nothing written.")
    path.write_text(new, encoding="utf-8")
    return path
