"""Who caused a sync point: the user's code, torch itself, or gradient clipping.

`sync_origin` adds two columns to the sync points, which the sync-family rules split them by
(after leaving out those on a background thread, `foreground`: they hold up no launch):

- `internal`: torch issued it, not the user's code. (1) Anything inside an
  `Optimizer.step#`/`Optimizer.zero_grad#` annotation (the optimizer's bookkeeping). (2) On a
  CPU-only rank, an `item`/`is_nonzero` op nested inside another op: there every `.item()`
  counts as a sync point (no runtime calls tell a real wait apart), and torch's kernels read
  CPU scalars that way themselves (`aten::std` calls `aten::item`; foreach Adam reads its
  CPU step counters). Neither would wait for a GPU, so neither is the user's per-step
  read-back. (On GPU ranks rule 0 of syncs.py already dropped ops that make no runtime call.)
- `grad_clip`: a read-back the user's code made after a gradient-norm op and before the
  optimizer step that follows it on the same thread (no step in between): gradient clipping
  that reads the norm back to the host (`total_norm.item()`, `if total_norm > m:`).
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from ...trace.model import Trace, rows_named
from ..host.called_ops import inside_torch_annotation, top_level_ops
from ..tree import between, host_tree

# Grad-norm ops: what gradient clipping computes before it scales the gradients.
GRAD_NORM_OPS = frozenset({"aten::linalg_vector_norm", "aten::_foreach_norm", "aten::norm",
                           "aten::frobenius_norm"})
# Kinds that read a value back (`nonzero` is a shape, nan_checks' evidence; pageable HtoD goes
# the other way).
READBACK_KINDS = ("item", "is_nonzero", "memcpy_dtoh", "sync_memcpy", "stream_sync",
                  "device_sync", "event_sync")
_ANY_OPT_STEP = re.compile(r"Optimizer\.step#")


def sync_origin(trace: Trace, points: pd.DataFrame, device_ranks: set) -> pd.DataFrame:
    """The foreground sync `points` with `internal` and `grad_clip` (module docstring);
    `device_ranks`: the ranks with GPU activity or runtime calls."""
    sp = foreground(points)
    if sp.empty:
        return sp.assign(internal=np.zeros(0, dtype=bool), grad_clip=np.zeros(0, dtype=bool))
    ev = trace.events
    rows = sp.assign(end=sp["ts"] + sp["dur"])
    torch_own = inside_torch_annotation(trace, rows)
    tree = host_tree(trace)
    node = tree.nodes(sp["row"].to_numpy())  # -1: a runtime call or device event, not an op
    nested = np.zeros(len(sp), dtype=bool)  # an op under another op
    nested[node >= 0] = tree.top_op[node[node >= 0]] != node[node >= 0]
    cpu_only = ~sp["rank"].isin(device_ranks).to_numpy()
    scalar = sp["kind"].isin(["item", "is_nonzero"]).to_numpy()
    internal = torch_own | (cpu_only & nested & scalar)
    readback = sp["kind"].isin(READBACK_KINDS).to_numpy() & ~internal
    grad_clip = np.zeros(len(sp), dtype=bool)
    if readback.any():
        ops = top_level_ops(trace)
        norms = ops[ops["name"].isin(GRAD_NORM_OPS).to_numpy()]
        norms = norms[~inside_torch_annotation(trace, norms)]
        steps = ev.iloc[rows_named(ev, _ANY_OPT_STEP, ("user_annotation", "cpu_op"))]  # cpu_op: 2021
        grad_clip[readback] = between(sp[readback], norms, steps)
    return sp.assign(internal=internal, grad_clip=grad_clip)


def foreground(points: pd.DataFrame) -> pd.DataFrame:
    """The sync points on threads that feed the GPU: those on a background thread (syncs.py, a
    thread that launches no GPU work: a logger waiting on CUDA events) hold up no launch, so no
    sync rule counts them as the training loop's stalls."""
    if points.empty or "background" not in points:
        return points
    return points[~points["background"].to_numpy(bool)]


def user_points(so: pd.DataFrame, kind: str) -> pd.DataFrame:
    """The sync points of one kind (of `so`, sync_origin's table) that the user's code made (not
    torch's, not gradient clipping's)."""
    return so[(so["kind"] == kind).to_numpy() & ~so["internal"].to_numpy() & ~so["grad_clip"].to_numpy()]
