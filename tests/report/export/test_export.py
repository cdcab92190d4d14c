"""`goodhart-prof export`: Perfetto protobuf and Chrome JSON, decoded back and counted against the
analysis (GPU, sync-heavy, ROCm and CPU-only traces), nesting per track, overflow tracks, errors."""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from goodhart_prof.analysis import analyze
from goodhart_prof.cli import main
from goodhart_prof.analysis.host.links import gpu_launches
from goodhart_prof.analysis.tree import profiler_steps
from goodhart_prof.report.export.chrome_json import COUNTER_CAT, FLOW_CAT, PATH_CAT, SYNC_CAT, write_chrome_json
from goodhart_prof.report.export.perfetto import assign_lanes, to_ns, write_perfetto
from goodhart_prof.trace.load import load
from goodhart_prof.trace.model import GPU_ACTIVITY_CATS
from tests.support.helpers import clean_env, error_lines, run_cmd, write_tiny_config
from tests.support.chrome_events import Event, check_anchors, read_events
from tests.support.pftrace import decode
from tests.support.paths import DATA

H100 = DATA / "tracelens" / "h100_owlv2_inference.json.gz"
MI250 = DATA / "hta" / "mi250_minitoy_rocm.json.gz"


@pytest.fixture(scope="module")
def cpu_trace(tmp_path_factory) -> Path:
    """A CPU-only trace of our own trainer (iterations 1-2 of 3): its one rank trace."""
    folder = tmp_path_factory.mktemp("cpu_run")
    cfg = write_tiny_config(folder)
    res = run_cmd(["-m", "trainer", "--config", str(cfg), "--total-iterations", "3",
                   "--output-dir", str(folder / "out"), "--no-progress"],
                  env=clean_env(PROF_ENABLED="1", PROF_ITERATIONS="1-2"))
    assert res.returncode == 0, res.stderr
    assert not (folder / "out" / "merged_trace.json").exists()  # one rank: no merged copy
    return folder / "out" / "rank-0.pt.trace.json.gz"


_ANALYSES: dict[Path, object] = {}


def analysis_of(path: Path):
    if path not in _ANALYSES:
        _ANALYSES[path] = analyze(load(path))
    return _ANALYSES[path]


@pytest.fixture(params=["h100", "mi250", "cpu"])
def traced(request, cpu_trace) -> Path:
    return {"h100": H100, "mi250": MI250, "cpu": cpu_trace}[request.param]


def export_pb(path: Path, tmp_path: Path):
    a = analysis_of(path)
    out = tmp_path / "out.pftrace"
    summary = write_perfetto(a, out)
    return a, summary, decode(out)


# -- protobuf -------------------------------------------------------------------------------------
def test_perfetto_counts_match_the_analysis(traced, tmp_path):
    a, summary, d = export_pb(traced, tmp_path)
    trace, ev = a.trace, a.trace.events

    processes = sorted(d.name(u) for u, t in d.tracks.items() if t.HasField("process"))
    if trace.rank_source == "single file":  # named as in its metadata (test_perfetto_export.py)
        assert len(processes) == len(trace.ranks) == 1 and not processes[0].startswith("rank")
    else:
        assert processes == [f"rank {r}" for r in trace.ranks]

    events = [s for s in d.slices if s[4] not in ("iteration", "python_function", "critical_path")]
    assert len(events) == len(ev) == summary.slices - summary.python_slices
    # Slices keep their times (us * 1000, never clipped) and their names.
    want = Counter(zip(ev["name"].astype(str), to_ns(ev["ts"].to_numpy()).tolist(),
                       np.maximum(to_ns(ev["end"].to_numpy()), to_ns(ev["ts"].to_numpy())).tolist()))
    assert Counter((s[3], s[1], s[2]) for s in events) == want

    gpu = [s for s in events if s[4] in GPU_ACTIVITY_CATS]
    assert len(gpu) == len(trace.gpu) == summary.gpu_slices
    streams = {f"GPU {d_} stream {s_}" for d_, s_ in trace.gpu[["device", "stream"]].drop_duplicates()
               .to_numpy().tolist()}
    assert {d.name(s[0]).split(" (overlap")[0] for s in gpu} == streams
    assert all(d.name(s[0]).startswith("GPU ") for s in gpu)

    syncs = [i for i in d.instants if i[4] == "sync"]
    assert len(syncs) == a.syncs.total == summary.sync_instants
    assert Counter(i[3]["kind"] for i in syncs) == Counter(a.sync_points["kind"])
    assert sorted(i[3]["site"] for i in syncs) == sorted(a.sync_points["site"])
    assert all(i[2] == f"sync {i[3]['kind']}" for i in syncs)

    counters = {d.name(u): v for u, v in d.counters.items()}
    assert len(counters) == len(trace.devices) == sum(
        1 for t in d.tracks.values() if t.HasField("counter"))
    for b in a.burstiness:
        samples = counters[f"GPU {b.device} utilization"]
        assert len(samples) == len(b.window_starts) + 1
        assert all(0 <= v <= 100 + 1e-9 for _, v in samples)

    links = gpu_launches(trace)
    linked = int((links["launch_row"] >= 0).sum())
    assert len(d.flows_out) == len(d.flows_in) == linked == summary.flows
    assert sorted(f for f, _ in d.flows_out) == sorted(f for f, _ in d.flows_in)
    assert {c for _, c in d.flows_out} <= {"cuda_runtime", "cuda_driver"}
    assert {c for _, c in d.flows_in} <= set(GPU_ACTIVITY_CATS)

    steps = profiler_steps(ev)
    iterations = [s for s in d.slices if s[4] == "iteration"]
    assert len(iterations) == len(steps) == summary.iterations
    assert {d.name(s[0]) for s in iterations} <= {"iterations"}
    assert sorted(s[3] for s in iterations) == sorted(f"iteration {n}" for n in steps["step"])
    assert {d.rank_of(s[0]) for s in iterations} == (
        set(processes) if trace.rank_source == "single file" else
        {f"rank {r}" for r in steps["rank"].unique()})


def test_perfetto_counts_on_the_h100_trace(tmp_path):
    """The figures of the GPU trace itself (5,165 GPU activities, 82 sync points)."""
    a, summary, d = export_pb(H100, tmp_path)
    assert (summary.gpu_slices, summary.flows, summary.sync_instants, summary.counter_tracks) == \
        (5165, 5165, 82, 1)
    # Kineto's events nest on this trace but for ProfilerStep#6, which starts inside the Python
    # frame of profiler.step() and ends after it: it and the 6 DataLoader annotations inside it overflow.
    assert (summary.overflow_tracks, summary.overflow_slices) == (1, 7)


def test_assign_lanes_nesting_rules():
    # back to back on one lane; identical intervals nest; zero-length at a parent's end is a sibling
    lanes, ops = assign_lanes([0, 10, 10, 20], [10, 20, 20, 20])
    assert lanes == [0, 0, 0, 0]
    assert [(t, op) for t, op, _ in ops][:3] == [(0, 1), (10, 2), (10, 1)]
    # partial overlap: the second interval goes to lane 1, a later one fits lane 0 again
    lanes, _ = assign_lanes([0, 5, 6, 20], [10, 15, 8, 30])
    assert lanes == [0, 1, 0, 0]


def _handmade(path: Path) -> Path:
    """A thread whose events overlap partially (A 0-10, B 5-15 around C 6-8, D 20-30) and a GPU
    stream with two kernels overlapping, the second launched by a runtime call."""
    x = lambda name, cat, ts, dur, **kw: {"ph": "X", "name": name, "cat": cat, "pid": 1, "tid": 1,
                                          "ts": ts, "dur": dur, **kw}
    events = [x("A", "cpu_op", 1000, 10), x("B", "cpu_op", 1005, 10), x("C", "cpu_op", 1006, 2),
              x("D", "cpu_op", 1020, 10),
              x("cudaLaunchKernel", "cuda_runtime", 1021, 2, args={"correlation": 7}),
              x("k1", "kernel", 1100, 10, pid=0, tid=7, args={"device": 0, "stream": 7, "correlation": 6}),
              x("k2", "kernel", 1105, 15, pid=0, tid=7, args={"device": 0, "stream": 7, "correlation": 7})]
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def test_partial_overlaps_go_to_overflow_tracks_unclipped(tmp_path):
    a = analyze(load(_handmade(tmp_path / "overlap.json")))
    summary = write_perfetto(a, tmp_path / "o.pftrace")
    d = decode(tmp_path / "o.pftrace")
    # (the critical path's track names its spans after the same events: left out here)
    where = {s[3]: (d.name(s[0]), s[1], s[2]) for s in d.slices if not d.name(s[0]).startswith("critical path")}
    assert where["A"] == ("thread 1", 1_000_000, 1_010_000)
    assert where["B"] == ("thread 1 (overlap 1)", 1_005_000, 1_015_000)
    assert where["C"][0] == "thread 1" and where["D"][0] == "thread 1"
    assert where["k1"][0] == "GPU 0 stream 7"
    assert where["k2"] == ("GPU 0 stream 7 (overlap 1)", 1_105_000, 1_120_000)
    assert (summary.overflow_tracks, summary.overflow_slices) == (2, 2)
    overflow = [t for t in d.tracks.values() if t.name.endswith("(overlap 1)")]
    assert all(d.name(t.parent_uuid) == "rank 0" for t in overflow)
    assert len(d.flows_out) == 1 and d.flows_out[0][0] == d.flows_in[0][0]


# -- Chrome JSON ----------------------------------------------------------------------------------
OURS = (COUNTER_CAT, SYNC_CAT, FLOW_CAT, PATH_CAT)


def _added(events: list[Event]) -> Counter:
    return Counter((e.ph, e.cat) for e in events if e.cat in OURS)


def test_chrome_json_keeps_events_and_adds_ours(traced, tmp_path):
    a = analysis_of(traced)
    out = tmp_path / "out.json.gz"
    summary = write_chrome_json(a, out)
    assert out.read_bytes()[:2] == b"\x1f\x8b"
    events, original = read_events(out), read_events(traced)
    added = _added(events)
    assert len(events) == len(original) + sum(added.values())
    assert [e for e in events if e.cat not in OURS] == original
    cp = a.critical_path  # the critical path: one async slice (b, e) for each path, then one per span
    paths = [it for it in cp.iterations if not it.spans.empty] if cp is not None else []
    assert added[("b", PATH_CAT)] == added[("e", PATH_CAT)] == len(paths) + sum(len(it.spans) for it in paths)
    samples = sum(len(b.window_starts) + 1 for b in a.burstiness)
    links = gpu_launches(a.trace)
    linked = int((links["launch_row"] >= 0).sum())
    assert added[("C", COUNTER_CAT)] == samples == summary.counter_samples
    assert added[("i", SYNC_CAT)] == a.syncs.total
    assert added[("s", FLOW_CAT)] == added[("f", FLOW_CAT)] == linked == summary.flows
    check_anchors(events)
    again = load(out)
    assert len(again.events) == len(a.trace.events)
    reanalysed = analyze(again)
    assert reanalysed.syncs.total == a.syncs.total
    assert reanalysed.gpu.equals(a.gpu)


# -- the command ----------------------------------------------------------------------------------
def cli(capsys, *args: str) -> tuple[int, str, list[str]]:
    """Run `goodhart-prof ARGS` in this process: exit code, stdout, error lines."""
    with pytest.raises(SystemExit) as exit_info:
        main(list(args))
    out, err = capsys.readouterr()
    return exit_info.value.code, out, error_lines(err)


def test_cli_export(capsys, tmp_path):
    out = tmp_path / "t.pftrace"
    code, stdout, _ = cli(capsys, "export", str(MI250), "-o", str(out))
    assert code == 0 and stdout.startswith(f"wrote {out} (perfetto)") and "16 launch flows" in stdout
    assert len([i for i in decode(out).instants if i[4] == "sync"]) == analysis_of(MI250).syncs.total
    code, stdout, _ = cli(capsys, "export", str(MI250), "-o", str(tmp_path / "t.json.gz"))
    assert code == 0 and "(chrome-json)" in stdout


def test_cli_export_refuses_existing_output_and_broken_input(capsys, tmp_path):
    out = tmp_path / "old.pftrace"
    out.write_bytes(b"keep me")
    assert cli(capsys, "export", str(MI250), "-o", str(out)) == (
        2, "", [f"Error: {out}: already exists (use --force to replace it)"])
    broken = tmp_path / "broken.json"
    broken.write_text('{"traceEvents": [{"ph": "X", "name": "a"')
    code, _, err = cli(capsys, "export", str(broken), "-o", str(out), "--force")
    assert code == 2 and len(err) == 1 and str(broken) in err[0]
    code, _, err = cli(capsys, "export", str(tmp_path / "missing.json"), "-o", str(out), "--force")
    assert code == 2 and len(err) == 1 and "no such file" in err[0]
    code, _, err = cli(capsys, "export", str(MI250), "-o", str(tmp_path / "t.txt"))
    assert code == 2 and len(err) == 1 and "unknown output format" in err[0]
    assert out.read_bytes() == b"keep me"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["broken.json", "old.pftrace"]
    code, _, _ = cli(capsys, "export", str(MI250), "-o", str(out), "--force")
    assert code == 0 and decode(out).slices


def test_cli_export_subprocess_error_is_one_line(tmp_path):
    """The installed entry point behaves the same: one line, exit 2."""
    out = tmp_path / "o.pftrace"
    out.write_bytes(b"x")
    res = run_cmd(["-m", "goodhart_prof.cli", "export", str(MI250), "-o", str(out)])
    assert res.returncode == 2 and error_lines(res.stderr) == [
        f"Error: {out}: already exists (use --force to replace it)"]
