"""Fusion and compilation rules: an optimizer step that is not fused, an update left eager."""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from ...trace.model import rows_named
from ..host.links import gpu_launches
from ..tree import launched_inside
from .base import BACKWARD, Context, Need, Rule, Threshold
from .finding import Finding
from .savings import Saving

_FUSED_OPT = re.compile(r"fused_adam|FusedAdam|_fused_adamw?_|fused_sgd|FusedSgd|fused_adagrad|"
                        r"FusedAdagrad", re.I)
# Optimizers that have a fused implementation in torch (`fused=True`): the fix exists for them.
# The rule id says Adam (the usual case), but SGD and Adagrad steps are judged the same way.
_OPT_STEP = re.compile(r"^Optimizer\.step#(Adam|AdamW|SGD|Adagrad)\.step$")
# foreach's multi-tensor kernels (one launch per arithmetic stage over many tensors)
_MULTI_TENSOR = re.compile(r"multi_tensor_apply|MultiTensorApply", re.I)
_FUSED_KERNELS = 3  # what a fused step launches (the step count, one kernel per dtype group)


def _unfused_adam(ctx: Context) -> Finding | None:
    ev = ctx.trace.events
    at = rows_named(ev, _OPT_STEP, ("user_annotation", "cpu_op"))
    if not len(at):
        return None
    # the columns read, by position (a selection of every column costs milliseconds)
    steps = pd.DataFrame({c: ev[c].to_numpy()[at] for c in ("rank", "pid", "tid", "ts", "end", "dur")},
                         index=ev.index[at])
    links = gpu_launches(ctx.trace)
    links = links[links["launch_row"].to_numpy() >= 0]
    inside = np.unique(links["gpu_row"].to_numpy()[launched_inside(steps, links)[1]])
    pos = ev.index.get_indexer(inside)
    kernel = ev["cat"].cat.categories.get_indexer(["kernel"])[0]
    pos = pos[(ev["cat"].cat.codes.to_numpy()[pos] == kernel) & (kernel >= 0)]
    names = ev["name"].cat.categories
    codes = ev["name"].cat.codes.to_numpy()[pos]
    counts = np.bincount(codes[codes >= 0], minlength=len(names))  # each distinct name matched once
    present = np.flatnonzero(counts).tolist()
    if any(_FUSED_OPT.search(str(names[c])) for c in present) or (
            (codes < 0).any() and _FUSED_OPT.search("nan")):
        return None
    per_step = len(pos) / len(steps)
    if per_step < UNFUSED_ADAM.limit("kernels_per_step"):
        return None
    kinds = sorted({str(n).split("#", 1)[1].split(".")[0]
                    for n in ev["name"].cat.categories[ev["name"].cat.codes.to_numpy()[at]]})
    multi = int(sum(int(counts[c]) for c in present if _MULTI_TENSOR.search(str(names[c]))))
    impl = "foreach" if multi >= len(pos) / 2 else "for-loop"
    gpu_us, cpu_us = float(np.nansum(ev["dur"].to_numpy()[pos])), float(np.nansum(steps["dur"].to_numpy()))
    # the step's time (host or GPU, the longer) scales with its kernel count; fused keeps ~3
    saved = max(gpu_us, cpu_us) * max(0.0, 1.0 - _FUSED_KERNELS / per_step)
    return Finding(
        "unfused_adam", "medium",
        f"the optimizer step ({', '.join(kinds)}, {impl}) is not fused: {per_step:.0f} kernels per step",
        {"optimizer": kinds, "implementation": impl, "optimizer_steps": int(len(steps)),
         "kernels_per_step": round(per_step, 1), "multi_tensor_kernels": int(multi),
         "gpu_us": round(gpu_us, 3), "cpu_us": round(cpu_us, 3)},
        optimizer_fix(kinds, impl),
        **UNFUSED_ADAM.estimated(ctx.per_iteration(saved, pd.unique(steps["rank"].to_numpy()))))


def optimizer_fix(kinds: list[str], impl: str) -> str:
    """The fix for the optimizer(s) the step annotations name, and the implementation the
    kernels show (`foreach`: multi-tensor kernels; `for-loop`: kernels per parameter)."""
    fixes = []
    for kind in kinds:
        if kind in ("Adam", "AdamW"):
            fixes.append(f"torch.optim.{kind}(params, ..., fused=True): one kernel per dtype group "
                         "does the whole update")
        elif kind == "SGD":
            fixes.append("torch.optim.SGD(params, ..., fused=True) where your torch has fused SGD "
                         "(recent releases), else foreach=True")
        elif kind == "Adagrad":
            fixes.append("torch.optim.Adagrad(params, ..., fused=True) where your torch has it "
                         "(not with sparse gradients, such as embedding tables with sparse=True), "
                         "else foreach=True")
        else:
            fixes.append(f"{kind}'s foreach or fused implementation if it has one, else "
                         "torch.compile the step")
    now = ("The step already runs foreach (multi-tensor kernels, one per arithmetic stage); fused "
           "does every stage in one pass." if impl == "foreach" else
           "The step launches kernels per parameter tensor (a for-loop step: foreach=False, or a "
           "torch before foreach); foreach alone batches them into a few multi-tensor kernels.")
    return f"{now} Use {'; '.join(fixes)}."


UNFUSED_ADAM = Rule(
    "unfused_adam", "compile", _unfused_adam, needs=(Need.GPU, Need.HOST_OPS, Need.BACKWARD),
    thresholds={
        "kernels_per_step": Threshold(4, "a fused step launches the step-counter increment plus one "
                                         "fused kernel per (device, dtype) group: 1-3 kernels. "
                                         "foreach launches one multi-tensor kernel per arithmetic "
                                         "stage (Adam: 6-8), a for-loop several per parameter tensor; "
                                         "fewer than 4 is a fused step, or one that runs on the host")},
    saving=Saving("the step's time per iteration (host or GPU, the longer) times 1 - 3 / its "
                  "kernels per step",
                  "a fused step does the same arithmetic in about 3 kernels, and an unfused step's "
                  "time, launches on the host and passes over the parameters on the GPU, grows "
                  "with its kernel count"))

_COMPILED_BACKWARD = "CompiledFunctionBackward"
_ACCUMULATE = re.compile(r"AccumulateGrad")


def _eager_update(ctx: Context) -> Finding | None:
    gpu = ctx.trace.gpu
    if len(gpu) < EAGER_UPDATE.limit("min_gpu_activities"):
        return None
    ev = ctx.trace.events
    names = pd.Series(ev["name"].cat.categories.astype(str))
    backward = names[names.str.contains(BACKWARD) & ~names.str.contains(_ACCUMULATE)]
    if backward.empty or backward.str.contains(_COMPILED_BACKWARD).any():
        return None
    count = int(ev["name"].isin(backward.tolist()).sum())
    compiled_elsewhere = bool(names.str.contains(r"Torch-Compiled Region|triton_").any())
    return Finding(
        "eager_update", "low",
        "the update runs eagerly: no compiled graph in the backward pass"
        + (" (other code in the trace is compiled)" if compiled_elsewhere else ""),
        {"kernels": int(len(gpu)), "backward_ops": count,
         "backward_op_names": int(len(backward)), "compiled_elsewhere": compiled_elsewhere},
        "torch.compile the loss/update function (warm it up before timing) to fuse elementwise "
        "chains into a few Triton kernels.", **EAGER_UPDATE.unestimated())


# Judged on the backward, not on the whole trace, because the rollout can be compiled (Triton
# kernels, compiled regions) while the update is not: no backward node may be a compiled graph's
# (`CompiledFunctionBackward`, what torch.compile'd code records under autograd). Parameter-gradient
# accumulation (`AccumulateGrad`) is always eager and does not count either way. On the CPU
# compile does not pay (the trainer leaves it off there): no GPU activity, no finding.
EAGER_UPDATE = Rule(
    "eager_update", "compile", _eager_update, needs=(Need.GPU, Need.HOST_OPS, Need.BACKWARD),
    thresholds={
        "min_gpu_activities": Threshold(50, "fewer GPU activities is too little GPU work for "
                                            "compilation to matter")},
    saving=Saving(None, "what compiling fuses depends on the graph (shapes, graph breaks), which "
                        "the trace does not show: no estimate"))

RULES = (UNFUSED_ADAM, EAGER_UPDATE)
