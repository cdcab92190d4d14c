"""A performance log row's figures, measured from an analysed trace and its run record, and
`add`: analyse a trace and append its row (the fields are listed in the package docstring)."""
from __future__ import annotations

import math
import os
from typing import Any

from ..errors import UserError, warn
from ..trace.run_record import read_run
from .log_file import DEFAULT_LOG, PerfLogError, append

HTOD_PREFIX = "Memcpy HtoD"


def env_steps_per_s(path: str | os.PathLike) -> float | None:
    """run.json's whole-run `env_steps_per_s` for the run path belongs to; None without one."""
    run = _run(path)
    return run.env_steps_per_s if run is not None else None


def _run(path: str | os.PathLike):
    """The run record of path (None: not part of a run); its skipped metrics.jsonl lines are
    warned for here, once."""
    try:
        run = read_run(path)
    except UserError as exc:
        raise PerfLogError(exc.message) from None
    for warning in run.warnings if run is not None else []:
        warn(warning)
    return run


def throughput(run) -> dict[str, Any]:
    """The row's env-steps/s fields: the median and interval of the run's per-iteration values
    (metrics.jsonl), else run.json's figure without spread, else nothing (no run)."""
    from ..analysis.compare.spread import median_interval

    empty = {"env_steps_per_s": None, "env_steps_per_s_low": None, "env_steps_per_s_high": None,
             "env_steps_per_s_n": None}
    if run is None:
        return empty
    samples = run.throughput()
    if samples.empty:
        return {**empty, "env_steps_per_s": run.env_steps_per_s}
    s = median_interval(samples["rate"].to_numpy(float))
    return {"env_steps_per_s": s.median, "env_steps_per_s_low": s.low, "env_steps_per_s_high": s.high,
            "env_steps_per_s_n": s.n}


def memcpy_htod_us(trace) -> float:
    """Total duration of the GPU memcpys whose name starts with `Memcpy HtoD`."""
    gpu = trace.gpu
    copies = gpu[(gpu["cat"] == "gpu_memcpy").to_numpy()]
    if copies.empty:
        return 0.0
    names = copies["name"].astype(str)
    return float(copies["dur"].to_numpy()[names.str.startswith(HTOD_PREFIX).to_numpy()].sum())


def iteration_time(analysis, run) -> dict[str, Any]:
    """The iteration time fields: median and interval over the counted iterations (ms)."""
    from ..analysis.compare.summary import mean_iteration_us
    from ..analysis.compare.noise import ITERATION_TIME, noise

    n = noise(analysis, run)
    if not n.n:
        return {"iteration_ms": mean_iteration_us(analysis.phases) / 1e3, "iteration_ms_low": None,
                "iteration_ms_high": None, "iteration_ms_n": None}
    s = n.spread("iteration", ITERATION_TIME)
    return {"iteration_ms": s.median / 1e3, "iteration_ms_low": s.low / 1e3, "iteration_ms_high": s.high / 1e3,
            "iteration_ms_n": s.n}


def measure(analysis, path: str | os.PathLike) -> dict[str, Any]:
    """The figures of one row (no id, date or change) from an analysis of the trace at path."""
    return _measured(analysis, path, _run(path))


def _measured(analysis, path: str | os.PathLike, run) -> dict[str, Any]:
    """`measure`, with the run record (or None) of the run path belongs to already read."""
    from ..analysis.compare.summary import host_reads_per_iteration, syncs_per_iteration

    busy, span = float(analysis.gpu["busy_us"].sum()), float(analysis.gpu["span_us"].sum())
    top = analysis.kernels.iloc[0] if len(analysis.kernels) else None
    return _finite({
        "trace": str(path),
        **iteration_time(analysis, run),
        **throughput(run),
        "gpu_busy_pct": 100 * busy / span if span > 0 else None,
        "syncs_per_iteration": syncs_per_iteration(analysis.phases),
        "host_reads_per_iteration": host_reads_per_iteration(analysis.phases, analysis.host_reads),
        "top_kernel": str(top["name"]) if top is not None else None,
        "top_kernel_pct": float(top["pct"]) if top is not None else None,
        "memcpy_htod_ms": memcpy_htod_us(analysis.trace) / 1e3,
    })


def _finite(row: dict[str, Any]) -> dict[str, Any]:
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in row.items()}


def add(path: str | os.PathLike, change: str, log: str | os.PathLike = DEFAULT_LOG) -> dict[str, Any]:
    """Analyse the trace at path (a trace file, a folder of rank traces, or a run folder with its
    run.json and metrics.jsonl) and append its row to the log; returns the row as written."""
    from ..analysis import analyze
    from ..trace.load import load

    run = _run(path)  # a broken run.json fails before the analysis, not after it
    analysis = analyze(load(path))
    return append(_measured(analysis, path, run), change, log)
