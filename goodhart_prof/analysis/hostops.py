"""Host-side op structure the findings need: which ops the user's code called, and fresh-tensor moves.

Kineto records every dispatcher op, also those torch calls from inside another op (`aten::std`
reading a scalar with `aten::item`) or from its own Python (the optimizer's step). An op is
**top-level** when no other cpu op on its thread encloses it: the user's code (or torch's Python,
such as `torch.optim`) called it directly. Ops inside an `Optimizer.step#...` or
`Optimizer.zero_grad#...` annotation are **torch's own** (the optimizer's bookkeeping).

A **fresh move** is a top-level `.to()` (`aten::to`, `aten::_to_copy`) whose previous top-level op
on the same thread created the tensor on the host, i.e. `torch.zeros(n).to(device)` or
`torch.from_numpy(a).to(device)`:

| creator (the previous top-level op) | kind |
| --- | --- |
| a factory: `aten::zeros`, `ones`, `empty`, `full`, `arange`, `rand`, ... (`*_like` too) | `factory` |
| `aten::lift_fresh` (`torch.from_numpy`, `torch.as_tensor`), or `aten::detach_` right after it (`torch.tensor(data)`) | `host_data` |

and the move is real: on a rank with GPU activity it launches a host-to-device memcpy; on a
CPU-only rank (where the device *is* the host) it does nothing, so the op has no child op (a
`.to(dtype)` would convert, through `aten::_to_copy`). On a CPU-only trace a redundant
`.to(device)` of a tensor already made with `device=` looks the same: the argument values are not
in the trace (Kineto does not print device arguments), so this is the closest the trace can say.
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from ..trace.model import Trace, name_codes
from .intervals import starts_inside, thread_groups
from .links import gpu_launches, launched_inside
from .syncs import STEP, _start_order

FACTORIES = frozenset({
    "aten::zeros", "aten::ones", "aten::empty", "aten::full", "aten::arange", "aten::rand",
    "aten::randn", "aten::randint", "aten::randperm", "aten::eye", "aten::linspace",
    "aten::logspace", "aten::scalar_tensor", "aten::zeros_like", "aten::ones_like",
    "aten::empty_like", "aten::full_like", "aten::rand_like", "aten::randn_like",
    "aten::empty_strided", "aten::tensor",
})
HOST_DATA = frozenset({"aten::lift_fresh"})
MOVES = frozenset({"aten::to", "aten::_to_copy"})
TORCH_ANNOTATION = re.compile(r"^Optimizer\.(step|zero_grad)#")


def top_level_ops(trace: Trace) -> pd.DataFrame:
    """Every cpu op with `top` (no cpu op on its thread encloses it), `has_child` (the next op
    on the thread starts inside it), `prev_top` / `next_top` (names of the previous / next
    top-level op on the thread, "" at the ends) and `torch_own` (inside an
    Optimizer.step#/zero_grad# annotation).
    Index: the op's row label in trace.events. Built once per trace and cached on it."""
    cached = trace.cache.get("top_level_ops")
    if cached is None:
        cached = trace.cache["top_level_ops"] = _top_level_ops(trace)
    return cached


def _top_level_ops(trace: Trace, none: bool = False) -> pd.DataFrame:
    """The table of top_level_ops (`none`: the same table with no rows)."""
    ev = trace.events
    cats = ev["name"].cat.categories
    codes_all = ev["name"].cat.codes.to_numpy()
    if none:
        sel = np.empty(0, dtype=np.int64)
    else:
        mask = (ev["cat"] == "cpu_op").to_numpy()
        # 2021-era traces record `ProfilerStep#N` as a cpu op around everything: a scope, not an op.
        step_codes = name_codes(ev, STEP)
        if len(step_codes):
            mask = mask & ~np.isin(codes_all, step_codes)
        sel = np.flatnonzero(mask)
    col = {c: ev[c].to_numpy()[sel] for c in ("rank", "pid", "tid", "ts", "dur", "end")}
    col["name"], col["row"] = codes_all[sel].astype(np.int32), ev.index.to_numpy()[sel]
    threads = thread_groups(pd.DataFrame({"rank": col["rank"], "pid": col["pid"], "tid": col["tid"]}))
    parts = []
    for pos in threads.values():  # numpy only inside: a thread can hold a million ops
        order = pos[_start_order(col["ts"][pos], col["dur"][pos])]
        ts, end, codes = col["ts"][order], col["end"][order], col["name"][order]
        reach = np.maximum.accumulate(end)
        top = np.ones(len(ts), dtype=bool)
        top[1:] = end[1:] > reach[:-1]  # not inside any earlier-starting op
        has_child = np.zeros(len(ts), dtype=bool)
        has_child[:-1] = ts[1:] < end[:-1]
        top_idx = np.flatnonzero(top)
        prev = np.full(len(ts), -1, dtype=np.int32)
        prev[top_idx[1:]] = codes[top_idx[:-1]]
        nxt = np.full(len(ts), -1, dtype=np.int32)
        nxt[top_idx[:-1]] = codes[top_idx[1:]]
        parts.append((order, top, has_child, prev, nxt))
    order = np.concatenate([p[0] for p in parts]) if parts else np.empty(0, dtype=np.int64)
    flat = {k: np.concatenate([p[i] for p in parts]) if parts else np.empty(0, dtype=t)
            for i, k, t in ((1, "top", bool), (2, "has_child", bool), (3, "prev_top", np.int32),
                            (4, "next_top", np.int32))}
    table = pd.DataFrame({"rank": col["rank"][order], "pid": col["pid"][order], "tid": col["tid"][order],
                          "ts": col["ts"][order], "end": col["end"][order], "top": flat["top"],
                          "has_child": flat["has_child"],
                          # categoricals: a comparison costs one test per distinct name
                          "name": pd.Categorical.from_codes(col["name"][order], categories=cats),
                          "prev_top": pd.Categorical.from_codes(flat["prev_top"], categories=cats),
                          "next_top": pd.Categorical.from_codes(flat["next_top"], categories=cats)},
                         index=pd.Index(col["row"][order]))
    table["torch_own"] = inside_torch_annotation(trace, table) if len(table) else np.zeros(0, dtype=bool)
    return table


def inside_torch_annotation(trace: Trace, rows: pd.DataFrame) -> np.ndarray:
    """Whether each row (rank, pid, tid, ts, end) lies inside an Optimizer.step#/zero_grad#
    annotation on its thread: torch's own work, not a line of the user's code."""
    out = np.zeros(len(rows), dtype=bool)
    ev = trace.events
    wanted = name_codes(ev, TORCH_ANNOTATION) if not rows.empty else ()
    if not len(wanted):
        return out
    # (2021-era traces record these annotations as cpu ops.)
    at = np.flatnonzero(np.isin(ev["name"].cat.codes.to_numpy(), wanted))
    at = at[ev["cat"].iloc[at].isin(("user_annotation", "cpu_op")).to_numpy()]
    ann = pd.DataFrame({c: ev[c].to_numpy()[at] for c in ("rank", "pid", "tid", "ts", "end")})
    spans = thread_groups(ann)
    q_ts, q_end = rows["ts"].to_numpy(), rows["end"].to_numpy()
    for key, pos in thread_groups(rows).items():
        own = spans.get(key)
        if own is None:
            continue
        own = own[np.argsort(ann["ts"].to_numpy()[own], kind="stable")]
        starts, ends = ann["ts"].to_numpy()[own], np.maximum.accumulate(ann["end"].to_numpy()[own])
        j = np.searchsorted(starts, q_ts[pos], side="right") - 1
        ok = j >= 0
        hit = np.zeros(len(pos), dtype=bool)
        hit[ok] = ends[j[ok]] >= q_end[pos][ok]
        out[pos] = hit
    return out


def fresh_moves(trace: Trace) -> pd.DataFrame:
    """Fresh moves (module docstring): one row per move op, index = its row in trace.events.

    Columns: rank, pid, tid, ts, end, name, creator (the op that made the tensor), kind
    (`factory` / `host_data`), gpu (the rank has GPU activity), copies (HtoD memcpys it
    launched), bytes, copy_us, pageable (copies from pageable memory).
    """
    cached = trace.cache.get("fresh_moves")
    if cached is not None:
        return cached
    names = trace.events["name"].cat.categories
    # No move op anywhere in the trace: no fresh move, and no need for the op structure.
    ops = top_level_ops(trace) if names.isin(MOVES).any() else _top_level_ops(trace, none=True)
    top = ops[ops["top"].to_numpy()]
    pos = np.flatnonzero(top["name"].isin(MOVES).to_numpy() & ~top["torch_own"].to_numpy())
    names = np.asarray(top["name"].cat.categories, dtype=object)
    prev = top["prev_top"].cat.codes.to_numpy()

    def label(codes: np.ndarray) -> np.ndarray:
        return np.where(codes >= 0, names[np.maximum(codes, 0)], "") if len(names) else codes.astype(str)
    moves = top.iloc[pos].assign(
        creator=label(prev[pos]), next=label(top["next_top"].cat.codes.to_numpy()[pos]),
        before=label(np.where(pos > 0, prev[np.maximum(pos - 1, 0)], -1)))  # the op before the creator
    # torch.tensor(data) records empty -> to -> lift_fresh -> detach_: the first `to` is part of
    # it (no move); a `to` after that detach_ moves host data.
    made = moves["creator"].isin(FACTORIES).to_numpy()
    inside_tensor = (moves["creator"] == "aten::empty").to_numpy() & (moves["next"] == "aten::lift_fresh").to_numpy()
    host = (moves["creator"].isin(HOST_DATA).to_numpy()
            | ((moves["creator"] == "aten::detach_").to_numpy() & (moves["before"] == "aten::lift_fresh").to_numpy()))
    keep = (made & ~inside_tensor) | host
    moves = moves[keep].drop(columns=["before", "next"])
    moves = moves.assign(kind=np.where(moves["creator"].isin(FACTORIES).to_numpy(), "factory", "host_data"))
    gpu_ranks = set(trace.gpu["rank"].unique().tolist()) if not trace.gpu.empty else set()
    moves = moves.assign(gpu=moves["rank"].isin(gpu_ranks).to_numpy())
    copies = _htod_inside(trace, moves)
    moves = moves.join(copies)
    for col in ("copies", "bytes", "copy_us", "pageable"):
        moves[col] = moves[col].fillna(0)
    real = np.where(moves["gpu"].to_numpy(), moves["copies"].to_numpy() > 0,
                    ~moves["has_child"].to_numpy())
    moves = moves[real].drop(columns=["top", "has_child", "prev_top", "next_top", "torch_own"])
    trace.cache["fresh_moves"] = moves
    return moves


def _htod_inside(trace: Trace, moves: pd.DataFrame) -> pd.DataFrame:
    """Per move: HtoD memcpys whose launch call starts inside it on its thread."""
    cols = ["copies", "bytes", "copy_us", "pageable"]
    if moves.empty or trace.gpu.empty:
        return pd.DataFrame(columns=cols, index=moves.index, dtype=float)
    gpu = trace.gpu
    cats = gpu["name"].cat.categories  # name tests once per distinct name, not per event
    codes = gpu["name"].cat.codes.to_numpy()
    htod = np.isin(codes, np.flatnonzero(cats.str.startswith("Memcpy HtoD")))
    pageable = np.isin(codes, np.flatnonzero(cats.str.startswith("Memcpy HtoD (Pageable")))
    copies = pd.DataFrame({"pageable": pageable[htod], "bytes": gpu["bytes"].to_numpy()[htod]},
                          index=gpu.index[htod])
    links = gpu_launches(trace)
    links = links[(links["launch_row"].to_numpy() >= 0) & links["gpu_row"].isin(copies.index).to_numpy()]
    links = links.join(copies, on="gpu_row")
    rows = [(row, len(part), float(part["bytes"].sum(skipna=True)), float(part["dur"].sum()),
             int(part["pageable"].sum())) for row, part in launched_inside(moves, links)]
    if not rows:
        return pd.DataFrame(columns=cols, index=moves.index, dtype=float)
    found = pd.DataFrame(rows, columns=["row"] + cols).set_index("row")
    return found.reindex(moves.index)


def launch_in_cpu_op(trace: Trace, gpu_rows: np.ndarray) -> np.ndarray:
    """Whether the launch call of each GPU activity row starts inside a cpu op on its thread
    (so the trace shows which op moved the data)."""
    out = np.zeros(len(gpu_rows), dtype=bool)
    links = gpu_launches(trace).set_index("gpu_row").reindex(gpu_rows)
    launch = links["launch_row"].fillna(-1).to_numpy(np.int64)
    has = launch >= 0
    if not has.any():
        return out
    ev = trace.events
    q = pd.DataFrame({"rank": ev["rank"].loc[launch[has]].to_numpy(),
                      "pid": ev["pid"].loc[launch[has]].to_numpy(),
                      "tid": ev["tid"].loc[launch[has]].to_numpy(),
                      "ts": ev["ts"].loc[launch[has]].to_numpy(), "pos": np.flatnonzero(has)})
    ops = top_level_ops(trace)
    out[q["pos"].to_numpy()] = starts_inside(ops[ops["top"].to_numpy()], q)
    return out
