"""Multi-objective search over designs and mappings: studies, strategies, Pareto sets
re-verified by the oracle.

The public face: load a study (:func:`load_study`) and search it to its budget
(:func:`run_search`) with a registered strategy (:data:`STRATEGIES`,
:mod:`deepflow.search.registry`) on a storage several workers may share. Writing a result
folder, and the whole pipeline (sample, fit, search, verify, report), live in
:mod:`deepflow.pipeline`. Heavy libraries (torch, BoTorch) are imported only by the
strategies that need them.
"""

from deepflow.search.base import (
    Proposals,
    Results,
    SearchConfig,
    SearchContext,
    Searcher,
    SearchResult,
    make_searcher,
    run_search,
)
from deepflow.search.pareto import hypervolume, pareto_mask
from deepflow.search.registry import REGISTRY, STRATEGIES
from deepflow.search.study import Study, load_study, study_from_mapping

__all__ = [
    "REGISTRY",
    "STRATEGIES",
    "Proposals",
    "Results",
    "SearchConfig",
    "SearchContext",
    "SearchResult",
    "Searcher",
    "Study",
    "hypervolume",
    "load_study",
    "make_searcher",
    "pareto_mask",
    "run_search",
    "study_from_mapping",
]
