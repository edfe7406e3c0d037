"""Plots and the HTML report (issue: pathfinding study)."""
