"""The ``deepflow`` command line: a thin typer shell over the library.

Exit codes (contract): 0 success, 2 bad input (the message names the file and key), 1 internal
failure. Nothing is written when the input is rejected. Heavy libraries (torch, botorch) are
imported inside the commands that need them, so ``deepflow --help`` stays fast.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from deepflow import CONTRACT_VERSION, __version__
from deepflow.errors import ConfigError, DeepflowError

__all__ = ["app", "main"]

T = TypeVar("T")

app = typer.Typer(
    name="deepflow",
    help="Cross-stack pathfinding for distributed AI systems.",
    add_completion=False,
    pretty_exceptions_enable=False,
)

EXIT_INTERNAL = 1
EXIT_BAD_INPUT = 2


def _guard(fn: Callable[[], T]) -> T:
    """Run a command body; map deepflow errors to the contract's exit codes."""
    try:
        return fn()
    except ConfigError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(EXIT_BAD_INPUT) from None
    except DeepflowError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(EXIT_INTERNAL) from None


@app.callback(invoke_without_command=True)
def _root(
    ctx: typer.Context,
    version: Annotated[
        bool,
        typer.Option("--version", help="Print the version and exit.", is_eager=True),
    ] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="With --version: print JSON.", is_eager=True)
    ] = False,
) -> None:
    if version:
        if as_json:
            payload = {"version": __version__, "contract_version": CONTRACT_VERSION}
            typer.echo(json.dumps(payload))
        else:
            typer.echo(f"deepflow {__version__} (contract v{CONTRACT_VERSION})")
        raise typer.Exit(0)
    if ctx.invoked_subcommand is None:
        typer.echo(ctx.get_help())
        raise typer.Exit(EXIT_BAD_INPUT)


def _dump(data: Any, as_json: bool) -> None:
    if as_json:
        typer.echo(json.dumps(data, indent=2))
    else:
        import yaml

        typer.echo(yaml.safe_dump(data, sort_keys=False, width=100, allow_unicode=True).rstrip())


@app.command()
def show(
    scenario: Annotated[Path, typer.Argument(help="Scenario YAML (system, workload, mapping).")],
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Print the fully resolved scenario: presets expanded, SI units in every key.

    ``derived.device`` holds what the device can do: the datasheet for spec-mode devices, the
    capabilities, area, power and cost derived from technology and budgets for design mode.
    """

    def body() -> None:
        from deepflow.config import load_scenario
        from deepflow.config.serialize import resolved_scenario, to_dict
        from deepflow.oracle.hardware import device_summary

        resolved = load_scenario(scenario)
        data = resolved_scenario(resolved)
        data["derived"]["device"] = to_dict(device_summary(resolved.system.device))
        _dump(data, as_json)

    _guard(body)


def main() -> None:
    """Console-script entry point."""
    app(prog_name="deepflow")


if __name__ == "__main__":  # pragma: no cover
    main()
