"""The report draws in a real browser: headless Chromium renders the page offline.

Chromium comes from Debian (``make chromium``, which ``make test`` runs). The check fails when
Chromium is missing, so a CI machine cannot pass it silently; ``DEEPFLOW_SKIP_BROWSER=1``
skips it on purpose (machines without apt).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from deepflow.report.html import FIGURE_IDS

CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--enable-unsafe-swiftshader",  # software WebGL for the 3-D plot (no GPU, trusted page)
    "--virtual-time-budget=10000",
)


def chromium() -> str:
    """The Chromium binary; pytest.fail (or skip when DEEPFLOW_SKIP_BROWSER=1) if missing."""
    path = (
        "/usr/bin/chromium"
        if os.access("/usr/bin/chromium", os.X_OK)
        else (shutil.which("chromium"))
    )
    if path:
        return path
    if os.environ.get("DEEPFLOW_SKIP_BROWSER") == "1":
        pytest.skip("DEEPFLOW_SKIP_BROWSER=1: the browser check of the report is skipped")
    pytest.fail(
        "Chromium is not installed, so the report cannot be checked in a browser. Install it "
        "with `make chromium` (apt-get install -y chromium, as root or with sudo), or set "
        "DEEPFLOW_SKIP_BROWSER=1 to skip this check on a machine without apt.",
        pytrace=False,
    )


class PlotScan(HTMLParser):
    """What was rendered inside each plotly div of a dumped DOM (script text is not markup)."""

    def __init__(self) -> None:
        super().__init__()
        self.divs: list[str | None] = []  # open <div>s: the plot id, or None
        self.found: dict[str, set[str]] = {}
        self.text: dict[str, list[str]] = {}

    def _plot(self) -> str | None:
        return next((d for d in reversed(self.divs) if d is not None), None)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        classes = (a.get("class") or "").split()
        plot = self._plot()
        if plot is not None:
            if tag == "svg" and "main-svg" in classes:
                self.found[plot].add("main-svg")
            if tag == "div" and "gl-container" in classes:
                self.found[plot].add("gl-container")
            if tag == "canvas":
                self.found[plot].add("canvas")
            if tag == "path" and "point" in classes:
                self.found[plot].add("point")
            if tag == "path" and "js-line" in classes:
                self.found[plot].add("line")
        if tag == "div":
            is_plot = "plotly-graph-div" in classes and a.get("id")
            self.divs.append(a["id"] if is_plot else None)
            if is_plot:
                self.found[str(a["id"])] = (
                    {"js-plotly-plot"} if "js-plotly-plot" in classes else set()
                )
                self.text[str(a["id"])] = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "div" and self.divs:
            self.divs.pop()

    def handle_data(self, data: str) -> None:
        plot = self._plot()
        if plot is not None:
            self.text[plot].append(data)


def test_report_renders_in_headless_chromium(rendered: tuple[Any, Path], tmp_path: Path) -> None:
    binary = chromium()
    page = rendered[1] / "report.html"
    assert rendered[0].exit_code == 0, rendered[0].output
    proc = subprocess.run(
        [
            binary,
            *CHROMIUM_FLAGS,
            f"--user-data-dir={tmp_path / 'profile'}",
            "--dump-dom",
            page.resolve().as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    scan = PlotScan()
    scan.feed(proc.stdout)
    assert list(scan.found) == [i for i in FIGURE_IDS if i in scan.found]
    assert set(scan.found) == {
        "fig-pareto-3d",
        "fig-pareto-pairs",
        "fig-hypervolume",
        "fig-breakdown-step-time",
        "fig-breakdown-area",
        "fig-breakdown-power",
        "fig-breakdown-memory",
        "fig-surrogate",
    }
    for plot, found in scan.found.items():
        assert {"js-plotly-plot", "main-svg"} <= found, (plot, found)
        assert "WebGL is not supported" not in "".join(scan.text[plot]), plot
    assert {"gl-container", "canvas"} <= scan.found["fig-pareto-3d"]
    assert "point" in scan.found["fig-pareto-pairs"]  # the scatter markers were drawn
    assert "line" in scan.found["fig-hypervolume"]
