"""The look shared by the HTML page and the PNG figures: labels with units, numbers, colours.

Units come from the names (``step_time_s``, ``area_mm2``, ``power_W``: style guide), so a new
objective gets a sensible axis title without code changes.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

__all__ = [
    "COMPONENT_COLORS",
    "DESIGN_COLORS",
    "FEASIBLE_COLOR",
    "INFEASIBLE_COLOR",
    "axis_label",
    "component_colors",
    "design_colors",
    "fmt",
    "humanize",
    "split_unit",
    "use_log",
]

# Suffix -> unit as printed, longest first ("_Bps" before "_s", "_mm2" before "_2").
_UNITS: tuple[tuple[str, str], ...] = (
    ("_per_s", "/s"),
    ("_per_J", "/J"),
    ("_Bps", "B/s"),
    ("_mm2", "mm²"),
    ("_GiB", "GiB"),
    ("_usd", "USD"),
    ("_Hz", "Hz"),
    ("_W", "W"),
    ("_J", "J"),
    ("_B", "B"),
    ("_s", "s"),
)
_WORDS = {
    "mfu": "MFU",
    "hbm": "HBM",
    "tp": "TP",
    "pp": "PP",
    "dp": "DP",
    "cp": "CP",
    "ep": "EP",
    "l1": "L1",
    "l2": "L2",
    "dram": "DRAM",
    "sram": "SRAM",
    "io": "I/O",
    "comm": "comm.",
    "p2p": "P2P",
    "ttft": "TTFT",
    "tpot": "TPOT",
}

#: D3/Tableau-10: the same hex colours in plotly and matplotlib ("tab10").
_TAB10 = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
)
#: Viridis sampled at 11 points (for fronts of more than ten designs).
_VIRIDIS = (
    "#440154",
    "#482475",
    "#414487",
    "#355f8d",
    "#2a788e",
    "#21918c",
    "#22a884",
    "#44bf70",
    "#7ad151",
    "#bddf26",
    "#fde725",
)
DESIGN_COLORS = _TAB10
#: Stacked-bar components: a muted palette distinct from the design colours' role.
COMPONENT_COLORS = (
    "#4c78a8",
    "#f58518",
    "#54a24b",
    "#e45756",
    "#72b7b2",
    "#b279a2",
    "#ff9da6",
    "#9d755d",
    "#bab0ac",
    "#eeca3b",
    "#88d27a",
    "#439894",
    "#d67195",
    "#83bcb6",
    "#fabfd2",
    "#79706e",
)
FEASIBLE_COLOR = "#8a8f98"
INFEASIBLE_COLOR = "#e0603a"


def split_unit(name: str) -> tuple[str, str]:
    """``step_time_s`` -> (``step_time``, ``s``); ``mfu`` -> (``mfu``, ``""``)."""
    for suffix, unit in _UNITS:
        if name.endswith(suffix) and len(name) > len(suffix):
            stem = name[: -len(suffix)]
            if suffix.startswith("_per_"):
                return stem, f"{humanize(stem)}{unit}"
            return stem, unit
    return name, ""


def humanize(stem: str) -> str:
    """``step_time`` -> ``step time``; ``tensor_parallel_comm`` -> ``tensor parallel comm.``."""
    return " ".join(_WORDS.get(w.lower(), w) for w in stem.split("_") if w)


def axis_label(name: str, direction: str | None = None) -> str:
    """An axis title with the unit and, given a direction, which way is better.

    >>> axis_label("step_time_s", "minimize")
    'step time (s) ↓'
    >>> axis_label("tokens_per_s")
    'tokens/s'
    """
    stem, unit = split_unit(name)
    if name.endswith(("_per_s", "_per_J")):
        text = unit
    else:
        text = humanize(stem) + (f" ({unit})" if unit else "")
    if direction is not None:
        text += " ↓" if direction == "minimize" else " ↑"
    return text


def fmt(value: object, digits: int = 4) -> str:
    """A number in ``digits`` significant digits, exponents written short (``1.5e7``)."""
    if value is None:
        return "–"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}" if abs(value) >= 10_000 else str(value)
    if not math.isfinite(value):
        return str(value)
    text = format(value, f".{digits}g")
    if "e" in text:
        mantissa, exp = text.split("e")
        text = f"{mantissa}e{int(exp)}"
    return text


def use_log(values: Iterable[float], *, ratio: float = 30.0) -> bool:
    """Log axis when every value is positive and they span more than ``ratio`` (decades)."""
    finite = [v for v in values if math.isfinite(v)]
    if not finite or min(finite) <= 0:
        return False
    return max(finite) / min(finite) > ratio


def design_colors(num: int) -> list[str]:
    """One colour per Pareto design, in pareto.json order: Tableau-10, or viridis past ten."""
    if num <= len(_TAB10):
        return list(_TAB10[:num])
    return [_VIRIDIS[round(i * (len(_VIRIDIS) - 1) / (num - 1))] for i in range(num)]


def component_colors(names: Sequence[str]) -> dict[str, str]:
    """A colour per breakdown component; the same name gets the same colour in every chart."""
    return {n: COMPONENT_COLORS[i % len(COMPONENT_COLORS)] for i, n in enumerate(names)}
