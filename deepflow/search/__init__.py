"""Multi-objective search over designs and mappings (issue: Search)."""
