"""Code torch.compile generated: inductor's compiled graphs, the files it writes them to, and the
user's function each graph was compiled from (docs/DESIGN.md, "compiled graphs").

What a trace of torch.compile'd code records (torch 2.x, inductor, seen on the H200 trace in
tests/data/gpu): the user's call enters `Torch-Compiled Region: N/M` (a cpu op, N the dynamo
frame, M its recompile) with the user's compiled function as the Python frame right inside it
(`trainer/env.py(247): step`), then torch's wrappers, then a `record_function` annotation
`## Call CompiledFxGraph <hash> ##` around the Python wrapper inductor generated: the function
`call` of a file in inductor's cache (`<cache>/ed/cedsdeu...py(1124): call`, the file named
`c` + a base32 hash, in a folder of its two characters after the `c`). That wrapper allocates
outputs and launches the graph's kernels one by one (triton launches, extern cuBLAS/cuDNN ops as
`aten::` cpu ops under it). A backward graph runs the same way under `CompiledFunctionBackward`
on the autograd engine's thread, with no user frame around it.

- `GRAPH`: the annotation's name; `graph_label` says it readably (`compiled graph f4qcacf6
  (inductor code)`), `frame_label`
  says such a frame readably (`inductor code cedsdeuk.py(1124): call`).
- `graph_owner(tree)`: per host-tree node, the graph it is part of (the wrapper's own calls:
  aten ops, triton launches; not a custom op inside the graph): idle.py gives such a node's idle
  time to the graph, and `readable_causes` says those causes readably.
- `graph_sources(trace)`: per graph annotation name, where it is called from: `function` (the
  nearest enclosing Python frame that is user code: not torch's, not a generated file; None
  without stacks or on the autograd thread), `region` (the nearest enclosing `Torch-Compiled
  Region`, else `CompiledFunctionBackward` for a backward graph), `phase` (the nearest enclosing
  user annotation, ProfilerStep#N and graph annotations excluded) and `calls`. Where one graph is
  called from several places, each field is the one of most calls (ties: the first in tree order).
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from ...trace.model import Trace
from ..host.user_code import FRAME, INDUCTOR_FILE, nearest_user_frame
from ..tree import frame_forest, host_tree
from ..memo import derived

GRAPH = re.compile(r"^## Call CompiledFxGraph (?P<hash>\w+) ##$")
# a compiled function's call: F the dynamo frame, R its cache entry (analysis/gpu/dynamo.py reads them)
REGION = re.compile(r"^Torch-Compiled Region: (?P<frame>\d+)/(?P<entry>\d+)$")
BACKWARD = "CompiledFunctionBackward"
# the ops a generated wrapper calls itself: aten ops (extern kernels: aten::addmm, cuDNN
# convolutions; random_) and triton kernels, recorded as cpu ops by their kernel's name
OWN_OPS = re.compile(r"^(?:aten::|prims::|triton_)")


def graph_label(name: str, where: str | None = None) -> str | None:
    """`compiled graph f4qcacf6 (inductor code)` for a graph annotation (`where` added: `(inductor
    code, in env_step)`), else None."""
    m = GRAPH.match(str(name))
    if m is None:
        return None
    return f"compiled graph {m['hash'][:8]} (inductor code{f', in {where}' if where else ''})"


def frame_label(frame: str | None) -> str | None:
    """A Python frame as the reports say it: one in a generated file as `inductor code
    cedsdeuk.py(1124): call` (the cache path is no place in the user's code), else unchanged."""
    m = FRAME.match(frame) if isinstance(frame, str) else None
    f = INDUCTOR_FILE.search(m["file"]) if m else None
    if f is None:
        return frame
    return f"inductor code {f['base'][:8]}.py({m['line']}): {m['fn']}"


def display_name(name: str) -> str:
    """A host event's name as the reports show it: a graph annotation by `graph_label`."""
    return graph_label(name) or name


def graph_codes(tree) -> np.ndarray:
    """Per name code of the tree: whether it is a graph annotation (once per tree)."""
    return tree.names_matching(GRAPH)


def inductor_codes(tree) -> np.ndarray:
    """Per name code of the tree: whether it is a call the generated wrapper makes itself (`OWN_OPS`:
    an aten op, inductor's extern kernels among them, or a triton kernel's launch); once per tree."""
    return tree.names_matching(OWN_OPS)


def graph_owner(tree) -> np.ndarray:
    """Per node of the host tree, the compiled graph it is part of: the outermost graph annotation
    among it and its ancestors, where every node from it up to that graph is the wrapper's own
    call (`inductor_codes`); -1 otherwise (a custom op inside a graph, and what it runs, is not
    the graph's), once per tree."""
    cached = tree.__dict__.get("_graph_outer")
    if cached is None:
        codes = graph_codes(tree)
        if not codes.any():
            cached = np.full(max(len(tree), 1), -1, dtype=np.int64)
        else:
            outer = tree.outermost(codes[tree.name])
            foreign = ~(codes | inductor_codes(tree))[tree.name]
            # the nearest node among it and its ancestors that is not the graph's own code
            near = np.where(foreign, np.arange(len(tree)), tree.nearest(foreign))
            inside = (near >= 0) & (outer[np.maximum(near, 0)] >= 0)  # below the graph: keep it
            cached = np.where(inside, -1, outer)
        tree.__dict__["_graph_outer"] = cached
    return cached


def readable_causes(trace: Trace, causes: list[dict]) -> list[dict]:
    """Idle causes (analysis/gpu/idle.py) in code torch.compile generated, said readably: a graph
    annotation as `compiled graph <hash> (inductor code)` with `compiled` (the annotation's
    name and where it is called from: compiled.graph_sources) and, as its frame, the user's
    function that was compiled; a frame or context in a generated file by compiled.frame_label."""
    for c in causes:
        label = graph_label(c["cause"])
        if label is not None:
            src = graph_sources(trace).get(c["cause"], {})
            c["compiled"] = {"graph": c["cause"], **{k: src.get(k) for k in ("function", "region", "phase")}}
            c["cause"], c["frame"] = label, src.get("function")
        else:
            c["cause"], c["frame"] = frame_label(c["cause"]), frame_label(c["frame"])
        if c.get("context"):
            c["context"] = frame_label(display_name(c["context"]))
    return causes


def graph_sources(trace: Trace) -> dict[str, dict]:
    """Per graph annotation name: {function, region, phase, calls} (module docstring)."""
    return derived(trace, "compiled_graph_sources", _sources)


def _sources(trace: Trace) -> dict[str, dict]:
    tree = host_tree(trace)
    is_graph = graph_codes(tree)
    if not len(tree) or not is_graph.any():
        return {}
    names = [str(n) for n in tree.names]
    nodes = np.flatnonzero(is_graph[tree.name])
    region_code = tree.names_matching(REGION) | np.array([n == BACKWARD for n in names], dtype=bool)
    region = tree.nearest(region_code[tree.name])[nodes]
    phase = tree.nearest(tree.is_annotation & ~tree.is_step & ~is_graph[tree.name])[nodes]
    function = np.full(len(nodes), None, dtype=object)
    if len(trace.frames):
        forest = frame_forest(trace)
        inner = forest.enclosing(tree.rank[nodes], tree.pid[nodes], tree.tid[nodes], tree.ts[nodes],
                                 tree.end[nodes])
        function[:] = [_user_function(forest, int(f)) for f in inner]
    table = pd.DataFrame({
        "graph": [names[c] for c in tree.name[nodes]],
        "function": function,
        "region": [names[tree.name[r]] if r >= 0 else None for r in region],
        "phase": [names[tree.name[p]] if p >= 0 else None for p in phase]})
    out = {}
    for graph, rows in table.groupby("graph", sort=False):
        out[graph] = {k: _most(rows[k]) for k in ("function", "region", "phase")}
        out[graph]["calls"] = int(len(rows))
    return out


def _user_function(forest, pos: int) -> str | None:
    """The first frame walking out from forest position pos that is user code (host/user_code.py,
    generated files excluded), as the trace names it (`file(N): fn`); None where none is."""
    return nearest_user_frame(forest, pos, "_compiled_user", str)


def _most(values: pd.Series):
    """The most frequent value (ties: the first seen), None where there is none."""
    known = values.dropna()
    if known.empty:
        return None
    counts = known.value_counts(sort=False)
    return counts.index[int(np.argmax(counts.to_numpy()))]
