"""Design spaces, samplers and labelled Parquet datasets.

A design space (``configs/spaces/*.yaml``, schema in ``docs/spaces.md``) is a base scenario
plus variables; :func:`sample` labels N of its designs with the oracle, in chunks on local
processes or Ray, and writes the contract's Parquet columns; :func:`load` reads them back.

Example:
    >>> from deepflow.datasets import load, sample, arrays           # doctest: +SKIP
    >>> sample("configs/spaces/mapping-spec.yaml", num_samples=4096, out="d.parquet")
    >>> X, Y, x_names, y_names = arrays(load("d.parquet"), targets=["y_step_time_s"])
"""

from deepflow.datasets.engine import BACKENDS, SampleResult, sample
from deepflow.datasets.io import (
    DatasetArrays,
    arrays,
    load,
    oracle_version,
    read_metadata,
)
from deepflow.datasets.label import label_rows
from deepflow.datasets.samplers import SAMPLERS, unit_cube
from deepflow.datasets.space import (
    VARIABLE_TYPES,
    DesignSpace,
    Variable,
    load_space,
    space_from_text,
    valid_mappings,
)

__all__ = [
    "BACKENDS",
    "SAMPLERS",
    "VARIABLE_TYPES",
    "DatasetArrays",
    "DesignSpace",
    "SampleResult",
    "Variable",
    "arrays",
    "label_rows",
    "load",
    "load_space",
    "oracle_version",
    "read_metadata",
    "sample",
    "space_from_text",
    "unit_cube",
    "valid_mappings",
]
