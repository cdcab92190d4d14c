"""Containment questions about intervals that are not tree nodes: spans a rule picks (move ops,
optimizer steps), items such as launch calls and sync points. All per thread, vectorised."""
from __future__ import annotations

from typing import Iterator

import numpy as np
import pandas as pd

from ..intervals import thread_groups


def covered(spans: pd.DataFrame, rows: pd.DataFrame) -> np.ndarray:
    """Whether each row (rank, pid, tid, ts, end) lies inside one of the spans on its thread:
    a span starting at or before its start and ending at or after its end."""
    out = np.zeros(len(rows), dtype=bool)
    if rows.empty or spans.empty:
        return out
    span_ts, span_end = spans["ts"].to_numpy(), spans["end"].to_numpy()
    groups = thread_groups(spans)
    q_ts, q_end = rows["ts"].to_numpy(), rows["end"].to_numpy()
    for key, pos in thread_groups(rows).items():
        own = groups.get(key)
        if own is None:
            continue
        own = own[np.argsort(span_ts[own], kind="stable")]
        starts, reach = span_ts[own], np.maximum.accumulate(span_end[own])
        j = np.searchsorted(starts, q_ts[pos], side="right") - 1
        ok = j >= 0
        hit = np.zeros(len(pos), dtype=bool)
        hit[ok] = reach[j[ok]] >= q_end[pos][ok]
        out[pos] = hit
    return out


def outermost(items: pd.DataFrame, tie: str) -> np.ndarray:
    """Positions of the items (rank, pid, tid, ts, dur, end) that lie inside no earlier item of
    their thread, in (thread, start) order: longer first, and on identical intervals the lower
    `tie` value is the outer one (`if t:` records `aten::is_nonzero > aten::item`). A sweep over
    the items only (they are few: sync candidates)."""
    if items.empty:
        return np.empty(0, dtype=np.int64)
    order = np.lexsort((items[tie].to_numpy(), -items["dur"].to_numpy(), items["ts"].to_numpy(),
                        items["tid"].to_numpy(), items["pid"].to_numpy(), items["rank"].to_numpy()))
    key = items[["rank", "pid", "tid"]].to_numpy()[order]
    end = items["end"].to_numpy()[order]
    keep = np.ones(len(order), dtype=bool)
    open_key, open_end = None, -np.inf
    for i in range(len(order)):
        k = tuple(key[i])
        if k == open_key and end[i] <= open_end:
            keep[i] = False
        else:
            open_key, open_end = k, end[i]
    return order[keep]


def starts_inside(spans: pd.DataFrame, points: pd.DataFrame) -> np.ndarray:
    """Whether each point's `ts` lies inside one of the spans (`ts`..`end`) on its own
    (rank, pid, tid)."""
    return covered(spans, points.assign(end=points["ts"]))


def _windows(spans: pd.DataFrame, items: pd.DataFrame, time_col: str, keys: tuple[str, ...]
             ) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
    """Per key group (a thread, by default): the spans' positions, the group's items sorted by
    time_col (positions in items, and their times), and for each span the range [lo, hi) of those
    items whose time lies in [ts, end]. Two searchsorted calls per group, no loop over spans."""
    if spans.empty or items.empty:
        return
    item_groups = thread_groups(items, keys)
    item_t = items[time_col].to_numpy()
    span_ts, span_end = spans["ts"].to_numpy(), spans["end"].to_numpy()
    for key, pos in thread_groups(spans, keys).items():
        own = item_groups.get(key)
        if own is None:
            continue
        own = own[np.argsort(item_t[own], kind="stable")]
        t = item_t[own]
        yield (pos, own, t, np.searchsorted(t, span_ts[pos], side="left"),
               np.searchsorted(t, span_end[pos], side="right"))


def sums_inside(spans: pd.DataFrame, items: pd.DataFrame, time_col: str,
                values: list[np.ndarray | None], keys: tuple[str, ...] = ("rank", "pid", "tid")
                ) -> list[np.ndarray]:
    """For each span and each of `values` (arrays aligned with items; None counts items), the
    sum over the items whose time_col lies in [ts, end] among items with the same keys (prefix
    sums over each group's sorted items)."""
    out = [np.zeros(len(spans)) for _ in values]
    for pos, own, t, lo, hi in _windows(spans, items, time_col, keys):
        for result, v in zip(out, values):
            cum = np.concatenate(([0.0], np.cumsum(np.ones(len(t)) if v is None else v[own])))
            result[pos] = cum[hi] - cum[lo]
    return out


def launched_inside(spans: pd.DataFrame, links: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Which rows of `links` (a `gpu_launches` selection) have their launch call start inside
    which span (rows with rank, pid, tid, ts, end) on the same thread: (span positions, links
    positions) as pairs, a span's pairs together in launch time order. No loop over spans."""
    span_at, link_at = [np.empty(0, dtype=np.int64)], [np.empty(0, dtype=np.int64)]
    for pos, own, _, lo, hi in _windows(spans, links, "launch_ts", ("rank", "pid", "tid")):
        k = np.maximum(hi - lo, 0)
        span_at.append(np.repeat(pos, k))
        # the ranges own[lo[i]:hi[i]] one after the other
        link_at.append(own[np.repeat(lo - (np.cumsum(k) - k), k) + np.arange(int(k.sum()))])
    return np.concatenate(span_at), np.concatenate(link_at)


def between(points: pd.DataFrame, after: pd.DataFrame, before: pd.DataFrame) -> np.ndarray:
    """Whether each point starts after the latest `after` event of its thread has ended, with no
    `before` event started since, and a `before` event still to come on the thread (e.g. a
    read-back between a gradient-norm op and the optimizer step that follows it)."""
    out = np.zeros(len(points), dtype=bool)
    if points.empty or after.empty or before.empty:
        return out
    a_end, b_ts = after["end"].to_numpy(), before["ts"].to_numpy()
    a_groups, b_groups = thread_groups(after), thread_groups(before)
    ts = points["ts"].to_numpy()
    for key, pos in thread_groups(points).items():
        a, b = a_groups.get(key), b_groups.get(key)
        if a is None or b is None:
            continue
        ne, st = np.sort(a_end[a]), np.sort(b_ts[b])
        i = np.searchsorted(ne, ts[pos], side="right") - 1          # last `after` ended by ts
        j = np.searchsorted(st, ts[pos], side="right") - 1          # last `before` started by ts
        last_after = np.where(i >= 0, ne[np.maximum(i, 0)], -np.inf)
        last_before = np.where(j >= 0, st[np.maximum(j, 0)], -np.inf)
        out[pos] = (i >= 0) & (last_after > last_before) & (j + 1 < len(st))
    return out
