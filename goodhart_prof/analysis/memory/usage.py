"""Memory per device, from the profiler's `[memory]` events (`Trace.memory`; recorded with
profile_memory=True, our `full` mode): one event per allocation (`bytes` > 0) and per free
(`bytes` < 0) by torch's allocators, each with the device's totals after it.

A **device** here is (rank, device_type, device): a GPU (CUDA or HIP, `device` its index) or the
host (device_type 0, device -1: tensors torch allocated in host memory; not the process's RSS).
Definitions (docs/DESIGN.md "memory"):

- **allocated**: bytes in live tensors on the device after each event: `Total Allocated` where the
  trace records it (`absolute`), else (2021-era traces) the running sum of `bytes` since the
  trace's first event, i.e. relative to what was allocated when recording began.
- **reserved**: `Total Reserved`, the bytes the caching allocator holds from the driver (live
  blocks and cached free ones); it never falls while the allocator keeps its cache. The host has
  no caching allocator: torch writes 0 there, so the host's reserved is null, not 0.
- **peak_allocated**, **peak_reserved**: their maxima over the trace; **reserved_ratio** =
  peak_reserved / peak_allocated; **cached_bytes** = peak_reserved - peak_allocated (reserved
  that live tensors never used during the trace).
- **allocations**: events with `bytes` > 0; **per iteration**: of each traced iteration
  (`ProfilerStep#N` of the rank holding the event), and per **phase** (the innermost user
  annotation around the event on its thread; `(none)` outside any) with the **op** (the
  outermost cpu op around it: what the code called), from the host tree (analysis/tree/).
- **allocated_end** of an iteration: allocated after the device's last event at or before the
  iteration's end; **growth** = allocated_end of the last traced iteration - that of the first;
  **growing_steps** = how many consecutive iterations ended above the one before.
- **live_bytes** of a (phase, op): bytes of its allocations inside iterations still live when the
  trace ends (no free at the same address after them; needs `Addr`): what an iteration kept.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from ...trace.model import Trace
from ..intervals import stable_order, thread_groups, tuple_codes
from ..iterations import iterations, step_table
from ..tree import host_tree
from ...units import device_key

HOST = 0  # c10 DeviceType CPU
DEVICE_COLUMNS = ["rank", "device_type", "device", "label", "absolute", "events", "allocations",
                  "frees", "alloc_bytes", "peak_allocated", "peak_reserved", "reserved_ratio",
                  "cached_bytes", "iterations", "allocations_per_iteration", "first_allocated",
                  "last_allocated", "growth", "growth_per_iteration", "growing_steps"]
ITERATION_COLUMNS = ["rank", "device_type", "device", "iteration", "allocations", "alloc_bytes",
                     "net_bytes", "allocated_end", "wall_us"]
SITE_COLUMNS = ["rank", "device_type", "device", "phase", "op", "allocations", "alloc_bytes",
                "per_iteration", "median_bytes", "live_bytes"]
KEYS = ["rank", "device_type", "device"]


@dataclass
class Memory:
    """`devices`: one row per device with memory events (DEVICE_COLUMNS); `iterations`: per
    device and traced iteration (ITERATION_COLUMNS); `sites`: per device, phase and op, the
    allocations made inside iterations (SITE_COLUMNS), most allocations first. All empty when
    the trace has no memory events."""

    devices: pd.DataFrame
    iterations: pd.DataFrame
    sites: pd.DataFrame
    events: pd.DataFrame = field(repr=False)  # trace.memory with `allocated` and `iteration`

    @property
    def recorded(self) -> bool:
        return bool(len(self.devices))


def memory(trace: Trace) -> Memory:
    """The memory tables of a trace (see the module docstring)."""
    m = trace.memory
    if not len(m):
        return Memory(pd.DataFrame(columns=DEVICE_COLUMNS), pd.DataFrame(columns=ITERATION_COLUMNS),
                      pd.DataFrame(columns=SITE_COLUMNS), m)
    events = _with_allocated(m).assign(
        iteration=iterations(trace, m["rank"].to_numpy(), m["ts"].to_numpy()))
    its = iteration_table(trace, events)
    return Memory(device_table(events, its), its, site_table(trace, events), events)


def _with_allocated(m: pd.DataFrame) -> pd.DataFrame:
    """The events with `allocated` (Total Allocated, else the running sum of bytes per device)
    and `absolute` (whether the device's trace records Total Allocated)."""
    allocated = m["total_allocated"].to_numpy(dtype=float).copy()
    absolute = np.ones(len(m), dtype=bool)
    for _, pos in thread_groups(m, tuple(KEYS)).items():  # devices: a handful; numpy inside
        if np.isnan(allocated[pos]).all():
            allocated[pos] = np.cumsum(np.nan_to_num(m["bytes"].to_numpy()[pos]))
            absolute[pos] = False
        else:  # an event without the total keeps the last one recorded
            allocated[pos] = pd.Series(allocated[pos]).ffill().to_numpy()
    return m.assign(allocated=allocated, absolute=absolute)


def iteration_table(trace: Trace, events: pd.DataFrame) -> pd.DataFrame:
    """Per device and traced iteration of its rank: allocations, alloc_bytes, net_bytes (sum of
    bytes), allocated_end, wall_us (the iteration's duration). Numpy per device (a handful)."""
    steps = step_table(trace)
    if steps.empty:
        return pd.DataFrame(columns=ITERATION_COLUMNS)
    # one span per (rank, step): its first start and last end, in (rank, step) order
    code = tuple_codes(steps["rank"].to_numpy(), steps["step"].to_numpy())
    order = stable_order(code)
    bounds = np.flatnonzero(np.r_[True, np.diff(code[order]) != 0])
    sp_rank = steps["rank"].to_numpy()[order][bounds]
    sp_step = steps["step"].to_numpy()[order][bounds]
    sp_ts = np.minimum.reduceat(steps["ts"].to_numpy(float)[order], bounds)
    sp_end = np.maximum.reduceat(steps["end"].to_numpy(float)[order], bounds)
    ev_ts, ev_bytes = events["ts"].to_numpy(), events["bytes"].to_numpy()
    ev_it, ev_allocated = events["iteration"].to_numpy(), events["allocated"].to_numpy()
    parts: dict[str, list] = {c: [] for c in ITERATION_COLUMNS}
    for key, pos in thread_groups(events, tuple(KEYS)).items():
        mine = np.flatnonzero(sp_rank == key[0])
        if not len(mine):
            continue
        steps_of = sp_step[mine]  # ascending: the spans are in (rank, step) order
        last = np.searchsorted(ev_ts[pos], sp_end[mine], side="right") - 1
        allocated = ev_allocated[pos]
        it, b = ev_it[pos], ev_bytes[pos]
        inside = it >= 0
        at = np.searchsorted(steps_of, it[inside])
        b = b[inside]
        n = len(steps_of)
        for c, v in zip(ITERATION_COLUMNS, (
                np.full(n, key[0], dtype=np.int64), np.full(n, key[1], dtype=np.int64),
                np.full(n, key[2], dtype=np.int64), steps_of,
                np.bincount(at, weights=b > 0, minlength=n).astype(np.int64),
                np.bincount(at, weights=np.where(b > 0, b, 0.0), minlength=n),
                np.bincount(at, weights=np.nan_to_num(b), minlength=n),
                np.where(last >= 0, allocated[np.maximum(last, 0)], np.nan), sp_end[mine] - sp_ts[mine])):
            parts[c].append(v)
    if not parts["rank"]:
        return pd.DataFrame(columns=ITERATION_COLUMNS)
    out = pd.DataFrame({c: np.concatenate(v) for c, v in parts.items()})
    return out.astype({"allocations": np.int64, "iteration": np.int64})


def device_table(events: pd.DataFrame, its: pd.DataFrame) -> pd.DataFrame:
    """One row per device (DEVICE_COLUMNS; the module docstring defines each figure). Devices
    are a handful: numpy per device, no groupby."""
    b = events["bytes"].to_numpy()
    allocated = events["allocated"].to_numpy()
    reserved = events["total_reserved"].to_numpy()
    absolute = events["absolute"].to_numpy()
    growth = _growth(its)
    rows = []
    for (rank, device_type, device), pos in thread_groups(events, tuple(KEYS)).items():
        bp = b[pos]
        host = device_type == HOST
        res = reserved[pos]
        peak_reserved = np.nan if host or np.isnan(res).all() else float(np.nanmax(res))
        rows.append({"rank": rank, "device_type": device_type, "device": device,
                     "label": device_key(rank, device, host=host), "absolute": bool(absolute[pos[0]]),
                     "events": len(pos), "allocations": int((bp > 0).sum()), "frees": int((bp < 0).sum()),
                     "alloc_bytes": float(bp[bp > 0].sum()), "peak_allocated": float(np.nanmax(allocated[pos])),
                     "peak_reserved": peak_reserved,
                     **growth.get((rank, device_type, device), _NO_GROWTH)})
    out = pd.DataFrame(rows)
    out["reserved_ratio"] = out["peak_reserved"] / out["peak_allocated"].where(out["peak_allocated"] > 0)
    out["cached_bytes"] = out["peak_reserved"] - out["peak_allocated"]
    return out[DEVICE_COLUMNS]  # thread_groups gives the devices in KEYS order


_NO_GROWTH = {"iterations": 0, "allocations_per_iteration": np.nan, "first_allocated": np.nan,
              "last_allocated": np.nan, "growth": np.nan, "growth_per_iteration": np.nan,
              "growing_steps": 0}


def _growth(its: pd.DataFrame) -> dict[tuple, dict[str, Any]]:
    """Per device (KEYS): iterations, allocations_per_iteration, first/last allocated_end (the
    first and last recorded), growth, growth_per_iteration (growth / (iterations - 1)),
    growing_steps (iterations that ended above the one before)."""
    out: dict[tuple, dict[str, Any]] = {}
    if its.empty:
        return out
    iteration, allocations = its["iteration"].to_numpy(), its["allocations"].to_numpy()
    end = its["allocated_end"].to_numpy(float)
    for key, pos in thread_groups(its, tuple(KEYS)).items():
        pos = pos[np.argsort(iteration[pos], kind="stable")]
        e = end[pos]
        known = e[~np.isnan(e)]
        first, last = (float(known[0]), float(known[-1])) if len(known) else (np.nan, np.nan)
        n = len(pos)
        with np.errstate(invalid="ignore"):
            up = int(np.count_nonzero(np.diff(e) > 0))
        out[key] = {"iterations": n, "allocations_per_iteration": float(allocations[pos].sum()) / n,
                    "first_allocated": first, "last_allocated": last, "growth": last - first,
                    "growth_per_iteration": (last - first) / (n - 1) if n > 1 else np.nan,
                    "growing_steps": up}
    return out


def site_table(trace: Trace, events: pd.DataFrame) -> pd.DataFrame:
    """Per device, phase and op: the allocations made inside traced iterations (SITE_COLUMNS),
    most first (ties: by phase, then op). Phase and op come from the host tree node holding each
    event. Grouped with numpy: a pandas groupby with a median costs ten times more."""
    kept = (events["iteration"].to_numpy() >= 0) & (events["bytes"].to_numpy() > 0)
    if not kept.any():
        return pd.DataFrame(columns=SITE_COLUMNS)
    # the columns read, by position (a selection of the whole table costs a millisecond)
    col = {c: events[c].to_numpy()[kept] for c in ("rank", "pid", "tid", "ts", "bytes", "iteration", *KEYS)}
    phase_c, op_c, labels = _phase_and_op(trace, col)
    b = col["bytes"].astype(float)
    live = np.where(_still_live(events)[kept], b, 0.0)
    keys = [col[c] for c in KEYS]
    # the labels present, ranked as their text sorts (a groupby's order; equal texts, one rank)
    present = np.unique(np.concatenate((phase_c, op_c)))
    text, at = np.unique(labels[present].astype(str), return_inverse=True)
    rank = np.zeros(len(labels), dtype=np.int64)
    rank[present] = at.ravel()
    phase_c, op_c = rank[phase_c], rank[op_c]
    phase_u = op_u = text.astype(object)
    group = tuple_codes(*keys, phase_c.ravel(), op_c.ravel())  # groups in key order, as a groupby sorts
    n = int(group.max()) + 1
    order = np.lexsort((b, group))  # by group, then bytes: each group's median from its middle
    starts = np.flatnonzero(np.r_[True, np.diff(group[order]) != 0])
    counts = np.diff(np.r_[starts, len(order)])
    sorted_b = b[order]
    lo, hi = starts + (counts - 1) // 2, starts + counts // 2
    first = order[starts]
    device = tuple_codes(*keys)
    pairs = np.unique(tuple_codes(device, col["iteration"]), return_index=True)[1]
    its_per_device = np.bincount(device[pairs])  # distinct iterations with an allocation
    alloc_bytes = np.bincount(group, weights=b, minlength=n)
    rank = np.lexsort((-alloc_bytes, -counts, *[k[first] for k in keys[::-1]]))
    at = first[rank]
    return pd.DataFrame({**{c: k[at] for c, k in zip(KEYS, keys)},
                         "phase": phase_u[phase_c.ravel()[at]].astype(object),
                         "op": op_u[op_c.ravel()[at]].astype(object),
                         "allocations": counts[rank].astype(np.int64), "alloc_bytes": alloc_bytes[rank],
                         "per_iteration": (counts / its_per_device[device[first]])[rank],
                         "median_bytes": ((sorted_b[lo] + sorted_b[hi]) / 2)[rank],
                         "live_bytes": np.bincount(group, weights=live, minlength=n)[rank]})


def _phase_and_op(trace: Trace, ev: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The innermost annotation (ProfilerStep#N excluded) and the outermost cpu op around each
    event (columns rank, pid, tid, ts) on its thread, by the host tree, as codes into the labels
    returned with them (the host tree's names, then `(none)` for events with none)."""
    tree = host_tree(trace)
    names = np.asarray(tree.texts + ["(none)"], dtype=object)
    none = len(names) - 1
    n = len(ev["ts"])
    if not len(tree):
        return np.full(n, none, dtype=np.int64), np.full(n, none, dtype=np.int64), names
    ts = ev["ts"]
    node = tree.enclosing(ev["rank"], ev["pid"], ev["tid"], ts, ts)
    has = node >= 0
    at = np.maximum(node, 0)
    own = tree.is_annotation[at] & ~tree.is_step[at]
    ann = np.where(own, at, tree.annotation[at])
    top = tree.top_op[at]
    phase = np.where(has & (ann >= 0), tree.name[np.maximum(ann, 0)], none).astype(np.int64)
    op = np.where(has & (top >= 0), tree.name[np.maximum(top, 0)], none).astype(np.int64)
    return phase, op, names


def _still_live(events: pd.DataFrame) -> np.ndarray:
    """Per event: an allocation whose block is not freed later in the trace (the next event at
    the same address of the device is not a free). False where `Addr` is not recorded."""
    addr = events["addr"].to_numpy()
    b = events["bytes"].to_numpy()
    order = np.lexsort((np.arange(len(events)), addr, events["device"].to_numpy(),
                        events["device_type"].to_numpy(), events["rank"].to_numpy()))
    same = np.zeros(len(events), dtype=bool)
    key = np.stack([events[c].to_numpy(np.int64)[order] for c in KEYS] + [addr[order]])
    same[:-1] = (key[:, 1:] == key[:, :-1]).all(axis=0)
    next_frees = np.zeros(len(events), dtype=bool)
    next_frees[:-1] = same[:-1] & (b[order][1:] < 0)
    live = np.zeros(len(events), dtype=bool)
    live[order] = (b[order] > 0) & ~next_frees & (addr[order] >= 0)
    return live


def timeline(mem: Memory, label: str, points: int = 2000) -> pd.DataFrame:
    """A device's allocated and reserved over time (ts, allocated, reserved), at most about
    `points` rows: the maximum of each time bucket (a peak is never smoothed away)."""
    d = mem.devices[mem.devices["label"] == label]
    if d.empty:
        return pd.DataFrame(columns=["ts", "allocated", "reserved"])
    key = d.iloc[0]
    e = mem.events
    sel = ((e["rank"] == key["rank"]) & (e["device_type"] == key["device_type"])
           & (e["device"] == key["device"])).to_numpy()
    ts = e["ts"].to_numpy()[sel]
    allocated = e["allocated"].to_numpy()[sel]
    reserved = e["total_reserved"].to_numpy()[sel] if key["device_type"] != HOST else np.full(len(ts), np.nan)
    if len(ts) <= points:
        return pd.DataFrame({"ts": ts, "allocated": allocated, "reserved": reserved})
    edges = np.linspace(ts[0], ts[-1], points + 1)
    starts = np.unique(np.searchsorted(ts, edges[:-1], side="left"))
    starts = starts[starts < len(ts)]
    return pd.DataFrame({"ts": ts[starts], "allocated": np.maximum.reduceat(allocated, starts),
                         "reserved": np.fmax.reduceat(reserved, starts)})
