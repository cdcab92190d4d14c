"""What to change when the GPU idles while the host is somewhere: the fix for each idle cause
(a runtime call by its kind, else the code the host is in), and how a title names the cause.
low_utilization's advice (rules/utilization.py)."""
from __future__ import annotations

import re

from ..gpu.compiled import BACKWARD, graph_label
from ..gpu.idle import UNTRACED


# A runtime call holding the host (idle.py's kinds) -> what to change.
RUNTIME_FIXES = {
    "alloc": "The host waits in the device allocator while the GPU idles: keep PyTorch's caching "
             "allocator on (no PYTORCH_NO_CUDA_MEMORY_CACHING / PYTORCH_NO_HIP_MEMORY_CACHING) and "
             "allocate buffers once, reusing them across iterations, instead of per step.",
    "free": "The host waits in the device free while the GPU idles (a free synchronizes the "
            "device): keep PyTorch's caching allocator on (no PYTORCH_NO_CUDA_MEMORY_CACHING / "
            "PYTORCH_NO_HIP_MEMORY_CACHING), allocate once and reuse, and never empty the cache "
            "(torch.cuda.empty_cache) inside the loop.",
    "context": "The host creates the GPU context (a first cudaFree / cuInit) while the GPU idles: "
               "a one-time start-up cost; run a warm-up iteration before the traced window "
               "(profiler schedule with wait/warmup steps) so it is not measured as a step.",
    "module": "The host loads GPU code (a module or library load) while the GPU idles: a one-time "
              "cost of first use; run a warm-up iteration before the traced window (profiler "
              "schedule with warmup steps), or load lazily-loaded modules up front.",
    "launch": "Kernel launches taking over a millisecond: first launches loading their code (or a "
              "full launch queue); run a warm-up iteration before the traced window (profiler "
              "schedule with warmup steps) so the code is loaded before it is measured.",
}


def with_frame(fix: str, frame: str | None) -> str:
    return f"{fix} Most of that idle time is in {frame}." if frame else fix


# What the host was doing while the GPU idled -> what to change. First match wins, on the cause
# (and the Python frame inside it); a cause nothing matches gets the generic advice.
IDLE_FIXES = (
    (re.compile(r"DataLoader|_DataLoaderIter|collate|fetch", re.I),
     "The GPU waits for the next batch: load data in background workers "
     "(DataLoader with num_workers of 2 or more, persistent_workers=True, prefetch_factor=2 "
     "or more), move preprocessing "
     "(decode, resize) into those workers or onto the GPU, and copy batches with pin_memory=True and "
     ".to(device, non_blocking=True) so the copy overlaps compute."),
    (re.compile(r"aten::item|_local_scalar_dense|aten::to\b|_to_copy|aten::copy_|Synchronize|"
                r"cudaMemcpy|aten::nonzero|is_nonzero", re.I),
     "The host reads results back or copies synchronously while the GPU has nothing queued: "
     "remove the read-back (keep values on the GPU, log every N steps), and make copies "
     "non_blocking from pinned memory."),
    (re.compile(r"Optimizer\.|optimizer|zero_grad", re.I),
     "The optimizer step runs on the host between GPU work: use {optimizer}'s fused or foreach "
     "implementation, or capture the step with CUDA graphs / torch.compile."),
    (re.compile(r"logging|logger|wandb|tensorboard|SummaryWriter|checkpoint|torch/serialization", re.I),
     "Logging or saving runs on the critical path: do it every N steps, on a background thread, "
     "or from values already copied off the GPU asynchronously."),
)
GENERIC_FIX = ("Find what the GPU waits for in the gap classes: host_wait means the CPU is late "
               "(syncs, Python overhead, data on the host); launch means too many tiny kernels. "
               "idle_causes names the host code the idle time lies in.")


def compiled_fix(functions: list[str]) -> str:
    """The fix for GPU idle time while the host runs code torch.compile generated (idle.py's
    compiled-graph causes): launch overhead, which CUDA graphs remove."""
    of = f" for {', '.join(functions)}" if functions else ""
    return ("The GPU waits while the host runs the Python wrapper torch.compile (inductor) generated"
            f"{of}: it allocates the outputs and launches the graph's kernels one at a time, and the "
            "GPU runs out of work between launches. That is kernel-launch overhead of the compiled "
            "code, not slow kernels. Replay it as a CUDA graph, which launches the whole graph at "
            "once: torch.compile(mode=\"reduce-overhead\") (CUDA graph trees; needs static shapes), "
            "or capture the step yourself with torch.cuda.graphs (torch.cuda.graph, "
            "torch.cuda.make_graphed_callables). More work per launch (more envs or samples per "
            "step) also helps.")


PROFILER_SYNC = ("torch.profiler synchronizes the device itself where its window starts and stops "
                 "(prof.step(), stop()): that idle time is the profiler's, not the loop's. Trace more "
                 "active steps per window so it weighs less, and judge the steps inside it.")


def idle_fix(cause: str, frame: str | None = None, kind: str | None = None,
             context: str | None = None) -> str:
    """The fix for GPU idle time spent in `cause` (a runtime call of `kind`, called from
    `context`: RUNTIME_FIXES, a sync the read-back advice, or the profiler's own where torch.profiler
    made it; else IDLE_FIXES; the generic advice otherwise)."""
    if kind in RUNTIME_FIXES:
        return RUNTIME_FIXES[kind]
    if kind == "sync":
        return PROFILER_SYNC if str(context or "").startswith("torch/profiler/") else IDLE_FIXES[1][1]
    if cause == UNTRACED:
        return ("The launching thread recorded nothing while the GPU idled (Python outside any "
                "op or annotation, or time outside the trace): profile with_stack=True or add "
                "record_function scopes to see the code, then move that work off the critical path.")
    if "_MultiProcessingDataLoaderIter" in cause:  # workers exist already: they fall behind
        return ("The GPU waits for the next batch although the DataLoader has worker processes: "
                "they cannot keep up. Add workers (num_workers), prefetch more (prefetch_factor), "
                "make the per-sample work cheaper or move it onto the GPU, and copy batches with "
                "pin_memory=True and .to(device, non_blocking=True).")
    for text in (cause, frame):  # the cause first; when generic, the Python inside it may say more
        for pattern, fix in IDLE_FIXES:
            if text and pattern.search(text):
                return fix.format(optimizer=_optimizer(cause, frame))
    return (f"The GPU waits while the host runs {cause}: move that work off the launching thread, "
            "overlap it with GPU work, or make it cheaper. " + GENERIC_FIX)


def _optimizer(*texts: str | None) -> str:
    """The optimizer the cause names (`Optimizer.step#SGD.step` -> `torch.optim.SGD`), else a
    generic phrase: the advice must not assume Adam."""
    for text in texts:
        m = re.search(r"Optimizer\.(?:step|zero_grad)#(\w+)\.", text or "")
        if m:
            return f"torch.optim.{m.group(1)}"
    return "the optimizer"


def short_cause(cause: str) -> str:
    """A cause as a title says it: `enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__`
    -> `DataLoader.__next__`; anything else unchanged (long names cut)."""
    m = re.match(r"enumerate\((\w+)\)#\w*?\.(\w+)$", cause)
    if m:
        return f"{m.group(1)}.{m.group(2)}"
    return cause if len(cause) <= 60 else cause[:57] + "..."


def compiled_first(causes: list[dict]) -> list[dict]:
    """The causes with those in compiled graphs (idle.py: code torch.compile generated) made one,
    first where together they hold more idle time than any other cause: one remedy (CUDA graphs)
    removes them all."""
    graphs = [c for c in causes if c.get("compiled")]
    rest = [c for c in causes if not c.get("compiled")]
    if not graphs or (rest and sum(c["share"] for c in graphs) < rest[0]["share"]):
        return causes
    functions = list(dict.fromkeys(_function(c) for c in graphs))
    us, share = sum(c["idle_us"] for c in graphs), sum(c["share"] for c in graphs)
    said = f"torch.compile'd code ({', '.join(functions)})"
    group = {"graphs": [graph_label(c["compiled"]["graph"]) for c in graphs], "functions": functions,
             "idle_us": round(us, 3), "share": round(share, 4)}
    return [{"cause": said, "idle_us": us, "share": share, "frame": None, "group": group}] + rest


def _function(cause: dict) -> str:
    """The user's function a compiled graph runs (`act_all (trainer/train.py)`), else where it
    runs: its phase, or the autograd backward."""
    src = cause["compiled"]
    m = re.match(r"^(?P<file>.+)\(\d+\): (?P<fn>.+)$", str(src.get("function") or ""))
    if m:
        return f"{m['fn']} ({m['file']})"
    if src.get("phase"):
        return f"the code in {src['phase']}"
    return "a backward graph" if src.get("region") == BACKWARD else cause["cause"]


def compiled_note(with_stacks: bool) -> str:
    """low_utilization's saving note when compiled code is the cause."""
    note = ("the GPU's idle time while the host runs the code inductor generated for the compiled "
            "graphs, per iteration: what a CUDA graph replay removes")
    if with_stacks:
        note += ("; recorded with Python stacks (with_stack), whose tracer slows that Python "
                 "wrapper, it is an upper bound")
    return note
