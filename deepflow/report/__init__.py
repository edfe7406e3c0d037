"""Plots and the HTML report of a search or study result directory (docs/report.md).

``write_report(RESULT_DIR)`` reads the files docs/results.md lists and writes a
self-contained ``report.html`` (interactive plotly figures, plotly.js inline) and matplotlib
PNGs in ``RESULT_DIR/figures/``. plotly and matplotlib are imported only when drawing.
"""

from deepflow.report.html import write_report
from deepflow.report.results import Objective, Result, load_result

__all__ = ["Objective", "Result", "load_result", "write_report"]
