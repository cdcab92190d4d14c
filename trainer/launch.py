"""Run the trainer on one or several ranks and write the run's records (merged trace, run.json)."""
from __future__ import annotations

import os
import platform
import socket
import subprocess
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from goodhart_prof.fileio import write_json
from goodhart_prof.hooks import ProfSettings
from goodhart_prof.trace.merge import merge_rank_traces

from .config import Config
from .train import RunResult, train

RUN_SCHEMA = "goodhart-prof/run/v1"


@dataclass
class RankOutcome:
    rank: int
    iterations_run: int
    env_steps: int
    wall_s: float
    env_steps_per_s: float | None
    warmup_s: float | None
    last_row: dict[str, Any] | None
    trace_path: str | None


def _outcome(rank: int, result: RunResult, warmup_s: float | None) -> RankOutcome:
    return RankOutcome(rank, result.iterations_run, result.env_steps, result.wall_s,
                       result.env_steps_per_s, warmup_s, result.rows[-1] if result.rows else None,
                       str(result.trace_path) if result.trace_path else None)


def _train_rank(cfg: Config, settings: ProfSettings, resume: bool, rank: int, world: int) -> RankOutcome:
    warm: list[float] = []
    result = train(cfg, settings, rank, world, resume=resume, on_warmup=warm.append)
    return _outcome(rank, result, warm[0] if warm else None)


def _rank_entry(cfg: Config, settings: ProfSettings, resume: bool, threads: int) -> RankOutcome:
    """Entry point of one worker started by torch.distributed's launcher."""
    import torch.distributed as dist

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.set_num_threads(threads)
    if cfg.device == "cuda":
        local = int(os.environ.get("LOCAL_RANK", rank))
        torch.cuda.set_device(local)
        cfg = _replace(cfg, device="cuda")
    dist.init_process_group("nccl" if cfg.device == "cuda" else "gloo")
    try:
        return _train_rank(_replace(cfg, progress=cfg.progress and rank == 0), settings, resume,
                           rank, world)
    finally:
        dist.destroy_process_group()


def _replace(cfg: Config, **changes: Any) -> Config:
    from dataclasses import replace
    return replace(cfg, **changes)


def launch(cfg: Config, settings: ProfSettings, nproc: int = 1, resume: bool = False) -> list[RankOutcome]:
    """Train on `nproc` ranks (torch.distributed's elastic launcher when more than one)."""
    if nproc == 1:
        return [_train_rank(cfg, settings, resume, 0, 1)]
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    if cfg.device == "cuda" and torch.cuda.device_count() < nproc:
        raise RuntimeError(f"--nproc {nproc} needs {nproc} CUDA devices, torch sees "
                           f"{torch.cuda.device_count()}")
    threads = max(1, (os.cpu_count() or 1) // nproc)
    config = LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=nproc, run_id=uuid.uuid4().hex,
                          rdzv_backend="c10d", rdzv_endpoint="127.0.0.1:0", max_restarts=0,
                          monitor_interval=0.1, start_method="spawn")
    results = elastic_launch(config, _rank_entry)(cfg, settings, resume, threads)
    return [results[r] for r in sorted(results)]


def finish_run(cfg: Config, settings: ProfSettings, outcomes: list[RankOutcome], started: float,
               argv: list[str]) -> dict[str, Any]:
    """Merge the ranks' traces (when profiling) and write run.json; returns the run record."""
    out_dir = Path(cfg.output_dir)
    trace_dir = Path(settings.output_dir)
    traces = {o.rank: Path(o.trace_path) for o in outcomes if o.trace_path and Path(o.trace_path).exists()}
    merged = None
    if traces:
        merged = trace_dir / "merged_trace.json"
        merge_rank_traces(traces, merged)
    main = outcomes[0]
    traced = [i for i in range(settings.first, settings.last + 1)
              if settings.enabled and i < cfg.total_iterations and i >= cfg.total_iterations - main.iterations_run]
    record = {
        "schema": RUN_SCHEMA,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
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
    }
    write_json(out_dir / "run.json", record)
    return record


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

