"""What torch.compile did in the traced iterations: the compiled regions, the graph breaks, the
compilations that ran inside the loop, and the GPU time of compiled against eager kernels.

What a trace records (torch 2.x; seen on tests/data/ours/compiled/, xDiT's FLUX trace and the H200
trace of our trainer):

- a call of a compiled function enters a cpu op `Torch-Compiled Region: F/R`: F the dynamo frame,
  R the cache entry run (0 the first compilation of the frame; R > 0: a later one, after a guard
  failed: the frame was **recompiled**, here or before the window);
- a **graph break** splits a function into a graph, eager code, and a resume function dynamo makes
  (`torch_dynamo_resume_in_<function>_at_<line>`, the line where the graph broke), compiled as a
  frame of its own: its region opens inside the outer region's span (nested regions), and with
  Python stacks its frame is named so (`loop.py(18): torch_dynamo_resume_in_update_at_18`, from the
  trace's own stacks or its attribution iteration's, trace/attribution.py);
- a **compilation** inside the window is a cpu op `_compile.compile_inner (dynamo_timed)` (older
  torch: `_compile.compile_inner`), with `... compile_id=F/R` annotations inside naming what it
  compiles.

`compile_use(trace)` -> CompileUse (None when the trace has no compiled region and no compilation).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ...trace.model import Trace
from ..iterations import iterations
from ..memo import derived
from ..tree import host_tree
from .compiled import REGION, graph_codes

COMPILE = re.compile(r"^_compile\.compile_inner(?: \(dynamo_timed\))?$")
COMPILE_ID = re.compile(r"^.*\bcompile_id=(?P<frame>\d+)/(?P<entry>\d+)")
RESUME = re.compile(r"^(?P<file>.+?)\((?P<frame_line>\d+)\): torch_dynamo_resume_in_(?P<function>\w+?)_at_"
                    r"(?P<line>\d+)$")


@dataclass
class CompileUse:
    """What torch.compile did (module docstring); every count is over the traced iterations."""

    iterations: int
    # one row per (frame, entry): calls, host_us (their spans), parent (the frame of the region it
    # opens in, -1 at the top), function (the user function its graphs came from; None: no stacks)
    regions: pd.DataFrame = field(repr=False)
    # one per graph break: frame (the resume function's), parent, calls, per_iteration, and where
    # the stacks say: function, file, line (None without stacks)
    breaks: list[dict]
    # one per compilation inside the traced iterations: iteration, compile_id, seconds
    compiles: list[dict]
    # GPU time of kernels launched inside a compiled graph's wrapper against the rest (us);
    # None without GPU activity
    compiled_gpu_us: float | None = None
    eager_gpu_us: float | None = None

    @property
    def recompiled_frames(self) -> list[int]:
        """Frames whose region ran with a cache entry above 0 (recompiled, here or before)."""
        return sorted({int(f) for f, e in zip(self.regions["frame"], self.regions["entry"]) if e > 0})

    @property
    def compiled_share(self) -> float | None:
        if self.compiled_gpu_us is None:
            return None
        total = self.compiled_gpu_us + (self.eager_gpu_us or 0.0)
        return self.compiled_gpu_us / total if total > 0 else None


def resume_site(b: dict) -> str | None:
    """Where a graph break (a `CompileUse.breaks` entry) resumes: `function at file:line`, from
    the stacks; None where the trace has none to say it."""
    return None if b["function"] is None else f"{b['function']} at {b['file']}:{b['line']}"


def compile_use(trace: Trace) -> CompileUse | None:
    return derived(trace, "compile_use", _compile_use)


def _named(tree, pattern: "re.Pattern[str]") -> np.ndarray:
    """Per node of the host tree: whether its name matches `pattern` (each distinct name tested
    once, HostTree.names_matching)."""
    return tree.names_matching(pattern)[tree.name] & (tree.name >= 0)


def _compile_use(trace: Trace) -> CompileUse | None:
    tree = host_tree(trace)
    if not len(tree.row):
        return None
    is_region, is_compile = _named(tree, REGION), _named(tree, COMPILE)
    if not is_region.any() and not is_compile.any():
        return None
    # the iterations of the nodes looked at only (a host tree has millions of nodes)
    steps = np.flatnonzero(tree.is_step)
    traced = sorted({int(i) for i in iterations(trace, tree.rank[steps], tree.ts[steps]) if i >= 0})
    looked = np.flatnonzero(is_region | is_compile)
    its = np.full(len(tree.row), -1, dtype=np.int64)
    its[looked] = iterations(trace, tree.rank[looked], tree.ts[looked])
    counted = its >= 0 if traced else np.ones(len(its), dtype=bool)
    n_iterations = max(1, len(traced))
    names = np.asarray(tree.names, dtype=object)
    regions = _regions(tree, names, is_region & counted)
    regions["function"] = _functions(trace, regions)
    breaks = _breaks(trace, regions, n_iterations)
    compiles = _compiles(tree, names, is_compile & counted, its)
    compiled_us, eager_us = _gpu_split(trace, tree)
    return CompileUse(iterations=n_iterations, regions=regions, breaks=breaks, compiles=compiles,
                      compiled_gpu_us=compiled_us, eager_gpu_us=eager_us)


def _regions(tree, names: np.ndarray, mask: np.ndarray) -> pd.DataFrame:
    """The regions table: per (frame, entry, the frame of the region it opens in), calls and time."""
    nodes = np.flatnonzero(mask)
    ids = [REGION.match(str(names[tree.name[n]])) for n in nodes]
    frame = np.array([int(m["frame"]) for m in ids], dtype=np.int64)
    entry = np.array([int(m["entry"]) for m in ids], dtype=np.int64)
    parent_node = tree.climb_to(np.where(tree.parent[nodes] >= 0, tree.parent[nodes], -1), mask) \
        if len(nodes) else np.zeros(0, dtype=np.int64)
    frame_of = dict(zip(nodes.tolist(), frame.tolist()))
    parent_frame = np.array([frame_of.get(int(p), -1) for p in parent_node], dtype=np.int64)
    rows = pd.DataFrame({"frame": frame, "entry": entry, "parent": parent_frame,
                         "host_us": tree.dur[nodes].astype(float), "node": nodes})
    if rows.empty:
        table = pd.DataFrame({c: pd.Series(dtype=t) for c, t in
                              (("frame", np.int64), ("entry", np.int64), ("parent", np.int64),
                               ("calls", np.int64), ("host_us", float))})
        return table
    return (rows.groupby(["frame", "entry", "parent"], sort=True)
            .agg(calls=("host_us", "size"), host_us=("host_us", "sum")).reset_index())


def _functions(trace: Trace, regions: pd.DataFrame) -> list:
    """Per region row, the user function its compiled graphs came from (compiled.graph_sources:
    the user frame around the graph's call; from the attribution iteration's stacks when the trace
    has none of its own); None where no stacks say."""
    from .compiled import graph_sources

    found: dict[str, str] = {}
    for source in (trace, trace.attribution):
        if source is None or not len(source.frames):
            continue
        for info in graph_sources(source).values():
            if info.get("region") and info.get("function") and info["region"] not in found:
                found[info["region"]] = info["function"]
        break
    by_frame: dict[str, str] = {}
    for region, function in found.items():
        by_frame.setdefault(region.rsplit("/", 1)[0], function)  # another entry of the same frame
    return [found.get(f"Torch-Compiled Region: {f}/{e}") or by_frame.get(f"Torch-Compiled Region: {f}")
            for f, e in zip(regions["frame"], regions["entry"])]


def _breaks(trace: Trace, regions: pd.DataFrame, n_iterations: int) -> list[dict]:
    """A graph break per frame whose region opens inside another frame's region; where a
    resume function's frame is in the stacks (the trace's or its attribution's), its name."""
    if regions.empty:
        return []
    nested = regions[regions["parent"] >= 0]
    resumes = _resume_frames(trace) or (_resume_frames(trace.attribution)
                                        if trace.attribution is not None else {})
    out = []
    for (frame, parent), group in nested.groupby(["frame", "parent"], sort=True):
        where = resumes.get(int(frame), {})
        calls = int(group["calls"].sum())
        out.append({"frame": int(frame), "parent": int(parent), "calls": calls,
                    "per_iteration": calls / n_iterations, "function": where.get("function"),
                    "file": where.get("file"), "line": where.get("line")})
    return out


def _resume_frames(trace: Trace | None) -> dict[int, dict]:
    """Region frame -> the resume function found right inside its regions (stacks)."""
    if trace is None or not len(trace.frames):
        return {}
    fr = trace.frames
    names = np.asarray(fr["name"], dtype=object)
    hits = [(i, RESUME.match(str(n))) for i, n in enumerate(names) if "torch_dynamo_resume_in_" in str(n)]
    hits = [(i, m) for i, m in hits if m is not None]
    if not hits:
        return {}
    tree = host_tree(trace)
    idx = np.array([i for i, _ in hits], dtype=np.int64)
    rank, pid, tid = (np.asarray(fr[c])[idx] for c in ("rank", "pid", "tid"))
    ts, end = np.asarray(fr["ts"])[idx], np.asarray(fr["end"])[idx]
    enclosing = tree.enclosing(rank, pid, tid, ts, end)
    out: dict[int, dict] = {}
    for node, (_, m) in zip(enclosing.tolist(), hits):
        region = REGION.match(str(tree.names[tree.name[node]])) if node >= 0 and tree.name[node] >= 0 else None
        if region is None:
            continue
        out.setdefault(int(region["frame"]), {"function": m["function"], "file": m["file"],
                                              "line": int(m["line"])})
    return out


def _compiles(tree, names: np.ndarray, mask: np.ndarray, its: np.ndarray) -> list[dict]:
    """Each outermost compilation: its iteration, the compile id the first `compile_id=` inside
    names, and its seconds."""
    nodes = np.flatnonzero(mask)
    if not len(nodes):
        return []
    outer = tree.climb_to(np.where(tree.parent[nodes] >= 0, tree.parent[nodes], -1), mask)
    nodes = nodes[outer < 0]  # a compilation inside another is part of it
    ids: dict[int, str] = {}
    has_id = _named(tree, COMPILE_ID)
    is_outer = np.zeros(len(tree.row), dtype=bool)
    is_outer[nodes] = True
    id_nodes = np.flatnonzero(has_id)
    owners = tree.climb_to(id_nodes, is_outer) if len(id_nodes) else id_nodes
    for n, owner in zip(id_nodes.tolist(), owners.tolist()):  # tree order: the first id inside names it
        if owner >= 0 and owner not in ids:
            m = COMPILE_ID.match(str(names[tree.name[n]]))
            ids[int(owner)] = f"{m['frame']}/{m['entry']}"
    return [{"iteration": int(its[n]), "compile_id": ids.get(int(n)), "seconds": float(tree.dur[n]) / 1e6}
            for n in nodes.tolist()]


def _gpu_split(trace: Trace, tree) -> tuple[float | None, float | None]:
    """GPU time of the kernels launched inside a `## Call CompiledFxGraph` wrapper, and of the rest."""
    if trace.gpu.empty:
        return None, None
    from ..host.links import gpu_launches

    links = gpu_launches(trace)
    launched = links["launch_row"].to_numpy() >= 0
    dur = links["dur"].to_numpy(float)
    is_graph = graph_codes(tree)[tree.name] & (tree.name >= 0)
    inside = np.zeros(len(links), dtype=bool)
    if is_graph.any() and launched.any():
        at = tree.enclosing(links["rank"].to_numpy()[launched], links["pid"].to_numpy()[launched],
                            links["tid"].to_numpy()[launched], links["launch_ts"].to_numpy(float)[launched],
                            links["launch_end"].to_numpy(float)[launched])
        owner = tree.climb_to(at, is_graph)
        inside[np.flatnonzero(launched)] = owner >= 0
    return float(dur[inside].sum()), float(dur[~inside].sum())
