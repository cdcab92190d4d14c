"""torch.compile rules (analysis/gpu/dynamo.py): a graph that breaks inside the loop, and code
compiled again inside the loop.

`graph_break`: a compiled function's graph breaks in the traced iterations (a resume frame's
region opens inside another frame's region): the code around the break runs eagerly and the rest
in a graph of its own. No estimate: what the eager part costs against one fused graph is not in
the trace. `recompile`: dynamo compiled a frame inside the traced iterations (a guard failed: a new
shape, dtype or Python value); the compilation's own time is what the fix saves.
"""
from __future__ import annotations

from ..gpu.dynamo import compile_use, resume_site
from .base import Context, Need, Rule, Threshold
from .finding import Finding
from .savings import Saving


def _where(b: dict) -> str:
    return resume_site(b) or (f"frame {b['parent']} (its code resumes in frame {b['frame']}; record "
                               "stacks for the line)")


def _graph_break(ctx: Context) -> Finding | None:
    use = compile_use(ctx.trace)
    if use is None:
        return None
    breaks = [b for b in use.breaks if b["per_iteration"] >= GRAPH_BREAK.limit("per_iteration")]
    if not breaks:
        return None
    breaks.sort(key=lambda b: (-b["calls"], b["frame"]))
    top = breaks[0]
    return Finding(
        "graph_break", "medium",
        f"torch.compile's graph breaks in {_where(top)} ({top['per_iteration']:.1f} per iteration)"
        + (f", and {len(breaks) - 1} more" if len(breaks) > 1 else ""),
        {"breaks": [{"function": b["function"], "file": b["file"], "line": b["line"], "frame": b["frame"],
                     "inside_frame": b["parent"], "calls": b["calls"], "times_per_iteration": b["per_iteration"]}
                    for b in breaks]},
        "Find what breaks it with torch._dynamo.explain(fn)(*args), or torch.compile(fn, fullgraph=True), "
        "which stops at the first break with its reason. The usual causes: a value read back to the "
        "host (.item(), .tolist(), a print) or a branch on a tensor (if tensor:); keep it on the device "
        "(torch.where, a mask) or move it out of the compiled function; for .item(), "
        "torch._dynamo.config.capture_scalar_outputs = True.",
        **GRAPH_BREAK.unestimated())


def _recompile(ctx: Context) -> Finding | None:
    use = compile_use(ctx.trace)
    if use is None or len(use.compiles) < RECOMPILE.limit("compilations"):
        return None
    seconds = sum(c["seconds"] for c in use.compiles)
    iterations = sorted({c["iteration"] for c in use.compiles if c["iteration"] >= 0})
    ids = [c["compile_id"] for c in use.compiles if c["compile_id"]]
    where = f" in iteration{'s' if len(iterations) > 1 else ''} {', '.join(map(str, iterations))}" \
        if iterations else ""
    return Finding(
        "recompile", "medium",
        f"torch.compile compiled {len(use.compiles)} time{'s' if len(use.compiles) > 1 else ''} inside "
        f"the traced iterations ({seconds:.2f} s{where})"
        + (f": frame/entry {', '.join(ids)}" if ids else ""),
        {"compilations": use.compiles, "seconds": round(seconds, 6), "recompiled_frames": use.recompiled_frames},
        "A guard failed: a new input shape, dtype or device, or a Python value the function reads. "
        "TORCH_LOGS=recompiles names the guard. Mark a dimension that changes as dynamic "
        "(torch._dynamo.mark_dynamic(x, 0), or torch.compile(dynamic=True)), pass changing Python "
        "numbers as tensors, and warm the loop up with every shape it will see before timing it.",
        **RECOMPILE.estimated(ctx.per_iteration(seconds * 1e6)))


GRAPH_BREAK = Rule(
    "graph_break", "compile", _graph_break, needs=(Need.HOST_OPS,),
    thresholds={"per_iteration": Threshold(0.5, "a break taken in at least every other traced "
                                                "iteration is part of the loop, not a one-off path")},
    saving=Saving(None, "the eager code at the break and the second graph's launch cost time the "
                        "trace does not separate from the graphs' own"))

RECOMPILE = Rule(
    "recompile", "compile", _recompile, needs=(Need.HOST_OPS,),
    thresholds={"compilations": Threshold(1, "one compilation inside the traced iterations is seconds "
                                             "of host time the loop stops for")},
    saving=Saving("the compilations' time per iteration",
                  "a loop that keeps its guards compiles once, before it is timed"))

RULES = (GRAPH_BREAK, RECOMPILE)
