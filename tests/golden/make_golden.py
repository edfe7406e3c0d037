"""Capture the oracle's outputs that a refactor must leave bit for bit unchanged.

Run from the repository root: ``python tests/golden/make_golden.py [--write]``. Without
``--write`` it compares against ``tests/golden/oracle_golden.json`` and prints the first
differences (exit 1 when any). The golden holds:

- ``evaluate``: the ``evaluate --json`` result of every scenario preset;
- ``validate``: the full ``validate --json`` report of the shipped public set;
- ``best_mapping``: the top-10 mappings of three scenarios;
- ``datasets``: the SHA-256 of the labelled columns of a 20,000-row dataset of every shipped
  space (``sample_index``, the x, y and c columns and ``feasible``: the provenance strings,
  which name the oracle version, are left out so that the hash is about values only).

Floats are stored as ``float.hex()`` strings, so "equal" means bit-identical.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).with_name("oracle_golden.json")
BEST_MAPPING_SCENARIOS = (
    "gpt3-175b-a100",
    "llama3-8b-h100",
    "lstm-a100",
    "llama3-70b-serving-h100-disaggregated",
)
DATASET_ROWS = 20_000
_SKIP_COLUMNS = ("oracle_version", "space_sha256", "seed")


def exact(value: Any) -> Any:
    """A JSON-able copy with every float as its hex string (bit-exact round trip)."""
    if isinstance(value, bool) or value is None or isinstance(value, str | int):
        return value
    if isinstance(value, float):
        return value.hex()
    if isinstance(value, np.generic):
        return exact(value.item())
    if isinstance(value, dict):
        return {str(k): exact(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [exact(v) for v in value]
    raise TypeError(f"cannot store {type(value).__name__}")


def evaluations() -> dict[str, Any]:
    from deepflow.config import list_presets, load_scenario
    from deepflow.config.loader import preset_path
    from deepflow.oracle.evaluate import evaluate_one

    return {name: exact(evaluate_one(load_scenario(preset_path("scenarios", name) or name)))
            for name in list_presets("scenarios")}  # fmt: skip


def validation() -> Any:
    from deepflow.validation import validation_report

    return exact(validation_report())


def best_mapping() -> dict[str, Any]:
    from deepflow.config import load_scenario
    from deepflow.config.loader import preset_path
    from deepflow.errors import ConfigError
    from deepflow.oracle.best_mapping import best_mappings

    out: dict[str, Any] = {}
    for name in BEST_MAPPING_SCENARIOS:
        try:
            out[name] = exact(
                best_mappings(load_scenario(preset_path("scenarios", name) or name), top=10)
            )
        except ConfigError as exc:  # a workload best-mapping does not enumerate
            out[name] = {"error": str(exc).replace(f"{ROOT}/", "")}  # a clone's own path
    return out


def table_sha256(table: Any) -> str:
    digest = hashlib.sha256()
    for name in sorted(table.column_names):
        if name in _SKIP_COLUMNS:
            continue
        column = table.column(name).combine_chunks()
        digest.update(name.encode())
        digest.update(str(column.type).encode())
        values = column.to_numpy(zero_copy_only=False)
        if values.dtype == object:
            digest.update(json.dumps([str(v) for v in values]).encode())
        else:
            digest.update(np.ascontiguousarray(values).tobytes())
    return digest.hexdigest()


def datasets() -> dict[str, str]:
    from deepflow.config import list_presets
    from deepflow.datasets import label_rows, load_space

    out = {}
    for name in list_presets("spaces"):
        space = load_space(name)
        rows = DATASET_ROWS
        table = label_rows(space, seed=0, start=0, stop=rows, num_samples=rows, oracle_version="")
        out[name] = table_sha256(table)
    return out


def capture() -> dict[str, Any]:
    return {
        "evaluate": evaluations(),
        "validate": validation(),
        "best_mapping": best_mapping(),
        "datasets": datasets(),
    }


def differences(a: Any, b: Any, path: str = "") -> list[str]:
    """Paths where two captures differ (keys missing on either side included)."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                out.append(f"{path}/{k}: only in {'golden' if k in a else 'now'}")
            else:
                out.extend(differences(a[k], b[k], f"{path}/{k}"))
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True))
                for d in differences(x, y, f"{path}[{i}]")]  # fmt: skip
    return [] if a == b else [f"{path}: golden {a!r}, now {b!r}"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="overwrite the golden file")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    now = capture()
    if args.write:
        GOLDEN.write_text(json.dumps(now, indent=1, sort_keys=True) + "\n")
        print(f"wrote {GOLDEN.relative_to(ROOT)}")
        return 0
    diff = differences(json.loads(GOLDEN.read_text()), now)
    for line in diff[:40]:
        print(line)
    print(f"{len(diff)} differences from {GOLDEN.relative_to(ROOT)}")
    return 1 if diff else 0


if __name__ == "__main__":
    raise SystemExit(main())
