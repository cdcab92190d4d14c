"""Run the trainer on one or several ranks and write the run's records (run.json; the merged trace
of several ranks: a one-rank run's trace is its rank file, never copied).

Interruptions: SIGINT, SIGTERM and SIGHUP raise `Interrupted` in the main thread (signals.py,
`catch_signals`), in the launcher and in every rank. A rank stops where it is: a traced window that
was not finished writes no trace (the profiler is stopped, its data dropped), a finished window's
trace is already complete on disk. The launcher then still merges the complete traces and writes run.json with
`interrupted` = {signal, at_iteration}, and the process exits with 128 + the signal's number.
A rank that dies (SIGKILL, an error) stops the others the same way (`RankFailed`): run.json then
holds `failed_ranks` = [{rank, signal}] instead.
"""
from __future__ import annotations

import inspect
import json
import logging
import os
import platform
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from goodhart_prof.errors import UserError
from goodhart_prof.fileio import write_json, writing
from goodhart_prof.capture.hooks import ProfSettings, trace_name, traced_iterations
from goodhart_prof.capture.iteration_log import read_rows
from goodhart_prof.capture.merging import MergeUnavailable, merge_apart
from goodhart_prof.capture.runs import CREATED
from goodhart_prof.textsafe import quote_path

from .checkpoint import checkpoint_path
from .config import Config
from .signals import (Interrupted, catch_signals, default_signals, deferred, ignore_signals,
                      signal_name)
from .train import RunResult, train

RUN_SCHEMA = "goodhart-prof/run/v1"


class RankFailed(Exception):
    """A rank of a multi-rank run died (a signal, an error): `failed` lists {rank, signal} (or
    {rank, exit_code} for one that exited) for the rank(s) that failed first, before the
    launcher stopped the others."""

    def __init__(self, failed: list[dict[str, Any]]):
        super().__init__(", ".join(describe_failure(f) for f in failed))
        self.failed = failed


def describe_failure(failure: dict[str, Any]) -> str:
    """`rank 1 was killed by SIGKILL` / `rank 2 exited with code 3`."""
    if failure.get("signal"):
        return f"rank {failure['rank']} was killed by {failure['signal']}"
    return f"rank {failure['rank']} exited with code {failure.get('exit_code')}"


@dataclass
class RankOutcome:
    rank: int
    iterations_run: int
    env_steps: int
    wall_s: float | None
    env_steps_per_s: float | None
    warmup_s: float | None
    last_row: dict[str, Any] | None
    trace_path: str | None
    memory: list[dict[str, Any]] = field(default_factory=list)  # iteration_memory.memory_row per traced iteration


def _outcome(rank: int, result: RunResult, warmup_s: float | None) -> RankOutcome:
    return RankOutcome(rank, result.iterations_run, result.env_steps, result.wall_s,
                       result.env_steps_per_s, warmup_s, result.rows[-1] if result.rows else None,
                       str(result.trace_path) if result.trace_path else None, result.memory)


def _train_rank(cfg: Config, settings: ProfSettings, resume: bool, rank: int, world: int) -> RankOutcome:
    warm: list[float] = []
    result = train(cfg, settings, rank, world, resume=resume, on_warmup=warm.append)
    return _outcome(rank, result, warm[0] if warm else None)


def _rank_entry(cfg: Config, settings: ProfSettings, resume: bool, threads: int) -> RankOutcome:
    """Entry point of one worker started by torch.distributed's launcher."""
    import torch.distributed as dist

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    catch_signals()  # the launcher stops its workers with SIGTERM: unwind, close the logger
    torch.set_num_threads(threads)
    bound: dict[str, Any] = {}
    if cfg.device == "cuda":
        local = int(os.environ.get("LOCAL_RANK", rank))
        torch.cuda.set_device(local)
        cfg = _replace(cfg, device="cuda")
        # Bind NCCL to this rank's device at once (torch >= 2.3): the communicator is made
        # eagerly for it, and no collective has to guess the device from the current one.
        if "device_id" in inspect.signature(dist.init_process_group).parameters:
            bound["device_id"] = torch.device("cuda", local)
    dist.init_process_group("nccl" if cfg.device == "cuda" else "gloo", **bound)
    try:
        return _train_rank(_replace(cfg, progress=cfg.progress and rank == 0), settings, resume,
                           rank, world)
    except Interrupted as exc:
        code = exc.exit_code  # the launcher records the interruption; no traceback from here
    finally:
        default_signals()
        dist.destroy_process_group()
    os._exit(code)


def _replace(cfg: Config, **changes: Any) -> Config:
    from dataclasses import replace
    return replace(cfg, **changes)


def launch(cfg: Config, settings: ProfSettings, nproc: int = 1, resume: bool = False) -> list[RankOutcome]:
    """Train on `nproc` ranks (torch.distributed's elastic launcher when more than one)."""
    if nproc == 1:
        return [_train_rank(cfg, settings, resume, 0, 1)]
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    threads = max(1, (os.cpu_count() or 1) // nproc)
    config = LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=nproc, run_id=uuid.uuid4().hex,
                          rdzv_backend="c10d", rdzv_endpoint="127.0.0.1:0", max_restarts=0,
                          monitor_interval=0.1, start_method="spawn")
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    quiet_launcher_logs()
    try:  # the launcher's agent turns SIGINT/SIGTERM into SignalException after stopping the ranks
        results = elastic_launch(config, _rank_entry)(cfg, settings, resume, threads)
    except SignalException as exc:
        raise Interrupted(exc.sigval) from None
    except ChildFailedError as exc:  # a rank died; the agent has stopped the others
        raise RankFailed(rank_failures(exc)) from None
    finally:  # the agent leaves its own handlers (SignalException) behind: ours again, for the merge
        catch_signals()
    return [results[r] for r in sorted(results)]


def rank_failures(exc: Exception) -> list[dict[str, Any]]:
    """{rank, signal} (or {rank, exit_code}) of each rank a ChildFailedError reports, the first
    observed failure first."""
    first, _ = exc.get_first_failure()
    failed = []
    for rank in sorted(exc.failures, key=lambda r: (r != first, r)):
        code = exc.failures[rank].exitcode
        failed.append({"rank": int(rank), "signal": signal_name(-code)} if code < 0 else
                      {"rank": int(rank), "exit_code": int(code)})
    return failed


# torch's elastic launcher logs each failure with a traceback of its own code (and a warning per
# rank it stops): the launcher says in one line what happened instead (RankFailed, Interrupted).
_LAUNCHER_LOGGERS = ("torch.distributed.elastic", "torch.distributed.launcher",
                     "torch.multiprocessing")


def quiet_launcher_logs() -> None:
    """Every logger under those names, each of which torch gives a level of its own."""
    names = [*_LAUNCHER_LOGGERS, *logging.Logger.manager.loggerDict]
    for name in names:
        if name.startswith(_LAUNCHER_LOGGERS):
            logging.getLogger(name).setLevel(logging.CRITICAL)


def finish_run(cfg: Config, settings: ProfSettings, outcomes: list[RankOutcome], started: float,
               argv: list[str], interrupted: dict[str, Any] | None = None,
               start_iteration: int | None = None,
               failed_ranks: list[dict[str, Any]] | None = None, merge: bool = True) -> dict[str, Any]:
    """Merge the ranks' traces (several ranks, when profiling) and write run.json; returns the run record.

    `interrupted` ({signal, at_iteration}) marks a run stopped by a signal, `failed_ranks`
    ([{rank, signal}]) one stopped because a rank died: its traced window counts only if it was
    finished (its traces are complete; an unfinished one wrote none). `merge` False: the rank
    traces are recorded as they are (a signal cut their merge short)."""
    out_dir = Path(cfg.output_dir)
    trace_dir = Path(settings.output_dir)
    traces = {o.rank: Path(o.trace_path) for o in outcomes if o.trace_path and Path(o.trace_path).exists()}
    merged = merge_traces(traces, trace_dir) if merge else None
    main = outcomes[0]
    first = cfg.total_iterations - main.iterations_run if start_iteration is None else start_iteration
    end = first + main.iterations_run
    stopped = interrupted is not None or bool(failed_ranks)
    window_done = not stopped or min(settings.last, cfg.total_iterations - 1) < end
    # The window's iterations that ran: bounded by those, never a range over the window itself
    # (PROF_ITERATIONS 3-999999999999 with 4 iterations is 1 traced iteration, not a long loop).
    traced = list(range(max(settings.first, first), min(settings.last + 1, end))) \
        if settings.enabled and window_done and traces else []
    if traces and first > settings.first:  # a resume after the window began: hooks.py kept its trace
        traced = traced_iterations(traces[min(traces)])
    record = {
        "schema": RUN_SCHEMA,
        "created": time.strftime(CREATED),
        # The run's folder (goodhart-prof run makes one per run under the output root) and its name.
        "run_dir": str(out_dir),
        "run_name": out_dir.resolve().name,
        "command": argv,
        "git_revision": git_revision(),
        "torch_version": torch.__version__,
        "python_version": platform.python_version(),
        "host": socket.gethostname(),
        "device": device_name(cfg.device),
        "device_type": cfg.device,
        "world_size": len(outcomes),
        "config": asdict(cfg),
        "profiling": {"enabled": settings.enabled, "mode": settings.mode,
                      "iterations": [settings.first, settings.last],
                      "iterations_traced": traced, "trace_dir": str(trace_dir)},
        "iterations_run": main.iterations_run,
        "env_steps": sum(o.env_steps for o in outcomes),
        # Throughput of all ranks together, over the iterations that were not traced.
        "env_steps_per_s": _total_rate(outcomes),
        "env_steps_per_s_per_rank": {str(o.rank): o.env_steps_per_s for o in outcomes},
        "warmup_s": main.warmup_s,
        "wall_s": round(time.perf_counter() - started, 3),
        "final_metrics": main.last_row,
        "traces": {str(r): str(p) for r, p in sorted(traces.items())},
        "merged_trace": str(merged) if merged else None,
        "interrupted": interrupted,
        # Ranks that died and stopped the run: [{rank, signal}] ({rank, exit_code} for one that
        # exited with an error); empty when none did.
        "failed_ranks": list(failed_ranks or []),
        # Per rank, per traced iteration (when it ended): host RSS and, on CUDA, the allocator's
        # peak allocated/reserved bytes during it (null on the CPU).
        "memory_per_iteration": {str(o.rank): o.memory for o in outcomes},
    }
    with deferred():  # a signal during the write waits, and is then ignored: the run is recorded
        write_json(out_dir / "run.json", record)
        ignore_signals()
    return record


def merge_traces(traces: dict[int, Path], trace_dir: Path) -> Path | None:
    """Several ranks' traces merged into trace_dir/merged_trace.json; None without traces, with one
    (its rank file is the run's trace: a merged copy would only repeat it, uncompressed, at 9 times
    its size), or where the reading side is not installed.

    The merge runs in a process of its own (capture/merging.py): the training process never
    imports the reading side (msgspec, pandas), so a machine without it (a bare GPU image) still
    trains and writes its rank traces, and says in one line why they were not merged (analyze
    reads rank traces as they are)."""
    merged = trace_dir / "merged_trace.json"
    if len(traces) == 1:
        merged.unlink(missing_ok=True)  # an earlier version's, in the folder a --resume reuses
    if len(traces) < 2:
        return None
    try:
        merge_apart(traces, merged)
    except MergeUnavailable as exc:
        sys.stderr.write(f"{quote_path(trace_dir)}: rank traces written, not merged: {exc.module} is "
                         f"not installed (pip install {exc.module}; goodhart-prof analyze reads the "
                         f"rank traces as they are)\n")
        return None
    return merged


def _total_rate(outcomes: list[RankOutcome]) -> float | None:
    rates = [o.env_steps_per_s for o in outcomes]
    return round(sum(rates), 1) if all(r is not None for r in rates) else None


def device_name(device) -> str:
    """The GPU's name for a CUDA device (str or torch.device), else the CPU model."""
    if str(device).startswith("cuda") and torch.cuda.is_available():
        return torch.cuda.get_device_name(torch.device(device))
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


def git_revision() -> str | None:
    here = Path(__file__).resolve().parent
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True,
                             timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def stale_traces(trace_dir: Path, nproc: int) -> list[Path]:
    """Rank traces in the folder from an earlier run with more ranks (they would mislead)."""
    found = []
    for path in Path(trace_dir).glob("rank-*.pt.trace.json.gz"):
        stem = path.name[len("rank-"):-len(".pt.trace.json.gz")]
        if not stem.isdigit() or int(stem) >= nproc:
            found.append(path)
    return found



# -- an interrupted run, the files of an earlier one ----------------------------------------------
METRICS = "metrics.jsonl"


def read_metrics(out_dir: str | Path) -> list[dict[str, Any]]:
    """metrics.jsonl rows (rank 0 writes one per finished iteration); a torn last line is skipped."""
    return read_rows(Path(out_dir))


def interrupted_outcomes(cfg: Config, settings: ProfSettings, nproc: int,
                         start_iteration: int) -> tuple[list[RankOutcome], int]:
    """What an interrupted run finished, read back from metrics.jsonl, and the iteration that was
    running when the signal came (the first one not finished)."""
    rows = [r for r in read_metrics(cfg.output_dir) if r["iteration"] >= start_iteration]
    at = rows[-1]["iteration"] + 1 if rows else start_iteration
    done = at - start_iteration
    steps = done * cfg.n_envs * cfg.rollout_steps
    trace_dir = Path(settings.output_dir)
    outcomes = [RankOutcome(r, done, steps, None, None, None, rows[-1] if rows and r == 0 else None,
                            str(trace_dir / trace_name(r)) if settings.enabled else None)
                for r in range(nproc)]
    return outcomes, at


def resume_iteration(cfg: Config) -> int:
    """The iteration a --resume starts at (rank 0's checkpoint)."""
    path = checkpoint_path(cfg.output_dir, 0)
    try:
        return int(torch.load(path, map_location="cpu", weights_only=False)["iteration"])
    except Exception as exc:  # noqa: BLE001 - whatever torch.load says, the file is not usable
        raise UserError(f"{path}: not a usable checkpoint ({type(exc).__name__}: "
                        f"{str(exc).splitlines()[0][:120] if str(exc) else ''})") from None


def trim_metrics(out_dir: str | Path, start_iteration: int) -> None:
    """Before a resume: drop the rows of iterations at or after the checkpoint (a run killed
    after its last checkpoint wrote them; the resumed run writes them again)."""
    path = Path(out_dir) / METRICS
    rows = read_metrics(out_dir)
    keep = [r for r in rows if r["iteration"] < start_iteration]
    if path.exists() and len(keep) != len(path.read_text().splitlines()):
        with writing(path) as tmp:
            tmp.write_text("".join(json.dumps(r) + "\n" for r in keep))


# Temporary files of atomic writes: a run killed with SIGKILL (no cleanup) leaves them behind.
_TEMP_PATTERNS = (".run.json.*.tmp", ".merged_trace.json.*.tmp", ".rank-*.pt.trace.json.gz.*.tmp.gz",
                  ".checkpoint-rank*.pt.*.tmp", f".{METRICS}.*.tmp")


def earlier_outputs(cfg: Config, settings: ProfSettings, nproc: int, resume: bool) -> list[Path]:
    """Files of an earlier run in this run's folders that this run replaces (a resume keeps
    the metrics and traces it continues)."""
    out_dir, trace_dir = Path(cfg.output_dir), Path(settings.output_dir)
    found = [out_dir / "run.json"]
    if not resume:
        found.append(out_dir / METRICS)
        if cfg.checkpoint_every:
            found += sorted(out_dir.glob("checkpoint-rank*.pt"))
    if settings.enabled:
        found += stale_traces(trace_dir, nproc)
        if not resume:
            found += sorted(trace_dir.glob("rank-*.pt.trace.json.gz")) + [trace_dir / "merged_trace.json"]
    for folder in dict.fromkeys((out_dir, trace_dir)):
        for pattern in _TEMP_PATTERNS:
            found += sorted(folder.glob(pattern))
    return [p for p in dict.fromkeys(found) if p.is_file()]


def clear_earlier_outputs(paths: list[Path]) -> None:
    """Remove the earlier run's traces, metrics and temporary files now, so that an interrupted
    run never leaves them beside its own run.json; run.json and checkpoints are replaced when
    this run writes its own (atomically)."""
    for path in paths:
        if path.name != "run.json" and not path.name.startswith("checkpoint-rank"):
            path.unlink(missing_ok=True)
