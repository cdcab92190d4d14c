"""The `goodhart-prof` command line: thin wiring, no logic of its own."""
from __future__ import annotations

import os
import subprocess
import sys

import click

from . import __version__
from .errors import UserError, run_cli
from .hooks import MODES, SettingsError, parse_iterations


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


if __name__ == "__main__":
    main()
