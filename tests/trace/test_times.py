"""Times that do not fit the trace (docs/DESIGN.md, "Times that fit a trace"): an event whose start
or end lies beyond 2^53 us, or that lasts over 1000x the span of the file's starts (and over a
day), is skipped and counted, and the figures of the rest stay exact; a trace all of whose events
lie beyond is a one-line error; `ProfilerStep#` numbers beyond int64 never raise."""
from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from goodhart_prof.analysis import analyze
from goodhart_prof.report.export.perfetto import write_perfetto
from goodhart_prof.trace.load import TraceError, load
from tests.support.helpers import clean_env, error_lines
from tests.support.pftrace import decode
from tests.support.paths import DATA

BASE = 1.7e15  # Kineto's clock: microseconds since the epoch
UNFIT = "with a time that does not fit the trace"


def event(ts, dur, name="aten::mm", cat="cpu_op", pid=1, tid=1, **extra) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, **extra}


def kernel(ts, dur, name="gemm", correlation=0, stream=7) -> dict:
    return event(ts, dur, name, cat="kernel", pid=0, tid=stream,
                 args={"device": 0, "stream": stream, "correlation": correlation})


def half_busy(base: float = BASE) -> list[dict]:
    """One iteration of 600 us whose GPU runs 300 us of a 600 us span: utilization exactly 50%."""
    events = [event(base, 600, "ProfilerStep#3", cat="user_annotation")]
    for i, (start, dur) in enumerate(((0, 100), (200, 100), (500, 100)), start=1):
        events.append(event(base + start - 5, 4, "cudaLaunchKernel", cat="cuda_runtime",
                            args={"correlation": i}))
        events.append(kernel(base + start, dur, correlation=i))
    return events


def write(tmp_path: Path, events: list, name: str = "t.json", raw: bytes | None = None) -> Path:
    path = tmp_path / name
    path.write_bytes(raw if raw is not None else json.dumps({"traceEvents": events}).encode())
    return path


def gpu_row(trace) -> dict:
    return analyze(trace).gpu.iloc[0].to_dict()


def test_half_busy_trace_is_half_busy(tmp_path):
    row = gpu_row(load(write(tmp_path, half_busy())))
    assert (row["busy_us"], row["span_us"], row["utilization"]) == (300.0, 600.0, 0.5)


@pytest.mark.parametrize("ts, dur", [
    (BASE + 50, 1e18),        # ends 1e18 us: beyond 2^53 us
    (1.5e308, 10.0),          # starts beyond
    (1.7e308, 1.7e308),       # ts + dur overflows to inf
    (-1e16, 5.0),             # far before
    (BASE + 50, 1e14),        # ends within 2^53 us but lasts 3 years: > 1000x the starts' 600 us span
])
def test_absurd_gpu_event_is_skipped_and_utilization_stays_half(tmp_path, ts, dur):
    path = write(tmp_path, half_busy() + [kernel(ts, dur, "absurd", correlation=99)])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no numpy overflow warning either
        trace = load(path)
        row = gpu_row(trace)
    assert (row["busy_us"], row["span_us"], row["utilization"]) == (300.0, 600.0, 0.5)
    assert trace.skipped_events == 1 and len(trace.events) == 7
    assert f"skipped 1 malformed event(s) in t.json (1 {UNFIT})" in trace.warnings
    assert "absurd" not in set(trace.events["name"].astype(str))


def test_absurd_python_frame_is_skipped(tmp_path):
    frames = [event(BASE + 10, 20, "train.py(10): step", cat="python_function"),
              event(BASE + 12, 1e18, "train.py(11): absurd", cat="python_function"),
              event(BASE + 14, 1e13, "train.py(12): too long", cat="python_function")]
    trace = load(write(tmp_path, half_busy() + frames))
    assert trace.frames["name"].tolist() == ["train.py(10): step"]
    assert trace.skipped_events == 2
    assert f"skipped 2 malformed event(s) in t.json (2 {UNFIT})" in trace.warnings


def test_malformed_and_unfit_are_counted_apart(tmp_path):
    odd = [event("soon", 1), {"ph": "X", "name": "no ts", "dur": 1}, kernel(2e16, 1, "far", 98)]
    trace = load(write(tmp_path, half_busy() + odd))
    assert trace.skipped_events == 3
    assert f"skipped 3 malformed event(s) in t.json (1 {UNFIT})" in trace.warnings


def test_real_long_events_are_kept(tmp_path):
    """A long kernel in a GPU-only trace, a lone event, a long step on the CPU: none is dropped."""
    hour = 3600e6
    gpu_only = [kernel(BASE, hour, "hung_allreduce", 1, stream=7), kernel(BASE + 1, 1, "tiny", 2, stream=8)]
    trace = load(write(tmp_path, gpu_only, "gpu_only.json"))
    assert trace.skipped_events == 0 and len(trace.events) == 2
    assert gpu_row(trace)["span_us"] == hour
    step = event(BASE, 20 * hour, "ProfilerStep#1", cat="user_annotation")
    lone = load(write(tmp_path, [step], "lone.json"))
    assert lone.skipped_events == 0 and lone.events["dur"].tolist() == [20 * hour]
    cpu = [event(BASE, 5e6, "ProfilerStep#1", cat="user_annotation"), event(BASE + 1e6, 2e6)]
    assert load(write(tmp_path, cpu, "cpu.json")).skipped_events == 0


def test_day_long_event_alone_is_an_error_naming_why(tmp_path):
    path = write(tmp_path, [event(BASE, 1e12, "eleven days")])
    with pytest.raises(TraceError, match=r"t\.json: no events left: 1 event\(s\) last longer"):
        load(path)


@pytest.mark.parametrize("base", [1e18, 1e17, 9.1e15])
def test_time_base_beyond_doubles_microseconds_is_an_error(tmp_path, base):
    path = write(tmp_path, half_busy(base))
    with pytest.raises(TraceError, match=r"t\.json: the trace's time base cannot be represented: "
                                         r"7 event\(s\) start or end beyond 2\^53 us"):
        load(path)


def test_time_base_just_below_the_bound_loads(tmp_path):
    """8e15 us (year 2223): doubles still hold whole microseconds (a step of 1 us)."""
    row = gpu_row(load(write(tmp_path, half_busy(8e15))))
    assert (row["busy_us"], row["span_us"], row["utilization"]) == (300.0, 600.0, 0.5)


def test_step_number_beyond_int64_is_an_annotation(tmp_path):
    events = half_busy()
    events[0] = event(BASE, 600, "ProfilerStep#" + "1" * 25, cat="user_annotation")
    a = analyze(load(write(tmp_path, events)))
    assert a.gpu.iloc[0]["utilization"] == 0.5
    assert not (a.phases["kind"] == "iteration").any()
    names = a.phases.loc[a.phases["kind"] == "annotation", "name"].tolist()
    assert names == ["ProfilerStep#" + "1" * 25]


def test_step_number_within_int64_is_an_iteration(tmp_path):
    events = half_busy()
    events[0] = event(BASE, 600, "ProfilerStep#" + "9" * 18, cat="user_annotation")
    a = analyze(load(write(tmp_path, events)))
    assert a.phases.loc[a.phases["kind"] == "iteration", "iteration"].tolist() == [10**18 - 1]


def test_perfetto_export_drops_the_file_events_beyond_the_bound(tmp_path):
    """Frames and instants the export reads again from the file obey the same bound: no wrapped
    nanoseconds (1e17 us would wrap int64 ns to 7.77e18)."""
    extra = [event(BASE + 10, 20, "train.py(10): step", cat="python_function"),
             event(1e17, 20, "train.py(11): far", cat="python_function"),
             {"ph": "i", "s": "t", "name": "far instant", "pid": 1, "tid": 1, "ts": 1e17},
             {"ph": "i", "s": "t", "name": "near instant", "pid": 1, "tid": 1, "ts": BASE + 20}]
    path = write(tmp_path, half_busy() + extra)
    out = tmp_path / "t.pftrace"
    summary = write_perfetto(analyze(load(path)), out)
    d = decode(out)
    times = [s[1] for s in d.slices] + [s[2] for s in d.slices] + [i[1] for i in d.instants]
    assert max(times) == int(BASE * 1000) + 600_000 and min(times) == int(BASE * 1000) - 5_000
    assert summary.python_slices == 1 and summary.trace_instants == 1
    assert sorted(s[3] for s in d.slices if s[4] == "python_function") == ["train.py(10): step"]


@pytest.mark.parametrize("name", ["param/dlrm_8rank/worker0_step_12.pt.trace.json.gz",
                                  "hta/mi250_minitoy_rocm.json.gz",
                                  "tracelens/vllm_decode_full_graph.json.gz"])
def test_real_traces_keep_every_event(name):
    """Kineto's epoch clock (1.69e15 us) and relative clocks (4e12 us) both fit: nothing skipped."""
    trace = load(DATA / name)
    assert trace.skipped_events == 0 and not any("malformed" in w for w in trace.warnings)
    assert np.abs(trace.events["end"].to_numpy()).max() < 2.0**53


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "goodhart_prof.cli", *map(str, args)],
                          capture_output=True, text=True, timeout=120, env=clean_env())


def test_export_of_an_unrepresentable_time_base_is_a_one_line_error(tmp_path):
    """ts 1e17 us: 1e20 ns wrapped to 7.77e18 ns in the .pftrace before, with exit 0."""
    path = write(tmp_path, half_busy(1e17))
    res = _cli("export", path, "-o", tmp_path / "t.pftrace")
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert error_lines(res.stderr) == [
        f"Error: {path}: the trace's time base cannot be represented: 7 event(s) start or end "
        "beyond 2^53 us (9.007e+15 us), where a double no longer holds whole microseconds"]
    assert not (tmp_path / "t.pftrace").exists()


def test_chrome_json_export_keeps_the_absurd_event_and_its_reload_skips_it(tmp_path):
    """The Chrome JSON export re-emits the file's events byte for byte: loading it again skips
    the same event and gives the same 50%."""
    path = write(tmp_path, half_busy() + [kernel(BASE + 50, 1e18, "absurd", correlation=99)])
    res = _cli("export", path, "-o", tmp_path / "out.json")
    assert res.returncode == 0, res.stderr
    assert f"warning: skipped 1 malformed event(s) in t.json (1 {UNFIT})" in error_lines(res.stderr)
    again = load(tmp_path / "out.json")
    assert again.skipped_events == 1 and gpu_row(again)["utilization"] == 0.5
