"""Multi-objective search over designs and mappings: studies, strategies, Pareto sets
re-verified by the oracle.

The public face: load a study (:func:`load_study`), search it to its budget and write the
result folder (:func:`search_study`), or run the whole pipeline (:func:`run_study`: sample,
fit, search, verify, report). Strategies: :data:`STRATEGIES`. Heavy libraries (torch,
BoTorch) are imported only by the strategies that need them.
"""

from deepflow.search.engine import SearchConfig, SearchResult, run_search
from deepflow.search.pareto import hypervolume, pareto_mask
from deepflow.search.runner import StudyOutcome, run_study, search_study
from deepflow.search.study import STRATEGIES, Study, load_study, study_from_mapping

__all__ = [
    "STRATEGIES",
    "SearchConfig",
    "SearchResult",
    "Study",
    "StudyOutcome",
    "hypervolume",
    "load_study",
    "pareto_mask",
    "run_search",
    "run_study",
    "search_study",
    "study_from_mapping",
]
