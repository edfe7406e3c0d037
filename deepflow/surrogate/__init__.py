"""Surrogate models of the oracle (issue: Surrogates)."""
