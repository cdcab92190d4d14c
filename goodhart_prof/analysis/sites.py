"""Sites: where a host event happened, in the words the reports use.

With Python stacks (`python_function` events on the thread), a site is the innermost user-code
frame around the event, as `file.py:line fn`; otherwise (or when no user frame holds it) the chain
of enclosing annotations and ops on the thread from the host call tree (analysis/tree/),
outermost first, ending with the event itself, without the `ProfilerStep#N` element so that
sites add up across iterations. An event seen only on the device (no host call in the trace) is
`NAME (no host call)`.
"""
from __future__ import annotations

import re
import sys

import numpy as np
import pandas as pd

from ..trace.model import Trace
from .intervals import thread_groups
from .tree import FrameNest, frame_nest, host_tree

_FRAME = re.compile(r"^(?P<file>.+)\((?P<line>\d+)\): (?P<fn>.*)$")
# The profiler strips sys.path prefixes, so installed packages look like relative paths: these
# top-level names are library code, never the user's line.
LIBRARY_TOPS = frozenset({
    "torch", "torchvision", "torchaudio", "torchrl", "tensordict", "functorch", "triton",
    "numpy", "pandas", "typing_extensions", "einops", "transformers", "accelerate", "apex",
    "deepspeed", "lightning", "pytorch_lightning", "gym", "gymnasium", "stable_baselines3",
    "_pytest", "pytest", "pluggy", "tqdm", "click", "rich", "msgspec",
})
_STDLIB = frozenset(getattr(sys, "stdlib_module_names", ())) - {"test"}


def sites(trace: Trace, points: pd.DataFrame) -> list[str]:
    """The site of each row of `points` (columns rank, pid, tid, ts, end, row, name, hosted,
    call: `call` marks runtime calls and memcpy launches, which are not host-tree nodes and end
    their chain with their own name; `row` is a counted op's own row in trace.events)."""
    out = [""] * len(points)
    if points.empty:
        return out
    tree = host_tree(trace)
    hosted = points["hosted"].to_numpy(bool)
    cols = {c: points[c].to_numpy() for c in ("rank", "pid", "tid", "ts", "end")}
    own = np.where(hosted, tree.nodes(points["row"].to_numpy()), -1)
    encl = np.where(hosted, tree.enclosing(cols["rank"], cols["pid"], cols["tid"], cols["ts"],
                                           cols["end"]), -1)
    names, calls = points["name"].tolist(), points["call"].to_numpy(bool)
    for key, pos in thread_groups(points).items():
        nest = frame_nest(trace, key)
        frames = nest.enclosing(cols["ts"][pos], cols["end"][pos]) if nest is not None else None
        for j, p in enumerate(pos.tolist()):
            if not hosted[p]:
                out[p] = f"{names[p]} (no host call)"
                continue
            user = _user_frame(nest, int(frames[j])) if frames is not None and frames[j] >= 0 else None
            if user is not None:
                out[p] = user
                continue
            # A counted op is itself a node: its chain starts at itself.
            start = own[p] if (own[p] >= 0 and not calls[p]) else encl[p]
            chain = tree.chain(int(start)) if start >= 0 else ()
            if calls[p] or own[p] < 0:
                chain = chain + (names[p],)
            out[p] = " > ".join(chain)
    return out


def op_sites(trace: Trace, rows: pd.Index | np.ndarray) -> list[str]:
    """Sites of host ops (row labels in trace.events)."""
    if len(rows) == 0:
        return []
    ev = trace.events.loc[np.asarray(rows)]
    ops = pd.DataFrame({"rank": ev["rank"].to_numpy(), "pid": ev["pid"].to_numpy(),
                        "tid": ev["tid"].to_numpy(), "ts": ev["ts"].to_numpy(),
                        "end": ev["end"].to_numpy(), "row": ev.index.to_numpy(np.int64),
                        "name": ev["name"].astype(str).to_numpy(), "hosted": True, "call": False})
    return sites(trace, ops)


def _user_frame(nest: FrameNest, pos: int) -> str | None:
    """The first user-code frame walking out from frame pos (answers cached on the nest)."""
    cache = nest.__dict__.setdefault("user_sites", {})
    todo, found = [], None
    while pos >= 0:
        if pos in cache:
            found = cache[pos]
            break
        todo.append(pos)
        found = user_site(nest.name[pos])
        if found is not None:
            break
        pos = int(nest.parent[pos])
    for p in todo:
        cache[p] = found
    return found


def user_site(frame_name: str) -> str | None:
    """`file.py:line fn` for a Kineto Python frame name of user code, else None."""
    m = _FRAME.match(frame_name) if isinstance(frame_name, str) else None
    if m is None:
        return None
    path = m["file"]
    if path.startswith("<"):
        if not (path == "<stdin>" or path.startswith("<ipython-input")):
            return None
    elif not is_user_path(path):
        return None
    return f"{path}:{m['line']} {m['fn']}"


def is_user_path(path: str) -> bool:
    p = path.replace("\\", "/")
    if "site-packages/" in p or "dist-packages/" in p or re.search(r"/lib/python\d", p):
        return False
    if "/torch/" in p:
        return False
    if p.startswith("/"):
        return True
    top = p.split("/", 1)[0]
    top = top[:-3] if top.endswith(".py") else top
    return top not in LIBRARY_TOPS and top not in _STDLIB
