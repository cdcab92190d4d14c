"""The host call tree (a package: parents.py finds parents, host.py builds the tree, spans.py
answers containment questions about other intervals): how the host events of each thread nest, built once per trace.

Nodes are the cpu ops and user annotations (`record_function` scopes, `ProfilerStep#N` included)
of every thread, in **tree order**: by (rank, pid, tid), then by start, longer first on ties, so a
parent always comes before its children. Columns, one numpy array each:

| column | meaning |
| --- | --- |
| row | the node's row label in trace.events |
| rank, pid, tid, ts, end | as in trace.events |
| name | the name's code in trace.events' `name` categories |
| is_op, is_annotation | cpu op / user annotation |
| parent | the innermost node holding it: the latest earlier node of its thread whose end is at or after its own end; -1 for a root |
| depth | number of ancestors |
| end_rank | the end's dense rank among its thread's ends (ends compared as integers within a thread) |
| top_op | the outermost cpu op among its ancestors and itself (the op the code on the host called); -1: none |
| annotation | the innermost user annotation among its ancestors, `ProfilerStep#N` excluded; -1: none |
| op_parent | the nearest cpu op among its ancestors (`ProfilerStep#N` is no op); -1: none |
| self_us | a cpu op's duration less the union of the ops directly under it (op_parent children); NaN for annotations |

GPU work hangs off the tree through its launch call (`links.gpu_launches`: GPU activity -> launch
call, by `correlation`); a launch call, a sync call or any other interval finds its place with
`HostTree.enclosing`. Python frames (Trace.frames) nest the same way in a tree per thread
(`FrameForest`, all threads' frames, built on demand), where a frame's parent is its Python parent id when recorded.

Everything in the analyses that asks "does this lie inside that" asks this module: the tree for
host events, and the interval queries at the end for spans a rule chooses (move ops, optimizer
steps) and items that are not host events (launch calls, sync points).

How parents are found without a Python loop over events: in a thread sorted by start, an event's
depth is the number of earlier events still open at its start (a searchsorted over the sorted
ends), and its parent is the last earlier event one level up. That is exact for properly nested
events; each candidate is then checked against the definition (its end reaches ours, and no event
in between does), and the few that fail (partial overlaps, equal stamps) are searched directly.
"""
from __future__ import annotations

from .host import HOST_CATS, STEP, FrameForest, HostTree, frame_forest, host_tree, profiler_steps
from .parents import climb, depths, holder_parents, start_order
from .spans import between, covered, launched_inside, outermost, starts_inside, sums_inside

__all__ = ["HOST_CATS", "STEP", "FrameForest", "HostTree", "frame_forest", "host_tree",
           "profiler_steps", "climb", "depths", "holder_parents", "start_order", "between",
           "covered", "launched_inside", "outermost", "starts_inside", "sums_inside"]
