"""Frequent kernel sequences: the runs of 2..MAX_LEN consecutive kernels that repeat most, ranked
by the GPU time they hold (HTA's "frequent CUDA kernel sequences", over the whole trace and not
under one named op).

- **The kernels**: `kernel` GPU activity (memcpys and memsets are not kernels and break no run),
  per rank, device and stream in start order, cut at iteration bounds (analysis/iterations.py:
  the iteration holding each kernel's launch call, or the kernel itself when no launch is
  linked; with iterations found, kernels outside them are left out; without, the whole trace is
  one run per stream).
- **A kernel's token** is its name and its launching op (the innermost cpu op around its launch
  call: gpu/kernels.py `launching_ops`), so one sequence has one op chain.
- **Occurrences** of a sequence are counted without overlapping themselves: greedily, first
  first (`ABAB` occurs once in `ABABAB`). All lengths' sequences are found at once: the codes of
  length n are the factorized pairs (code of length n-1, next token), one pass per length.
- **Ranked** by total GPU time (the kernels' durations over the counted occurrences; the shorter
  first among equals: `ABAB` twice holds the time of `AB` four times); a
  sequence with a kernel already in a higher-ranked one is skipped (a shorter or shifted window
  of the same repeated block), so a kernel is in one sequence at most and their shares add up;
  TOP kept.
- **Fusion**: an eager chain (every kernel launched by an `aten::` op, none a Triton kernel) of
  elementwise/reduction/norm kernels (gpu/kernels.py categories) is a fusion candidate: fused
  (torch.compile, or a fused op) it would make one launch instead of n, so `count x (n - 1)`
  launches fewer, and the intermediate tensors between its ops would no longer go to memory and
  back: 2 x the output of each op but the last, the output taken as the op's largest tensor
  input (`Input Dims` x `Input type`, record_shapes; an elementwise op's output is its
  broadcast input); unknown (None) when an op there has no shapes, or one op launches them all
  (what passes between its own kernels is not in the trace). The TOP fusion candidates are
  ranked as above among the fusible sequences alone, apart from the TOP sequences and not
  among them.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property

import numpy as np
import pandas as pd

from ...trace.model import Trace
from ...units import ELEMENT_BYTES
from ..host.links import gpu_launches
from ..host.sites import op_sites
from ..iterations import find_iterations, iterations
from ..tree import host_tree
from .kernels import gpu_with_category, launching_ops

MIN_LEN, MAX_LEN = 2, 8
TOP = 10
FUSIBLE = frozenset({"elementwise", "reduction", "norm"})
COMPILED_LIBRARIES = frozenset({"triton"})


@dataclass(frozen=True)
class Sequence:
    """One frequent sequence: its kernels (full names), their launching ops ("" where none),
    categories and libraries, position by position."""

    kernels: tuple[str, ...]
    ops: tuple[str, ...]
    categories: tuple[str, ...]
    libraries: tuple[str, ...]
    count: int                  # occurrences, not overlapping themselves
    per_iteration: float | None  # count / (rank, iteration) windows; None without iterations
    total_us: float             # GPU time of its kernels over those occurrences
    share: float                # of all GPU activity time
    site: str | None            # the Python site of its first op (traces with stacks), else None
    fusible: bool               # an eager chain of elementwise/reduction/norm kernels
    launches_saved: int         # fused: count x (n - 1) (0 when not fusible)
    bytes_saved: float | None   # fused: intermediates not written and read back; None: unknown

    @property
    def length(self) -> int:
        return len(self.kernels)

    @property
    def op_chain(self) -> str:
        """The launching ops in order, an op launching several kernels in a row named once
        (`aten::mul > aten::add > aten::tanh`); "" when no kernel has one."""
        chain = [o for i, o in enumerate(self.ops) if o and (i == 0 or o != self.ops[i - 1])]
        return " > ".join(chain)


@dataclass(frozen=True)
class KernelSequences:
    """The TOP sequences, most GPU time first, the TOP fusion candidates (fusible sequences,
    most GPU time first, chosen apart and not among `sequences`), and what was looked at."""

    sequences: tuple[Sequence, ...]
    fusion: tuple[Sequence, ...]
    kernels: int      # kernels in runs
    windows: int      # (rank, iteration) windows with kernels (0: no iterations)
    note: str = ""    # why there are none, when there are none


def kernel_sequences(trace: Trace, top: int = TOP, max_len: int = MAX_LEN) -> KernelSequences:
    """The trace's frequent kernel sequences (module docstring)."""
    runs = _runs(trace)
    if runs is None or len(runs.token) < 2 * MIN_LEN:
        return KernelSequences((), (), 0 if runs is None else len(runs.token), 0,
                               "fewer than 4 kernels in the trace's iterations" if runs is not None
                               else "no kernels in the trace")
    found, code = [], runs.token
    width = int(code.max()) + 1
    for n in range(MIN_LEN, max_len + 1):  # the codes of length n: (code of n - 1, next token)
        code = pd.factorize(code[:-1] * width + runs.token[n - 1:])[0].astype(np.int64)
        f = _length(runs, code, n)
        if f is not None:
            found.append(f)
    chosen = _choose(found, len(runs.token), top)
    fusion = _choose(found, len(runs.token), top, fusible=True,
                     skip=frozenset((f.n, c) for f, c in chosen))
    total = float(trace.gpu["dur"].sum())
    saved = _bytes_saved(trace, runs, [(f, c) for f, c in chosen + fusion if f.fusible[c]])
    seqs = [_describe(runs, f, c, total, saved.get((f.n, c))) for f, c in chosen + fusion]
    sites = _sites(trace, runs, chosen + fusion)
    seqs = [s if site is None else replace(s, site=site) for s, site in zip(seqs, sites)]
    return KernelSequences(tuple(seqs[:len(chosen)]), tuple(seqs[len(chosen):]), len(runs.token),
                           runs.windows, "" if seqs else "no sequence of kernels repeats")


@dataclass(frozen=True)
class _Runs:
    """The kernels in run order (rank, device, stream, iteration, start), a column each: the
    token, the run it belongs to (`seg`), duration, launching op's tree node (-1: none), codes of
    the name, op, category and library (in `frame`'s categoricals: gpu/kernels.py
    `gpu_with_category`), whether it is fusible; and the (rank, iteration) windows counted."""

    token: np.ndarray
    seg: np.ndarray
    dur: np.ndarray
    node: np.ndarray
    name: np.ndarray
    op: np.ndarray
    category: np.ndarray
    library: np.ndarray
    fusible: np.ndarray
    windows: int
    frame: pd.DataFrame
    categories: dict = field(default_factory=dict)  # column -> its categories, as `labels` reads them

    @cached_property
    def dur_before(self) -> np.ndarray:
        """The kernels' durations summed up to each position (one more than kernels)."""
        return np.r_[0.0, np.cumsum(self.dur)]

    @cached_property
    def unfusible_before(self) -> np.ndarray:
        """How many kernels before each position are not fusible (one more than kernels)."""
        return np.r_[0, np.cumsum(~self.fusible)]

    def labels(self, column: str, codes: np.ndarray) -> tuple[str, ...]:
        """The text of codes of one of `frame`'s categoricals ("" for -1)."""
        cats = self.categories.get(column)
        if cats is None:  # each column's categories looked up once (a column read costs ~40 us)
            cats = self.categories[column] = np.asarray(self.frame[column].array.categories, dtype=object)
        return tuple("" if i < 0 else str(cats[i]) for i in codes.tolist())


def _runs(trace: Trace) -> _Runs | None:
    """The trace's kernels in runs (`_Runs`); None without kernels."""
    gpu = trace.gpu
    if gpu.empty:
        return None
    is_kernel = (gpu["cat"] == "kernel").to_numpy()
    if not is_kernel.any():
        return None
    rows = np.flatnonzero(is_kernel)
    g = gpu_with_category(trace)
    links = gpu_launches(trace)
    ops = launching_ops(trace)
    rank = gpu["rank"].to_numpy(np.int64)[rows]
    ts = gpu["ts"].to_numpy(float)[rows]
    launch_ts = links["launch_ts"].to_numpy(float)[rows]
    found = find_iterations(trace)
    if found.how == "none":
        step = np.zeros(len(rows), dtype=np.int64)
    else:
        step = iterations(trace, rank, np.where(np.isnan(launch_ts), ts, launch_ts))
        inside = step >= 0
        rows, rank, ts, step = rows[inside], rank[inside], ts[inside], step[inside]
    device, stream = (_ids(gpu[c], rows) for c in ("device", "stream"))
    order = np.lexsort((ts, step, stream, device, rank))
    rows, rank, step, device, stream = rows[order], rank[order], step[order], device[order], stream[order]
    cut = np.r_[True, (rank[1:] != rank[:-1]) | (device[1:] != device[:-1]) |
                (stream[1:] != stream[:-1]) | (step[1:] != step[:-1])]
    name = g["name"].cat.codes.to_numpy(np.int64)[rows]
    op = g["op"].cat.codes.to_numpy(np.int64)[rows]
    token = pd.factorize(name * (int(op.max(initial=-1)) + 2) + (op + 1))[0].astype(np.int64)
    windows = 0 if found.how == "none" else len(set(zip(rank.tolist(), step.tolist())))
    return _Runs(token, np.cumsum(cut) - 1, gpu["dur"].to_numpy(float)[rows], ops["op_node"].to_numpy()[rows],
                 name, op, g["category"].cat.codes.to_numpy(np.int64)[rows],
                 g["library"].cat.codes.to_numpy(np.int64)[rows], _fusible_kernels(g, rows), windows, g)


def _fusible_kernels(g: pd.DataFrame, rows: np.ndarray) -> np.ndarray:
    """Per kernel row: an eager elementwise/reduction/norm kernel (its category FUSIBLE, launched
    by an `aten::` op, not a compiled (Triton) kernel)."""
    cat = np.isin(np.asarray(g["category"].cat.categories), list(FUSIBLE))
    lib = np.isin(np.asarray(g["library"].cat.categories), list(COMPILED_LIBRARIES))
    ops = g["op"].cat.categories
    aten = np.r_[np.array([str(o).startswith("aten::") for o in ops], dtype=bool), False]
    op = g["op"].cat.codes.to_numpy(np.int64)[rows]
    return (cat[g["category"].cat.codes.to_numpy(np.int64)[rows]] & aten[op]
            & ~lib[g["library"].cat.codes.to_numpy(np.int64)[rows]])


@dataclass(frozen=True)
class _Found:
    """The sequences of one length n that occur at least twice: `starts` the counted
    occurrences' first kernels, sorted by (code, start); `codes` their sequence codes;
    `total`/`count` per code (index: code)."""

    n: int
    starts: np.ndarray
    codes: np.ndarray
    count: np.ndarray
    total: np.ndarray
    fusible: np.ndarray  # per code: every kernel fusible (`_fusible_kernels`)
    bounds: np.ndarray   # code k's occurrences are starts[bounds[k]:bounds[k + 1]]


def _length(runs: _Runs, code: np.ndarray, n: int) -> _Found | None:
    """The sequences of n kernels (`code`: of the n starting at each position; those crossing
    a run are dropped here) that occur at least twice without overlapping themselves."""
    seg = runs.seg
    valid = np.flatnonzero(seg[:len(code)] == seg[n - 1:])
    if not len(valid):
        return None
    c = code[valid]
    repeated = np.bincount(c)[c] >= 2
    starts, c = valid[repeated], c[repeated]
    if not len(starts):
        return None
    order = np.argsort(c, kind="stable")  # by code, then start (valid is ascending)
    starts, c = starts[order], c[order]
    keep = _non_overlapping(starts, c, n)
    starts, c = starts[keep], c[keep]
    csum = runs.dur_before
    dur = csum[starts + n] - csum[starts]
    count = np.bincount(c)
    bad = runs.unfusible_before
    fusible = np.zeros(len(count), dtype=bool)
    fusible[c] = bad[starts + n] == bad[starts]
    return _Found(n, starts, c, count, np.bincount(c, weights=dur, minlength=len(count)), fusible,
                  np.searchsorted(c, np.arange(len(count) + 1)))


def _non_overlapping(starts: np.ndarray, codes: np.ndarray, n: int) -> np.ndarray:
    """Which occurrences (sorted by code, then start) a greedy first-first count keeps: each
    one starting at least n after the last one kept of its code. Occurrences far enough from
    the one before are always kept; within a cluster of close ones at an even step g (a run of
    one kernel, `AAAA`) every ceil(n / g)-th is; in the other clusters the kept ones are followed
    from the cluster's first, all clusters at once."""
    same = np.r_[False, codes[1:] == codes[:-1]]
    gap = np.diff(starts, prepend=starts[:1])
    close = same & (gap < n)
    keep = ~close
    if not close.any():
        return keep
    cluster = np.cumsum(~close) - 1          # cluster id of each occurrence
    first = np.flatnonzero(~close)
    end = np.r_[first[1:], len(starts)][cluster]  # cluster's end (exclusive)
    step = np.where(close, gap, 0)
    low = np.full(len(first), n)
    np.minimum.at(low, cluster[close], step[close])
    even = low == np.maximum.reduceat(step, first)  # one step within the cluster
    at = np.arange(len(starts)) - first[cluster]
    keep |= even[cluster] & (at % -(-n // np.maximum(low, 1))[cluster] == 0)
    heads = first[~even & (np.diff(np.r_[first, len(starts)]) > 1)]  # uneven clusters of two or more
    span = int(starts.max()) + n + 1
    flat = codes.astype(np.int64) * span + starts  # sorted: by code, then start
    at = heads
    while len(at):  # the next kept: the first of its cluster starting at least n after this one
        nxt = np.searchsorted(flat, flat[at] + n, side="left")
        at = nxt[nxt < end[at]]
        keep[at] = True
    return keep


def _choose(found: list[_Found], n_kernels: int, top: int, fusible: bool = False,
            skip: frozenset = frozenset()) -> list[tuple[_Found, int]]:
    """The top sequences by total time (shorter first among equals), skipping those with a
    kernel in one chosen before; `fusible`: among the fusible ones only; `skip`:
    (length, code) pairs left out."""
    if not found:
        return []
    lengths = np.concatenate([np.full(len(f.count), i) for i, f in enumerate(found)])
    codes = np.concatenate([np.arange(len(f.count)) for f in found])
    total = np.concatenate([f.total for f in found])
    count = np.concatenate([f.count for f in found])
    n = np.array([f.n for f in found])[lengths]
    # shorter first among equal times: a block repeated twice in a row holds the time of the
    # block counted twice, and the block is the unit that repeats (rounded: the sums differ in
    # their last bits)
    order = np.lexsort((n, -np.round(total, 3)))
    order = order[count[order] >= 2]
    if fusible:
        order = order[np.concatenate([f.fusible for f in found])[order]]
    covered = np.zeros(n_kernels, dtype=bool)
    out: list[tuple[_Found, int]] = []
    for i in order.tolist():
        f, c = found[int(lengths[i])], int(codes[i])
        if (f.n, c) in skip:
            continue
        at = _occurrences(f, c)
        cells = (at[:, None] + np.arange(f.n)).ravel()
        if covered[cells].any():
            continue
        covered[cells] = True
        out.append((f, c))
        if len(out) >= top:
            break
    return out


def _occurrences(f: _Found, code: int) -> np.ndarray:
    return f.starts[f.bounds[code]:f.bounds[code + 1]]


def _describe(runs: _Runs, f: _Found, code: int, total: float, bytes_saved: float | None) -> Sequence:
    at = _occurrences(f, code)
    first = at[0] + np.arange(f.n)
    names, ops = runs.labels("name", runs.name[first]), runs.labels("op", runs.op[first])
    cats, libs = runs.labels("category", runs.category[first]), runs.labels("library", runs.library[first])
    count = len(at)
    fusible = bool(f.fusible[code])
    us = float(f.total[code])
    windows = runs.windows
    return Sequence(names, ops, cats, libs, count, count / windows if windows else None, us,
                    us / total if total > 0 else 0.0, None, fusible,
                    count * (f.n - 1) if fusible else 0, bytes_saved)


def _bytes_saved(trace: Trace, runs: _Runs, seqs: list[tuple[_Found, int]]) -> dict[tuple[int, int], float]:
    """Per sequence ((length, code) -> bytes), what fusing would keep off memory over all its
    occurrences: 2 x each intermediate (written by one op, read by the next), the output of each
    op but the last in its run; left out when an op there has no shapes, or the run is one op.
    The ops' sizes of all sequences in one call."""
    parts = []
    for f, c in seqs:
        node = runs.node[_occurrences(f, c)[:, None] + np.arange(f.n)]  # occurrences x positions
        parts.append(node[:, :-1][node[:, :-1] != node[:, 1:]])         # the next kernel is another op's
    sizes = _output_bytes(trace, np.concatenate(parts)) if parts else np.zeros(0)
    out, at = {}, 0
    for (f, c), part in zip(seqs, parts):
        mine = sizes[at:at + len(part)]
        at += len(part)
        if len(part) and not np.isnan(mine).any():
            out[(f.n, c)] = float(2 * mine.sum())
    return out


def _output_bytes(trace: Trace, nodes: np.ndarray) -> np.ndarray:
    """An op's output size estimate: its largest tensor input in bytes (NaN: no shapes, or no op)."""
    ev = trace.events
    pos = ev.index.get_indexer(host_tree(trace).row[np.maximum(nodes, 0)]) if len(nodes) else nodes
    types, dims = ev["input_types"], ev["input_dims"]
    t = np.where(nodes >= 0, types.cat.codes.to_numpy()[pos], -1)
    d = np.where(nodes >= 0, dims.cat.codes.to_numpy()[pos], -1)
    tl, dl = types.cat.categories, dims.cat.categories
    keys, inverse = np.unique((t.astype(np.int64) + 1) * (len(dl) + 1) + (d + 1), return_inverse=True)
    values = np.array([largest_operand(tl[a] if a >= 0 else "", dl[b] if b >= 0 else "")
                       for a, b in zip((keys // (len(dl) + 1) - 1).tolist(), (keys % (len(dl) + 1) - 1).tolist())],
                      dtype=float)
    return values[inverse.ravel()]


def largest_operand(types: str, dims: str) -> float:
    """The largest tensor input of an op, in bytes, from its `Input type` and `Input Dims`
    labels (`float, float` / `64x64, 64`); NaN when none is both shaped and typed."""
    best = np.nan
    for t, d in zip(str(types).split(", "), str(dims).split(", ")):
        size = ELEMENT_BYTES.get(t.strip())
        d = d.strip()
        if size is None or not d or not all(x.isdigit() for x in d.split("x")):
            continue
        best = np.fmax(best, float(np.prod([int(x) for x in d.split("x")], dtype=float)) * size)
    return float(best)


def _sites(trace: Trace, runs: _Runs, chosen: list[tuple[_Found, int]]) -> list[str | None]:
    """The Python site of each sequence's first op (its first occurrence), where the trace has
    stacks (its own, or borrowed from its attribution trace); None elsewhere."""
    if not chosen or (not len(trace.frames) and trace.attribution is None):
        return [None] * len(chosen)
    node = np.array([runs.node[_occurrences(f, c)[0]] for f, c in chosen], dtype=np.int64)
    out: list[str | None] = [None] * len(chosen)
    has = np.flatnonzero(node >= 0)
    if len(has):
        for i, site in zip(has.tolist(), op_sites(trace, host_tree(trace).row[node[has]])):
            out[i] = site
    return out


def _ids(column: pd.Series, rows: np.ndarray) -> np.ndarray:
    """A device or stream id column at `rows` as int64 (the loader's are); an id that is not a
    finite number within int64 (a broken trace) is -1, without a cast warning."""
    if pd.api.types.is_integer_dtype(column):
        return column.to_numpy(np.int64)[rows]
    values = pd.to_numeric(column, errors="coerce").to_numpy(float)[rows]
    return np.where(np.isfinite(values) & (np.abs(values) < 2.0**62), values, -1).astype(np.int64)

