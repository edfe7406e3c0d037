"""The search strategies by name: one line per strategy, the class imported when it is used.

A strategy is a class with the :class:`~deepflow.search.base.Searcher` protocol whose
constructor takes a :class:`~deepflow.search.base.SearchContext`. Adding one is this line and
the class; the study schema, the CLI and the contract tests (``tests/search/test_contract.py``)
pick it up from here.
"""

from __future__ import annotations

__all__ = ["INNER_STRATEGIES", "REGISTRY", "STRATEGIES"]

#: strategy name -> "module:Class" of its searcher.
REGISTRY: dict[str, str] = {
    "botorch": "deepflow.search.searchers:BotorchSearcher",
    "nsga2": "deepflow.search.searchers:NSGA2Searcher",
    "tpe": "deepflow.search.searchers:TPESearcher",
    "gp": "deepflow.search.searchers:GPSearcher",
    "random": "deepflow.search.searchers:RandomSearcher",
    "surrogate": "deepflow.search.assisted:SurrogateSearcher",
    "gradient": "deepflow.search.gradient:GradientSearcher",
}

#: Every strategy name, in the registry's order.
STRATEGIES = tuple(REGISTRY)

#: Strategies the surrogate-assisted search may run on its surrogate (cheap and many
#: evaluations: no BoTorch GP there, and not itself).
INNER_STRATEGIES = ("nsga2", "tpe", "gp", "random")
