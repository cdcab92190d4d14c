"""The `goodhart-prof` command line: thin wiring, no logic of its own."""
from __future__ import annotations

import os
import subprocess
import sys

import click

from . import __version__
from .errors import UserError, run_cli
from .settings import MODES, SettingsError, parse_iterations


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


@cli.command()
@click.option("--iterations", callback=_iterations, default=None, metavar="FIRST-LAST",
              help="Training iterations to trace, 0-based, inclusive (default: PROF_ITERATIONS or 50-55).")
@click.option("--mode", type=click.Choice(MODES), default=None,
              help="lite: CPU+CUDA activity and phases; full: adds shapes, stacks, memory, FLOPs "
                   "(default: PROF_MODE or lite).")
@click.option("--output-dir", type=click.Path(file_okay=False), default=None,
              help="Where traces, run.json and metrics go (default: PROF_OUTPUT_DIR or traces).")
@click.option("--config", "config_file", type=click.Path(dir_okay=False), default=None,
              help="Trainer config (TOML).")
@click.option("--total-iterations", type=click.IntRange(min=1), default=None,
              help="Iterations to train (default: the last traced iteration + 1).")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default=None)
@click.option("--nproc", type=click.IntRange(min=1), default=1, show_default=True,
              help="Ranks (torch.distributed); each writes its own trace, merged afterwards.")
@click.option("--seed", type=int, default=None)
@click.option("--checkpoint-every", type=click.IntRange(min=0), default=None)
@click.option("--resume", is_flag=True, help="Continue from the checkpoint in the output folder.")
@click.option("--no-progress", is_flag=True, help="No progress bar.")
def run(iterations, mode, output_dir, config_file, total_iterations, device, nproc, seed,
        checkpoint_every, resume, no_progress):
    """Train the bundled trainer with profiling on and write the traces.

    Writes rank-<r>.pt.trace.json.gz per rank, merged_trace.json and run.json to the output folder.
    """
    env = dict(os.environ)
    if iterations is None:
        try:
            iterations = parse_iterations(env.get("PROF_ITERATIONS", "50-55"))
        except SettingsError as exc:
            raise UserError(f"PROF_ITERATIONS: {exc}") from None
    first, last = iterations
    output_dir = output_dir or env.get("PROF_OUTPUT_DIR") or "traces"
    env.update(PROF_ENABLED="1", PROF_ITERATIONS=f"{first}-{last}",
               PROF_MODE=mode or env.get("PROF_MODE", "lite"), PROF_OUTPUT_DIR=output_dir)
    total = total_iterations if total_iterations is not None else last + 1
    argv = [sys.executable, "-m", "trainer", "--total-iterations", str(total),
            "--output-dir", output_dir, "--nproc", str(nproc)]
    for flag, value in (("--config", config_file), ("--device", device), ("--seed", seed),
                        ("--checkpoint-every", checkpoint_every)):
        if value is not None:
            argv += [flag, str(value)]
    argv += ["--resume"] * resume + ["--no-progress"] * no_progress
    proc = subprocess.Popen(argv, env=env)
    try:
        code = proc.wait()
    except KeyboardInterrupt:  # the trainer got the same SIGINT; let it finish cleanly
        code = proc.wait()
    sys.exit(code)


@cli.command()
@click.argument("path", type=click.Path(path_type=str))
@click.option("--json", "as_json", is_flag=True, help="Print the goodhart-prof/analysis/v1 JSON document.")
@click.option("--top", type=click.IntRange(min=1), default=15, show_default=True,
              help="Kernels, sites and phases to list (JSON: kernels to include; all when not given).")
@click.option("--rank", type=int, default=None, help="Only this rank.")
@click.option("--device", type=int, default=None, help="Only this GPU device.")
@click.option("--hta", is_flag=True, help="Also print HTA's temporal and idle-time breakdowns.")
@click.option("--progress/--no-progress", default=None,
              help="Progress bar on stderr (default: for inputs over ~50 MB).")
def analyze(path, as_json, top, rank, device, hta, progress):
    """Analyze a trace: a .json/.json.gz file, a merged trace, or a folder of per-rank traces."""
    from .analysis import analyze as run_analysis
    from .trace.load import load

    if hta:
        from .analysis.hta_bridge import require_hta
        require_hta()  # fail before the work, not after the report
    trace = load(path, progress=progress)
    if rank is not None and rank not in trace.ranks:
        raise UserError(f"{path}: no rank {rank} (ranks: {trace.ranks})")
    if device is not None and device not in {d for _, d in trace.devices}:
        raise UserError(f"{path}: no GPU device {device} (devices: {sorted({d for _, d in trace.devices})})")
    if rank is not None or device is not None:
        trace = trace.select(rank, device)
    result = run_analysis(trace)
    if as_json:
        import json
        from .report.json_report import to_document
        explicit_top = click.get_current_context().get_parameter_source("top").name != "DEFAULT"
        click.echo(json.dumps(to_document(result, top if explicit_top else None), indent=1))
        return
    from rich.console import Console
    from .report.text import render, render_hta
    import sys
    console = Console(width=None if sys.stdout.isatty() else 140)  # files and pipes get full rows
    render(result, console, top)
    if hta:
        from .analysis.hta_bridge import hta_breakdowns
        render_hta(hta_breakdowns(trace.paths), console)


if __name__ == "__main__":
    main()
