"""Idle causes inside torch.compile's generated code, and waits on a background thread, on our
trainer recorded on an NVIDIA H200 (torch 2.11, torch.compile without CUDA graphs, bf16):
tests/data/gpu/h200_2026-11-26/{full,lite}/clean (recorded at commit 7c38a10)."""
from __future__ import annotations

import io
import json

import pytest
from rich.console import Console

from goodhart_prof.analysis import analyze
from goodhart_prof.analysis.gpu.idle import cause_label
from goodhart_prof.analysis.rules.origin import foreground
from goodhart_prof.report.json_report import burstiness_json, syncs_json
from goodhart_prof.report.text.report import render
from goodhart_prof.trace.load import load
from tests.support.events import X
from tests.support.paths import ROOT

H200 = ROOT / "tests" / "data" / "gpu" / "h200_2026-11-26"
ACT = "## Call CompiledFxGraph fi36ptu7hclw7ptqgi5zqowpt3rd6stxowv3c4gow2kzhgolg4g5 ##"
STEP = "## Call CompiledFxGraph f4qcacf6d75w7w4metufjonr54moxtfiou6bricntzvwovexl4wy ##"


@pytest.fixture(scope="module")
def full():
    return analyze(load(H200 / "full" / "clean" / "rank-0.pt.trace.json.gz", progress=False))


@pytest.fixture(scope="module")
def lite():
    return analyze(load(H200 / "lite" / "clean" / "rank-0.pt.trace.json.gz", progress=False))


def test_full_idle_causes_name_the_compiled_functions(full):
    (b,) = full.burstiness
    causes = b.idle_causes
    total = sum(c["idle_us"] for c in causes)
    assert total == pytest.approx(349_920.4, abs=0.1)  # the idle time within the steps
    act, step = causes[0], causes[1]
    # the graph annotation with the ops inside it (extern aten::addmm / cudnn convolutions,
    # triton launches): before, 55.6 and 79.0 ms on the annotation alone
    assert act["cause"] == "compiled graph fi36ptu7 (inductor code)"
    assert act["idle_us"] == pytest.approx(127_734.334, abs=1e-3)
    assert act["share"] == pytest.approx(0.3650, abs=1e-4)
    assert act["frame"] == "trainer/train.py(136): act_all"
    assert act["compiled"] == {"graph": ACT, "function": "trainer/train.py(136): act_all",
                               "region": "Torch-Compiled Region: 0/0", "phase": "policy_act"}
    assert step["cause"] == "compiled graph f4qcacf6 (inductor code)"
    assert step["idle_us"] == pytest.approx(126_695.110, abs=1e-3)
    assert step["frame"] == "trainer/env.py(247): step"
    assert step["compiled"]["region"] == "Torch-Compiled Region: 1/0"
    assert cause_label(step) == "compiled graph f4qcacf6 (inductor code, in env_step)"
    # no cause, frame or context is a cache path or the raw annotation
    shown = [str(c.get(k)) for c in causes for k in ("cause", "frame", "context")]
    assert not [s for s in shown if "/tmp/" in s or "CompiledFxGraph" in s]
    # the ops inside the graphs are the graphs' now
    assert not {"aten::addmm", "aten::cudnn_convolution"} & {c["cause"] for c in causes}
    doc = burstiness_json(b)["idle_causes"][0]
    assert doc["compiled"]["graph"] == ACT and doc["cause"] == act["cause"]


def test_full_low_utilization_advises_cuda_graphs(full):
    f = next(f for f in full.findings if f.rule == "low_utilization")
    assert f.title == ("GPU idle 33% of its steps: the host launches torch.compile'd code kernel by "
                       "kernel (73% of idle time, in act_all (trainer/train.py), step (trainer/env.py))")
    group = f.evidence["compiled_code"]
    assert group["graphs"] == ["compiled graph fi36ptu7 (inductor code)",
                               "compiled graph f4qcacf6 (inductor code)"]
    assert group["idle_us"] == pytest.approx(254_429.444, abs=1e-3)
    assert group["share"] == pytest.approx(0.7271, abs=1e-4)
    assert 'torch.compile(mode="reduce-overhead")' in f.fix and "torch.cuda.graphs" in f.fix
    assert "kernel-launch overhead" in f.fix and "act_all (trainer/train.py)" in f.fix
    # the saving is the grouped idle time per iteration (3 steps), flagged as an upper bound
    assert f.est_saving_us == pytest.approx(254_429.444 / 3, abs=1e-2)
    assert "upper bound" in f.saving_note and "with_stack" in f.saving_note
    assert [(c["cause"], c["frame"]) for c in f.evidence["idle_causes"][:2]] == [
        ("compiled graph fi36ptu7 (inductor code)", "trainer/train.py(136): act_all"),
        ("compiled graph f4qcacf6 (inductor code)", "trainer/env.py(247): step")]


def test_lite_idle_causes_without_stacks(lite):
    (b,) = lite.burstiness
    act, step = b.idle_causes[:2]
    assert (act["cause"], step["cause"]) == ("compiled graph fi36ptu7 (inductor code)",
                                             "compiled graph f4qcacf6 (inductor code)")
    assert act["idle_us"] == pytest.approx(48_227.695, abs=1e-3)
    assert step["idle_us"] == pytest.approx(46_846.719, abs=1e-3)
    # no stacks: no function, the region and the phase still say where it runs
    assert step["frame"] is None and step["compiled"] == {
        "graph": STEP, "function": None, "region": "Torch-Compiled Region: 1/0", "phase": "env_step"}
    assert cause_label(act) == "compiled graph fi36ptu7 (inductor code, in policy_act)"
    # 78% busy: low_utilization does not fire; the graphs hold 69% of the idle time, 47.5 ms of
    # the 2 steps' 317 ms each (15%; cudagraphs measured 1.88M -> 2.17M env-steps/s, 13%)
    assert "low_utilization" not in {f.rule for f in lite.findings}
    assert act["share"] + step["share"] == pytest.approx(0.6922, abs=1e-4)


def _logger_site(a):
    sites = a.syncs.sites
    return sites[sites["site"].astype(str).str.contains("_run")].iloc[0]


def test_full_logger_waits_are_on_a_background_thread(full):
    pts = full.sync_points
    assert int(pts["background"].sum()) == 8
    bg = pts[pts["background"]]
    assert set(bg["kind"]) == {"event_sync"} and set(bg["tid"]) == {1486}
    assert float(bg["dur"].sum()) == pytest.approx(259_452.113, abs=1e-3)
    site = _logger_site(full)
    assert site["site"] == ("in function _run (trainer/logger.py, at line 82 when tracing began): "
                            "candidate lines 87, 88")
    assert bool(site["background"]) and int(site["count"]) == 8
    # the training thread's own read (submit's copy, line 72 at 7c38a10) is not background
    others = full.syncs.sites[~full.syncs.sites["background"]]
    assert list(others["site"].astype(str))[0] == "trainer/logger.py:72 submit"
    doc = syncs_json(full.syncs)["sites"]
    assert [d["background"] for d in doc] == [True, False, False, False]
    # no finding counts them, and the rules' input leaves them out
    assert not any("_run" in json.dumps(f.evidence) for f in full.findings)
    assert len(foreground(pts)) == len(pts) - 8


def test_lite_logger_waits_are_on_a_background_thread(lite):
    sites = lite.syncs.sites
    row = sites[sites["site"] == "cudaEventSynchronize"].iloc[0]
    assert bool(row["background"]) and int(row["count"]) == 6
    assert float(row["total_us"]) == pytest.approx(279_198.411, abs=1e-3)
    assert not sites[sites["site"] != "cudaEventSynchronize"]["background"].any()


def test_logger_candidate_lines_are_the_recorded_codes_waits():
    """Lines 87 and 88 are the two event waits of `_run` in the source the trace was recorded
    from (run.json's git_revision), which is what the site reads, whatever the working tree's
    trainer/logger.py holds now."""
    from goodhart_prof.analysis.host.source_files import recorded_source
    run = json.loads((H200 / "full" / "clean" / "run.json").read_text())
    assert run["git_revision"].startswith("7c38a10")
    source = recorded_source(ROOT / "trainer" / "logger.py", run["git_revision"])
    if source is None:
        pytest.skip("no git history here")
    lines = source.decode().splitlines()
    assert lines[81].strip() == "item = self._queue.get()"  # where _run was when tracing began
    assert [lines[86].strip(), lines[87].strip()] == ["item.done_event.synchronize()",
                                                      "item.marker.synchronize()"]


def test_background_thread_definition(tmp_path):
    """A wait on a thread that launched no GPU work is background; one on a launching thread
    is not; without any launch in the trace nothing is called background."""
    def kernel(ts, corr):
        return X("k", "kernel", ts, 5, pid=0, tid=7, correlation=corr, device=0, stream=7)

    def events(with_launch: bool):
        ev = [X("cudaEventSynchronize", "cuda_runtime", 10, 50, tid=200),
              X("cudaStreamSynchronize", "cuda_runtime", 100, 20, tid=100), kernel(130, 1)]
        if with_launch:
            ev.append(X("cudaLaunchKernel", "cuda_runtime", 90, 5, tid=100, correlation=1))
        return ev

    for with_launch, expected in ((True, [True, False]), (False, [False, False])):
        path = tmp_path / f"t{int(with_launch)}.json"
        path.write_text(json.dumps({"traceEvents": events(with_launch)}))
        pts = analyze(load(path, progress=False)).sync_points
        assert list(pts.sort_values("ts")["background"]) == expected


def test_a_graph_owns_its_own_ops_but_not_a_custom_op_inside_it(tmp_path):
    """Inside a graph annotation, aten ops and triton launches are the graph's (one cause); a
    custom op the graph calls (and what runs inside it) keeps its own cause, as before."""
    graph = "## Call CompiledFxGraph abcdefgh12345 ##"
    events = [
        X(graph, "user_annotation", 0, 100), X("aten::mm", "cpu_op", 10, 20),
        X("mylib::custom", "cpu_op", 40, 40), X("aten::empty", "cpu_op", 50, 10),
        X("cudaLaunchKernel", "cuda_runtime", 1, 1, correlation=1),
        X("cudaLaunchKernel", "cuda_runtime", 90, 2, correlation=2),
        X("k1", "kernel", 2, 3, pid=0, tid=7, device=0, stream=7, correlation=1),
        X("k2", "kernel", 95, 5, pid=0, tid=7, device=0, stream=7, correlation=2)]
    path = tmp_path / "graph.json"
    path.write_text(json.dumps({"traceEvents": events}))
    (b,) = analyze(load(path, progress=False)).burstiness
    got = {c["cause"]: c["idle_us"] for c in b.idle_causes}
    assert got == {"compiled graph abcdefgh (inductor code)": pytest.approx(50.0),
                   "mylib::custom": pytest.approx(30.0), "aten::empty": pytest.approx(10.0)}
    (graph_cause,) = [c for c in b.idle_causes if c.get("compiled")]
    assert graph_cause["compiled"] == {"graph": graph, "function": None, "region": None, "phase": None}


def test_text_report_shows_no_cache_path_or_raw_graph_name(full):
    out = io.StringIO()
    render(full, Console(width=140, file=out, color_system=None), 15)
    text = out.getvalue()
    assert "/tmp/goodhart-acceptance" not in text and "CompiledFxGraph" not in text
    assert "compiled graph fi36ptu7 (inductor code, in policy_act)" in text  # why the GPU idles
    assert "compiled graph fvq2zruw (inductor code)" in text  # the phase table's backward graph
    assert "thread background: a host thread that launches no GPU work" in text


def test_lines_are_read_at_the_recorded_revision(tmp_path):
    """With run.json's git_revision, the source is read at that revision (a fresh clone gives
    every file one mtime, so mtimes prove nothing, and the file may have changed since): at an
    older revision of logger.py, `_run`'s waits are lines 81 and 82 there, and the site says so."""
    from goodhart_prof.analysis.host.source_files import recorded_source
    logger = ROOT / "trainer" / "logger.py"
    older = "819090fd0b00ea5632070ee2d1d857700285a9e3"  # logger.py before 7c38a10's version
    run = json.loads((H200 / "full" / "clean" / "run.json").read_text())
    if recorded_source(logger, older) is None:
        pytest.skip("no git history here")
    assert recorded_source(logger, "0" * 40) is None  # not a revision of this repository
    folder = tmp_path / "clean"
    folder.mkdir()
    (folder / "rank-0.pt.trace.json.gz").write_bytes((H200 / "full" / "clean" / "rank-0.pt.trace.json.gz").read_bytes())
    (folder / "run.json").write_text(json.dumps({**run, "git_revision": older}))
    a = analyze(load(folder / "rank-0.pt.trace.json.gz", progress=False))
    assert _logger_site(a)["site"] == ("in function _run (trainer/logger.py, at line 82 when tracing "
                                       "began): candidate lines 81, 82")
