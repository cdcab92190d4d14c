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

from ...trace.model import Trace, name_codes
from .links import gpu_launches
from ..tree import STEP, covered, host_tree, launched_inside, starts_inside
from ..memo import derived

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
    top-level op on the thread, "" at the ends). Whether an op is torch's own is asked of the
    few ops that need it (`inside_torch_annotation`).
    Index: the op's row label in trace.events. Built once per trace (memo.py)."""
    return derived(trace, "top_level_ops", _top_level_ops)


def _top_level_ops(trace: Trace, none: bool = False) -> pd.DataFrame:
    """The table of top_level_ops (`none`: the same table with no rows), read off the host
    call tree: its cpu ops in tree order, `top` where an op is its own `top_op`."""
    ev = trace.events
    cats = ev["name"].cat.categories
    tree = host_tree(trace) if not none else None
    # 2021-era traces record `ProfilerStep#N` as a cpu op around everything: a scope, not an op.
    sel = (np.flatnonzero(tree.is_op & ~np.isin(tree.name, name_codes(ev, STEP))) if tree is not None
           else np.empty(0, dtype=np.int64))
    col = {c: getattr(tree, c)[sel] if tree is not None else np.empty(0, dtype=np.int64)
           for c in ("rank", "pid", "tid", "ts", "end", "row", "name", "top_op")}
    top = col["top_op"] == sel
    codes = col["name"].astype(np.int32)
    same_thread = ((col["rank"][1:] == col["rank"][:-1]) & (col["pid"][1:] == col["pid"][:-1])
                   & (col["tid"][1:] == col["tid"][:-1]))
    has_child = np.zeros(len(sel), dtype=bool)  # the next op on the thread starts inside it
    has_child[:-1] = same_thread & (col["ts"][1:] < col["end"][:-1])
    prev, nxt = _neighbour_tops(top, codes, same_thread)
    table = pd.DataFrame({"rank": col["rank"], "pid": col["pid"], "tid": col["tid"],
                          "ts": col["ts"].astype(float), "end": col["end"].astype(float),
                          "top": top, "has_child": has_child,
                          # categoricals: a comparison costs one test per distinct name
                          "name": pd.Categorical.from_codes(codes, categories=cats),
                          "prev_top": pd.Categorical.from_codes(prev, categories=cats),
                          "next_top": pd.Categorical.from_codes(nxt, categories=cats)},
                         index=pd.Index(col["row"].astype(np.int64)))
    return table


def _neighbour_tops(top: np.ndarray, codes: np.ndarray, same_thread: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray]:
    """Name codes of the previous / next top-level op on each top-level op's thread (-1: none)."""
    prev = np.full(len(top), -1, dtype=np.int32)
    nxt = np.full(len(top), -1, dtype=np.int32)
    tops = np.flatnonzero(top)
    if len(tops) > 1:
        # consecutive tops on one thread: no thread change between them
        change = np.concatenate(([0], np.cumsum(~same_thread)))
        linked = change[tops[1:]] == change[tops[:-1]]
        prev[tops[1:][linked]] = codes[tops[:-1][linked]]
        nxt[tops[:-1][linked]] = codes[tops[1:][linked]]
    return prev, nxt


def inside_torch_annotation(trace: Trace, rows: pd.DataFrame) -> np.ndarray:
    """Whether each row (rank, pid, tid, ts, end) lies inside an Optimizer.step#/zero_grad#
    annotation on its thread: torch's own work, not a line of the user's code."""
    ev = trace.events
    wanted = name_codes(ev, TORCH_ANNOTATION) if not rows.empty else ()
    if not len(wanted):
        return np.zeros(len(rows), dtype=bool)
    # (2021-era traces record these annotations as cpu ops.)
    tree = host_tree(trace)
    at = np.flatnonzero(np.isin(tree.name, wanted))
    spans = pd.DataFrame({c: getattr(tree, c)[at] for c in ("rank", "pid", "tid", "ts", "end")})
    return covered(spans, rows)


def fresh_moves(trace: Trace) -> pd.DataFrame:
    """Fresh moves (module docstring): one row per move op, index = its row in trace.events.

    Columns: rank, pid, tid, ts, end, name, creator (the op that made the tensor), kind
    (`factory` / `host_data`), gpu (the rank has GPU activity), copies (HtoD memcpys it
    launched), bytes, copy_us, pageable (copies from pageable memory).
    """
    return derived(trace, "fresh_moves", _fresh_moves)


def _fresh_moves(trace: Trace) -> pd.DataFrame:
    names = trace.events["name"].cat.categories
    # No move op anywhere in the trace: no fresh move, and no need for the op structure.
    ops = top_level_ops(trace) if names.isin(MOVES).any() else _top_level_ops(trace, none=True)
    # the top-level ops by position (selecting the whole table's top rows costs milliseconds)
    tops = np.flatnonzero(ops["top"].to_numpy())
    is_move = ops["name"].cat.categories.isin(MOVES)
    codes = ops["name"].cat.codes.to_numpy()[tops]
    pos = np.flatnonzero(is_move[np.maximum(codes, 0)] & (codes >= 0))
    pos = pos[~inside_torch_annotation(trace, ops.iloc[tops[pos]])]  # asked for the move ops only
    names = np.asarray(ops["name"].cat.categories, dtype=object)
    prev = ops["prev_top"].cat.codes.to_numpy()[tops]

    def label(codes: np.ndarray) -> np.ndarray:
        return np.where(codes >= 0, names[np.maximum(codes, 0)], "") if len(names) else codes.astype(str)
    moves = ops.iloc[tops[pos]].assign(
        creator=label(prev[pos]), next=label(ops["next_top"].cat.codes.to_numpy()[tops[pos]]),
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
    return moves[real].drop(columns=["top", "has_child", "prev_top", "next_top"])


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
    move_at, link_at = launched_inside(moves, links)
    if not len(move_at):
        return pd.DataFrame(columns=cols, index=moves.index, dtype=float)
    n = len(moves)
    count = np.bincount(move_at, minlength=n)
    nbytes, dur = (np.nan_to_num(links[c].to_numpy(float)[link_at]) for c in ("bytes", "dur"))
    pageable = links["pageable"].to_numpy()[link_at].astype(np.int64)
    has = count > 0
    found = pd.DataFrame({"copies": count[has],
                          "bytes": np.bincount(move_at, weights=nbytes, minlength=n)[has],
                          "copy_us": np.bincount(move_at, weights=dur, minlength=n)[has],
                          "pageable": np.bincount(move_at, weights=pageable, minlength=n)[has].astype(np.int64)},
                         index=moves.index[has])
    return found.reindex(moves.index)  # a move that launched no copy: NaN


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
