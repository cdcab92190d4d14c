"""`analyze --workers N` / `--scheduler ADDRESS` (goodhart_prof/trace/cluster.py): the same report
from one process, the local pool and a Dask cluster; a broken rank file or a worker that dies is
named and the other ranks are analysed (or `--strict` stops); Dask loads only when asked for."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

import goodhart_prof.trace.load as load_module
from goodhart_prof.analysis import analyze
from goodhart_prof.report.json_report import to_document
from goodhart_prof.trace.load import TraceError, load, load_rank_file
from tests.support.helpers import clean_env, error_lines
from tests.support.paths import DATA

DLRM = DATA / "param" / "dlrm_8rank"
TIMEOUT_S = 120


def _cli(*args: str, prelude: str = "") -> subprocess.CompletedProcess:
    code = f"{prelude}\nfrom goodhart_prof.cli import main\nmain({list(args)!r})"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=TIMEOUT_S, env=clean_env())


def _document(trace) -> dict:
    """The --json document without what the load cost (`trace.load`: time and RSS of this run)."""
    doc = to_document(analyze(trace), None)
    load = doc["trace"].pop("load")
    assert load is None or load["seconds"] > 0
    assert doc.pop("timing")["analysis_total_s"] > 0  # the stages' times: this run's
    return doc


def _same_but_cost(a: dict, b: dict) -> bool:
    for doc in (a, b):
        doc["trace"].pop("load", None)
        doc.pop("timing", None)
    return a == b


def _folder(tmp_path: Path, ranks: range, broken: str | None = None) -> Path:
    folder = tmp_path / "ranks"
    folder.mkdir()
    for path in sorted(DLRM.iterdir())[ranks.start:ranks.stop]:
        shutil.copy(path, folder / path.name)
    if broken:
        (folder / broken).write_bytes((DLRM / "worker0_step_12.pt.trace.json.gz").read_bytes()[:500])
    return folder


def test_without_workers_dask_is_never_imported():
    res = _cli("analyze", str(DLRM / "worker0_step_12.pt.trace.json.gz"), "--json",
               prelude="import atexit, sys\natexit.register(lambda: print(sorted(m for m in "
                       "sys.modules if m.split('.')[0] in ('dask', 'distributed')), file=sys.stderr))")
    assert res.returncode == 0, res.stderr
    assert res.stderr.strip().splitlines()[-1] == "[]", res.stderr


def test_missing_dask_is_a_one_line_error():
    res = _cli("analyze", str(DLRM), "--workers", "2",
               prelude="import sys\nsys.modules['distributed'] = None")
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert error_lines(res.stderr) == ["Error: --workers needs Dask: pip install 'goodhart-prof[cluster]'"]
    assert res.stdout == ""


@pytest.mark.parametrize("pool", [False, True])
def test_a_broken_rank_file_is_skipped_locally_or_stops_under_strict(tmp_path, monkeypatch, pool):
    if pool:  # the fixture is small: force the process pool
        monkeypatch.setattr(load_module, "PARALLEL_BYTES", 0)
    folder = _folder(tmp_path, range(0, 2), broken="worker9_step_12.pt.trace.json.gz")
    trace = load(folder, workers=2)
    assert trace.ranks == [0, 1] and len(trace.paths) == 2
    assert trace.warnings[0].startswith("skipped rank file worker9_step_12.pt.trace.json.gz: ")
    with pytest.raises(TraceError, match="worker9_step_12.pt.trace.json.gz: truncated or corrupt gzip"):
        load(folder, workers=2, strict=True)


# --- on Dask (skipped where it is not installed) --------------------------------------------------

@pytest.fixture(scope="module")
def scheduler():
    """One 2-worker LocalCluster for the module, configured as `--workers` configures its own."""
    distributed = pytest.importorskip("distributed")
    import dask
    from goodhart_prof.trace.cluster import LOCAL_CONFIG
    with dask.config.set(LOCAL_CONFIG), \
            distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                     dashboard_address=None, silence_logs=50) as cluster:
        yield cluster.scheduler_address


def test_one_process_local_pool_and_dask_give_the_same_report(scheduler, monkeypatch):
    from goodhart_prof.trace.cluster import load_on_cluster
    serial = _document(load(DLRM, workers=1))
    monkeypatch.setattr(load_module, "PARALLEL_BYTES", 0)  # the fixture is small: force the pool
    pool = _document(load(DLRM, workers=2))
    trace = load_on_cluster(DLRM, scheduler=scheduler)
    assert trace.events.equals(load(DLRM).events)  # `end` left out on the way, rebuilt the same
    on_dask = _document(trace)
    assert serial["trace"]["ranks"] == list(range(8))
    assert pool == serial and on_dask == serial


def test_frames_names_travel_joined_and_arrive_the_same(scheduler):
    from goodhart_prof.trace.cluster import load_on_cluster
    path = DATA / "tracelens" / "h100_owlv2_inference.json.gz"
    local, on_dask = load(path), load_on_cluster(path, scheduler=scheduler)
    assert len(local.frames) > 1000 and on_dask.events.equals(local.events)
    for column in local.frames.columns:
        assert (on_dask.frames[column] == local.frames[column]).all(), column
    assert on_dask.frames["name"].dtype == object


def test_cli_with_a_local_cluster_prints_the_same_json(scheduler):
    alone = _cli("analyze", str(DLRM), "--json")
    started = time.monotonic()
    on_dask = _cli("analyze", str(DLRM), "--json", "--workers", "2")
    assert on_dask.returncode == 0 and alone.returncode == 0, on_dask.stderr
    assert _same_but_cost(json.loads(on_dask.stdout), json.loads(alone.stdout))
    assert time.monotonic() - started < 30


def test_a_broken_rank_file_on_dask_is_named_and_the_others_analysed(scheduler, tmp_path):
    from goodhart_prof.trace.cluster import load_on_cluster
    folder = _folder(tmp_path, range(0, 3), broken="worker9_step_12.pt.trace.json.gz")
    trace = load_on_cluster(folder, scheduler=scheduler)
    assert trace.ranks == [0, 1, 2]
    assert trace.warnings == load(folder).warnings
    assert "worker9_step_12.pt.trace.json.gz: truncated or corrupt gzip" in trace.warnings[0]
    with pytest.raises(TraceError, match="worker9_step_12.pt.trace.json.gz: truncated"):
        load_on_cluster(folder, scheduler=scheduler, strict=True)


def test_strict_on_the_command_line_is_a_one_line_error(scheduler, tmp_path):
    folder = _folder(tmp_path, range(0, 2), broken="worker9_step_12.pt.trace.json.gz")
    res = _cli("analyze", str(folder), "--scheduler", scheduler, "--strict")
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    (line,) = error_lines(res.stderr)
    assert line.startswith(f"Error: {folder}/worker9_step_12.pt.trace.json.gz: truncated")
    res = _cli("analyze", str(folder), "--scheduler", scheduler, "--json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["trace"]["ranks"] == [0, 1]
    assert error_lines(res.stderr)[0].startswith("warning: skipped rank file worker9_step_12")


def test_a_worker_that_dies_fails_its_rank_only(scheduler, tmp_path):
    from goodhart_prof.trace.cluster import load_on_cluster
    folder = _folder(tmp_path, range(0, 4))
    victim = "worker2_step_12.pt.trace.json.gz"

    def dying(path, index):  # pickled by value: the worker needs no test module
        if path.name == victim:
            os._exit(1)
        return load_rank_file(path, index)

    trace = load_on_cluster(folder, scheduler=scheduler, task=dying)
    assert trace.ranks == [0, 1, 3]
    assert trace.warnings[0].startswith(f"skipped rank file {victim}: its Dask worker died")
    with pytest.raises(TraceError, match="worker died"):
        load_on_cluster(folder, scheduler=scheduler, task=dying, strict=True)


def test_a_rank_that_never_finishes_is_reported_not_awaited(scheduler, tmp_path):
    from goodhart_prof.trace.cluster import load_on_cluster
    folder = _folder(tmp_path, range(0, 2))

    def stuck(path, index):
        if path.name.startswith("worker1_"):
            time.sleep(30)
        return load_rank_file(path, index)

    # The test before kills a worker: wait until its replacement is up and has loaded a rank, so
    # that the limit below times the stuck rank, not a worker's start on a busy machine.
    distributed = pytest.importorskip("distributed")
    with distributed.Client(scheduler, timeout=60) as client:
        client.wait_for_workers(2, timeout=60)
    load_on_cluster(folder, scheduler=scheduler)
    started = time.monotonic()
    trace = load_on_cluster(folder, scheduler=scheduler, task=stuck, rank_timeout_s=6)
    assert time.monotonic() - started < 20  # the stuck rank would take 30 s: not awaited
    assert trace.ranks == [0]
    assert "worker1_step_12.pt.trace.json.gz: not loaded within 6 s" in trace.warnings[0]


def test_a_scheduler_that_does_not_answer_is_a_one_line_error():
    pytest.importorskip("distributed")
    res = _cli("analyze", str(DLRM), "--scheduler", "tcp://127.0.0.1:9",
               prelude="import goodhart_prof.trace.cluster as cluster\ncluster.CONNECT_TIMEOUT_S = 1")
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    (line,) = error_lines(res.stderr)
    assert line.startswith("Error: --scheduler tcp://127.0.0.1:9: no Dask scheduler answered")
