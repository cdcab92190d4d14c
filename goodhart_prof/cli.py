"""The `goodhart-prof` command line: thin wiring, no logic of its own."""
from __future__ import annotations

import os
import sys

import click

from . import __version__
from .capture import run_options
from .errors import UserError, out_of_memory, run_cli, warn
from .textsafe import printable, quote_path
from .capture.settings import DEFAULT_MODE, DEFAULT_WINDOW, MODES, SettingsError, parse_iterations


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="goodhart-prof")
def cli() -> None:
    """Profile GPU-native RL training and find out why it is slow."""


def main(args: list[str] | None = None) -> None:
    run_cli(cli, "goodhart-prof", args)


def _iterations(ctx, param, value):
    if value is None:
        return None
    try:
        return parse_iterations(value)
    except SettingsError as exc:
        raise UserError(f"--iterations: {exc}") from None


@cli.command(context_settings={"allow_interspersed_args": False})
@click.option("--iterations", callback=_iterations, default=None, metavar="FIRST-LAST",
              help="Training iterations to trace, 0-based, inclusive "
                   f"(default: PROF_ITERATIONS or {DEFAULT_WINDOW}).")
@click.option("--mode", type=click.Choice(MODES), default=None,
              help="lite: CPU+CUDA activity and phases; full: adds shapes, stacks, memory "
                   f"(default: PROF_MODE or {DEFAULT_MODE}).")
@click.option("--verbose", is_flag=True,
              help="Let the profiler (Kineto) print its own log lines (quiet by default).")
@click.option("--name", default=None, metavar="NAME",
              help="Name of this run's folder under the output folder (default: the start time, "
                   "e.g. 2026-11-23T12-40-55); an existing name is an error, never replaced. "
                   "With --resume: the run to continue.")
@run_options.run_side()
@click.argument("command", nargs=-1, type=click.UNPROCESSED, metavar="[-- CMD ARGS...]")
def run(iterations, mode, verbose, name, command, **trainer_values):
    """Train the bundled trainer, or run your own loop (-- CMD ARGS...), with profiling on.

    Each run gets its own folder, OUTPUT_DIR/NAME (OUTPUT_DIR: --output-dir, PROF_OUTPUT_DIR or
    traces), holding rank-<r>.pt.trace.json.gz per rank, merged_trace.json (several ranks),
    run.json and metrics.jsonl; OUTPUT_DIR/latest then points at it. --resume continues the run --name names,
    else the newest run with a checkpoint, in its own folder.

    With a command (goodhart-prof run -- python my_train.py ARGS...), it runs in the run's folder
    with PROF_* set for the hooks it calls (docs/trainer.md), which also log each iteration's time
    (and env steps) to metrics.jsonl; the trainer's options but --output-dir do not apply.
    """
    from .capture import runs
    from .trace import run_folders

    root = runs.output_root(trainer_values["output_dir"], os.environ)
    window = iterations if iterations is not None else run_options.env_window(os.environ)
    if name is not None:
        runs.check_name(name)
    if command:
        _check_command(command, trainer_values)
    else:
        _check_trainer_installed()
    root_made = not root.exists()
    with runs.stop_signals_held():  # from the folder's making until the trainer can be told
        folder = runs.resume_folder(root, name) if trainer_values["resume"] else \
            runs.create_run_folder(root, name)
        if command:
            try:
                code = _run_command(list(command), window, mode, folder, verbose)
            except UserError:
                if root_made:  # a command that could not start leaves no folder behind
                    runs.discard_if_empty(root)
                raise
        else:
            argv, env = run_options.run_command(window, mode, {**trainer_values, "output_dir": str(folder)},
                                                os.environ, verbose)
            # SIGINT, SIGTERM and SIGHUP to us go to the trainer (it records the interruption, then
            # exits 128 + N); a Ctrl-C reaches it once, from us (runs.run_child).
            code = runs.run_child(argv, env)
    finished = run_folders.run_in(folder)
    if code == 0 and finished is not None and finished.complete:
        try:
            runs.point_latest(root, folder)
        except OSError as exc:  # e.g. a folder named latest that someone made: keep the run
            warn(f"{quote_path(root / runs.LATEST)} not updated ({exc.strerror or exc})")
    runs.discard_if_empty(folder)
    if root_made:
        runs.discard_if_empty(root)
    sys.exit(code)


def _check_trainer_installed() -> None:
    """The bundled trainer needs torch, an extra: a one-line error (exit 2) where it is missing,
    before any folder is made (the trainer would die on its import with a traceback)."""
    import importlib.util

    try:
        found = importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise UserError("goodhart-prof run trains the bundled trainer, which needs torch (not installed): "
                        "pip install 'goodhart-prof[trainer]', or run your own loop: "
                        "goodhart-prof run -- python my_train.py")


def _check_command(command: tuple[str, ...], trainer_values: dict) -> None:
    """A command with the trainer's own options is a one-line error (exit 2): they would be
    silently ignored."""
    from .capture.command_runs import trainer_only

    given = trainer_only(trainer_values)
    if given:
        raise UserError(f"{', '.join(given)}: the bundled trainer's option{'s' if len(given) > 1 else ''}, "
                        f"not used with a command ({command[0]} ...); give it to the command itself")


def _run_command(command: list[str], window, mode, folder, verbose: bool) -> int:
    """Run the user's command in `folder` (capture/command_runs.py), write its run.json, print
    its summary; returns its exit code. A command that cannot be started leaves no folder."""
    import time

    from .capture import command_runs, runs
    from .fileio import folder_lock

    env = command_runs.command_environment(window, mode, folder, os.environ, verbose)
    started = time.perf_counter()
    with folder_lock(folder, "run"):
        try:
            code = runs.run_child(command, env, unblocked=True)
        except OSError as exc:
            runs.discard_if_empty(folder)
            raise UserError(f"{command[0]}: cannot run the command ({exc.strerror or exc})") from None
        record = command_runs.record_command_run(folder, command, code, window, env["PROF_MODE"], started)
    click.echo(printable(command_runs.summary(record, folder)), err=True)
    return code


def _latest(what: str) -> str:
    """The latest run's folder under PROF_OUTPUT_DIR or traces, for a command given no PATH."""
    from .capture import runs
    from .trace import run_folders

    run = run_folders.latest_run(runs.output_root(None, os.environ))
    click.echo(printable(f"{what} the latest run: {run.describe()}"), err=True)
    return str(run.folder)


# Options `analyze` and `diff` share, declared once; each command says what its JSON, page and
# lists are.
def _json_option(schema: str):
    return click.option("--json", "as_json", is_flag=True, help=f"Print the {schema} JSON document.")


def _html_option(page: str):
    return click.option("--html", "html_file", type=click.Path(dir_okay=False, path_type=str), default=None,
                        metavar="FILE", help=f"Also write {page} to FILE.")


def _force_option(target: str = "an existing --html file"):
    return click.option("--force", is_flag=True, help=f"Replace {target}.")


def _top_option(listed: str):
    return click.option("--top", type=click.IntRange(min=1), default=15, show_default=True, help=listed)


@cli.command()
@click.argument("path", type=click.Path(path_type=str), required=False)
@_json_option("goodhart-prof/analysis/v1")
@_top_option("Kernels, sites and phases to list (JSON: kernels to include; all when not given).")
@click.option("--rank", type=int, default=None, help="Only this rank.")
@click.option("--device", type=int, default=None, help="Only this GPU device.")
@click.option("--hta", is_flag=True, help="Also print HTA's temporal and idle-time breakdowns.")
@click.option("--progress/--no-progress", default=None,
              help="Progress bar on stderr (default: for inputs over ~50 MB).")
@_html_option("a self-contained HTML report (plotly charts)")
@_force_option()
@click.option("--workers", type=click.IntRange(min=1), default=None, metavar="N",
              help="Load a folder's rank files on a local Dask cluster of N worker processes (one "
                   "thread each, one rank file per task); the report is the same. Needs the "
                   "cluster extra: pip install 'goodhart-prof[cluster]'.")
@click.option("--scheduler", default=None, metavar="ADDRESS",
              help="Load the rank files on an existing Dask cluster (e.g. tcp://host:8786): its "
                   "workers read PATH (a shared filesystem) and need goodhart-prof installed.")
@click.option("--strict", is_flag=True,
              help="A rank file that cannot be loaded (broken, its worker died, too slow) stops "
                   "the analysis (exit 2); by default it is skipped with a warning naming it.")
def analyze(path, as_json, top, rank, device, hta, progress, html_file, force, workers, scheduler,
            strict):
    """Analyze a trace: a .json/.json.gz file, a merged trace, or a folder of per-rank traces.

    Without PATH: the latest run (PROF_OUTPUT_DIR or traces, its `latest`).
    """
    if html_file:
        from .report.common import refuse_overwrite
        refuse_overwrite(html_file, force)  # fail before the work, not after the report
    if hta:
        from .analysis.hta_bridge import require_hta
        require_hta()  # fail before the work, not after the report
    if workers is not None and scheduler is not None:
        raise UserError("--workers and --scheduler exclude each other (the scheduler's cluster has its own workers)")
    if path is None:
        path = _latest("analyzing")
    with out_of_memory(path):
        _analyze(path, as_json, top, rank, device, hta, progress, html_file, force, workers,
                 scheduler, strict)


def _analyze(path, as_json, top, rank, device, hta, progress, html_file, force, workers, scheduler,
             strict):
    """`analyze` once its options are checked: load, analyse, report (out of memory: one line)."""
    from .analysis import analyze as run_analysis
    from .trace.load import load

    if workers is not None or scheduler is not None:
        from .trace.cluster import load_on_cluster
        trace = load_on_cluster(path, workers, scheduler, strict)
    else:
        trace = load(path, progress=progress, strict=strict)
    if as_json:  # the text report shows them itself
        _warn(trace)
    if rank is not None and rank not in trace.ranks:
        raise UserError(f"{quote_path(path)}: no rank {rank} (ranks: {trace.ranks})")
    if device is not None and device not in {d for _, d in trace.devices}:
        raise UserError(f"{quote_path(path)}: no GPU device {device} (devices: {sorted({d for _, d in trace.devices})})")
    if rank is not None or device is not None:
        trace = trace.select(rank, device)
    result = run_analysis(trace)
    if html_file:
        from .report.html.page import write_html
        write_html(result, html_file, force)
        click.echo(f"wrote {quote_path(html_file)}", err=True)
    if as_json:
        import json
        from .report.json_report import to_document
        explicit_top = click.get_current_context().get_parameter_source("top").name != "DEFAULT"
        click.echo(json.dumps(to_document(result, top if explicit_top else None), indent=1))
        return
    from .report.text.hta import render_hta
    from .report.text.report import render
    console = _console()
    render(result, console, top)
    if hta:
        from .analysis.hta_bridge import hta_breakdowns
        render_hta(hta_breakdowns(trace.paths), console)


def _warn(trace) -> None:
    """The loader's warnings (skipped events, ignored ranks) on stderr, one line each."""
    for warning in trace.warnings:
        warn(warning)


PIPE_COLUMNS = 100  # the width when the terminal's is unknown: a file or pipe without COLUMNS


def _console():
    """The terminal's width; for a file or pipe, COLUMNS when set, else PIPE_COLUMNS; every table
    fits it (goodhart_prof/tables.py). Its text is made printable (report.common.SafeConsole): no
    name from a trace acts on the terminal."""
    from .report.common import SafeConsole
    if sys.stdout.isatty():
        return SafeConsole()
    columns = os.environ.get("COLUMNS", "")
    return SafeConsole(width=int(columns) if columns.isdigit() and int(columns) >= 40 else PIPE_COLUMNS)


@cli.command()
@click.argument("a", required=False)
@click.argument("b", required=False)
@click.option("--root", type=click.Path(file_okay=False, path_type=str), default=None,
              help="Where the runs are (default: PROF_OUTPUT_DIR or traces).")
@_json_option("goodhart-prof/diff/v1")
@_html_option("a self-contained page with A-vs-B charts")
@_force_option()
@_top_option("Headline items, kernels, sites and phases to list (JSON: all when not given).")
def diff(a, b, root, as_json, html_file, force, top):
    """Compare two traces (A: before, B: after): what got better and what got worse.

    A and B are trace files, folders, run folders or run names under the root. Without them:
    the last two complete runs under the root (by run.json `created`).
    """
    from .capture import runs
    from .trace import run_folders
    from .analysis import analyze as run_analysis
    from .analysis.compare.comparison import compare
    from .trace.load import load
    from .trace.run_record import read_run

    root_dir = runs.output_root(root, os.environ)
    if a is None:
        older, newer = run_folders.last_two(root_dir)
        a, b = str(older.folder), str(newer.folder)
        click.echo(printable(f"A: {older.describe()}, B: {newer.describe()}"), err=True)
    elif b is None:
        raise UserError("diff takes two traces or runs (A B), or none to compare the last two runs")
    else:
        a, b = str(run_folders.resolve(a, root_dir)), str(run_folders.resolve(b, root_dir))
    if html_file:
        from .report.common import refuse_overwrite
        refuse_overwrite(html_file, force)  # fail before the work, not after it
    runs = read_run(a), read_run(b)  # a broken run.json fails before the analyses
    for run in runs:  # metrics.jsonl lines skipped (torn, out of range)
        for warning in run.warnings if run is not None else []:
            warn(warning)
    with out_of_memory(a, b):
        comparison = compare(run_analysis(load(a)), run_analysis(load(b)), *runs)
        if html_file:
            from .report.diff.page import write_html
            write_html(comparison, html_file, force=force, top=top)
            click.echo(f"wrote {quote_path(html_file)}", err=True)
        if as_json:
            import json
            from .report.diff.document import to_document
            explicit_top = click.get_current_context().get_parameter_source("top").name != "DEFAULT"
            click.echo(json.dumps(to_document(comparison, top if explicit_top else None), indent=1,
                                  allow_nan=False))
            return
        from .report.diff.text import render as render_diff
        render_diff(comparison, _console(), top)


@cli.group("log")
def perf_log() -> None:
    """Performance log: a markdown table (and a JSONL twin) of key figures per analysed trace."""


_LOG_OPTION = click.option("--log", "log_file", type=click.Path(dir_okay=False), default="PERFLOG.md",
                           show_default=True, help="The markdown log; its twin is the .jsonl beside it.")


@perf_log.command("add")
@click.argument("path", type=click.Path(path_type=str), required=False)
@click.option("--change", required=True, help='What this run changed, e.g. "torch.compile A/B".')
@_LOG_OPTION
def log_add(path, change, log_file):
    """Analyze PATH (a trace file or folder) and add its row to the log (newest first).

    Without PATH: the latest run's folder (its run.json gives env-steps/s).
    """
    from .perflog.measure import add
    from .perflog.show import describe
    if path is None:
        path = _latest("adding")
    with out_of_memory(path):
        row = add(path, change, log_file)
    click.echo(printable(f"added to {log_file}: {describe(row)}"))


@perf_log.command("show")
@_LOG_OPTION
def log_show(log_file):
    """Print the log's rows, newest first; `log compare` names them by their id (#)."""
    from .perflog.log_file import require_rows
    from .perflog.show import render_rows
    render_rows(require_rows(log_file), _console())


@perf_log.command("compare")
@click.argument("first")
@click.argument("second")
@_LOG_OPTION
def log_compare(first, second, log_file):
    """Compare two rows field by field (B = SECOND against A = FIRST).

    Name a row by its id, the # column of `log show` (7 or id:7).
    """
    from .perflog.compare import compare_rows, select
    from .perflog.log_file import require_rows
    from .perflog.show import render_comparison
    rows = require_rows(log_file)
    a, b = select(rows, first), select(rows, second)
    render_comparison(a, b, compare_rows(a, b), _console())


@cli.command()
@click.argument("path", type=click.Path(path_type=str), required=False)
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False, path_type=str),
              help="Output file: .pftrace (Perfetto protobuf) or .json / .json.gz (Chrome trace JSON).")
@_force_option("OUTPUT if it exists")
def export(path, output, force):
    """Export a trace with our analysis (utilization counters, sync instants, launch flows) for
    the Perfetto UI. Without PATH: the latest run."""
    from .analysis import analyze as run_analysis
    from .report.export.common import check_output
    from .report.export.perfetto import output_format, write_perfetto
    from .report.export.chrome_json import write_chrome_json
    from .trace.load import load

    fmt = output_format(output)
    check_output(output, force)  # before the work, not after it
    if path is None:
        path = _latest("exporting")
    with out_of_memory(path):
        trace = load(path)
        _warn(trace)
        result = run_analysis(trace)
        write = write_perfetto if fmt == "perfetto" else write_chrome_json
        click.echo(printable(write(result, output, force=force).line()))


@cli.command("open")
@click.argument("file", type=click.Path(path_type=str))
@click.option("--port", type=click.IntRange(0, 65535), default=9001, show_default=True,
              help="Port on 127.0.0.1 (the Perfetto UI fetches from 9001; 0: any free port).")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=300.0,
              show_default=True, help="Give up after this many seconds without the file being fetched.")
@click.option("--browser/--no-browser", default=True, help="Open the UI in a browser where one exists.")
def open_trace(file, port, timeout, browser):
    """Serve FILE once on 127.0.0.1 and open it in the Perfetto UI (ui.perfetto.dev)."""
    from .report.server import serve_once

    if serve_once(file, port, timeout, open_browser=browser, echo=click.echo):
        click.echo(f"served {quote_path(file)}; the UI has it now")
    else:
        click.echo(f"{quote_path(file)} was not fetched within {timeout:g} s", err=True)
        click.get_current_context().exit(1)


if __name__ == "__main__":
    main()
