"""Interval primitives on sorted numpy arrays: unions, coverage, per-thread grouping.

Which event holds which (nesting, "inside" searches) is the host call tree's question
(analysis/tree/); these are the plain set operations on time intervals under it.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

def merge_intervals(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Union of [start, end) intervals as disjoint sorted blocks."""
    if len(starts) == 0:
        return np.empty(0), np.empty(0)
    order = np.argsort(starts, kind="stable")
    s, e = np.asarray(starts, float)[order], np.asarray(ends, float)[order]
    reach = np.maximum.accumulate(e)
    new_block = np.empty(len(s), dtype=bool)
    new_block[0] = True
    new_block[1:] = s[1:] > reach[:-1]
    # a block ends where its reach does at its last interval (reach never falls)
    last = np.r_[np.flatnonzero(new_block)[1:] - 1, len(s) - 1]
    return s[new_block], reach[last]


def covered_before(block_starts: np.ndarray, block_ends: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Busy time in (-inf, t] for each t, given disjoint sorted blocks (one segment of
    `segment_covered_before`)."""
    t = np.asarray(t, dtype=float)
    return segment_covered_before(block_starts, block_ends, np.array([0, len(block_starts)]),
                                  np.zeros(len(t), dtype=np.int64), t)


def segment_covered_before(block_starts: np.ndarray, block_ends: np.ndarray, bounds: np.ndarray,
                           segment: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Busy time in (-inf, t[i]] of segment[i]'s blocks, for blocks laid out in segments
    [bounds[k], bounds[k + 1]) (a device's busy blocks, say), disjoint and sorted in each: the
    blocks' lengths summed in segment order up to the block holding t, plus its part up to t."""
    bs, be = block_starts, block_ends
    if not len(bs):
        return np.zeros(len(t))
    cum = segment_cumsum(be - bs, bounds)
    lo, hi = bounds[:-1][segment], bounds[1:][segment]
    i = segment_searchsorted(bs, lo, hi, t, side="right") - lo  # blocks starting at or before t
    j = lo + np.maximum(i - 1, 0)
    last = len(bs) - 1
    full = np.where(i > 1, cum[np.clip(j - 1, 0, last)], 0.0)  # the segment's blocks before block j
    partial = np.where(i > 0, np.minimum(t, be[np.minimum(j, last)]) - bs[np.minimum(j, last)], 0.0)
    return full + np.maximum(partial, 0.0)


ThreadKey = tuple  # (rank, pid, tid)


def thread_groups(frame: pd.DataFrame, keys: tuple[str, ...] = ("rank", "pid", "tid")
                  ) -> dict[tuple, np.ndarray]:
    """Positions (0..len-1) of the rows of each (rank, pid, tid), or of each value of `keys`;
    within a group, positions ascend. One lexsort, no pandas groupby (10x cheaper: the analyses
    group a dozen tables by thread)."""
    if frame.empty:
        return {}
    cols = [frame[k].to_numpy() for k in keys]
    order = np.lexsort(cols[::-1])  # stable: positions stay ascending inside a group
    cols = [c[order] for c in cols]
    change = np.zeros(len(order) - 1, dtype=bool)
    for c in cols:
        change |= c[1:] != c[:-1]
    bounds = np.concatenate(([0], np.flatnonzero(change) + 1, [len(order)]))
    return {tuple(int(c[a]) for c in cols): order[a:b] for a, b in zip(bounds[:-1], bounds[1:])}


def stable_order(codes: np.ndarray) -> np.ndarray:
    """`np.argsort(codes, kind="stable")` of integer codes: a radix sort (numpy's stable sort of
    16-bit integers, ~10x faster than its sort of int64) when they fit 16 bits."""
    codes = np.asarray(codes)
    if len(codes) and codes.dtype.kind in "iu" and codes.min() >= 0 and codes.max() < 2 ** 16:
        return np.argsort(codes.astype(np.uint16), kind="stable")
    return np.argsort(codes, kind="stable")


def exact_sums(inverse: np.ndarray, groups: int, **values: np.ndarray) -> dict[str, np.ndarray]:
    """Per-group sums of each values array (group of row i: inverse[i]), exactly rounded
    (math.fsum), so that the figures do not depend on the order rows are added in."""
    order = stable_order(inverse)
    bounds = np.concatenate(([0], np.cumsum(np.bincount(inverse, minlength=groups))))
    out = {}
    for k, v in values.items():
        v = np.asarray(v, dtype=float)[order].tolist()
        out[k] = np.array([math.fsum(v[a:b]) for a, b in zip(bounds[:-1], bounds[1:])])
    return out


def group_totals(table: pd.DataFrame, keys: list[str], value: str = "dur") -> pd.DataFrame:
    """`count` and `total_us` (exactly rounded sum of `value`) per distinct combination of
    `keys`, groups in order of their keys' first appearance; with numpy (a pandas groupby costs
    milliseconds even on a few rows). Key columns keep their dtypes."""
    if table.empty:
        return pd.DataFrame(columns=keys + ["count", "total_us"])
    codes, uniques = zip(*(pd.factorize(table[k].to_numpy()) for k in keys))
    key = np.zeros(len(table), dtype=np.int64)
    for c, u in zip(codes, uniques):
        key = key * len(u) + c
    groups, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    inverse = inverse.ravel()
    return pd.DataFrame({**{k: np.asarray(u)[c[first]] for k, c, u in zip(keys, codes, uniques)},
                         "count": np.bincount(inverse).astype(np.int64),
                         "total_us": exact_sums(inverse, len(groups), total=table[value].to_numpy(float))["total"]})


def sorted_rows(table: pd.DataFrame, keys: list[str], ascending: "bool | list[bool]" = True) -> pd.DataFrame:
    """`table.sort_values(keys, ascending=ascending, kind="stable").reset_index(drop=True)` by
    one np.lexsort (pandas costs ~0.5 ms a sort even of a few rows): number and text columns,
    NaN last as pandas puts it; pandas sorts any other column."""
    up = [ascending] * len(keys) if isinstance(ascending, bool) else list(ascending)
    cols = []
    for k, a in zip(keys, up):
        v = table[k].to_numpy()
        if v.dtype.kind in "iub":
            v = v.astype(np.int64)
        elif v.dtype.kind != "f":
            if not all(type(x) is str for x in v.tolist()):
                return table.sort_values(keys, ascending=ascending, kind="stable").reset_index(drop=True)
            v = np.unique(v, return_inverse=True)[1].ravel()  # sorts as the texts do
        cols.append(v if a else -v)
    order = np.lexsort(cols[::-1]) if len(table) > 1 else np.arange(len(table))
    return table.take(order).reset_index(drop=True)


def sorted_group_sums(keys: list[np.ndarray], values: np.ndarray
                      ) -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
    """What `groupby(keys).agg(size, sum)` gives (groups in the keys' sorted order; texts sort
    as text), with one integer key: each group's key values, count, and sum of `values` as
    pandas sums a group (compensated, in row order), without a groupby on several columns."""
    uniques, key = [], np.zeros(len(values), dtype=np.int64)
    for k in keys:
        u, code = np.unique(k, return_inverse=True)
        uniques.append(u)
        key = key * len(u) + code.ravel()
    total = pd.Series(values).groupby(key).sum()
    at = total.index.to_numpy()
    out = []
    for u in reversed(uniques):
        out.append(u[at % len(u)])
        at = at // len(u)
    return out[::-1], np.bincount(key)[total.index.to_numpy()].astype(np.int64), total.to_numpy()


def first_positions(codes: np.ndarray) -> np.ndarray:
    """The first position of each code 0..max (dense codes, as tuple_codes makes them)."""
    first = np.full(int(codes.max(initial=-1)) + 1, len(codes), dtype=np.int64)
    np.minimum.at(first, codes, np.arange(len(codes)))
    return first


def occurs_once(values: np.ndarray) -> np.ndarray:
    """Whether each value is >= 0 and no other entry holds the same value."""
    found = values >= 0
    uniq, counts = np.unique(values[found], return_counts=True)
    out = np.zeros(len(values), dtype=bool)
    out[found] = counts[np.searchsorted(uniq, values[found])] == 1
    return out


def segment_searchsorted(values: np.ndarray, lo: np.ndarray, hi: np.ndarray, queries: np.ndarray,
                         side: str = "left") -> np.ndarray:
    """`lo + np.searchsorted(values[lo:hi], q, side)` for every query with its own segment
    [lo, hi) of `values` (sorted within each segment), exact (values are compared, never shifted).

    Queries usually share a few segments (one per thread or device), often in runs: then one C
    searchsorted per run (or per distinct segment, found by a sort); with more than
    SEGMENT_LOOP_LIMIT distinct segments, one binary search for all queries at once, log2(longest
    segment) numpy steps."""
    lo = np.array(lo, dtype=np.int64, copy=True)
    hi = np.array(hi, dtype=np.int64, copy=True)
    q = np.asarray(queries)
    if lo.ndim == 0 or len(lo) == 0:
        return _binary_searchsorted(values, lo, hi, q, side)
    key = lo * (len(values) + 1) + np.maximum(hi, lo)
    runs = np.flatnonzero(key[1:] != key[:-1]) + 1 if len(key) > 1 else np.zeros(0, dtype=np.int64)
    if len(runs) < SEGMENT_LOOP_LIMIT:  # queries grouped by segment already (a thread's, a device's)
        edges = np.r_[0, runs, len(key)]
        groups = [(int(a), slice(int(a), int(b))) for a, b in zip(edges[:-1], edges[1:])]
    else:
        segs, first, inverse = np.unique(key, return_index=True, return_inverse=True)
        if len(segs) > SEGMENT_LOOP_LIMIT:
            return _binary_searchsorted(values, lo, hi, q, side)
        order = stable_order(inverse)
        bounds = np.concatenate(([0], np.cumsum(np.bincount(inverse, minlength=len(segs)))))
        groups = [(int(first[g]), order[bounds[g]:bounds[g + 1]]) for g in range(len(segs))]
    for at, rows in groups:
        a, b = int(lo[at]), int(hi[at])
        if a < b:
            lo[rows] = a + searchsorted_many(values[a:b], q[rows], side=side)
    return lo


SEGMENT_LOOP_LIMIT = 256  # distinct segments up to which a C searchsorted per segment is cheaper


def searchsorted_many(values: np.ndarray, q: np.ndarray, side: str = "left") -> np.ndarray:
    """`np.searchsorted(values, q, side)`, cheaper for many sorted queries (a thread's cut times,
    a device's gaps): the values are searched among the queries instead, and each query's count
    of values before it is a running sum, O(len(values) log len(q) + len(q)) in place of
    O(len(q) log len(values)). Exact: only comparisons."""
    q = np.asarray(q)
    if len(q) >= MERGE_MIN_QUERIES and len(q) >= 2 * len(values) and bool((q[1:] >= q[:-1]).all()):
        k = np.searchsorted(q, values, side="left" if side == "right" else "right")
        return np.cumsum(np.bincount(k, minlength=len(q) + 1)[:len(q)])
    return np.searchsorted(values, q, side=side)


MERGE_MIN_QUERIES = 4096  # below, one binary search per query costs too little to matter


def _binary_searchsorted(values: np.ndarray, lo: np.ndarray, hi: np.ndarray, q: np.ndarray,
                         side: str) -> np.ndarray:
    active = np.flatnonzero(lo < hi)
    while len(active):
        a, b = lo[active], hi[active]
        mid = (a + b) // 2
        go = values[mid] <= q[active] if side == "right" else values[mid] < q[active]
        lo[active] = np.where(go, mid + 1, a)
        hi[active] = np.where(go, b, mid)
        active = active[lo[active] < hi[active]]
    return lo


def dense_codes(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`np.unique(values, return_inverse=True)` for small non-negative integer codes (name
    codes): by counting, not sorting, when the largest is at most a few times the count."""
    values = np.asarray(values)
    if not len(values) or values.min() < 0 or values.max() > 4 * len(values) + 1024:
        uniq, inverse = np.unique(values, return_inverse=True)
        return uniq, inverse.ravel()
    present = np.flatnonzero(np.bincount(values))
    remap = np.zeros(int(values.max()) + 1, dtype=np.int64)
    remap[present] = np.arange(len(present))
    return present.astype(values.dtype), remap[values]


def tuple_codes(*cols: np.ndarray) -> np.ndarray:
    """Dense integer codes of the rows of `cols` (equal rows, equal codes), in lexicographic
    order of the rows: one lexsort, no overflow however many distinct values each column has."""
    n = len(cols[0]) if cols else 0
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    key = _packed(cols)
    if key is not None:  # integer columns: one key whose order is the rows' order
        return dense_codes(key)[1]
    order = np.lexsort(cols[::-1])
    change = np.zeros(n, dtype=bool)
    change[0] = True
    for c in cols:
        c = np.asarray(c)[order]
        change[1:] |= c[1:] != c[:-1]
    codes = np.empty(n, dtype=np.int64)
    codes[order] = np.cumsum(change) - 1
    return codes


def _packed(cols) -> "np.ndarray | None":
    """Integer (or bool) columns packed into one int64 key per row that sorts as the rows sort
    lexicographically (each column shifted to start at 0, or replaced by the rank of its value
    among the values present when its range is wide but countable, times the span of those after
    it), so that the key's range stays small enough to count; None when a column is not integer
    or the spans multiply past 2^62."""
    cols = [np.asarray(c) for c in cols]
    if not all(c.dtype.kind in "iub" for c in cols):
        return None
    n = len(cols[0])
    key, span = np.zeros(n, dtype=np.int64), 1
    for c in cols:
        lo, hi = (int(c.min()), int(c.max())) if c.dtype.kind != "b" else (0, 1)
        width = hi - lo + 1
        shifted = c.astype(np.int64) - lo
        if 1024 < width <= 4 * n + 1024:  # a wide column with few values: their ranks (counted)
            present, shifted = dense_codes(shifted)
            width = len(present)
        span *= width
        if span > 2**62:
            return None
        key = key * width + shifted
    return key


def segment_merge(starts: np.ndarray, ends: np.ndarray, bounds: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`merge_intervals` of every segment [bounds[i], bounds[i+1]) of the intervals at once:
    the blocks segment after segment, and the bounds of each segment's blocks. Starts and ends
    become dense codes within their segment, every code of a segment above the codes of the
    segments before it, so one running maximum serves all segments (exact: only compared)."""
    n_seg = len(bounds) - 1
    seg = np.repeat(np.arange(n_seg), np.diff(bounds))
    if not len(seg):
        return np.empty(0), np.empty(0), np.zeros(n_seg + 1, dtype=np.int64)
    order = np.lexsort((starts, seg))  # stable: merge_intervals' order within a segment
    s, e, seg = np.asarray(starts, float)[order], np.asarray(ends, float)[order], seg[order]
    codes = tuple_codes(np.concatenate((seg, seg)), np.concatenate((s, e)))
    s_code, e_code = codes[:len(s)], codes[len(s):]
    reach = np.maximum.accumulate(e_code)
    new_block = np.empty(len(s), dtype=bool)
    new_block[0] = True
    new_block[1:] = s_code[1:] > reach[:-1]  # a segment's first interval always starts a block
    first = np.flatnonzero(new_block)
    last = np.r_[first[1:] - 1, len(s) - 1]
    value = np.empty(codes.max() + 1)
    value[codes] = np.concatenate((s, e))
    block_bounds = np.searchsorted(seg[first], np.arange(n_seg + 1))
    return s[first], value[reach[last]], block_bounds


def segment_cumsum(values: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """np.cumsum of each segment [bounds[i], bounds[i+1]), laid out as `values` (each segment
    summed from its own start, rounded as np.cumsum of it alone rounds)."""
    return per_segment(values, bounds, lambda m: np.cumsum(m, axis=1), flat=True)


def per_segment(values: np.ndarray, bounds: np.ndarray, fn, flat: bool = False) -> np.ndarray:
    """fn applied to each segment [bounds[i], bounds[i+1]) of `values` at once: segments of
    equal length are stacked as the rows of a matrix and fn(matrix) gives one result row per
    segment (numpy's reductions along the rows of a row-major matrix round exactly as on each
    row alone: tests/analysis/test_scale.py). Segments of n distinct lengths cost n calls, at most
    sqrt(2 * len(values)). Results: one row per segment (NaN for empty segments), or with
    `flat`, fn's rows laid out as `values` (fn keeps each row's length)."""
    values = np.asarray(values)
    lengths = np.diff(bounds)
    out = np.full(len(values), np.nan) if flat else None
    for length in np.unique(lengths[lengths > 0]).tolist():
        idx = np.flatnonzero(lengths == length)
        cells = bounds[idx][:, None] + np.arange(length)
        res = np.asarray(fn(values[cells]), dtype=float)
        if flat:
            out[cells] = res
            continue
        if out is None:
            out = np.full((len(lengths),) + res.shape[1:], np.nan)
        out[idx] = res
    if out is None:
        out = np.full(len(lengths), np.nan)
    return out
