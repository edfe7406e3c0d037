"""The README's commands can be followed as written in a fresh clone.

Every ``.venv/bin/deepflow`` line of the README's bash blocks is parsed by the real command
line (its subcommand, options and their types; nothing runs), and every file or folder it
reads is in the repository or written by an earlier line (``--out``, or ``results/STUDY``
of ``run``/``search``). Links stay inside the repository. The slow test runs them all, in
order, in a copy of the checkout's files (what a clone holds) with an 80-column terminal:
each exits 0 without a traceback or a warning, and its tables fit without a cut number
(``make tour``, part of ``make test``). The case-study lines (``benchmarks/case_studies.py``)
are benchmarks that rewrite ``docs/figures/``; ``tests/test_case_studies.py`` runs them at a
tiny size.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import typer

from deepflow.cli import app
from tests.conftest import REPO

README = REPO / "README.md"
#: Commands whose positional arguments are inputs that must exist.
_READS = {"show", "evaluate", "best-mapping", "sample", "fit", "query", "search", "run",
          "report"}  # fmt: skip


def _commands(readme: Path = README) -> list[list[str]]:
    text = readme.read_text(encoding="utf-8")
    out = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        for line in block.splitlines():
            line = line.split(" #", 1)[0].strip()
            if line.startswith(".venv/bin/deepflow"):
                out.append(shlex.split(line)[1:])
    return out


def test_the_tour_is_found() -> None:
    names = [c[0] for c in _commands() if c]
    assert {"show", "evaluate", "sample", "fit", "query", "search", "run", "report"} <= set(names)


def test_every_readme_command_parses_and_reads_what_exists_or_was_written() -> None:
    command = typer.main.get_command(app)
    written: set[str] = set()
    for args in _commands():
        if not args or args[0].startswith("-"):
            continue
        name, rest = args[0], args[1:]
        sub = command.get_command(command.make_context("deepflow", ["--help"],
                                                       resilient_parsing=True), name)  # fmt: skip
        assert sub is not None, f"README: unknown command {name}"
        ctx = sub.make_context(name, list(rest))
        params = ctx.params
        if name in _READS:
            for param in sub.params:
                if param.param_type_name != "argument":
                    continue
                value = str(params[param.name])
                exists = (REPO / value).exists() or value in written
                assert exists, (
                    f"README: `deepflow {' '.join(args)}` reads {value}, which "
                    "nothing before it creates"
                )
        out = params.get("out")
        if out is not None:
            written.add(str(out))
        elif name in ("run", "search"):
            study = Path(str(params["study_path"])).stem
            written.add(f"results/{study}")


def test_readme_links_stay_in_the_repository() -> None:
    text = README.read_text(encoding="utf-8")
    for target in re.findall(r"\]\(([^)#]+)\)", text):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        assert not target.startswith("../"), f"README links outside the repository: {target}"
        assert (REPO / target).exists(), f"README links to a missing file: {target}"


#: Characters that start the lines of a rich table (heavy head box).
_TABLE = "┏┃┡│└"


def _clone(to: Path) -> Path:
    """The checkout's files as a clone of it holds them (tracked, and untracked but not
    ignored), with the checkout's venv as ``.venv``."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        check=True,
    )
    for name in listed.stdout.decode().split("\0"):
        source = REPO / name
        if name and source.is_file():  # a deleted file stays listed until committed
            target = to / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(source.read_bytes())
    (to / ".venv").symlink_to(Path(sys.prefix), target_is_directory=True)
    return to


@pytest.mark.slow
def test_the_tour_runs_as_written_in_a_fresh_clone(tmp_path: Path) -> None:
    clone = _clone(tmp_path / "clone")
    env = {k: v for k, v in os.environ.items() if k != "DEEPFLOW_CONFIG_PATH"}
    env.update(COLUMNS="80", PYTHONPATH=str(clone))  # the clone's package and presets
    where = subprocess.run(
        [".venv/bin/python", "-c", "import deepflow; print(deepflow.__file__)"],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert Path(where.stdout.strip()).is_relative_to(clone)
    commands = _commands(clone / "README.md")
    assert len(commands) >= 15
    for args in commands:
        shown = f"README: `deepflow {' '.join(args)}`"
        proc = subprocess.run([".venv/bin/deepflow", *args], cwd=clone, env=env,
                              capture_output=True, text=True, timeout=900)  # fmt: skip
        assert proc.returncode == 0, f"{shown} exited {proc.returncode}:\n{proc.stderr}"
        for stream in (proc.stdout, proc.stderr):
            assert "Traceback" not in stream and "warning:" not in stream, f"{shown}:\n{stream}"
        if "--json" in args:
            json.loads(proc.stdout)
            continue
        table = [line for line in proc.stdout.splitlines() if line[:1] in _TABLE]
        assert max((len(line) for line in table), default=0) <= 80, f"{shown}:\n{proc.stdout}"
        assert "…" not in proc.stdout, f"{shown} cuts a cell at 80 columns:\n{proc.stdout}"
    assert (clone / "results" / "default" / "report.html").is_file()
