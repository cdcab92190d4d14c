"""Host-thread rules: CPU ops on tiny inputs that take far longer than their size warrants.

`slow_tiny_ops`: on a CPU-only rank, an op whose inputs are tiny (a few KB) runs in microseconds
on one free core. When the same op on tiny inputs takes a median of milliseconds, call after
call, the host thread is not computing: it is waiting for a core. The usual cause is more
runnable threads than free cores: torch's intra-op threads (one per core by default, OpenMP/MKL
workers that spin after each parallel region) on a machine other work also uses, so each tiny op
waits for a scheduler time slice (CleanRL's 4x2 softmax took 3.6-15 ms a call with two threads on
a busy 2-core machine, 1-6 us with one: tests/data/ours/user_loops).

How an op's size is known: its input dims where recorded (record_shapes, and kept by the loader:
trace/model.py `input_dims`), else, for an
elementwise op (whose output is as large as its largest input, so a tiny output means tiny
inputs), the host memory it allocated inside its own span (profile_memory). A reduction's small
output says nothing about its input, so other ops are not judged by their allocations.

Only CPU-only ranks and compute ops (`aten::`) are looked at (a trace without a CPU-only rank is
judged and silent): on a rank with GPU activity a host op's time is its dispatch and launch, and
waits there are the sync and idle rules' business; a collective on a tiny tensor
(`c10d::allreduce_` over gloo) waits for the other ranks.
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from ..recorder import record_full_advice
from ..tree import host_tree
from .base import Context, Need, Rule, Threshold
from .finding import Finding, NotJudged
from .savings import Saving
from ...units import ms_text

# Ops whose output has the broadcast shape of their inputs (so no input is larger than the output).
_ELEMENTWISE = re.compile(
    r"^aten::_?(softmax|log_softmax|tanh|relu|sigmoid|gelu|silu|elu|leaky_relu|hardtanh|exp|log|"
    r"sqrt|rsqrt|neg|abs|add|sub|rsub|mul|div|pow|clamp|clamp_min|clamp_max|where|maximum|minimum|"
    r"sign|reciprocal|tanh_backward|sigmoid_backward|threshold_backward|softmax_backward_data|"
    r"log_softmax_backward_data|copy|clone|lerp|addcmul|addcdiv)_?$")


def _numels(dims: str) -> list[int] | None:
    """Elements of each tensor input of an `input_dims` text (`8x64, 64x64, , `), blanks (scalars)
    skipped; None when an entry is not a plain shape (`?`: a tensor list) or none is a tensor."""
    out = []
    for part in str(dims).split(", "):
        part = part.strip()
        if not part:
            continue
        if not re.fullmatch(r"\d+(x\d+)*", part):
            return None
        out.append(int(np.prod([int(d) for d in part.split("x")])))
    return out or None


def _tiny_calls(ctx: Context) -> pd.DataFrame | NotJudged:
    """One row per cpu op call on a CPU-only rank whose inputs are known to be tiny: node, rank,
    name, self_us, shape (what shows it is tiny)."""
    trace = ctx.trace
    tree = host_tree(trace)
    cpu_only = ~np.isin(tree.rank, list(ctx.device_ranks))
    ops = tree.is_op & ~tree.is_step & cpu_only
    if not ops.any():  # no CPU-only rank: nothing this rule looks at
        return pd.DataFrame(columns=["node", "rank", "name", "self_us", "shape"])
    ev = trace.events
    dims = ev["input_dims"].loc[tree.row[ops]] if "input_dims" in ev else pd.Series(dtype=object)
    mem = trace.memory
    host_mem = mem[(mem["device_type"] == 0) & (mem["bytes"] > 0)] if len(mem) else mem
    if not dims.notna().any() and len(host_mem) == 0:
        return NotJudged(SLOW_TINY_OPS.id, "the trace records neither input shapes (record_shapes) nor "
                                           "host memory events (profile_memory), so a tiny op cannot be "
                                           f"told from a large one (record with {record_full_advice(trace)})")
    limit = SLOW_TINY_OPS.limit("tiny_bytes")
    nodes = np.flatnonzero(ops)
    shape = pd.Series(pd.NA, index=nodes, dtype=object)
    # 1. recorded input dims (4 bytes an element: fp32, the CPU default), of compute ops only: a
    # collective (c10d::*, gloo) on a tiny tensor waits for the other ranks, not for a core
    dims = dims[ev["name"].loc[dims.index].astype(str).str.startswith("aten::").to_numpy()]
    for text, idx in dims.dropna().groupby(dims.dropna().astype(str), observed=True).groups.items():
        n = _numels(text)
        if n is not None and max(n) * 4 <= limit:
            shape.loc[tree.nodes(np.asarray(idx))] = ", ".join(p for p in str(text).split(", ") if p.strip())
    # 2. elementwise ops: the host bytes allocated inside the op itself (innermost op)
    if len(host_mem):
        held = tree.climb_to(tree.enclosing(host_mem["rank"].to_numpy(), host_mem["pid"].to_numpy(),
                                            host_mem["tid"].to_numpy(), host_mem["ts"].to_numpy(),
                                            host_mem["ts"].to_numpy()), tree.is_op)
        keep = held >= 0
        alloc = pd.Series(host_mem["bytes"].to_numpy(float)[keep]).groupby(held[keep]).sum()
        alloc = alloc[alloc.index.isin(nodes)]
        names = pd.Series(tree.names[tree.name[alloc.index]].astype(str), index=alloc.index)
        small = alloc[(alloc <= limit).to_numpy() & names.str.match(_ELEMENTWISE).to_numpy()]
        todo = small.index[shape.loc[small.index].isna().to_numpy()]
        shape.loc[todo] = [f"output {int(b)} B" for b in small.loc[todo]]
    shape = shape.dropna()
    if shape.empty:
        return pd.DataFrame(columns=["node", "rank", "name", "self_us", "shape"])
    n = shape.index.to_numpy()
    return pd.DataFrame({"node": n, "rank": tree.rank[n], "name": tree.names[tree.name[n]].astype(str),
                         "self_us": tree.self_us[n], "shape": shape.to_numpy().astype(str)})


def _slow_tiny_ops(ctx: Context) -> Finding | NotJudged | None:
    calls = _tiny_calls(ctx)
    if isinstance(calls, NotJudged) or calls.empty:
        return calls if isinstance(calls, NotJudged) else None
    rule = SLOW_TINY_OPS
    # one group per op and size: the same op on other sizes may be fast (not every size enters
    # a parallel region), and a median over mixed sizes would hide the slow ones
    by_op = calls.groupby(["name", "shape"]).agg(calls=("self_us", "size"), median_us=("self_us", "median"),
                                               total_us=("self_us", "sum"))
    slow = by_op[(by_op["calls"] >= rule.limit("min_calls"))
                 & (by_op["calls"] / ctx.iterations >= rule.limit("per_iteration"))
                 & (by_op["median_us"] >= rule.limit("slow_us"))]
    if slow.empty:
        return None
    slow = slow.sort_values("total_us", ascending=False)
    keys = pd.MultiIndex.from_frame(calls[["name", "shape"]])
    mine = calls[keys.isin(slow.index)]
    fast = rule.limit("fast_us")
    excess = float(np.maximum(0.0, mine["self_us"].to_numpy() - fast).sum())
    (top, top_shape), t = slow.index[0], slow.iloc[0]
    ops = [{"op": name, "shape": shape, "calls": int(r["calls"]),
            "per_iteration": round(float(r["calls"]) / ctx.iterations, 2),
            "median_us": round(float(r["median_us"]), 3), "total_us": round(float(r["total_us"]), 3)}
           for (name, shape), r in slow.head(5).iterrows()]
    more = f" (and {len(slow) - 1} more op/size pairs)" if len(slow) > 1 else ""
    return Finding(
        rule.id, "medium",
        f"host ops on tiny inputs take far longer than their size warrants: {top} ({top_shape}) "
        f"took a median {ms_text(t['median_us'])} over {int(t['calls'])} calls{more}: the "
        "thread waits for a core (more runnable threads than free cores)",
        {"ops": ops, "pairs": int(len(slow)), "calls": int(len(mine)), "excess_us": round(excess, 3),
         "cause": "intra-op thread contention / oversubscription"},
        "Ops this small gain nothing from threads, and with more runnable threads than free cores "
        "each waits for a time slice: run torch's intra-op work on one thread, "
        "torch.set_num_threads(1) at startup (or OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 in the "
        "environment), or at most as many threads as cores left free by other work; batch tiny "
        "ops (more envs per step) so each does real work.",
        **rule.estimated(ctx.per_iteration(excess, mine["rank"].unique())))


SLOW_TINY_OPS = Rule(
    "slow_tiny_ops", "host", _slow_tiny_ops, needs=(Need.HOST_OPS,),
    thresholds={
        "tiny_bytes": Threshold(16384, "every input at most 16 KB (4,096 fp32 elements): it fits in "
                                       "L1 cache, an elementwise op on it takes ~1-10 us and a GEMM of "
                                       "such inputs (64x64 @ 64x64) well under 100 us on one core"),
        "slow_us": Threshold(500.0, "a median of 0.5 ms is 50x what a tiny op needs: not its work "
                                    "but waiting for a core (a scheduler time slice is 1-10 ms; "
                                    "the 4x2 softmax took 3.6-15 ms per call under contention)"),
        "fast_us": Threshold(20.0, "what a tiny op takes on a free core (the 4x2 softmax: 1-6 us, "
                                   "an 8x64 @ 64x64 addmm ~20 us): the part of each call above it "
                                   "is waiting"),
        "min_calls": Threshold(8, "a median over 8+ calls is the op's usual cost, not one call "
                                  "that the scheduler interrupted"),
        "per_iteration": Threshold(1.0, "an op of the step itself (each iteration calls it), not "
                                        "one-time setup")},
    saving=Saving("the time these calls take above what a tiny op needs on a free core (20 us "
                  "each), per iteration",
                  "with one thread per free core the ops run in microseconds; the rest of each "
                  "call is waiting for a core"))

RULES = (SLOW_TINY_OPS,)
