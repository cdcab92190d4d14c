"""Sites: where a host event happened, in the words the reports use.

With Python stacks (`python_function` events on the thread), a site is the innermost user-code
frame around the event, at the line of the call that made the event where the frame's source
establishes it (`file.py:line fn`; analysis/host/line_sites.py), else naming the function and no line
(`in function fn (file.py, defined at line N): candidate lines a, b`); otherwise (or when no
user frame holds it) the chain of enclosing annotations and ops on the thread from the host call
tree (analysis/tree/), outermost first, ending with the event itself, without the
`ProfilerStep#N` element so that sites add up across iterations. An event seen only on the device (no host call in the trace) is
`NAME (no host call)`. Code inductor generated (a file in its cache, analysis/gpu/compiled.py) is never
user code, though its path is absolute: a site walks out of it to the user's compiled function.

Torch's own events: an event inside an `Optimizer.step#`/`Optimizer.zero_grad#` annotation is
the optimizer's doing, not a line the user wrote. With stacks, the innermost user frame around
it holds the call of `optimizer.step()`, so the site says whose it is:
`torch: Optimizer.step#Adam.step > aten::_fused_adam_ > aten::item (called at ppo.py:134 fn)`
(the chain from the annotation down to the event, then the user's line site: its one call named
`step` there, or `function fn (...)` where that is not established). Without stacks the chain
already names the annotation and is kept as it is.

Reads inside torch's own Python code (the packages whose frames the loader keeps:
trace.model.KEPT_TORCH_FRAMES, e.g. torch.distributions' argument validation) are torch's too:
the site names the torch function the user's code called (the outermost torch frame around the
event) and the user's line calling it, found as a call of that name (`__init__`: a class, whose
call has another name, so no line): `torch: torch/distributions/categorical.py:151 log_prob >
aten::is_nonzero (called at ppo.py:82 get_action)`.
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from ...trace.model import Trace, name_codes
from .borrowed_sites import borrowed_sites
from .called_ops import TORCH_ANNOTATION
from .line_sites import Placer
from .user_code import FRAME, nearest_user_frame, user_site
from ..tree import FrameForest, frame_forest, host_tree

def sites(trace: Trace, points: pd.DataFrame, stacks: bool = True) -> list[str]:
    """The site of each row of `points` (columns rank, pid, tid, ts, end, row, name, hosted,
    call: `call` marks runtime calls and memcpy launches, which are not host-tree nodes and end
    their chain with their own name; `row` is a counted op's own row in trace.events).
    A trace without stacks of its own takes them from its attribution trace (borrowed_sites.py);
    `stacks` False: the op chains alone, as a trace without stacks has them."""
    out = [""] * len(points)
    if points.empty:
        return out
    if stacks and not len(trace.frames) and trace.attribution is not None:
        return borrowed_sites(trace, points, sites(trace, points, stacks=False), sites)
    tree = host_tree(trace)
    hosted = points["hosted"].to_numpy(bool)
    cols = {c: points[c].to_numpy() for c in ("rank", "pid", "tid", "ts", "end")}
    own = np.where(hosted, tree.nodes(points["row"].to_numpy()), -1)
    encl = np.where(hosted, tree.enclosing(cols["rank"], cols["pid"], cols["tid"], cols["ts"],
                                           cols["end"]), -1)
    names, calls = points["name"].tolist(), points["call"].to_numpy(bool)
    # A counted op is itself a node: its chain starts at itself.
    starts = np.where((own >= 0) & ~calls, own, encl)
    torch_own = _torch_annotation(trace, tree, starts)
    forest = frame_forest(trace) if stacks and len(trace.frames) else None
    frames = (forest.enclosing(cols["rank"], cols["pid"], cols["tid"], cols["ts"], cols["end"])
              if forest is not None else np.full(len(points), -1, dtype=np.int64))
    placer = Placer(trace, tree, forest) if forest is not None else None
    chains = tree.chains(starts)
    for p in range(len(points)):
        if not hosted[p]:
            out[p] = f"{names[p]} (no host call)"
            continue
        at = _user_frame_at(forest, int(frames[p])) if frames[p] >= 0 else -1
        user = _user_frame(forest, int(frames[p])) if at >= 0 else None
        entry = _torch_entry(forest, int(frames[p])) if user is not None and torch_own[p] < 0 else None
        if entry is not None:  # inside torch's own Python code, called from the user's line
            called = entry.rpartition(" ")[2]  # the torch function the user's code called
            cls = "none" if called.startswith("__") else f"call:{called}"  # (a class: by its name)
            out[p] = f"torch: {entry} > {names[p]} ({_called(_line(placer, at, -1, -1, '', user, cls))})"
            continue
        if user is not None and torch_own[p] < 0:
            out[p] = _line(placer, at, int(frames[p]), int(starts[p]), names[p], user)
            continue
        chain = chains[p]
        if calls[p] or own[p] < 0:
            chain = chain + (names[p],)
        if user is not None:  # torch's own, under the user's call: from the annotation down
            above = len(tree.chain(int(tree.parent[torch_own[p]]))) if tree.parent[torch_own[p]] >= 0 else 0
            called = _line(placer, at, -1, int(torch_own[p]), "", user, _annotation_call(tree, int(torch_own[p])))
            out[p] = f"torch: {' > '.join(chain[above:])} ({_called(called)})"
            continue
        out[p] = " > ".join(chain)
    return out


def _torch_annotation(trace: Trace, tree, nodes: np.ndarray) -> np.ndarray:
    """For each node, the nearest Optimizer.step#/zero_grad# annotation among it and its
    ancestors (-1: none, or node -1). 2021-era traces record these annotations as cpu ops."""
    wanted = np.zeros(len(tree.names), dtype=bool)
    wanted[name_codes(trace.events, TORCH_ANNOTATION)] = True
    if not wanted.any():  # no such annotation in the trace
        return np.full(len(nodes), -1, dtype=np.int64)
    return tree.climb_to(nodes, wanted[tree.name])


def op_sites(trace: Trace, rows: pd.Index | np.ndarray) -> list[str]:
    """Sites of host ops (row labels in trace.events)."""
    if len(rows) == 0:
        return []
    ev = trace.events
    rows = np.asarray(rows)
    pos = ev.index.get_indexer(rows)
    if (pos < 0).any():
        raise KeyError(f"{int((pos < 0).sum())} rows are not in the trace's events")
    codes = ev["name"].cat.codes.to_numpy()[pos]
    if (codes < 0).any():  # an op without a name: as pandas writes it
        names = ev["name"].iloc[pos].astype(str).to_numpy()
    else:  # each distinct name made text once
        uniq, inverse = np.unique(codes, return_inverse=True)
        cats = ev["name"].cat.categories
        names = np.array([str(cats[c]) for c in uniq.tolist()], dtype=object)[inverse.ravel()]
    ops = pd.DataFrame({**{c: ev[c].to_numpy()[pos] for c in ("rank", "pid", "tid", "ts", "end")},
                        "row": rows.astype(np.int64), "name": names, "hosted": True, "call": False})
    return sites(trace, ops)


def _torch_entry(nest: FrameForest, pos: int) -> str | None:
    """When frame pos is torch's own (a kept torch/ frame), the outermost torch frame of the run
    of torch frames around it (the torch function the user's code called), as
    `torch/pkg/file.py:line fn`; else None."""
    found = None
    while pos >= 0:
        m = FRAME.match(nest.name[pos]) if isinstance(nest.name[pos], str) else None
        if m is None or not m["file"].replace("\\", "/").startswith("torch/"):
            break
        found = f"{m['file']}:{m['line']} {m['fn']}"
        pos = int(nest.parent[pos])
    return found


def torch_package(site: str) -> str | None:
    """`torch.distributions` for a site put on torch's own Python code (`torch: torch/distributions/
    ... (called at ...)`), else None."""
    m = re.match(r"^torch: (torch/[^/ ]+)", str(site))
    if m is None:
        return None
    return m[1].removesuffix(".py").replace("/", ".")


def _line(placer: "Placer | None", at: int, inner: int, node: int, name: str, user: str,
          cls: str | None = None) -> str:
    """The line-level site (analysis/host/line_sites.py) of an event in user frame `at`; `user`, the
    frame's own name, where the frame name has no `file(N): fn` form. cls "none": no class known
    (no line is claimed, the function is named)."""
    if placer is None:
        return user
    found = placer.place(at, inner, node, name, cls=None if cls == "none" else cls,
                         no_class=cls == "none")
    return user if found is None else found.text


def _called(site: str) -> str:
    """`called at file.py:N fn`, or `called at function fn (...)` where no line is known (the
    rules read what follows `called at`)."""
    return f"called at {site.removeprefix('in ')}"


def _annotation_call(tree, node: int) -> str | None:
    """The call an optimizer annotation comes from: `Optimizer.step#...` -> call:step."""
    m = TORCH_ANNOTATION.match(str(tree.names[tree.name[node]]))
    return f"call:{m[1]}" if m is not None else "none"


def _user_frame_at(nest: FrameForest, pos: int) -> int:
    """Position of the first user-code frame walking out from frame pos (-1: none; answers
    cached on the nest)."""
    cache = nest.__dict__.setdefault("user_frames", {})
    todo, found = [], -1
    while pos >= 0:
        if pos in cache:
            found = cache[pos]
            break
        todo.append(pos)
        if user_site(nest.name[pos]) is not None:
            found = pos
            break
        pos = int(nest.parent[pos])
    for p in todo:
        cache[p] = found
    return found


def _user_frame(nest: FrameForest, pos: int) -> str | None:
    """The first user-code frame walking out from frame pos, as a site (answers cached on the nest)."""
    return nearest_user_frame(nest, pos, "user_sites", user_site)
