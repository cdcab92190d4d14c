"""Frequent kernel sequences (analysis/gpu/kernel_sequences.py): on hand-made iterations whose
answer is worked out below, and on our trainer's H200 trace, recounted from its raw JSON."""
from __future__ import annotations

import bisect
import gzip

import msgspec
import pytest

from goodhart_prof.analysis.gpu.kernel_sequences import kernel_sequences, largest_operand
from goodhart_prof.trace.load import load
from tests.support.events import kernel, load_events, op, rt
from tests.support.paths import DATA

GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64"
MUL = "void at::native::vectorized_elementwise_kernel<4, at::native::mul_kernel>(int)"
ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::add_kernel>(int)"
TANH = "void at::native::vectorized_elementwise_kernel<4, at::native::tanh_kernel>(int)"
SUM = "void at::native::reduce_kernel<512, 1>(int)"
SHAPED = {"Input Dims": [[1024, 1024], [1024, 1024]], "Input type": ["float", "float"]}
H200 = DATA / "gpu" / "h200_2026-11-26" / "full" / "clean" / "rank-0.pt.trace.json.gz"


def _call(ts, corr, op_name, name, dur, shaped=False):
    """An op at ts, its launch call, and its kernel of `dur` us 10 us later."""
    return [op(op_name, ts, 20, **(SHAPED if shaped else {})), rt("cudaLaunchKernel", ts + 2, 5, corr),
            kernel(name, ts + 10, dur, corr)]


def _iterations(tmp_path):
    """Two ProfilerStep iterations, each: (mm, mul, add, tanh) twice, then a sum. Kernels
    GEMM 150 us, MUL/ADD/TANH 100 us, SUM 50 us; so per iteration A B C D A B C D E."""
    calls = [("aten::mm", GEMM, 150, False), ("aten::mul", MUL, 100, True),
             ("aten::add", ADD, 100, True), ("aten::tanh", TANH, 100, True)]
    events, corr = [], 1
    for k in (1, 2):
        t0 = (k - 1) * 10_000
        events.append(op(f"ProfilerStep#{k}", t0, 2_500))
        for j in range(2):
            for i, (name, kern, dur, shaped) in enumerate(calls):
                events += _call(t0 + j * 1_000 + i * 200 + 1, corr, name, kern, dur, shaped)
                corr += 1
        events += _call(t0 + 2_000, corr, "aten::sum", SUM, 50)
        corr += 1
    return load_events(tmp_path, events)


def test_hand_made_iterations(tmp_path):
    ks = kernel_sequences(_iterations(tmp_path))
    assert (ks.kernels, ks.windows) == (18, 2)
    # ABCD 4 times holds 4 x 450 = 1,800 us, as does ABCDABCD twice: the shorter unit wins;
    # every other repeated sequence shares a kernel with it
    assert len(ks.sequences) == 1
    top = ks.sequences[0]
    assert top.kernels == (GEMM, MUL, ADD, TANH)
    assert top.op_chain == "aten::mm > aten::mul > aten::add > aten::tanh"
    assert (top.count, top.per_iteration, top.total_us) == (4, 2.0, 1800.0)
    assert top.share == pytest.approx(1800 / 1900)  # all GPU time: 2 x (900 + 50)
    assert not top.fusible and top.launches_saved == 0 and top.site is None
    # fusion: BCD 4 x 300 = 1,200 us beats BCDE 2 x 350 (which then shares kernels with it)
    assert len(ks.fusion) == 1
    fused = ks.fusion[0]
    assert fused.op_chain == "aten::mul > aten::add > aten::tanh"
    assert fused.categories == ("elementwise",) * 3
    assert (fused.count, fused.total_us, fused.launches_saved) == (4, 1200.0, 8)
    # mul's and add's outputs (1024 x 1024 fp32, 4 MiB) written and read back: 2 x 8 MiB each time
    assert fused.bytes_saved == 4 * 2 * 2 * 4 * 1024 * 1024


def test_a_sequence_does_not_overlap_itself(tmp_path):
    """X X X X X, no iterations: XX occurs at 0 and 2 (not 1 and 3: they overlap those); XXX
    and longer occur once without overlapping, so they do not repeat."""
    events = []
    for i in range(5):
        events += _call(1 + i * 200, i + 1, "aten::mul", MUL, 100)
    ks = kernel_sequences(load_events(tmp_path, events))
    assert ks.windows == 0
    assert [(s.length, s.count, s.total_us, s.per_iteration) for s in ks.sequences] == [(2, 2, 400.0, None)]
    assert ks.sequences[0].share == pytest.approx(0.8)


def test_nothing_repeats(tmp_path):
    names = (GEMM, MUL, ADD, TANH, SUM)
    events = [e for i, name in enumerate(names) for e in _call(1 + i * 200, i + 1, "aten::mul", name, 100)]
    ks = kernel_sequences(load_events(tmp_path, events))
    assert (ks.sequences, ks.fusion, ks.kernels, ks.note) == ((), (), 5, "no sequence of kernels repeats")


def test_no_kernels(tmp_path):
    ks = kernel_sequences(load_events(tmp_path, [op("aten::mul", 1, 5)]))
    assert ks.sequences == () and ks.fusion == () and ks.note == "no kernels in the trace"


def test_largest_operand():
    assert largest_operand("float, c10::BFloat16, Scalar", "32x3x3x3, 8x2, ") == 32 * 27 * 4
    assert largest_operand("float", "?") != largest_operand("float", "?")  # NaN: no shape


def _merged(intervals: list[tuple[float, float]]) -> tuple[list[float], list[float]]:
    """Intervals merged where they overlap or nest: (starts, ends), sorted."""
    starts, ends = [], []
    for s, t in sorted(intervals):
        if ends and s <= ends[-1]:
            ends[-1] = max(ends[-1], t)
        else:
            starts.append(s)
            ends.append(t)
    return starts, ends


def _inside(spans: tuple[list[float], list[float]], at: float) -> bool:
    i = bisect.bisect_right(spans[0], at) - 1
    return i >= 0 and at <= spans[1][i]


class _Args(msgspec.Struct, frozen=True):
    correlation: int = -1
    stream: int = -1


class _Event(msgspec.Struct):
    """The fields of a raw event the recount reads (decoding only these keeps the test fast)."""
    ph: str = ""
    cat: str = ""
    name: str = ""
    ts: float = 0.0
    dur: float = 0.0
    tid: int | str = 0
    args: _Args = _Args()


class _Doc(msgspec.Struct):
    traceEvents: list[_Event]


def _raw_runs() -> list[list[tuple[str, float, bool]]]:
    """Per stream and ProfilerStep (by the launch call's start), the kernels in start order as
    (name, dur, whether a cpu op on the launching thread holds the launch), from the raw JSON."""
    events = msgspec.json.decode(gzip.decompress(H200.read_bytes()), type=_Doc).traceEvents
    steps = [(e.ts, e.ts + e.dur) for e in events if e.ph == "X" and e.name.startswith("ProfilerStep#")]
    launch = {e.args.correlation: e for e in events
              if e.cat in ("cuda_runtime", "cuda_driver") and e.args.correlation >= 0}
    ops: dict = {}
    for e in events:
        if e.cat == "cpu_op" and not e.name.startswith("ProfilerStep#"):
            ops.setdefault(e.tid, []).append((e.ts, e.ts + e.dur))
    spans = {tid: _merged(v) for tid, v in ops.items()}
    runs: dict[tuple, list] = {}
    for e in events:
        if e.cat != "kernel":
            continue
        call = launch.get(e.args.correlation)
        at = call.ts if call else e.ts
        step = next((i for i, (s, t) in enumerate(steps) if s <= at <= t), None)
        held = call is not None and _inside(spans.get(call.tid, ([], [])), at)
        if step is not None:
            runs.setdefault((e.args.stream, step), []).append((e.ts, e.name, e.dur, held))
    return [[(n, d, h) for _, n, d, h in sorted(r)] for r in runs.values()]


def test_h200_trace_recounted_from_raw_json():
    ks = kernel_sequences(load(H200))
    assert ks.windows == 3
    runs = _raw_runs()
    assert ks.kernels == sum(len(r) for r in runs)
    top = ks.sequences[0]
    # its occurrences counted from the raw events, first first, none overlapping another; a
    # kernel's token holds its launching op, and 8 of the 56 runs of these names were launched
    # outside any op (no op around their launch calls): another sequence
    count, total, unheld = 0, 0.0, 0
    for run in runs:
        names = [n for n, _, _ in run]
        i = 0
        while i + top.length <= len(names):
            if tuple(names[i:i + top.length]) == top.kernels:
                if all(h for _, _, h in run[i:i + top.length]):
                    count += 1
                    total += sum(d for _, d, _ in run[i:i + top.length])
                else:
                    unheld += 1
                i += top.length
            else:
                i += 1
    assert (top.count, top.length, unheld) == (count, 8, 8) and count == 48
    assert top.total_us == pytest.approx(total)
    assert top.per_iteration == 16.0
    assert top.op_chain == "aten::convolution_backward"
    # shares add up: a kernel is in one sequence at most
    assert sum(s.share for s in ks.sequences) <= 1.0
    # the trainer's compiled model leaves the optimizer and grad-norm clipping eager: the top
    # fusion candidate is clip_grad_norm's chain, with its site from the stacks
    fused = ks.fusion[0]
    assert fused.op_chain.startswith("aten::linalg_vector_norm > aten::add > aten::reciprocal")
    assert fused.launches_saved == fused.count * (fused.length - 1)
    assert "clip_grad" in fused.site
    assert all(not s.fusible or "triton" not in s.libraries for s in ks.sequences + ks.fusion)
