"""Line-level sites: which line of a user frame's function made an event (docs/DESIGN.md "sites").

A trace records the user's frame (`file.py(N): fn`, N its def line) but not the line of the call
inside it. For an event in frame F this module:

1. gives the event a **class**: when it lies in a library frame that F called (a kept frame whose
   Python parent is F: numpy, logging, ...), `call:NAME` of that function; else from its outermost
   op inside F (OP_CLASS: `aten::item` -> `item`, `aten::is_nonzero` -> `truth`, `aten::to` ->
   `copy`, ...); a runtime call outside any op by its name (`cudaDeviceSynchronize` -> `sync`).
   Anything else has no class, and no line is claimed.
2. finds the **segment**: the innermost annotation around the event, inside F, that one
   `with` of F's body records by name (`with hooks.phase("rollout"):`, `with hooks.iteration(it):`
   for ProfilerStep#N); else F's whole body and run.
3. lists the **candidates**: F's call sites in that segment that can make the class
   (analysis/host/source_lines.py), and the **events**: every event of that class that F itself made
   in the segment's interval (its outermost ops not inside a child frame or an optimizer
   annotation; its direct child frames of that name), in time order.
4. decides: one candidate line -> that line (when its sites make at most one event each, only if
   the events are no more than the sites); several -> the k-th event is the k-th site when the
   count starts where the segment starts (an annotation, or a call entered while tracing) and
   either every site runs once per pass in source order, makes at most one event, and the events
   are exactly as many as the sites, or the first k sites each run once per pass and are certain
   to make exactly one event (`torch.where(cond)`, `torch.nonzero(x)`); else no line: `in function fn (file.py, defined at line N): candidate
   lines a, b`.

Assumption (docs/DESIGN.md): an event comes from F's own code or from a call whose frame the trace
keeps; a read inside torch's own Python code (dropped at load) is taken for F's, so a read made by a
torch function the user called (not the optimizer, whose annotation marks it, nor
torch.distributions, whose frames are kept) can be counted as a candidate's. The count checks catch
it where it adds an event the candidates cannot explain.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...trace.attribution import ATTRIBUTION_DIR
from ...trace.model import Trace
from ...trace.run_record import RUN_FILE, run_folder
from ...trace.run_json import RunJsonError, read_run_json
from .called_ops import TORCH_ANNOTATION
from .source_files import SourceIndex
from .source_lines import STEP_SEGMENT, Body
from ..tree import FrameForest, HostTree
from ..memo import derived

_FRAME = re.compile(r"^(?P<file>.+)\((?P<line>\d+)\): (?P<fn>.*)$")

OP_CLASS = {
    "aten::item": "item", "aten::_local_scalar_dense": "item", "aten::is_nonzero": "truth",
    "aten::nonzero": "nonzero", "aten::nonzero_static": "nonzero", "aten::argwhere": "nonzero",
    "aten::where": "nonzero", "aten::masked_select": "masked_select", "aten::index": "index",
    "aten::index_put_": "index", "aten::to": "copy", "aten::_to_copy": "copy", "aten::copy_": "copy",
    "cudaDeviceSynchronize": "sync", "hipDeviceSynchronize": "sync", "cuCtxSynchronize": "sync",
    "cudaStreamSynchronize": "sync", "hipStreamSynchronize": "sync", "cuStreamSynchronize": "sync",
    "cudaEventSynchronize": "sync", "hipEventSynchronize": "sync", "cuEventSynchronize": "sync",
}


# Frames already running when tracing began all start with the thread's first frame (within a
# few microseconds: 1.3 us between <module> and train() in tests/data/ours/loops/helper_loop).
RUNNING_SLACK_US = 50.0


@dataclass(frozen=True)
class LineSite:
    """Where in frame `file(frame_line): function` an event was made. `line` is None when it
    cannot be known; `candidates` then lists the lines that could have made it."""

    file: str
    function: str
    frame_line: int
    line: int | None
    candidates: tuple[int, ...] = ()
    how: str = "unknown"  # only candidate | order | no source | ambiguous | no candidate
    how_frame: str = "unknown"  # defined | running | unknown (no source: the frame line is either)

    @property
    def text(self) -> str:
        if self.line is not None:
            return f"{self.file}:{self.line} {self.function}"
        where = {"defined": f"defined at line {self.frame_line}",
                 "running": f"at line {self.frame_line} when tracing began",
                 }.get(self.how_frame, f"frame line {self.frame_line}")
        head = (f"in module code ({self.file}, {where})" if self.function == "<module>"
                else f"in function {self.function} ({self.file}, {where})")
        if self.candidates:
            return f"{head}: candidate lines {', '.join(map(str, self.candidates))}"
        return head


def source_roots(trace: Trace) -> list[Path]:
    """Where relative file names are looked for: each trace file's folder and its parent (a run
    folder), then the current directory."""
    roots: list[Path] = []
    for p in trace.paths:
        p = Path(p)
        folder = p if p.is_dir() else p.parent
        roots += [folder, folder.parent]
    return roots + [Path.cwd()]


def recorded_at(trace: Trace) -> float | None:
    """When the trace was written: its oldest trace file's mtime (None when not known)."""
    times = []
    for p in trace.paths:
        try:
            p = Path(p)
            files = [f for f in p.iterdir() if f.name.endswith((".json", ".json.gz"))] if p.is_dir() else [p]
            times += [f.stat().st_mtime for f in files if f.is_file()]
        except OSError:
            continue
    return min(times) if times else None


def recorded_revision(trace: Trace) -> str | None:
    """The git revision the run that wrote the trace was at (its run.json's `git_revision`, 40 hex
    digits; None when the trace is not part of a run or the run did not record one)."""
    for p in trace.paths:
        folder = run_folder(p)
        if folder is None and Path(p).parent.name == ATTRIBUTION_DIR:  # a lite run's attribution trace
            folder = run_folder(Path(p).parent.parent)
        if folder is None:
            continue
        try:
            rev = read_run_json(folder / RUN_FILE).get("git_revision")
        except RunJsonError:
            continue  # the analysis says so where it reads the run; here it only loses the check
        if isinstance(rev, str) and re.fullmatch(r"[0-9a-f]{40}", rev):
            return rev
    return None


class Placer:
    """Line placement for the events of one trace (caches per frame, segment and class)."""

    def __init__(self, trace: Trace, tree: HostTree, forest: FrameForest):
        self.trace, self.tree, self.forest = trace, tree, forest
        self.index: SourceIndex = derived(
            trace, "source_index", lambda t: SourceIndex(source_roots(t), recorded_at(t), recorded_revision(t)))
        self._events: dict[tuple, np.ndarray] = {}
        self._py: dict[int, tuple[int, int]] = {}
        self._around: dict[int, int] = {}
        self._classes: dict[str, np.ndarray] = {}
        self._frames: dict[int, tuple | None] = {}
        self._torch_own: np.ndarray | None = None  # per tree node: its optimizer annotation
        self._by_frame: dict[str, dict[int, np.ndarray]] = {}

    # -- the event ----------------------------------------------------------------------------
    def place(self, user: int, inner: int, node: int, name: str, cls: str | None = None,
              no_class: bool = False) -> LineSite | None:
        """The line site of an event in user frame `user` (forest position), whose innermost
        frame is `inner`, host-tree node `node` (-1: none) and name `name` (a runtime call's
        when it is no node); `cls` forces the class. None when the frame name is not `file(N): fn`."""
        frame = self._frame(user)
        if frame is None:
            return None
        file, line, fn, body = frame
        if body is None:
            return LineSite(file, fn, line, None, (), "no source",
                            "running" if fn == "<module>" else "unknown")
        how_frame = "running" if body.running else "defined"
        at = np.nan  # the event's time among its class's events (its outermost op, or its call's frame)
        if cls is None and not no_class:
            cls, at = self.event_class(user, inner, node, name)
        if cls is None:
            return LineSite(file, fn, line, None, (), "no candidate", how_frame)
        seg, lo, hi = self.segment(user, node, body)
        cands = body.candidates(cls, seg)
        lines = tuple(sorted({c.line for c in cands}))
        if not cands:
            return LineSite(file, fn, line, None, (), "no candidate", how_frame)
        singles = [c.single[c.segments.index(seg)] and not c.multi for c in cands]
        if len(lines) == 1:
            # sites that each make at most one event per pass cannot explain more events than
            # there are sites: then something else made one
            if not all(singles) or cls == "sync" or len(self.events(user, cls, lo, hi)) <= len(cands):
                return LineSite(file, fn, line, lines[0], lines, "only candidate", how_frame)
            return LineSite(file, fn, line, None, lines, "ambiguous", how_frame)
        if (seg >= 0 or not body.running) and cls != "sync" and at == at:
            events = self.events(user, cls, lo, hi)
            k = int(np.searchsorted(events, at, side="left"))
            found = k < len(events) and events[k] == at and k < len(cands)
            # every site runs once per pass and makes at most one event, and there are as many
            # events as sites; or the sites up to the k-th each make exactly one
            if found and ((all(singles) and len(events) == len(cands))
                          or all(singles[i] and cands[i].certain for i in range(k + 1))):
                return LineSite(file, fn, line, cands[k].line, lines, "order", how_frame)
        return LineSite(file, fn, line, None, lines, "ambiguous", how_frame)

    def _frame(self, user: int) -> tuple[str, int, str, Body | None] | None:
        """(file, line, function, body) of a user frame (None: not `file(N): fn`), once each."""
        if user not in self._frames:
            m = _FRAME.match(str(self.forest.name[user]))
            self._frames[user] = None if m is None else (
                m["file"], int(m["line"]), m["fn"],
                self.index.body(m["file"], m["fn"], int(m["line"]), self._opens_thread(user)))
        return self._frames[user]

    def _opens_thread(self, user: int) -> bool:
        """Whether the frame was on the stack when tracing began: it starts with the thread's
        first recorded frame (Kineto gives such frames the start of tracing and the line they
        were at, not their def line)."""
        th = self._thread_of(user)
        first = float(self.forest.ts[int(self.forest.spans.lo[th])])
        return float(self.forest.ts[user]) - first <= RUNNING_SLACK_US

    def event_class(self, user: int, inner: int, node: int, name: str) -> tuple[str | None, float]:
        """(class, time): the event's class and the start of what is counted for it (its call's
        frame, its outermost op; NaN for a runtime call outside any op)."""
        child = self._child_of(user, inner)
        if child == -2:
            return None, np.nan  # inside a frame whose caller the trace does not keep
        if child >= 0:
            m = _FRAME.match(str(self.forest.name[child]))
            return (f"call:{m['fn']}" if m is not None else None), float(self.forest.ts[child])
        top = self._top(node) if node >= 0 else -1
        if top >= 0:
            return OP_CLASS.get(str(self.tree.names[self.tree.name[top]])), float(self.tree.ts[top])
        return OP_CLASS.get(name), np.nan

    def _top(self, node: int) -> int:
        top = int(self.tree.top_op[node])
        return top if top >= 0 else -1

    def _child_of(self, user: int, inner: int) -> int:
        """The frame directly under `user` holding the event (-1: none, the event is `user`'s
        own; -2: one whose Python parent is not `user`)."""
        if inner < 0 or inner == user:
            return -1
        pos = inner
        while pos >= 0 and int(self.forest.parent[pos]) != user:
            pos = int(self.forest.parent[pos])
        if pos < 0:
            return -2
        return pos if self._py_ids(pos)[1] == self._py_ids(user)[0] >= 0 else -2

    def _py_ids(self, pos: int) -> tuple[int, int]:
        """(python id, python parent id) of forest position pos (-1 when not recorded)."""
        if pos not in self._py:
            f = self.trace.frames
            order = derived(self.trace, "frame_ts_order", lambda t: np.argsort(t.frames["ts"], kind="stable"))
            ts = f["ts"][order]
            i = int(np.searchsorted(ts, self.forest.ts[pos], side="left"))
            found = (-1, -1)
            thread = self._thread_key(self._thread_of(pos))
            while i < len(ts) and ts[i] == self.forest.ts[pos]:
                j = order[i]
                if (f["end"][j] == self.forest.end[pos] and f["name"][j] == self.forest.name[pos]
                        and (int(f["rank"][j]), int(f["pid"][j]), int(f["tid"][j])) == thread):
                    found = (int(f["python_id"][j]), int(f["python_parent_id"][j]))
                    break
                i += 1
            self._py[pos] = found
        return self._py[pos]

    # -- the segment --------------------------------------------------------------------------
    def segment(self, user: int, node: int, body: Body) -> tuple[int, float, float]:
        """(segment, start, end): the innermost annotation around the node, inside the frame's
        run, that one annotation `with` of the body records; else (-1, the frame's run)."""
        f_ts, f_end = float(self.forest.ts[user]), float(self.forest.end[user])
        t = self.tree
        n = node
        while n >= 0 and t.ts[n] >= f_ts:
            if not t.is_op[n] or t.is_step[n]:
                key = STEP_SEGMENT if t.is_step[n] else str(t.names[t.name[n]])
                segs = body.phases.get(key, [])
                if len(segs) == 1 and self._frame_around(n) == user:
                    return segs[0], float(t.ts[n]), float(t.end[n])
            n = int(t.parent[n])
        return -1, f_ts, f_end

    def _frame_around(self, n: int) -> int:
        """The innermost frame holding all of node n (cached: the same annotations recur)."""
        if n in self._around:
            return self._around[n]
        t = self.tree
        found = int(self.forest.enclosing(t.rank[n:n + 1], t.pid[n:n + 1], t.tid[n:n + 1],
                                          t.ts[n:n + 1], t.end[n:n + 1])[0])
        self._around[n] = found
        return found

    # -- the events ---------------------------------------------------------------------------
    def events(self, user: int, cls: str, lo: float, hi: float) -> np.ndarray:
        """Start times of the events of class cls that frame `user` made itself in [lo, hi]."""
        key = (user, cls, lo, hi)
        if key in self._events:
            return self._events[key]
        if cls.startswith("call:"):
            out = self._child_events(user, cls[5:], lo, hi)
        else:
            out = self._op_events(user, cls, lo, hi)
        self._events[key] = out
        return out

    def _thread_of(self, pos: int) -> int:
        spans = self.forest.spans
        return int(np.searchsorted(spans.hi, pos, side="right"))

    def _child_events(self, user: int, fn: str, lo: float, hi: float) -> np.ndarray:
        th = self._thread_of(user)
        a, b = _window(self.forest.ts, int(self.forest.spans.lo[th]), int(self.forest.spans.hi[th]), lo, hi)
        kids = np.flatnonzero(self.forest.parent[a:b] == user) + a
        kids = kids[self.forest.end[kids] <= hi]
        me = self._py_ids(user)[0]
        keep = []
        for k in kids.tolist():
            m = _FRAME.match(str(self.forest.name[k]))
            if m is not None and m["fn"] == fn and self._py_ids(k)[1] == me >= 0:
                keep.append(float(self.forest.ts[k]))
        return np.sort(np.asarray(keep, dtype=float))

    def _op_events(self, user: int, cls: str, lo: float, hi: float) -> np.ndarray:
        ts = self._class_events(cls).get(user)
        if ts is None:
            return np.empty(0)
        return ts[np.searchsorted(ts, lo, side="left"):np.searchsorted(ts, hi, side="right")]

    def _class_events(self, cls: str) -> dict[int, np.ndarray]:
        """Per frame: the start times of the class-cls events it made itself (its outermost ops
        of that class not inside a frame it called, nor inside an optimizer annotation), sorted;
        found for every frame at once, once per class."""
        if cls in self._by_frame:
            return self._by_frame[cls]
        t = self.tree
        nodes = np.flatnonzero(t.is_op & ~t.is_step & (t.top_op == np.arange(len(t.is_op)))
                               & self._of_class(cls)[t.name])
        nodes = nodes[self._torch_own_nodes()[nodes] < 0]
        out: dict[int, np.ndarray] = {}
        if len(nodes):
            own = self.forest.enclosing(t.rank[nodes], t.pid[nodes], t.tid[nodes], t.ts[nodes], t.end[nodes])
            order = np.lexsort((t.ts[nodes], own))
            own, ts = own[order], t.ts[nodes][order]
            cuts = np.flatnonzero(np.diff(own)) + 1
            for frame, part in zip(own[np.r_[0, cuts]].tolist(), np.split(ts, cuts)):
                out[int(frame)] = part
        self._by_frame[cls] = out
        return out

    def _torch_own_nodes(self) -> np.ndarray:
        """Per tree node: the optimizer annotation among it and its ancestors (-1: none)."""
        if self._torch_own is None:
            t = self.tree
            ann = np.array([bool(TORCH_ANNOTATION.match(str(x))) for x in t.names], dtype=bool)
            mask = ann[t.name] if len(t.name) else np.zeros(0, dtype=bool)
            self._torch_own = np.where(mask, np.arange(len(mask)), t.nearest(mask))
        return self._torch_own

    def _of_class(self, cls: str) -> np.ndarray:
        """Per tree name code: whether an op of that name is of class cls."""
        if cls not in self._classes:
            self._classes[cls] = np.array([OP_CLASS.get(str(n)) == cls for n in self.tree.names], dtype=bool)
        return self._classes[cls]

    def _thread_key(self, th: int) -> tuple[int, int, int]:
        spans = self.forest.spans
        return (int(spans.rank[th]), int(spans.pid[th]), int(spans.tid[th]))


def _window(ts: np.ndarray, a: int, b: int, lo: float, hi: float) -> tuple[int, int]:
    """The rows a..b of one thread (start order) that start within [lo, hi]."""
    return (a + int(np.searchsorted(ts[a:b], lo, side="left")),
            a + int(np.searchsorted(ts[a:b], hi, side="right")))


_DETERMINED = re.compile(r"^(?P<file>[^ ]+):(?P<line>\d+) (?P<fn>[^ ]+)$")
_UNDETERMINED = re.compile(
    r"^in (?:function (?P<fn>.+?)|module code) \((?P<file>.+), (?:defined at line|at line|frame line) "
    r"(?P<frame_line>\d+)(?: when tracing began)?\)(?:: candidate lines (?P<cands>[\d, ]+))?$")
_CALLED_AT = re.compile(r"^torch: .* \(called at (?P<at>.+)\)$")


def site_fields(site: str) -> dict | None:
    """A Python site's parts for the JSON report (`where`): file, function, line (None when it is
    not established), frame_line (the frame's own line; None when the line is), candidates; for
    torch's own reads those of the user's calling line. None for an annotation/op chain."""
    called = _CALLED_AT.match(site)
    if called is not None:
        at = called["at"]
        site = at if _DETERMINED.match(at) else f"in {at}"
    m = _DETERMINED.match(site)
    if m is not None:
        return {"file": m["file"], "function": m["fn"], "line": int(m["line"]), "frame_line": None,
                "candidates": [int(m["line"])]}
    m = _UNDETERMINED.match(site)
    if m is None:
        return None
    cands = [int(c) for c in m["cands"].split(", ")] if m["cands"] else []
    return {"file": m["file"], "function": m["fn"] or "<module>", "line": None,
            "frame_line": int(m["frame_line"]), "candidates": cands}
