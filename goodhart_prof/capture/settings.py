"""PROF_* settings: parsing and validation, without importing torch (the CLI needs them fast)."""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping


# Kineto's log levels: 0 verbose, 1 info, 2 warning, 3 stage, 4 error, 5 usdt; 6 prints nothing. Its
# lines (`ERROR ... gpuGetDeviceCount failed with code 35` on a CPU-only machine with a CUDA build
# of torch, `profiler_start`/`profiler_stop` stages) say nothing about the user's run.
QUIET_KINETO = "6"
KINETO_DEFAULT = "4"  # what Kineto prints when the variable is unset: its errors and stage markers

PHASES = ("rollout", "env_step", "policy_act", "store", "gae", "ppo_update",
          "minibatch", "optimizer_step", "logging")
MODES = ("lite", "full")
# The PROF_* defaults, here only: ProfSettings, `goodhart-prof run` and both help texts use these.
DEFAULT_ITERATIONS = (50, 55)
DEFAULT_WINDOW = f"{DEFAULT_ITERATIONS[0]}-{DEFAULT_ITERATIONS[1]}"  # as PROF_ITERATIONS spells it
DEFAULT_MODE = MODES[0]  # lite
DEFAULT_OUTPUT_DIR = "traces"


# PROF_COUNTERS=default: CUPTI counters for FLOPs by precision (an FMA is 2, a mul or add 1:
# analysis/gpu/cupti.py) and the DRAM bytes each kernel moves.
DEFAULT_COUNTERS = tuple(f"smsp__sass_thread_inst_executed_op_{p}{k}_pred_on.sum"
                         for p in "hf" for k in ("fma", "mul", "add")) + (
    "dram__bytes_read.sum", "dram__bytes_write.sum")
_COUNTER_NAME = re.compile(r"^[A-Za-z0-9_.]+$")


class SettingsError(ValueError):
    """A PROF_* value or the matching CLI flag is malformed (message is one line)."""


TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off", "")  # "": set but empty reads as unset, i.e. off


def parse_switch(name: str, text: str | None) -> bool:
    """An on/off variable: 1/true/yes/on -> True; 0/false/no/off, empty or unset (None) -> False.

    Any case, surrounding spaces ignored. Anything else is refused rather than read as off:
    `PROF_ENABLED=ture` silently profiling nothing costs a whole run."""
    word = "" if text is None else text.strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise SettingsError(f"{name} must be one of 1/true/yes/on or 0/false/no/off, not {text!r}")


def parse_counters(text: str | None) -> tuple[str, ...]:
    """PROF_COUNTERS: CUPTI metric names separated by commas, `default` (DEFAULT_COUNTERS), or
    unset/empty (none)."""
    text = (text or "").strip()
    if not text:
        return ()
    if text.lower() == "default":
        return DEFAULT_COUNTERS
    names = tuple(n.strip() for n in text.split(","))
    for n in names:
        if not _COUNTER_NAME.match(n):
            raise SettingsError(f"PROF_COUNTERS: {n!r} is not a CUPTI metric name (letters, digits, "
                                "_ and . only; names separated by commas, or `default`)")
    return tuple(dict.fromkeys(names))


def parse_iterations(text: str) -> tuple[int, int]:
    """`50-55` -> (50, 55); `7` -> (7, 7). 0-based, inclusive."""
    match = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", str(text))
    if not match:
        raise SettingsError(f"iterations must look like 50-55 or 7 (0-based, inclusive), not {text!r}")
    first = int(match.group(1))
    last = int(match.group(2)) if match.group(2) is not None else first
    if last < first:
        raise SettingsError(f"iterations {text!r}: the first iteration is after the last")
    return first, last


@dataclass(frozen=True)
class ProfSettings:
    """What to profile. `heap_guard` is GOODHART_HEAP_GUARD (goodhart_prof/capture/heap_guard.py, off
    unless asked): it belongs to the window, so it is read with the PROF_* variables. `metrics` is
    PROF_METRICS: the hooks write metrics.jsonl themselves (a loop that writes none of its own)."""

    enabled: bool = False
    first: int = DEFAULT_ITERATIONS[0]
    last: int = DEFAULT_ITERATIONS[1]
    mode: str = DEFAULT_MODE
    output_dir: Path = Path(DEFAULT_OUTPUT_DIR)
    heap_guard: bool = False
    metrics: bool = False  # PROF_METRICS: the hooks log each iteration to metrics.jsonl (rank 0)
    sites: bool = True  # PROF_SITES: after a lite window, one iteration with stacks for the sites
    # PROF_COUNTERS: CUPTI counters per kernel (CUDA only): the window's kernels are serialised
    # and replayed to count them, so its times are not the loop's
    counters: tuple[str, ...] = ()

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> "ProfSettings":
        """The settings the variables give. With profiling off nothing else is read or checked:
        a stale PROF_ITERATIONS must not stop an unprofiled run."""
        env = os.environ if environ is None else environ
        output_dir = Path(env.get("PROF_OUTPUT_DIR", DEFAULT_OUTPUT_DIR))
        if not parse_switch("PROF_ENABLED", env.get("PROF_ENABLED")):
            return cls(enabled=False, output_dir=output_dir)
        try:
            first, last = parse_iterations(env.get("PROF_ITERATIONS", DEFAULT_WINDOW))
        except SettingsError as exc:
            raise SettingsError(f"PROF_ITERATIONS: {exc}") from None
        mode = env.get("PROF_MODE", DEFAULT_MODE).strip().lower()
        if mode not in MODES:
            raise SettingsError(f"PROF_MODE must be lite or full, not {env['PROF_MODE']!r}")
        return cls(enabled=True, first=first, last=last, mode=mode, output_dir=output_dir,
                   heap_guard=parse_switch("GOODHART_HEAP_GUARD", env.get("GOODHART_HEAP_GUARD")),
                   metrics=parse_switch("PROF_METRICS", env.get("PROF_METRICS")),
                   sites=parse_switch("PROF_SITES", env.get("PROF_SITES", "1")),
                   counters=parse_counters(env.get("PROF_COUNTERS")))

    def traced(self, iteration: int) -> bool:
        """Iteration `iteration` is recorded (labelled ProfilerStep#iteration)."""
        return self.enabled and self.first <= iteration <= self.last

    @property
    def warmup_iteration(self) -> int | None:
        """The iteration before the window, during which the profiler warms up and records
        nothing (hooks.py); None when the window starts at iteration 0, which has none."""
        return self.first - 1 if self.first > 0 else None

    def profiler_slows(self, iteration: int) -> bool:
        """A profiler slows `iteration` (`profiler_window`); False with profiling off."""
        return self.enabled and bool(profiler_window(iteration, self.first, self.last))


# A run's first iteration(s) pay for compilation, autotuning and allocator growth: never a time or
# throughput sample (trace/run_record.py for a run's reports, command_runs.py for its run.json).
WARMUP_ITERATIONS = 1


def profiler_window(iteration, first: int, last: int):
    """Whether a profiler slows each iteration of the window FIRST..LAST (an int, or a numpy array
    of them): the warm-up one before it (FIRST - 1, which sets the profiler up), the traced ones,
    and the one after (LAST + 1, which writes the trace and, after a lite window, is recorded with
    stacks for the sites). Throughput leaves them all out, in the
    trainer's own rate (trainer/train.py) and in a run folder's (trace/run_record.py)."""
    return (iteration >= first - 1) & (iteration <= last + 1)
