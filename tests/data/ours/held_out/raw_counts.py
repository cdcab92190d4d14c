"""The figures the held-out labels were written from: one plain pass over a raw trace's JSON
(gzip + json only, nothing of goodhart_prof), run before any analyzer run on these traces.

    python tests/data/ours/held_out/raw_counts.py TRACE.json.gz [...]

Per trace: the ProfilerStep#N windows; top-level ops (no cpu_op around them on their thread) that
read a value back (`aten::item`/`_local_scalar_dense`, `aten::is_nonzero`, `aten::nonzero`), those
inside an `Optimizer.step#`/`zero_grad#` annotation apart, and those between a grad-norm op and the
next optimizer step; top-level `aten::to` right after `aten::lift_fresh` (host data moved) or
after a factory (a tensor made on the host, then moved), and whether that `to` has a child op;
Python frames; memory events (allocations per iteration and per ms, allocated at each
iteration's end); and per (aten op, input dims) of tiny inputs (every tensor <= 16 KB) the calls
and the median self time (duration less the ops directly under it).
"""
import gzip
import json
import statistics
import sys
from collections import Counter, defaultdict

READS = {"aten::item": "item", "aten::_local_scalar_dense": "item", "aten::is_nonzero": "is_nonzero",
         "aten::nonzero": "nonzero"}
NORMS = {"aten::linalg_vector_norm", "aten::_foreach_norm", "aten::norm", "aten::frobenius_norm"}
FACTORIES = {"aten::zeros", "aten::ones", "aten::empty", "aten::full", "aten::arange", "aten::rand",
             "aten::randn", "aten::randint", "aten::zeros_like", "aten::ones_like", "aten::empty_like",
             "aten::full_like", "aten::rand_like", "aten::randn_like", "aten::scalar_tensor"}
SIZES = {"float": 4, "double": 8, "long int": 8, "int": 4, "bool": 1, "c10::BFloat16": 2,
         "c10::Half": 2, "unsigned char": 1, "signed char": 1, "short int": 2}


def load(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f)["traceEvents"]


def tiny(e):
    """True when every tensor input is known and at most 16 KB; None when sizes are not recorded."""
    dims, types = e["args"].get("Input Dims"), e["args"].get("Input type")
    if dims is None:
        return None
    seen = False
    for d, t in zip(dims, types or [""] * len(dims)):
        if not isinstance(d, list) or (d and not all(isinstance(x, int) for x in d)):
            if d:  # a tensor list or other nested entry: size not plain
                return False
            continue
        if t in ("", "Scalar", None) and not d:
            continue
        n = 1
        for x in d:
            n *= x
        seen = True
        if n * SIZES.get(t, 8) > 16384:
            return False
    return seen


def main(path):
    ev = load(path)
    ops = sorted((e for e in ev if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "user_annotation")),
                 key=lambda e: (e["tid"], e["ts"], -e["dur"]))
    steps = sorted((e for e in ops if e["name"].startswith("ProfilerStep#")), key=lambda e: e["ts"])
    n_it = len(steps)
    print(f"== {path}\n{n_it} ProfilerStep#: " + ", ".join(f"{s['name']} {s['dur'] / 1000:.1f} ms" for s in steps))
    # host call tree per thread: parent op (cpu_op only) and annotation chain
    parent, annots, children = {}, {}, defaultdict(list)
    stack = []
    for i, e in enumerate(ops):
        while stack and (stack[-1][1]["tid"] != e["tid"] or stack[-1][1]["ts"] + stack[-1][1]["dur"] <= e["ts"]):
            stack.pop()
        cpu_parent = next((j for j, p in reversed(stack) if p["cat"] == "cpu_op"), None)
        parent[i] = cpu_parent
        annots[i] = [p["name"] for _, p in stack if p["cat"] == "user_annotation"]
        if cpu_parent is not None:
            children[cpu_parent].append(i)
        stack.append((i, e))
    top = [i for i, e in enumerate(ops) if e["cat"] == "cpu_op" and parent[i] is None]
    torch_own = lambda i: any(a.startswith(("Optimizer.step#", "Optimizer.zero_grad#")) for a in annots[i])
    reads = Counter()
    for i in top:
        kind = READS.get(ops[i]["name"])
        if kind:
            reads[(kind, "torch's optimizer" if torch_own(i) else "user", " > ".join(annots[i][1:]) or "-")] += 1
    nested = Counter(READS[ops[i]["name"]] for i in range(len(ops)) if ops[i]["name"] in READS and parent[i] is not None)
    print("top-level reads (kind, whose, annotations): " + (", ".join(f"{k}: {v}" for k, v in sorted(reads.items())) or "none"))
    print(f"reads nested in another op: {dict(nested) or 'none'}")
    # reads between a grad-norm op and the next optimizer step, same thread, by time
    by_tid = defaultdict(list)
    for i in top:
        by_tid[ops[i]["tid"]].append(i)
    clip = 0
    for tid, idx in by_tid.items():
        marks = [(ops[i]["ts"], 1, i) for i in idx]
        marks += [(e["ts"], 0, None) for e in ops if e["tid"] == tid and e["name"].startswith("Optimizer.step#")]
        after_norm = False
        for _, is_op, i in sorted(marks, key=lambda m: (m[0], m[1])):
            if not is_op:
                after_norm = False  # an optimizer step ends the clipping
            elif ops[i]["name"] in NORMS and not torch_own(i):
                after_norm = True
            elif after_norm and ops[i]["name"] in READS and not torch_own(i):
                clip += 1
    print(f"user reads after a grad-norm op, before the next optimizer step: {clip}")
    moves = Counter()
    for idx in by_tid.values():
        idx.sort(key=lambda i: ops[i]["ts"])
    for tid, idx in by_tid.items():
        for a, b in zip(idx, idx[1:]):
            if ops[b]["name"] in ("aten::to", "aten::_to_copy") and not torch_own(b):
                creator = ops[a]["name"]
                if creator in ("aten::lift_fresh", "aten::detach_") or creator in FACTORIES:
                    moves[(creator, "has child" if children[b] else "no child")] += 1
    print("top-level .to() right after (creator, child): " + (", ".join(f"{k}: {v}" for k, v in sorted(moves.items())) or "none"))
    print(f"python_function frames: {sum(1 for e in ev if e.get('cat') == 'python_function')}")
    mem = sorted((e for e in ev if e.get("name") == "[memory]"), key=lambda e: e["ts"])
    print(f"memory events: {len(mem)}")
    if mem:
        for s in steps:
            a, b = s["ts"], s["ts"] + s["dur"]
            inside = [m for m in mem if a <= m["ts"] <= b]
            allocs = sum(1 for m in inside if m["args"]["Bytes"] > 0)
            before = [m for m in mem if m["ts"] <= b]
            end = before[-1]["args"]["Total Allocated"] if before else None
            print(f"  {s['name']}: {allocs} allocations ({allocs / (s['dur'] / 1000):.1f} per ms), allocated at end {end}")
    sizes = {}
    by_key = defaultdict(list)
    for i, e in enumerate(ops):
        if e["cat"] != "cpu_op" or not e["name"].startswith("aten::"):
            continue
        t = tiny(e)
        if t is None:
            sizes = None
            break
        if t:
            self_us = e["dur"] - sum(ops[c]["dur"] for c in children[i])
            by_key[(e["name"], str(e["args"].get("Input Dims")))].append(self_us)
    if sizes is None:
        print("tiny ops: no input dims recorded")
    else:
        slow = [(k, len(v), statistics.median(v)) for k, v in by_key.items()
                if len(v) >= 8 and len(v) >= n_it and statistics.median(v) >= 500]
        print(f"tiny (op, dims) with >= 8 calls, >= 1 per iteration, median self >= 500 us: {len(slow)}")
        for k, n, med in sorted(slow, key=lambda r: -r[1] * r[2])[:6]:
            print(f"  {k[0]} {k[1]}: {n} calls, median {med:.0f} us")
        busiest = sorted(((k, len(v), statistics.median(v)) for k, v in by_key.items() if len(v) >= 8),
                         key=lambda r: -r[2])[:4]
        print("  slowest tiny (op, dims) with >= 8 calls: " + "; ".join(f"{k[0]} {k[1]} {n} calls median {m:.0f} us" for k, n, m in busiest))


if __name__ == "__main__":
    for p in sys.argv[1:]:
        main(p)
