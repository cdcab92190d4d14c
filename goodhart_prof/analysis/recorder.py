"""How a trace was recorded, and so how to record it again with stacks, shapes and memory: the one
home for that advice (the coverage rule, the memory rules' "not judged" line and the reports ask
`record_full_advice`).

- `run`: `goodhart-prof run` made it: its run folder holds run.json beside the trace
  (runs.RUN_RECORD), or the trace carries our bundled trainer's phases (`rollout`, `ppo_update`).
  Record again with `goodhart-prof run --mode full`.
- `hooks`: our hooks in the user's own loop (PROF_ENABLED=1): the file is named as the hooks name
  it (`rank-<r>.pt.trace.json.gz`, hooks.trace_name) with no run.json beside it. The switch is the
  environment variable PROF_MODE=full.
- `other`: any other profiler (Kineto, HTA's or TraceLens's samples, DLRM's PARAM traces): the
  torch.profiler arguments that record what full mode records.
"""
from __future__ import annotations

import re
from pathlib import Path

from ..trace.model import Trace

RUN_RECORD = "run.json"  # runs.RUN_RECORD (runs.py is the CLI's side; not imported from analysis)
_HOOK_FILE = re.compile(r"rank-\d+\.pt\.trace\.json(\.gz)?$")
_TRAINER_PHASES = frozenset({"rollout", "ppo_update"})

ADVICE = {
    "run": "goodhart-prof run --mode full",
    "hooks": "the environment variable PROF_MODE=full (with PROF_ENABLED=1) in your training loop",
    "other": "torch.profiler.profile(with_stack=True, record_shapes=True, profile_memory=True)",
}


def recorded_by(trace: Trace) -> str:
    """`run`, `hooks` or `other` (see the module docstring)."""
    paths = [Path(p) for p in trace.paths]
    if any((p if p.is_dir() else p.parent).joinpath(RUN_RECORD).is_file() for p in paths):
        return "run"
    names = trace.events["name"]
    categories = set(names.cat.categories.astype(str)) if hasattr(names, "cat") else set(names.astype(str))
    if _TRAINER_PHASES <= categories:
        return "run"
    if paths and all(_HOOK_FILE.search(p.name) for p in paths if not p.is_dir()) and \
            any(not p.is_dir() for p in paths):
        return "hooks"
    return "other"


def record_full_advice(trace: Trace) -> str:
    """How to record this trace again with Python stacks, shapes and memory events."""
    return ADVICE[recorded_by(trace)]
