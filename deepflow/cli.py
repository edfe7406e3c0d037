"""The ``deepflow`` command line: a thin typer shell over the library.

Exit codes (contract): 0 success, 2 bad input (the message names the file and key), 1 internal
failure. Nothing is written when the input is rejected. Heavy libraries (torch, botorch) are
imported inside the commands that need them, so ``deepflow --help`` stays fast.
"""

from __future__ import annotations

import contextlib
import json
import threading
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar, cast

import typer

from deepflow import CONTRACT_VERSION, __version__
from deepflow.errors import ConfigError, DeepflowError, PlausibilityWarning

__all__ = ["app", "main"]

T = TypeVar("T")

app = typer.Typer(
    name="deepflow",
    help="Cross-stack pathfinding for distributed AI systems.",
    add_completion=True,  # --install-completion / --show-completion (bash, zsh, fish, pwsh)
    context_settings={"help_option_names": ["-h", "--help"]},
    pretty_exceptions_enable=False,
)

EXIT_INTERNAL = 1
EXIT_BAD_INPUT = 2


def _show_warning(message: Warning | str, category: type[Warning], *_: Any, **__: Any) -> None:
    typer.echo(f"warning: {message}", err=True)


def _guard(fn: Callable[[], T]) -> T:
    """Run a command body; map deepflow errors to the contract's exit codes. Plausibility
    warnings print as ``warning:`` lines; numpy's floating-point warnings never print (the
    oracle turns NaN/inf into infeasible rows)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("always", PlausibilityWarning)
            warnings.filterwarnings("ignore", r".* encountered in ", RuntimeWarning)
            warnings.showwarning = _show_warning
            return fn()
    except ConfigError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(EXIT_BAD_INPUT) from None
    except DeepflowError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(EXIT_INTERNAL) from None
    except ModuleNotFoundError as exc:
        extra = OPTIONAL_MODULES.get((exc.name or "").split(".")[0])
        if extra is None:
            raise
        typer.echo(f"error: {_missing_extra(str(exc.name).split('.')[0], extra)}", err=True)
        raise typer.Exit(EXIT_INTERNAL) from None
    except OSError as exc:  # a disk, permission or storage error: the path and the cause
        typer.echo(f"error: {_os_error(exc)}", err=True)
        raise typer.Exit(EXIT_INTERNAL) from None


#: Optional dependencies -> the extra of pyproject.toml that installs them.
OPTIONAL_MODULES = {
    "torch": "ml",
    "botorch": "ml",
    "gpytorch": "ml",
    "linear_operator": "ml",
    "safetensors": "ml",
    "ray": "dist",
    "psycopg": "postgres",
}


def _missing_extra(module: str, extra: str) -> str:
    """One line: which optional module is missing and the extra that installs it."""
    torch = " (CPU torch first: README, 'Installing')" if extra == "ml" else ""
    return (f"this needs {module}, which is not installed; install the {extra} extra: "
            f"pip install 'deepflow[{extra}]'{torch}.")  # fmt: skip


def _os_error(exc: OSError) -> str:
    """``PATH: cause.`` of an OS error (both paths of a rename)."""
    cause = exc.strerror or str(exc) or type(exc).__name__
    if exc.filename is None:
        return f"{cause}."
    second = f" -> {exc.filename2}" if exc.filename2 is not None else ""
    return f"{exc.filename}{second}: {cause}."


#: Fewer rows cannot be split into a training set and a held-out set worth scoring.
MIN_FIT_ROWS = 10


def _check_out_suffix(out: Path, suffix: str, what: str) -> None:
    """``--out`` must end in ``suffix`` (a file of that kind); with none, be no file (a folder)."""
    for parent in out.parents:
        if parent.is_file():
            raise ConfigError(f"--out {out}: {parent} is a file, not a folder.")
    if suffix and out.suffix.lower() != suffix:
        raise ConfigError(f"--out {out}: writes {what}; give a name ending in {suffix}.")
    if not suffix and out.is_file():
        raise ConfigError(f"--out {out}: is a file; {what} is written to a folder.")


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


def _emit(data: dict[str, Any], as_json: bool, printer: Callable[[dict[str, Any]], None]) -> None:
    """Print a command's result: one JSON object, or the human-readable form."""
    if as_json:
        typer.echo(json.dumps(data, indent=2))
    else:
        printer(data)


#: Priority of a table column: 0 always shown; higher numbers are dropped first.
Column = tuple[str, int, str]  # (label, priority, justify)


def _table_width(widths: list[int]) -> int:
    """Width of a rich table (heavy head box) whose columns hold ``widths`` characters."""
    return sum(w + 3 for w in widths) + 1


def _print_table(title: str, columns: list[Column], rows: list[list[str]], *, wide: bool,
                 console: Any = None) -> None:  # fmt: skip
    """Print a table that fits the terminal (80 columns when not one) without cutting a cell:
    columns are dropped by priority (highest first) until it fits, and a note names them;
    ``wide`` keeps them all (the table may then be wider than the terminal)."""
    from rich.console import Console
    from rich.table import Table

    width = (console or Console()).width
    need = [max([len(label), *(len(r[j]) for r in rows)]) for j, (label, _, _) in
            enumerate(columns)]  # fmt: skip
    keep = list(range(len(columns)))
    if not wide:
        for j in sorted(keep, key=lambda j: -columns[j][1]):
            if _table_width([need[k] for k in keep]) <= width or columns[j][1] == 0:
                break
            keep.remove(j)
    shown = max(width, _table_width([need[k] for k in keep]))
    table = Table(title=title)
    for j in keep:
        label, _, justify = columns[j]
        table.add_column(label, justify=cast(Any, justify), no_wrap=True, min_width=need[j])
    for r in rows:
        table.add_row(*(r[j] for j in keep))
    out = console or Console(width=shown)
    out.print(table)
    hidden = [columns[j][0] for j in range(len(columns)) if j not in keep]
    if hidden:
        out.print(f"(hidden to fit {width} columns: {', '.join(hidden)}; --wide shows them)",
                  highlight=False)  # fmt: skip


_Wide = Annotated[
    bool, typer.Option("--wide", help="Show every table column, however wide the table.")
]


def _print_yaml(data: dict[str, Any]) -> None:
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
        _emit(data, as_json, _print_yaml)

    _guard(body)


@app.command()
def evaluate(
    scenario: Annotated[Path, typer.Argument(help="Scenario YAML (system, workload, mapping).")],
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """One oracle evaluation: step time with a breakdown, throughput, memory, power, energy."""

    def body() -> None:
        from deepflow.config import load_scenario
        from deepflow.oracle.evaluate import evaluate_one
        from deepflow.oracle.version import oracle_version

        result = evaluate_one(load_scenario(scenario))
        result["oracle_version"] = oracle_version()
        _emit(result, as_json, _print_evaluation)

    _guard(body)


def _print_evaluation(result: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    device = result["device"]
    console.print(
        f"[bold]step time {result['step_time_s']:.6g} s[/bold]  "
        f"({result['samples_per_s']:.4g} samples/s, {result['tokens_per_s']:.4g} tokens/s, "
        f"MFU {100 * result['mfu']:.1f} %) on {result['num_devices']} × {device['name']}"
    )
    if "ttft_s" in result:  # a serving workload (docs/model.md part D)
        pools = result.get("pools")
        replica = "a decode replica" if pools else "a replica"
        console.print(
            f"serving: TTFT {result['ttft_s']:.4g} s (queue {result['queue_wait_s']:.4g} s), "
            f"TPOT {1e3 * result['tpot_s']:.4g} ms, request {result['request_latency_s']:.4g} s; "
            f"{result['active_batch']:.0f} requests in flight {replica} (its KV cache holds "
            f"{result['max_concurrency']:.0f}); "
            f"{result['tokens_per_J']:.4g} tokens/J, ${result['usd_per_Mtoken']:.4g} per M tokens"
        )
        if pools:  # disaggregated prefill and decode (docs/model.md §D6)
            sent_ms = 1e3 * result["breakdown_s"]["kv_transfer"]
            console.print(
                f"pools: {pools['prefill_replicas']} prefill × TP "
                f"{pools['prefill_tensor_parallel']}, {pools['decode_replicas']} decode × TP "
                f"{pools['decode_tensor_parallel']}; each prompt's KV cache sent in "
                f"{sent_ms:.4g} ms"
            )
    table = Table(title="where the step time goes")
    table.add_column("component")
    table.add_column("seconds", justify="right")
    table.add_column("share", justify="right")
    for name, seconds in result["breakdown_s"].items():
        share = seconds / result["step_time_s"] if result["step_time_s"] else 0.0
        table.add_row(name, f"{seconds:.6g}", f"{100 * share:.1f} %")
    console.print(table)
    framework = result.get("framework")
    if framework:
        switches = ", ".join(f"{k} {v}" for k, v in framework["behaviours"].items())
        console.print(f"framework [bold]{framework['name']}[/bold]: {switches}")
    placement = result.get("placement")
    if placement and placement["groups"]:
        where = "; ".join(
            f"{name} {g['size']} " + ("in 1 node" if g["nodes"] == 1 else
                                      f"over {g['nodes']} nodes, {g['members_per_node']} per node")
            for name, g in placement["groups"].items()
        )  # fmt: skip
        console.print(f"placement [bold]{placement['rank_order']}[/bold]: {where}")
    terms = {k: v for k, v in result.get("memory_breakdown_B", {}).items() if v > 0}
    if terms:
        memory = Table(title="where the memory goes (per device)")
        memory.add_column("component")
        memory.add_column("GiB", justify="right")
        memory.add_column("share", justify="right")
        for name, nbytes in terms.items():
            share = nbytes / result["memory_per_device_B"]
            memory.add_row(name, f"{nbytes / 2**30:.3g}", f"{100 * share:.1f} %")
        console.print(memory)
    fits = "fits" if result["memory_excess_B"] <= 0 else "does NOT fit"
    console.print(
        f"memory {result['memory_per_device_B'] / 2**30:.2f} GiB of "
        f"{result['memory_capacity_B'] / 2**30:.2f} GiB per device ({fits}); "
        f"system power {result['system_power_W'] / 1e3:.3g} kW, "
        f"{result['energy_per_step_J'] / 1e3:.4g} kJ per step "
        f"({result['energy_per_step_ops_J'] / 1e3:.4g} kJ summed per operation)"
    )
    if result["sram_excess_B"] > 0:
        console.print(
            f"on-chip SRAM too small: the smallest GEMM tile needs "
            f"{result['sram_excess_B'] / 2**10:.3g} KiB more per SM (register file or L1)"
        )
    if not result["feasible"]:
        why = ", ".join(f"{name} {result['constraints'][name]:.6g}"
                        for name in result["violated_constraints"])  # fmt: skip
        console.print(f"[bold red]infeasible[/bold red]: {why} (each must be <= 0)",
                      highlight=False)  # fmt: skip


@app.command("best-mapping")
def best_mapping(
    scenario: Annotated[Path, typer.Argument(help="Scenario YAML (its mapping is ignored).")],
    top: Annotated[int, typer.Option("--top", min=1, help="How many mappings to print.")] = 10,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    wide: _Wide = False,
    max_ttft_s: Annotated[float | None, typer.Option(
        "--max-ttft-s", help="Serving: keep the mappings whose time to first token is at most "
        "this (s).")] = None,
    max_tpot_ms: Annotated[float | None, typer.Option(
        "--max-tpot-ms", help="Serving: keep the mappings whose time per output token is at "
        "most this (ms).")] = None,
) -> None:  # fmt: skip
    """Enumerate every valid mapping for the model and system; rank the feasible ones."""

    def body() -> None:
        from deepflow.config import load_scenario
        from deepflow.oracle.best_mapping import best_mappings

        for flag, value in (("--max-ttft-s", max_ttft_s), ("--max-tpot-ms", max_tpot_ms)):
            if value is not None and not value > 0:
                raise ConfigError(f"{flag} must be > 0; got {value:g}.")
        tpot = None if max_tpot_ms is None else max_tpot_ms / 1e3
        result = best_mappings(load_scenario(scenario), top=top, max_ttft_s=max_ttft_s,
                               max_tpot_s=tpot)  # fmt: skip
        _emit(result, as_json, lambda r: _print_mappings(r, wide=wide))

    _guard(body)


def _print_serving_mappings(result: dict[str, Any], *, wide: bool) -> None:
    columns: list[Column] = [
        ("#", 0, "right"), ("tokens/s", 0, "right"), ("TTFT s", 0, "right"),
        ("TPOT ms", 0, "right"), ("mem GiB", 1, "right"), ("max conc.", 2, "right"),
        ("TP", 0, "right"), ("PP", 0, "right"), ("DP", 0, "right"),
    ]  # fmt: skip
    rows = [[str(rank), f"{row['tokens_per_s']:.4g}", f"{row['ttft_s']:.3g}",
             f"{1e3 * row['tpot_s']:.3g}", f"{row['memory_per_device_B'] / 2**30:.1f}",
             f"{row['max_concurrency']:.0f}", str(row["mapping"]["tensor_parallel"]),
             str(row["mapping"]["pipeline_parallel"]), str(row["mapping"]["data_parallel"])]
            for rank, row in enumerate(result["mappings"], 1)]  # fmt: skip
    if any(row["mapping"].get("expert_parallel", 1) > 1
           or row["mapping"].get("expert_tensor_parallel", 0) > 0
           for row in result["mappings"]):  # fmt: skip
        # a MoE's expert layout: EP, and the ranks splitting each expert (0: as TP)
        columns += [("EP", 0, "right"), ("ETP", 0, "right")]
        for line, row in zip(rows, result["mappings"], strict=True):
            line += [str(row["mapping"]["expert_parallel"]),
                     str(row["mapping"]["expert_tensor_parallel"])]  # fmt: skip
    if any(row["mapping"].get("prefill_replicas", 0) > 0 for row in result["mappings"]):
        # disaggregated pools: the prefill replicas of the DP and their TP (the decode's: TP)
        columns += [("prefill DP", 0, "right"), ("prefill TP", 0, "right")]
        for line, row in zip(rows, result["mappings"], strict=True):
            m = row["mapping"]
            split = m["prefill_replicas"] > 0
            line += [str(m["prefill_replicas"]) if split else "-",
                     str(m["prefill_tensor_parallel"] or m["tensor_parallel"]) if split
                     else "-"]  # fmt: skip
    title = f"{result['num_feasible']:,} feasible of {result['num_valid']:,} valid mappings"
    if "slo" in result:
        bounds = ", ".join(f"TTFT ≤ {v:g} s" if k == "max_ttft_s" else f"TPOT ≤ {1e3 * v:g} ms"
                           for k, v in result["slo"].items())  # fmt: skip
        title += f", {result['num_within_slo']:,} within {bounds}"
    _print_table(title, columns, rows, wide=wide)


def _print_mappings(result: dict[str, Any], *, wide: bool = False) -> None:
    if result["mappings"] and "tpot_s" in result["mappings"][0]:
        _print_serving_mappings(result, wide=wide)
        return
    columns: list[Column] = [
        ("#", 0, "right"), ("step s", 0, "right"), ("MFU", 1, "right"), ("mem GiB", 1, "right"),
        ("TP", 0, "right"), ("PP", 0, "right"), ("DP", 0, "right"), ("CP", 3, "right"),
        ("EP", 4, "right"), ("mb", 1, "right"), ("v", 3, "right"), ("SP", 2, "right"),
        ("recompute", 2, "right"), ("ZeRO", 1, "right"), ("ranks", 3, "left"),
        ("axes", 4, "left"),
    ]  # fmt: skip
    rows = []
    for rank, row in enumerate(result["mappings"], 1):
        m = row["mapping"]
        rows.append([
            str(rank), f"{row['step_time_s']:.4g}", f"{100 * row['mfu']:.1f}%",
            f"{row['memory_per_device_B'] / 2**30:.1f}", str(m["tensor_parallel"]),
            str(m["pipeline_parallel"]), str(m["data_parallel"]),
            str(m["context_parallel"]), str(m["expert_parallel"]),
            str(m["micro_batch_size"]), str(m["virtual_pipeline_stages"]),
            "yes" if m["sequence_parallel"] else "no", m["activation_recompute"],
            str(m["zero_stage"]), m["rank_order"], m["grid_axes"],
        ])  # fmt: skip
    title = f"{result['num_feasible']:,} feasible of {result['num_valid']:,} valid mappings"
    _print_table(title, columns, rows, wide=wide)
    counts = {k: v for k, v in result.get("violations", {}).items() if v}
    if counts:
        why = ", ".join(f"{name} {n:,}" for name, n in counts.items())
        typer.echo(f"no feasible mapping among {result['num_valid']:,}; mappings breaking each "
                   f"constraint: {why}.")  # fmt: skip
    violated = result.get("violated_device_constraints")
    if violated:
        budgets = result["device_constraints"]
        why = ", ".join(f"{name} {budgets[name]:.6g}" for name in violated)
        typer.echo(f"the device breaks its budgets: {why} (each must be <= 0)")


@app.command()
def validate(
    cases: Annotated[
        Path | None, typer.Option("--cases", help="Measurement JSON (default: the public set).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    wide: _Wide = False,
    group: Annotated[
        str | None,
        typer.Option(
            "--group",
            help="Score only the cases whose group or id matches this "
            "shell-style pattern, e.g. 'trtllm_perf_overview_h200*'.",
        ),
    ] = None,
    breakdown: Annotated[
        bool,
        typer.Option(
            "--breakdown",
            help="Also show where each end-to-end case's modelled "
            "step, peak memory or request slot goes, by part.",
        ),
    ] = False,
    scenarios: Annotated[
        Path | None,
        typer.Option(
            "--scenarios",
            help="Also write each end-to-end case's scenario to FOLDER/<case>.yaml, as "
            "deepflow evaluate reads it.",
            metavar="FOLDER",
        ),
    ] = None,
) -> None:
    """Score the oracle against published measurements: per case, per group, overall."""

    def body() -> None:
        from deepflow.validation import load_cases, validation_report, write_case_scenarios

        report = validation_report(cases, group=group, breakdown=breakdown)
        if not report["cases"] and not report["skipped"]:
            raise ConfigError(f"{cases}: holds no measurement cases; give at least one.")
        if scenarios is not None:
            written = write_case_scenarios(load_cases(cases, group=group), scenarios)
            report["scenario_files"] = [str(p) for p in written]
        _emit(report, as_json, lambda r: _print_validation(r, wide=wide, breakdown=breakdown))

    _guard(body)


#: Parts of a case's breakdown the ``--breakdown`` table shows, largest first.
_BREAKDOWN_PARTS = 4


def _print_validation(report: dict[str, Any], *, wide: bool = False,
                      breakdown: bool = False) -> None:  # fmt: skip
    from rich.console import Console

    console = Console()
    # the error says how far the model is; the two values go first when the table is too wide
    columns: list[Column] = [("case", 0, "left"), ("quantity", 3, "right"),
                             ("measured", 2, "right"), ("model", 1, "right"),
                             ("error", 0, "right")]  # fmt: skip
    rows = [[row["id"], row["quantity"], f"{row['measured']:.4g}", f"{row['model']:.4g}",
             f"{100 * row['error']:+.1f} %"] for row in report["cases"]]  # fmt: skip
    _print_table("per case", columns, rows, wide=wide)
    if breakdown:
        _print_breakdowns(report["cases"], wide=wide)
    columns = [("group", 0, "left"), ("cases", 0, "right"), ("mean |error|", 0, "right"),
               ("max |error|", 1, "right")]  # fmt: skip
    rows = [[name, str(g["cases"]), f"{100 * g['mean_abs_error']:.1f} %",
             f"{100 * g['max_abs_error']:.1f} %"]
            for name, g in report["groups"].items()]  # fmt: skip
    _print_table("per group (mean |error|)", columns, rows, wide=wide)
    kinds = [g.get("kind") for g in report["groups"].values()]
    # out-of-memory runs scored against feasibility have their own figure (below)
    errors = [g for g in report["groups"].values() if g.get("kind") != "feasibility"]
    console.print(
        f"[bold]group-weighted mean |error| {100 * report['group_weighted_mean_abs_error']:.1f} %"
        f"[/bold] over {sum(g['cases'] for g in errors)} cases in {len(errors)} groups"
    )
    parts = [f"{label} {100 * report[f'{kind}_group_weighted_mean_abs_error']:.1f} % "
             f"({kinds.count(kind)})" for kind, label in
             (("performance", "performance"), ("memory", "memory"), ("serving", "serving"))
             if kinds.count(kind)]  # fmt: skip
    if len(parts) > 1:
        console.print("  by kind (groups): " + ", ".join(parts))
    if kinds.count("feasibility"):
        from deepflow.validation import FITS_QUANTITY

        misses = [r for r in report["cases"] if r["quantity"] == FITS_QUANTITY]
        share = 100 * report["feasibility_group_weighted_mean_abs_error"]
        console.print(f"runs that ran out of memory, modelled as fitting: "
                      f"{sum(r['model'] > 0 for r in misses)} of {len(misses)} "
                      f"(group-weighted {share:.1f} %)")  # fmt: skip
    from rich.markup import escape

    for skip in report.get("skipped", []):
        console.print(f"[yellow]skipped[/yellow] {escape(str(skip['id']))}: "
                      f"{escape(skip['reason'])}", highlight=False)  # fmt: skip
    if "scenario_files" in report:
        files = report["scenario_files"]
        if files:
            folder = Path(files[0]).parent
            console.print(f"wrote {len(files)} case scenarios to {escape(str(folder))} "
                          "(deepflow evaluate reads each)", highlight=False)  # fmt: skip
        else:
            console.print("no end-to-end case among them: no scenario to write", highlight=False)


def _print_breakdowns(cases: list[dict[str, Any]], *, wide: bool) -> None:
    """Each end-to-end row's largest parts as shares of its modelled step, peak or request
    slot (``validate --breakdown``), beside its error."""
    rows = []
    for row in cases:
        parts = row.get("breakdown")
        if not parts:
            continue
        total = sum(v for v in parts.values() if v > 0)
        top = sorted(((v, k) for k, v in parts.items() if v > 0), reverse=True)
        cells = [f"{k} {100 * v / total:.0f} %" for v, k in top[:_BREAKDOWN_PARTS]]
        rows.append([str(row["id"]), str(row["quantity"]), f"{100 * row['error']:+.1f} %",
                     *cells, *[""] * (_BREAKDOWN_PARTS - len(cells))])  # fmt: skip
    if not rows:
        typer.echo("no end-to-end case among them: nothing to break down")
        return
    names = ("largest part", "2nd", "3rd", "4th")
    parts_shown = [(names[j], j + 1, "left") for j in range(_BREAKDOWN_PARTS)]
    columns: list[Column] = [("case", 0, "left"), ("quantity", _BREAKDOWN_PARTS + 1, "right"),
                             ("error", 0, "right"), *parts_shown]  # fmt: skip
    _print_table("where the modelled value goes", columns, rows, wide=wide)


@app.command()
def sample(
    space: Annotated[Path, typer.Argument(help="Design-space YAML (configs/spaces/).")],
    num_samples: Annotated[int, typer.Option("--num-samples", help="Rows to label (>= 1).")],
    out: Annotated[
        str,
        typer.Option(
            "--out",
            help="Parquet file to write; with --layout parts, a folder: a path or a pyarrow URI "
            "(file://, s3://, gs://, hdfs://).",
        ),
    ],
    seed: Annotated[int, typer.Option("--seed", help="Random seed (>= 0).")] = 0,
    backend: Annotated[
        str, typer.Option("--backend", help="local (processes, default) or ray.")
    ] = "local",
    workers: Annotated[
        int | None, typer.Option("--workers", help="Processes or Ray CPUs (default: all CPUs).")
    ] = None,
    resume: Annotated[
        bool, typer.Option("--resume", help="Continue the interrupted run in OUT.parts/.")
    ] = False,
    address: Annotated[
        str | None, typer.Option("--address", help="With --backend ray: join this cluster.")
    ] = None,
    chunk_rows: Annotated[
        int | None,
        typer.Option(
            "--chunk-rows",
            min=1,
            help="Rows per task, part file and progress step "
            "(default 8192); the file is the same for any value.",
        ),
    ] = None,
    layout: Annotated[
        str,
        typer.Option(
            "--layout",
            help="file (default: one Parquet file the driver assembles) or parts (a folder of "
            "Parquet parts the workers write; no assembly, for large sweeps).",
        ),
    ] = "file",
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Label designs of a space with the oracle and write a Parquet dataset.

    The same seed gives the same rows for every backend and worker count. Chunks land in
    OUT.parts/ as they finish (with --layout parts, in OUT itself); after an interruption,
    --resume computes only the missing ones.
    """

    def body() -> None:
        import os

        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            ProgressColumn,
            Task,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )
        from rich.text import Text

        from deepflow.datasets import sample as run_sample

        if "://" not in out:
            _check_out_suffix(Path(out), ".parquet", "a Parquet file")

        class RowsPerSecond(ProgressColumn):
            """Rows computed in this run (not those kept from an interrupted one) per second."""

            def render(self, task: Task) -> Text:
                elapsed = task.finished_time if task.finished else task.elapsed
                rows = task.completed - task.fields["kept"]
                return Text(f"{rows / elapsed:,.0f} rows/s" if elapsed and rows else "– rows/s")

        bar = Progress(
            TextColumn("sampling"), BarColumn(), MofNCompleteColumn(), RowsPerSecond(),
            TimeElapsedColumn(), TimeRemainingColumn(), console=Console(stderr=True),
        )  # fmt: skip
        task_ids: list[Any] = []
        stopping: list[int] = []  # the signal SIGTERM brought, once the pool runs

        def progress(done: int, total: int) -> None:
            if stopping:  # between chunks: outside the pool's own locks and queues
                raise SystemExit(128 + stopping[0])
            if not task_ids:  # the first call comes once the input is validated
                bar.start()
                task_ids.append(bar.add_task("sample", total=total, completed=done, kept=done))
            else:
                bar.update(task_ids[0], completed=done)

        import signal

        def stop(signum: int, frame: Any) -> None:
            """SIGTERM: unwind as on Ctrl-C, so the pool, the lock and temporaries are cleaned
            up. Once chunks are running the unwinding starts at the next finished chunk: an
            exception raised inside the worker pool's result loop (joblib/loky: its locks and
            queues) could leave its shutdown waiting forever. A second SIGTERM, or one before
            the first chunk, unwinds at once."""
            if not task_ids or stopping:
                raise SystemExit(128 + signum)
            stopping.append(signum)

        main = threading.current_thread() is threading.main_thread()
        previous = signal.signal(signal.SIGTERM, stop) if main else None
        try:
            result = run_sample(
                space, num_samples=num_samples, out=out, seed=seed, backend=backend,
                workers=workers if workers is not None else (os.cpu_count() or 1),
                resume=resume, address=address, chunk_size=chunk_rows, progress=progress,
                layout=layout,
            )  # fmt: skip
        finally:
            if main:
                signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)
            if task_ids:
                bar.stop()
        if as_json:
            typer.echo(json.dumps({
                "path": str(result.path), "num_rows": result.num_rows,
                "num_feasible": result.num_feasible, "resumed_rows": result.resumed_rows,
                "num_chunks": result.num_chunks, "seconds": result.seconds,
                "rows_per_s": result.rows_per_s,
            }, indent=2))  # fmt: skip
            return
        resumed = f", {result.resumed_rows:,} kept from the interrupted run" if (
            result.resumed_rows) else ""  # fmt: skip
        typer.echo(
            f"wrote {result.num_rows:,} rows ({result.num_feasible:,} feasible{resumed}) to "
            f"{result.path} in {result.seconds:.1f} s ({result.rows_per_s:,.0f} rows/s)"
        )

    _guard(body)


_SpaceOption = Annotated[
    Path | None,
    typer.Option(
        "--space",
        help="The dataset's design space when its Parquet metadata and its "
        "DATA.space.yaml sidecar are gone (the sidecar or the space YAML).",
    ),
]


@app.command()
def fit(
    data: Annotated[Path, typer.Argument(help="Dataset Parquet file (deepflow sample).")],
    out: Annotated[Path, typer.Option("--out", help="Folder to save the surrogate in.")],
    surrogate: Annotated[
        str, typer.Option("--surrogate", help="mlp (default), gp, svgp or gbt.")
    ] = "mlp",
    targets: Annotated[
        list[str] | None,
        typer.Option("--targets", help="y_*/c_* columns (repeat or comma-separate)."),
    ] = None,
    seed: Annotated[int, typer.Option("--seed", help="Random seed (split and model).")] = 0,
    max_rows: Annotated[
        int | None, typer.Option("--max-rows", help="Subsample the training split (for gp).")
    ] = None,
    space: _SpaceOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Fit a surrogate on 80 % of a dataset; print MAPE, R², Spearman, 95 % coverage on 20 %."""

    def body() -> None:
        from deepflow.datasets import load
        from deepflow.surrogate import fit_surrogate, surrogate_class

        surrogate_class(surrogate)  # reject an unknown name before reading the data
        _check_out_suffix(out, "", "the surrogate")
        names = [t.strip() for arg in targets for t in arg.split(",") if t.strip()] if (
            targets) else None  # fmt: skip
        df = load(data, space=space)
        if len(df) < MIN_FIT_ROWS:
            raise ConfigError(
                f"{data}: {len(df)} rows are too few to fit and score a surrogate (80 % to "
                f"train, 20 % to score); need at least {MIN_FIT_ROWS}."
            )
        from rich.console import Console
        from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        rows = min(len(df), max_rows) if max_rows else len(df)
        console = Console(stderr=True)
        bar = Progress(SpinnerColumn(), TextColumn(f"fitting the {surrogate} surrogate on up "
                                                   f"to {rows:,} rows"), TimeElapsedColumn(),
                       console=console, transient=True)  # fmt: skip
        with bar if console.is_terminal else contextlib.nullcontext():  # a clock while it fits
            bar.add_task("fit", total=None)
            model, report = fit_surrogate(df, surrogate, targets=names,
                                          max_train_rows=max_rows, random_state=seed)  # fmt: skip
        report["out"] = str(model.save(out))
        _emit(report, as_json, _print_fit)

    _guard(body)


def _print_fit(report: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(
        title=f"{report['surrogate']} surrogate: {report['num_train']:,} training rows, "
        f"held-out {report['num_test']:,} rows"
    )
    for col in ("target", "MAPE", "R²", "Spearman", "95 % coverage"):
        table.add_column(col, justify="right" if col != "target" else "left")
    for name, m in report["metrics"].items():
        table.add_row(name, f"{100 * m['mape']:.2f} %", f"{m['r2']:.4f}",
                      f"{m['spearman']:.4f}", f"{m['coverage95']:.3f}")  # fmt: skip
    console = Console()
    console.print(table)
    console.print(
        f"feasibility accuracy {report['feasibility_accuracy']:.3f}; fitted in "
        f"{report['fit_seconds']:.1f} s; saved to {report['out']}"
    )


@app.command()
def query(
    model_dir: Annotated[Path, typer.Argument(help="Surrogate folder (deepflow fit --out).")],
    points: Annotated[
        Path,
        typer.Argument(
            help="Parquet file with the x_* columns, or a .yaml/.yml list of designs "
            "(variable: value mappings; a simplex as a mapping of its parts)."
        ),
    ],
    space: _SpaceOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    wide: _Wide = False,
) -> None:
    """Predict the targets (median, std, 95 % interval) and P(feasible) at POINTS."""

    def body() -> None:
        from deepflow.datasets import load
        from deepflow.surrogate import SurrogateModel, read_points
        from deepflow.surrogate.points import points_from_table

        if points.suffix.lower() in (".yaml", ".yml"):
            model = SurrogateModel.load(model_dir)
            df = read_points(points, model)
        else:
            table = load(points, validate=False, space=space)
            sha = str(table.attrs.get("deepflow", {}).get("space_sha256", ""))
            model = SurrogateModel.load(model_dir, space_sha256=sha or None)
            df = points_from_table(table, model, file=str(points))
        pred = model.predict(df)
        rows = [{k: (float(v) if k != "index" else v) for k, v in r.items()}
                for r in pred.to_dict(orient="records")]  # fmt: skip
        _emit({"surrogate": model.kind, "targets": model.targets, "predictions": rows},
              as_json, lambda d: _print_query(d, wide=wide))  # fmt: skip

    _guard(body)


def _print_query(data: dict[str, Any], *, wide: bool = False) -> None:
    targets = data["targets"]
    columns: list[Column] = [("#", 0, "right")]
    for t in targets:
        label = _short(t.removeprefix("y_").removeprefix("c_"))
        columns += [(label, 0, "right"), (f"{label} 95 %", 2 if t == targets[0] else 3, "right")]
    has_p = bool(data["predictions"]) and "p_feasible" in data["predictions"][0]
    if has_p:
        columns.append(("P(feasible)", 1, "right"))
    rows = []
    for i, row in enumerate(data["predictions"]):
        cells = [str(i)]
        for t in targets:
            cells += [f"{row[t]:.4g}", f"[{row[t + '_lo']:.4g}, {row[t + '_hi']:.4g}]"]
        if has_p:
            cells.append(f"{row['p_feasible']:.3f}")
        rows.append(cells)
    title = f"{data['surrogate']} surrogate: {len(data['predictions']):,} points (median"
    _print_table(f"{title}, 95 % interval)", columns, rows, wide=wide)


def _study_progress() -> tuple[Any, Callable[[str, int, int], None]]:
    """A rich progress bar (stderr) with one task per stage: sample, search."""
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    bar = Progress(TextColumn("{task.description:>8}"), BarColumn(), MofNCompleteColumn(),
                   TimeElapsedColumn(), console=Console(stderr=True))  # fmt: skip
    tasks: dict[str, Any] = {}

    def progress(stage: str, done: int, total: int) -> None:
        if not tasks:
            bar.start()
        if stage not in tasks:
            tasks[stage] = bar.add_task(stage, total=total)
        bar.update(tasks[stage], completed=done, total=total)

    return bar, progress


def _search_options(study_path: Path, strategy: str | None, budget: int | None,
                    seed: int | None) -> Any:  # fmt: skip
    from deepflow.search.study import load_study

    study = load_study(study_path)
    if strategy not in (None, study.search.strategy) and study.search.prescreen_evaluations:
        # Another strategy starts as it would alone: the study's prescreen (in place of a
        # Sobol start) is tuned to its own strategy (the default study's 600,000-evaluation
        # prescreen would hand BoTorch's GP 757 designs).
        import dataclasses

        from deepflow.search.study import SearchSettings

        start = max(study.search.initial_points, SearchSettings().initial_points)
        search = dataclasses.replace(study.search, prescreen_evaluations=0, initial_points=start)
        study = dataclasses.replace(study, search=search)
    return study.replace(strategy=strategy, budget=budget, seed=seed)


_UNITS = {"s": "s", "W": "W", "J": "J", "mm2": "mm²", "B": "B", "usd": "$"}


def _short(name: str) -> str:
    """A column label from an output name: ``step_time_s`` -> ``step s``,
    ``energy_per_step_J`` -> ``energy J``."""
    stem, _, unit = name.rpartition("_")
    if stem and unit in _UNITS:
        label = f"{stem.replace('_', ' ')} {_UNITS[unit]}"
        return label.replace("step time", "step").replace(" per step", "")
    return name.replace("_", " ")


def _print_pareto(summary: dict[str, Any], designs: list[dict[str, Any]], out_dir: Path,
                  limit: int = 20, *, wide: bool = False) -> None:  # fmt: skip
    """The Pareto designs (oracle values) as the report's table, fitted to the terminal
    (columns after the trial and the objectives dropped by position; ``wide``: every column),
    then the run's figures."""

    from deepflow.report import load_result
    from deepflow.report.views import design_table

    headers, rows = design_table(load_result(out_dir))
    kept = 1 + len(summary["objectives"])  # the trial and the objectives always show
    columns: list[Column] = [(label, 0 if j < kept else j - kept + 1, "right")
                             for j, label in enumerate(headers)]  # fmt: skip
    _print_table(f"Pareto designs of '{summary['study']}' (oracle values)", columns,
                 rows[:limit], wide=wide)  # fmt: skip
    if len(designs) > limit:
        typer.echo(f"... and {len(designs) - limit} more in {out_dir / 'pareto.json'}")
    hv = summary["hypervolume"]
    typer.echo(
        f"{summary['num_evaluations']} oracle evaluations ({summary['num_feasible']} feasible), "
        f"{summary['num_pareto']} Pareto designs, hypervolume {hv:.4f}; results in {out_dir}"
    )
    surrogate = summary.get("surrogate")
    if surrogate and surrogate.get("pareto_error"):
        errs = ", ".join(f"{k} {v:.1%}" for k, v in surrogate["pareto_error"].items())
        typer.echo(f"surrogate vs oracle on the front (mean |error|): {errs}")


def _result_lock(out_dir: Path) -> Any:
    """The lock of a result folder (``<folder>.lock`` next to it): one search or run at a
    time writes it."""
    from deepflow.lock import hold_lock

    out_dir.parent.mkdir(parents=True, exist_ok=True)
    return hold_lock(out_dir, what=f"result folder {out_dir}")


_ResultFolder = Annotated[
    Path | None, typer.Option("--out", help="Result folder (default: results/STUDY).")
]
_Storage = Annotated[
    str | None,
    typer.Option(
        "--storage",
        help="Optuna storage: a database URL (sqlite:///f.db, postgresql+psycopg://user:pw@host"
        "/db) or a journal file path (default: SQLite in the folder). Processes given the same "
        "study and storage share its budget.",
    ),
]


@app.command()
def search(
    study_path: Annotated[Path, typer.Argument(help="Study YAML (configs/studies/).")],
    strategy: Annotated[
        str | None,
        typer.Option(
            "--strategy",
            help="botorch, nsga2, tpe, gp, gradient, random or surrogate (another strategy "
            "than the study's skips its prescreen and starts from at least 16 Sobol "
            "designs).",
        ),
    ] = None,
    budget: Annotated[int | None, typer.Option("--budget", help="Oracle evaluations.")] = None,
    storage: _Storage = None,
    seed: Annotated[int | None, typer.Option("--seed", help="Random seed (>= 0).")] = None,
    out: _ResultFolder = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
    wide: _Wide = False,
) -> None:
    """Multi-objective search of a study; re-verifies the Pareto set with the oracle.

    Writes trials.parquet, pareto.json/.yaml, summary.json and study.yaml (docs/results.md)
    to the result folder. Running it again on the same folder (or --storage) resumes; other
    processes given the same study and --storage join it and share its budget.
    """

    def body() -> None:
        from deepflow.pipeline import search_study

        study = _search_options(study_path, strategy, budget, seed)
        out_dir = out or Path("results") / study.name
        _check_out_suffix(out_dir, "", "a result")
        settings = study.search
        # BoTorch takes minutes per batch after the space-filling start: say so before it starts
        proposed = max(settings.budget - settings.initial_points, 0)
        batches = -(-proposed // settings.batch_size)
        if settings.strategy == "botorch" and batches:
            typer.echo(
                f"note: after {settings.initial_points} space-filling designs, botorch fits a "
                f"GP and optimises its acquisition for each of {batches} batch(es) of "
                f"{settings.batch_size}: about 10-25 s per batch of 8 on the default study's "
                "space on one CPU thread (README, search efficiency).",
                err=True,
            )
        bar, progress = _study_progress()
        try:
            with _result_lock(out_dir):
                outcome = search_study(study, out_dir, storage=storage, progress=progress)
        finally:
            bar.stop()
        if as_json:
            typer.echo(json.dumps(outcome.summary, indent=2, default=str))
        else:
            _print_pareto(outcome.summary, outcome.designs, outcome.out_dir, wide=wide)

    _guard(body)


@app.command()
def run(
    study_path: Annotated[Path, typer.Argument(help="Study YAML (configs/studies/).")],
    out: _ResultFolder = None,
    storage: _Storage = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the summary and the report's path as JSON.")
    ] = False,
    wide: _Wide = False,
) -> None:
    """The whole pipeline: sample -> fit -> search -> verify -> report.

    Prints the Pareto designs and the path of the HTML report (OUT/report.html).
    """

    def body() -> None:
        from deepflow.pipeline import run_study
        from deepflow.search.study import load_study

        study = load_study(study_path)
        out_dir = out or Path("results") / study.name
        _check_out_suffix(out_dir, "", "a result")
        bar, progress = _study_progress()
        try:
            with _result_lock(out_dir):
                outcome = run_study(study, out_dir, storage=storage, progress=progress)
        finally:
            bar.stop()
        if as_json:
            payload = {**outcome.summary, "out_dir": str(outcome.out_dir),
                       "report": str(outcome.report)}  # fmt: skip
            typer.echo(json.dumps(payload, indent=2, default=str))
            return
        _print_pareto(outcome.summary, outcome.designs, outcome.out_dir, wide=wide)
        timings = outcome.summary["timings_s"]
        names = ("sample", "search", "verify", "report")
        stages = ", ".join(f"{k} {timings[k]:.1f} s" for k in names if k in timings)
        typer.echo(f"stages: {stages}")
        typer.echo(f"report: {outcome.report}")

    _guard(body)


@app.command()
def report(
    result_dir: Annotated[Path, typer.Argument(help="Result folder (deepflow search / run).")],
    out: Annotated[
        Path | None, typer.Option("--out", help="HTML file (default: RESULT_DIR/report.html).")
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the page's and the figures' paths as JSON.")
    ] = False,
) -> None:
    """Plots and a self-contained HTML report: Pareto fronts, hypervolume, breakdowns.

    Also writes PNG figures into RESULT_DIR/figures/. The page embeds plotly.js, so it opens
    without a network. Nothing is written when a file of RESULT_DIR is missing or malformed.
    """

    def body() -> None:
        from deepflow.report import write_report

        if out is not None:
            _check_out_suffix(out, ".html", "an HTML page")
        figures = Path(result_dir) / "figures"
        if not Path(result_dir).is_dir():  # the report's own message names what is missing
            path = write_report(result_dir, out)
        else:
            with _result_lock(Path(result_dir)):  # not while a search or run writes it
                path = write_report(result_dir, out)
        if as_json:
            typer.echo(json.dumps({"report": str(path), "figures_dir": str(figures),
                                   "figures": [str(f) for f in sorted(figures.glob("*.png"))]},
                                  indent=2))  # fmt: skip
            return
        typer.echo(f"wrote {path} and the figures in {figures}")

    _guard(body)


def main() -> None:
    """Console-script entry point."""
    app(prog_name="deepflow")


if __name__ == "__main__":  # pragma: no cover
    main()
