"""`python -m trainer`: train the Goodhart grid world with PPO, honouring the PROF_* variables."""
from __future__ import annotations

from .signals import hold_signals

if __name__ == "__main__":  # before the imports (torch's take seconds): signals.py
    hold_signals()
    import sys as _sys
    import tempfile as _tempfile
    try:  # torch's import needs a folder it can write a file in (issue 32's own round: ulimit -f 0)
        _tempfile.gettempdir()
    except OSError as _exc:
        _sys.stderr.write(f"Error: cannot start training: no folder to write a temporary file in "
                          f"({_exc.strerror or _exc}; a full disk, or a file size limit: ulimit -f)\n")
        _sys.exit(2)

import dataclasses  # noqa: E402
import os
import sys
import time
from pathlib import Path

import click

from goodhart_prof.capture import run_options
from goodhart_prof.errors import UserError, run_cli
from goodhart_prof.fileio import take_folder_lock, write_error
from goodhart_prof.capture.hooks import ProfSettings, SettingsError
from goodhart_prof.capture.runs import refuse_finished

from .checkpoint import checkpoint_path
from .config import Config, ConfigError, build_config, to_dict
from .launch import (RankFailed, clear_earlier_outputs, describe_failure, earlier_outputs,
                     finish_run, interrupted_outcomes, launch, resume_iteration, trim_metrics)
from .signals import Interrupted, catch_signals, default_signals


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@run_options.trainer_side(to_dict(Config()))
def cli(total_iterations, output_dir, config_file, device, seed, checkpoint_every, resume, nproc,
         no_progress, inject, cudagraphs):
    """Train PPO on the Goodhart grid world. Profile with PROF_ENABLED=1 (or true/yes/on; see README)."""
    started = time.perf_counter()
    try:
        catch_signals()  # a signal held during the imports is delivered here
        prepared = prepare(total_iterations, output_dir, config_file, device, seed, checkpoint_every,
                           resume, nproc, no_progress, inject, cudagraphs)
    except Interrupted as exc:
        default_signals()
        click.echo(f"interrupted by {exc.name} before training started | nothing trained, no run.json "
                   f"written", err=True)
        sys.exit(exc.exit_code)
    train_and_record(*prepared, nproc, resume, started)


def prepare(total_iterations, output_dir, config_file, device, seed, checkpoint_every, resume,
            nproc, no_progress, inject, cudagraphs) -> tuple:
    """The run's config and settings, its folders locked and an earlier run's files cleared."""
    try:
        settings = ProfSettings.from_env()
    except SettingsError as exc:
        raise UserError(str(exc)) from None
    env_dir = os.environ.get("PROF_OUTPUT_DIR")
    try:
        cfg = build_config(config_file, total_iterations=total_iterations,
                           output_dir=output_dir or env_dir, device=device, seed=seed,
                           checkpoint_every=checkpoint_every,
                           progress=False if no_progress else None, inject=inject,
                           cudagraphs=True if cudagraphs else None)
    except ConfigError as exc:
        raise UserError(str(exc)) from None
    if cfg.cudagraphs and nproc > 1:
        raise UserError("cudagraphs runs on one rank only (DDP's all-reduce is not captured)")
    check_nproc(nproc, cfg.device)
    if not env_dir:
        settings = dataclasses.replace(settings, output_dir=Path(cfg.output_dir))
    if settings.enabled and settings.first >= cfg.total_iterations:
        raise UserError(f"PROF_ITERATIONS {settings.first}-{settings.last} starts after the last "
                        f"training iteration ({cfg.total_iterations - 1}); raise --total-iterations")
    hold_folders(Path(cfg.output_dir), Path(settings.output_dir))
    if resume:
        refuse_finished(Path(cfg.output_dir))  # under the lock: a finished run is never trained again
        missing = [str(checkpoint_path(cfg.output_dir, r)) for r in range(nproc)
                   if not checkpoint_path(cfg.output_dir, r).is_file()]
        if missing:
            raise UserError(f"{missing[0]}: no checkpoint to resume from")
    start_iteration = resume_iteration(cfg) if resume else 0
    earlier = earlier_outputs(cfg, settings, nproc, resume)
    if earlier:
        click.echo(f"replacing {len(earlier)} file(s) of an earlier run: "
                   f"{', '.join(str(p) for p in earlier)}", err=True)
    clear_earlier_outputs(earlier)
    if resume:
        trim_metrics(cfg.output_dir, start_iteration)
    return cfg, settings, start_iteration


def train_and_record(cfg: Config, settings: ProfSettings, start_iteration: int, nproc: int,
                     resume: bool, started: float) -> None:
    """Train, then merge the traces and write run.json: the run's or, when a signal or a dead
    rank stopped it, what it finished and why it stopped."""
    argv = ["python -m trainer", *sys.argv[1:]]
    try:
        outcomes = launch(cfg, settings, nproc=nproc, resume=resume)
    except Interrupted as exc:
        default_signals()
        outcomes, at = interrupted_outcomes(cfg, settings, nproc, start_iteration)
        record = finish_run(cfg, settings, outcomes, started, argv,
                            {"signal": exc.name, "at_iteration": at}, start_iteration)
        click.echo(interrupted_line(record, settings), err=True)
        sys.exit(exc.exit_code)
    except RankFailed as exc:
        default_signals()
        outcomes, at = interrupted_outcomes(cfg, settings, nproc, start_iteration)
        failed = [{**failure, "at_iteration": at} for failure in exc.failed]
        record = finish_run(cfg, settings, outcomes, started, argv, None, start_iteration, failed)
        click.echo(failed_line(record, settings), err=True)
        sys.exit(RANK_FAILED_EXIT)
    try:
        record = finish_run(cfg, settings, outcomes, started, argv)
    except Interrupted as exc:  # training finished: record it without the merge (not done twice)
        default_signals()
        end = start_iteration + outcomes[0].iterations_run
        record = finish_run(cfg, settings, outcomes, started, argv,
                            {"signal": exc.name, "at_iteration": end}, start_iteration, merge=False)
        click.echo(after_training_line(record, exc.name), err=True)
        sys.exit(exc.exit_code)
    click.echo(summary_line(record))


RANK_FAILED_EXIT = 1  # a rank died: run.json's failed_ranks says which and why


def check_nproc(nproc: int, device: str) -> None:
    """One machine's ranks: one per GPU on CUDA, at most RANKS_PER_CORE per CPU core on the CPU
    (each rank is a process with its own torch: more only thrash)."""
    if device == "cuda":
        import torch
        if torch.cuda.device_count() < nproc:
            raise UserError(f"--nproc {nproc} needs {nproc} CUDA devices, torch sees "
                            f"{torch.cuda.device_count()}")
        return
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    if nproc > run_options.RANKS_PER_CORE * cores:
        raise UserError(f"--nproc {nproc}: at most {run_options.RANKS_PER_CORE} ranks per CPU core "
                        f"on the CPU ({run_options.RANKS_PER_CORE * cores} here, {cores} core(s))")


def hold_folders(*folders: Path) -> list[int]:
    """Lock the run's folders (made when missing) until the process ends: a second run into one
    of them (two `--resume`s, two trainers given one --output-dir) stops here with one line,
    before it removes or replaces any file. The kernel drops the locks however the process ends."""
    fds = []
    for folder in dict.fromkeys(folders):
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise write_error(folder, exc) from None
        fds.append(take_folder_lock(folder, "run"))
    return fds  # never closed: the locks last as long as the process


def run_trace(record: dict) -> str | None:
    """Where the run's trace is: its merged trace (several ranks), its one rank trace, or the
    folder of rank traces that were not merged; None when it wrote none."""
    if record.get("merged_trace"):
        return record["merged_trace"]
    traces = list((record.get("traces") or {}).values())
    if len(traces) == 1:
        return traces[0]
    return record["profiling"]["trace_dir"] if traces else None


def trace_part(record: dict) -> str:
    """`merged trace: PATH`, `trace: PATH` (one rank), `rank traces: FOLDER` (not merged) or `no trace`."""
    where = run_trace(record)
    if where is None:
        return "no trace"
    label = "merged trace" if record.get("merged_trace") else \
        "trace" if len(record["traces"]) == 1 else "rank traces"
    return f"{label}: {where}"


def _traces_text(record: dict, settings: ProfSettings) -> str:
    """What the stopped run kept of its profiler window, for the one-line summaries below."""
    window = f"{settings.first}-{settings.last}"
    if not settings.enabled:
        return "profiling was off"
    if run_trace(record) and record["profiling"]["iterations_traced"]:
        return f"the finished window {window} is in {run_trace(record)}"
    return f"no trace written (the window {window} was not finished)"


def interrupted_line(record: dict, settings: ProfSettings) -> str:
    stop = record["interrupted"]
    traces = _traces_text(record, settings)
    out = Path(record["config"]["output_dir"]) / "run.json"
    return (f"interrupted by {stop['signal']} at iteration {stop['at_iteration']} "
            f"({record['iterations_run']} iteration(s) finished) | {traces} | run record: {out}")


def failed_line(record: dict, settings: ProfSettings) -> str:
    """`rank 1 was killed by SIGKILL at iteration 7 | ...`: which rank, why, what was kept."""
    failed = record["failed_ranks"]
    at = failed[0]["at_iteration"]
    traces = _traces_text(record, settings)
    out = Path(record["config"]["output_dir"]) / "run.json"
    return (f"{'; '.join(describe_failure(f) for f in failed)} at iteration {at}; the other ranks "
            f"were stopped ({record['iterations_run']} iteration(s) finished) | {traces} | "
            f"run record: {out}")


def after_training_line(record: dict, signal: str) -> str:
    """A signal after training, while run.json was being written (and several ranks' traces
    merged: they stay as they are)."""
    several = len(record["traces"]) > 1
    doing = "merging the traces" if several else "recording the run"
    out = Path(record["config"]["output_dir"]) / "run.json"
    return (f"interrupted by {signal} after training, while {doing} | {trace_part(record)}"
            f"{', not merged' if several else ''} | run record: {out}")


def summary_line(record: dict) -> str:
    m = record.get("final_metrics") or {}
    sps = record.get("env_steps_per_s")
    parts = [f"trained {record['iterations_run']} iterations ({record['env_steps']:,} env-steps) "
             f"on {record['world_size']} rank(s), {record['device_type']}",
             f"{sps:,.0f} env-steps/s" if sps else "env-steps/s n/a"]
    if m.get("proxy_return") is not None:
        parts.append(f"last iteration: proxy return {m['proxy_return']:.2f}, true return "
                     f"{m['true_return']:.2f} (Goodhart gap {m.get('goodhart_gap', 0):.2f})")
    parts.append(trace_part(record))
    parts.append(f"run folder: {record.get('run_dir') or record['config']['output_dir']} (run.json)")
    return " | ".join(parts)


def main(args: list[str] | None = None) -> None:
    run_cli(cli, "python -m trainer", args)


if __name__ == "__main__":
    main()
