"""Best-known Pareto fronts of a study, to measure searches against.

The true front of a study is unknown; the best known one is the feasible non-dominated set
of everything tried: a large quasi-random sweep (:func:`sweep_front`: Sobol points labelled
in chunks on several processes, each chunk reduced to its own front where it is computed),
a long vectorised evolutionary run (:func:`deepflow.search.evolution.evolve`) and the
fronts the strategies found. :class:`ReferenceFront` keeps that set with where each point
came from and how (sizes, seeds, seconds, the oracle version), and saves it as a small JSON
file (``benchmarks/reference_fronts/*.json``) that benchmarks read back.

Points are compared in BoTorch's maximisation form (:func:`~deepflow.search.objectives.
to_botorch`), which needs no reference point; the hypervolume uses the objectives' references
and ideals, stored with the front, so every search measured against it is normalised alike.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from deepflow.errors import ConfigError
from deepflow.search.objectives import Bound, Objective, normalise, outcomes, to_botorch
from deepflow.search.pareto import ParetoArchive, hypervolume, pareto_mask, thin_front

__all__ = ["FORMAT", "SWEEP_SEED", "ReferenceFront", "sweep_front"]

F = NDArray[np.float64]

#: Version of the JSON layout.
FORMAT = 1
#: Seed of the reference sweep's scrambled Sobol sequence (distinct from searches' seeds).
SWEEP_SEED = 12345
#: Significant digits of the stored objective values (the hypervolume of the stored front is
#: what the file reports, so rounding changes nothing a reader sees).
DIGITS = 10


@dataclass
class ReferenceFront:
    """A study's best-known front and its provenance.

    Attributes:
        study: the study's name.
        objectives: the objectives with the references and ideals of the hypervolume.
        values: (n, k) objective values in their units, the front's points.
        origin: (n,) index into ``sources`` of the source that found each point first.
        sources: what was merged, in order: dicts with ``kind`` (``sweep``, ``evolution``,
            ``strategy``), its settings (sizes, seeds), ``hypervolume`` (of its own front),
            ``front_size`` and ``seconds``.
        oracle_version: the oracle the points were labelled with.
        space_sha256: the design space's hash.
    """

    study: str
    objectives: tuple[Objective, ...]
    values: F
    origin: NDArray[np.int64]
    sources: list[dict[str, Any]] = field(default_factory=list)
    oracle_version: str = ""
    space_sha256: str = ""
    #: how the stored points were thinned from the merged front (:meth:`thinned`), if so
    thinning: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def empty(
        cls, study: str, objectives: Sequence[Objective], *, oracle_version: str,
        space_sha256: str,
    ) -> ReferenceFront:  # fmt: skip
        """A front without points (to merge sources into)."""
        k = len(objectives)
        return cls(study, tuple(objectives), np.empty((0, k)), np.empty(0, dtype=np.int64), [],
                   oracle_version, space_sha256)  # fmt: skip

    @property
    def normalised(self) -> F:
        return normalise(self.values, self.objectives)

    @property
    def hypervolume(self) -> float:
        """The front's hypervolume in the normalised space (docs/results.md)."""
        return hypervolume(self.normalised)

    def source_hypervolumes(self) -> list[float]:
        """Per source, the hypervolume of the front's points it found (its share of the
        merged front; its own front's hypervolume is ``sources[i]["hypervolume"]``)."""
        norm = self.normalised
        return [hypervolume(norm[self.origin == i]) for i in range(len(self.sources))]

    def merge(self, values: F, source: dict[str, Any]) -> ReferenceFront:
        """A new front with ``values`` (n, k, in their units; feasible designs only) and its
        source added; the source's record gets its own front's size and hypervolume."""
        values = _rounded(np.asarray(values, dtype=float).reshape(-1, len(self.objectives)))
        values = values[np.isfinite(values).all(axis=1)]
        own = pareto_mask(to_botorch(values, self.objectives))
        entry = dict(source, front_size=int(own.sum()),
                     hypervolume=hypervolume(normalise(values[own], self.objectives)))  # fmt: skip
        index = len(self.sources)
        archive = ParetoArchive(len(self.objectives))
        joint = np.vstack([self.values, values[own]])
        origin = np.concatenate([self.origin, np.full(int(own.sum()), index, dtype=np.int64)])
        archive.add(to_botorch(joint, self.objectives), values=joint, origin=origin)
        return replace(
            self,
            values=archive.data.get("values", np.empty((0, len(self.objectives)))),
            origin=archive.data.get("origin", np.empty(0, dtype=np.int64)).astype(np.int64),
            sources=[*self.sources, entry],
            thinning={},
        )

    def thinned(self, max_points: int) -> ReferenceFront:
        """At most ``max_points`` points: one per cell of a grid in the normalised space
        (the one with the largest coordinate sum), the grid as fine as that allows.

        The hypervolume lost is bounded by the cells' size (measured on the default study:
        see ``thinning`` in the file, which records both hypervolumes); a front with at
        most ``max_points`` points is returned as it is.
        """
        if len(self.values) <= max_points:
            return self
        keep, cell_size = thin_front(self.normalised, max_points)
        front = replace(self, values=self.values[keep], origin=self.origin[keep])
        front.sources = [*self.sources]
        front.thinning = {"points_before": len(self.values), "points_after": len(keep),
                          "cell_size": cell_size, "hypervolume_before": self.hypervolume,
                          "hypervolume_after": front.hypervolume}  # fmt: skip
        return front

    # ------------------------------------------------------------------ files
    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "study": self.study,
            "objectives": [
                {
                    "name": o.name,
                    "direction": o.direction,
                    "reference": o.reference,
                    "ideal": o.ideal,
                    "scale": o.scale,
                }
                for o in self.objectives
            ],
            "oracle_version": self.oracle_version,
            "space_sha256": self.space_sha256,
            "hypervolume": self.hypervolume,
            "num_points": len(self.values),
            "sources": self.sources,
            "thinning": self.thinning,
            "points": {
                "columns": [o.name for o in self.objectives],
                "values": self.values.tolist(),
                "origin": self.origin.tolist(),
            },
        }

    def save(self, path: str | Path) -> Path:
        """Write the JSON file (to a temporary name, then renamed); returns its path."""
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_name(f".{p.name}.tmp-{os.getpid()}")
        tmp.write_text(json.dumps(self.to_dict(), separators=(",", ":")) + "\n", encoding="utf-8")
        os.replace(tmp, p)
        return p

    @classmethod
    def load(cls, path: str | Path) -> ReferenceFront:
        """Read a file written by :meth:`save`.

        Raises:
            ConfigError: a missing or unreadable file, or another format.
        """
        p = Path(path)
        try:
            data = json.loads(p.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError(
                f"{p}: no reference front; make one with benchmarks/reference_front.py."
            ) from None
        except (OSError, ValueError) as exc:
            raise ConfigError(f"{p}: not a reference front ({exc}).") from None
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            got = data.get("format") if isinstance(data, dict) else type(data).__name__
            raise ConfigError(f"{p}: reference-front format {got!r}; this deepflow reads {FORMAT}.")
        objectives = tuple(
            Objective(o["name"], o["direction"], float(o["reference"]), float(o["ideal"]),
                      o["scale"])
            for o in data["objectives"]
        )  # fmt: skip
        points = data["points"]
        k = len(objectives)
        return cls(
            study=str(data["study"]),
            objectives=objectives,
            values=np.asarray(points["values"], dtype=float).reshape(-1, k),
            origin=np.asarray(points["origin"], dtype=np.int64),
            sources=list(data["sources"]),
            oracle_version=str(data.get("oracle_version", "")),
            space_sha256=str(data.get("space_sha256", "")),
            thinning=dict(data.get("thinning") or {}),
        )

    def check(self, study: str, objectives: Sequence[Objective], *, space_sha256: str,
              oracle_version: str) -> list[str]:  # fmt: skip
        """Why this front may not fit a study (empty: it does).

        Returns:
            Lines naming each difference: another study or design space, other objectives
            (names, directions, references, ideals, scales) or another oracle version.
        """
        notes = []
        if study != self.study:
            notes.append(f"the front is of study '{self.study}', not '{study}'")
        if space_sha256 and self.space_sha256 and space_sha256 != self.space_sha256:
            notes.append("the design space changed since the front was made")
        mine = [(o.name, o.direction, o.reference, o.ideal, o.scale) for o in self.objectives]
        theirs = [(o.name, o.direction, o.reference, o.ideal, o.scale) for o in objectives]
        if any(math.isfinite(t[2]) for t in theirs) and mine != theirs:
            notes.append("the study's objectives (or their references) differ from the front's")
        if oracle_version and self.oracle_version and oracle_version != self.oracle_version:
            notes.append(
                f"the front was labelled by oracle {self.oracle_version}, this is {oracle_version}"
            )
        return notes


def _rounded(values: F) -> F:
    """Values at :data:`DIGITS` significant digits (what the file stores)."""
    return np.array([[float(f"{v:.{DIGITS}g}") for v in row] for row in values]).reshape(
        values.shape
    )


# ------------------------------------------------------------------------------ the sweep
@dataclass(frozen=True)
class _SweepJob:
    """What a worker needs (plain data: it pickles)."""

    text: str
    file: str
    base_dir: str
    config_path: str
    objectives: tuple[Objective, ...]
    bounds: tuple[Bound, ...]
    seed: int
    num_samples: int
    oracle_version: str


def _sweep_chunk(job: _SweepJob, start: int, stop: int) -> tuple[F, int]:
    """Worker entry point: the feasible non-dominated objective values of Sobol rows
    ``start..stop-1`` and the number of feasible rows."""
    from deepflow.datasets.engine import _worker_space
    from deepflow.datasets.label import label_points, output_names
    from deepflow.datasets.samplers import unit_cube

    space = _worker_space(job.text, job.file, job.base_dir, job.config_path)
    u = unit_cube("sobol", seed=job.seed, start=start, stop=stop, num_samples=job.num_samples,
                  dims=space.num_dims)  # fmt: skip
    rows = label_points(space, u, oracle_version=job.oracle_version).to_pandas()
    values, _, _, ok = outcomes(rows, job.objectives, output_names(space)[1], job.bounds)
    front = pareto_mask(to_botorch(values, job.objectives), ok)
    return values[front], int(ok.sum())


def sweep_front(
    space: Any,
    objectives: Sequence[Objective],
    bounds: Sequence[Bound] = (),
    *,
    num_samples: int,
    seed: int = SWEEP_SEED,
    chunk_rows: int = 65536,
    workers: int = 1,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[F, dict[str, Any]]:
    """The feasible front of ``num_samples`` scrambled Sobol designs of a space.

    Args:
        space: the :class:`~deepflow.datasets.space.DesignSpace`.
        objectives: the objectives (directions matter; references do not).
        bounds: user bounds.
        num_samples: designs to label (>= 1).
        seed: the Sobol sequence's scrambling seed.
        chunk_rows: rows per chunk (the unit of work, each reduced to its front).
        workers: processes (joblib); 1 labels in this process.
        progress: called with (rows done, rows total) after each chunk.

    Returns:
        (n, k) objective values of the front, and a record of the sweep for
        :meth:`ReferenceFront.merge`: ``kind``, ``sampler``, ``num_samples``, ``seed``,
        ``workers``, ``num_feasible`` and ``seconds``.
    """
    from deepflow.datasets.io import oracle_version

    if num_samples < 1 or chunk_rows < 1 or workers < 1:
        raise ConfigError(
            f"sweep_front needs num_samples, chunk_rows and workers >= 1; got {num_samples}, "
            f"{chunk_rows} and {workers}."
        )
    start = time.perf_counter()
    job = _SweepJob(space.text, space.file, space.base_dir,
                    os.environ.get("DEEPFLOW_CONFIG_PATH", ""), tuple(objectives), tuple(bounds),
                    seed, num_samples, oracle_version())  # fmt: skip
    chunks = [(a, min(a + chunk_rows, num_samples)) for a in range(0, num_samples, chunk_rows)]
    if workers == 1:
        results: Any = (_sweep_chunk(job, a, b) for a, b in chunks)
    else:
        from joblib import Parallel, delayed

        parallel = Parallel(n_jobs=workers, backend="loky", batch_size=1, return_as="generator")
        results = parallel(delayed(_sweep_chunk)(job, a, b) for a, b in chunks)
    archive = ParetoArchive(len(objectives))
    feasible, done = 0, 0
    for (a, b), (values, count) in zip(chunks, results, strict=True):
        archive.add(to_botorch(values, objectives), values=values)
        feasible += count
        done += b - a
        if progress is not None:
            progress(done, num_samples)
    front = archive.data.get("values", np.empty((0, len(objectives))))
    record = {
        "kind": "sweep",
        "sampler": "sobol",
        "num_samples": int(num_samples),
        "seed": int(seed),
        "workers": int(workers),
        "num_feasible": int(feasible),
        "seconds": round(time.perf_counter() - start, 1),
    }
    return front, record
