"""The launching thread's timeline cut into stretches (analysis/gpu/host_segments.py): the
runtime calls of a known kind that hold the host (outermost only, a first free as context
creation, launches only when long), the cut times of a thread, and each stretch's cause and
length, on one hand-made thread worked by hand."""
from __future__ import annotations

from goodhart_prof.analysis.gpu.host_segments import KINDS, cuts, runtime_calls, segments, step_names
from goodhart_prof.analysis.tree import host_tree
from tests.support.events import ann, kernel, load_events, op, rt

EVENTS = [ann("ProfilerStep#1", 0, 10_000),
          rt("cudaFree", 10, 100, -1),                                  # before any launch: context
          op("aten::empty", 200, 300), rt("cudaMalloc", 250, 100, -1),  # an allocation inside an op
          rt("cudaLaunchKernel", 600, 5, 1), kernel("k", 700, 10, 1),   # a short launch: not a cause
          rt("cudaFree", 800, 50, -1),                                  # after a launch: a free
          rt("cudaLaunchKernel", 1000, 1500, 2),                        # 1.5 ms: a long launch
          rt("cudaStreamSynchronize", 1100, 100, 3),                    # inside it: not outermost
          kernel("k", 2600, 10, 2)]


def load(tmp_path):
    trace = load_events(tmp_path, EVENTS)
    return trace, host_tree(trace)


def test_runtime_calls_of_a_known_kind(tmp_path):
    trace, tree = load(tmp_path)
    ts, end, code, kind, lo, hi = runtime_calls(trace, tree)
    assert ts.tolist() == [10.0, 250.0, 800.0, 1000.0] and end.tolist() == [110.0, 350.0, 850.0, 2500.0]
    assert [str(tree.names[c]) for c in code] == ["cudaFree", "cudaMalloc", "cudaFree", "cudaLaunchKernel"]
    assert [KINDS[k] for k in kind] == ["context", "alloc", "free", "launch"]
    assert (lo.tolist(), hi.tolist()) == ([0], [4])  # one thread, holding all four


def test_cut_times_are_the_threads_starts_and_ends(tmp_path):
    trace, tree = load(tmp_path)
    values, lo, hi = cuts(trace, tree)
    # the step, the op and the four calls (the short launch and the nested sync are no causes)
    assert values.tolist() == [0, 10, 110, 200, 250, 350, 500, 800, 850, 1000, 2500, 10_000]
    assert (lo.tolist(), hi.tolist()) == ([0], [12])


def test_each_stretch_has_a_cause_and_a_length(tmp_path):
    trace, tree = load(tmp_path)
    cause, frame, length = segments(trace, tree)
    n_names = len(tree.names)
    untraced = n_names  # no Python frames: cause n_names + 0 is "untraced"

    def said(c: int) -> str:
        if c < n_names:
            return str(tree.names[c])
        if c == untraced:
            return "untraced"
        # a runtime call: n_ctx + (name code x len(KINDS) + kind) x n_ctx + its context
        n_ctx = n_names + 1
        call, context = divmod(c - n_ctx, n_ctx)
        name, kind = divmod(call, len(KINDS))
        inside = "untraced" if context == untraced else str(tree.names[context])
        return f"{tree.names[name]} ({KINDS[kind]}, in {inside})"
    # ProfilerStep#N is never a cause: outside everything else the thread is untraced
    assert [(said(c), x) for c, x in zip(cause.tolist(), length.tolist())][:-1] == [
        ("untraced", 10.0), ("cudaFree (context, in untraced)", 100.0), ("untraced", 90.0),
        ("aten::empty", 50.0), ("cudaMalloc (alloc, in aten::empty)", 100.0), ("aten::empty", 150.0),
        ("untraced", 300.0), ("cudaFree (free, in untraced)", 50.0), ("untraced", 150.0),
        ("cudaLaunchKernel (launch, in untraced)", 1500.0), ("untraced", 7500.0)]
    assert length[-1] == 0.0 and frame.tolist() == [0] * 12
    assert step_names(tree).tolist() == [str(n).startswith("ProfilerStep#") for n in tree.names]


def test_stretches_asked_for_by_number_are_those_of_the_whole(tmp_path):
    trace, tree = load(tmp_path)
    whole = segments(trace, tree)
    at = [9, 3, 11, 0]  # any order; 11 is the thread's last cut: an empty stretch
    some = segments(trace, tree, at)
    assert [x.tolist() for x in some] == [x[at].tolist() for x in whole]
    assert some[2].tolist() == [1500.0, 50.0, 0.0, 10.0]
    assert [x.tolist() for x in segments(trace, tree, [])] == [[], [], []]
