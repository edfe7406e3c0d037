"""The README's commands can be followed as written in a fresh clone.

Every ``.venv/bin/deepflow`` line of the README's bash blocks is parsed by the real command
line (its subcommand, options and their types; nothing runs), and every file or folder it
reads is in the repository or written by an earlier line (``--out``, or ``results/STUDY``
of ``run``/``search``). Links stay inside the repository.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import typer

from deepflow.cli import app
from tests.conftest import REPO

README = REPO / "README.md"
#: Commands whose positional arguments are inputs that must exist.
_READS = {"show", "evaluate", "best-mapping", "sample", "fit", "query", "search", "run",
          "report"}  # fmt: skip


def _commands() -> list[list[str]]:
    text = README.read_text(encoding="utf-8")
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
