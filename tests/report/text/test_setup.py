"""report/text/setup.py: how the reports say how iterations were found and what ran once before
them. An unmarked loop's iterations inferred from its optimizer steps (6 steps, 5 iterations from
one to the next), HTA's simple_add trace whose setup is the model's upload (16 host-to-device
copies, counted from the raw events), and the setup of a two-rank trace named by its longest rank."""
from __future__ import annotations

import gzip
import json

from goodhart_prof.report.text.setup import iteration_label, iterations_line, setup_line
from goodhart_prof.trace.load import load
from tests.support.paths import DATA

UNMARKED = DATA / "ours" / "unmarked" / "unmarked_loop.json.gz"
SIMPLE_ADD = DATA / "hta" / "critical_path_simple_add.json.gz"


def raw_events(path):
    with gzip.open(path, "rt") as fh:
        return [e for e in json.load(fh)["traceEvents"] if e.get("ph") == "X"]


def test_inferred_iterations_are_named_by_their_marker():
    steps = [e for e in raw_events(UNMARKED) if e["name"] == "Optimizer.step#SGD.step"]
    assert len(steps) == 6
    t = load(UNMARKED)
    assert iteration_label(t) == "inferred from Optimizer.step#SGD.step"
    assert iterations_line(t) == ("Iterations: 5 iteration(s) inferred from Optimizer.step#SGD.step (from one "
                                  "end of it to the next; what runs before the first is setup)")
    line = setup_line(t)
    assert line.startswith("Setup (before the first iteration; runs once, left out of per-iteration figures): ")
    assert " on rank 0 · longest ops: aten::linear x4 " in line


def test_upload_before_the_first_kernel_is_the_setup():
    events = raw_events(SIMPLE_ADD)
    copies = [e for e in events if e["cat"] == "gpu_memcpy"]
    first_kernel = min(e["ts"] for e in events if e["cat"] == "kernel")
    assert len(copies) == 16 and all(e["ts"] < first_kernel for e in copies)
    mib = sum(e["args"]["bytes"] for e in copies) / 2**20
    gpu_ms = sum(e["dur"] for e in copies) / 1e3
    t = load(SIMPLE_ADD)
    assert iterations_line(t).startswith("Iterations: no iterations found (no ProfilerStep#N")
    parts = setup_line(t).split(" · ")
    assert parts[0].startswith("Setup (before the first kernel launch; runs once")
    assert parts[1] == f"16 host-to-device copies ({mib:.1f} MiB, {gpu_ms:.3f} ms on the GPU)" \
        == "16 host-to-device copies (233.1 MiB, 39.080 ms on the GPU)"
    assert parts[-1].startswith("longest ops: aten::to x16 ")


def test_several_ranks_name_the_longest_setup():
    t = load(DATA / "ours" / "cpu_2rank_merged.json.gz")
    assert iterations_line(t) == "Iterations: 2 iteration(s) (ProfilerStep#N)"
    assert iteration_label(t) == "ProfilerStep#N"
    assert ", the longest of 2 ranks" in setup_line(t)


def test_borrowed_sites_say_which_iterations_gave_them_and_the_timings(tmp_path):
    from goodhart_prof.report.text.setup import sites_line
    from tests.support.events import X, ann, load_events

    trace = load_events(tmp_path, [ann("ProfilerStep#50", 0, 10), ann("ProfilerStep#51", 20, 10),
                                   ann("ProfilerStep#52", 40, 10)], name="lite.json")
    assert sites_line(trace) is None
    frame = X("a.py(1): f", "python_function", 1, 2, **{"Python id": 1, "Python parent id": -1})
    trace.attribution = load_events(tmp_path, [ann("ProfilerStep#53", 0, 10), frame], name="stacks.json")
    assert len(trace.attribution.frames) == 1
    assert sites_line(trace) == (f"Sites: from iteration 53, recorded with Python stacks after the window "
                                 f"({tmp_path / 'stacks.json'}); the timings are from iterations 50-52, "
                                 "recorded without stacks")
