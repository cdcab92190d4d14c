"""scripts/gpu_acceptance.py on the CPU: the dry run does every step within its 90 s budget and
writes what a GPU run must bring back (docs/gpu.md), so the script cannot rot between GPU draws."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile

import pytest
from tests.support.paths import ROOT

REPO = ROOT
SCRIPT = REPO / "scripts" / "gpu_acceptance.py"


def acceptance(*args: str, timeout: int = 200) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROF_")}
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("acceptance")
    out = root / "out"
    res = acceptance("--dry-run", "--out", str(out), "--work", str(root / "work"))
    return res, out, json.loads((out / "results.json").read_text())


@pytest.mark.slow
def test_the_dry_run_does_every_step_within_its_budget(dry_run):
    res, out, results = dry_run
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert results["dry_run"] is True and results["budget_s"] == 90
    assert list(results["steps"]) == ["env", "smoke", "bench", "zoo", "traces"]
    statuses = {k: v["status"] for k, v in results["steps"].items()}
    # env, smoke and the zoo must finish; bench and traces list what the budget left out.
    assert statuses["env"] == statuses["smoke"] == statuses["zoo"] == "ok", statuses
    assert statuses["bench"] in ("ok", "partial") and statuses["traces"] in ("ok", "partial"), statuses
    assert results["elapsed_s"] <= 92  # the budget, and the moment it takes to close the tar
    deadlines = [step["deadline_s"] for step in results["steps"].values()]
    assert deadlines == sorted(deadlines) and deadlines[-1] == 90.0
    for name, step in results["steps"].items():  # a step ends by its deadline (a child is killed)
        assert step["step_s"] <= step["deadline_s"] + 2, name
    # What comes back fits the device tool's limits: at most 8 files of at most 16 MiB.
    files = [p for p in out.iterdir() if p.is_file()]
    assert sorted(p.name for p in files) == ["acceptance.log", "results.json", "summary.md", "traces.tar"]
    assert all(p.stat().st_size <= 16 << 20 for p in files)


@pytest.mark.slow
def test_the_dry_run_measures_real_figures(dry_run):
    _, out, results = dry_run
    env, smoke, bench = (results["steps"][k] for k in ("env", "smoke", "bench"))
    assert env["device_type"] == "cpu" and env["matmul"]["tflops"] > 0
    assert env["copy_device"]["gb_per_s"] > 0 and env["htod_pinned"] is None
    assert smoke["n_envs"] == 16 and len(smoke["iteration_s"]) == 3 and smoke["env_steps_per_s"] > 0
    assert smoke["sync_debug"] == "not available on the CPU" and smoke["host_syncs"] is None
    rows = {(r["n_envs"], r["variant"]): r for r in bench["runs"]}
    assert list(rows) == [(16, "eager"), (16, "cudagraphs"), (32, "eager"), (64, "eager")]
    for n in (16, 32, 64):
        row = rows[(n, "eager")]
        if n > 16 and row["status"] == "not run (budget)":
            continue  # a slow machine: listed, not dropped
        assert row["status"] == "ok" and row["sps"] > 0 and row["rollout_steps"] == 8
        assert set(row["phase_s"]) == {"rollout", "gae", "ppo_update", "logging"}
        assert row["naive_rollout_sps"] is None if n > 16 else row["naive_rollout_sps"] > 0
    graphs = rows[(16, "cudagraphs")]
    assert graphs["status"] == "refused on the CPU, as it must be"
    assert graphs["error"].startswith("ConfigError: ") and "CUDA" in graphs["error"]


@pytest.mark.slow
def test_the_dry_run_zoo_and_traces(dry_run):
    _, out, results = dry_run
    zoo = results["steps"]["zoo"]["summary"]
    assert "item_logging" in zoo["detected"] and zoo["precision"] == 1.0
    assert zoo["slowdowns"]["item_logging"] > 0
    traces = results["steps"]["traces"]
    packed = {(p["name"], p["mode"]): p for p in traces["packed"]}
    assert list(packed)[:2] == [("clean", "full"), ("item_logging", "full")]  # priority order
    assert traces["lite_runs"][0]["name"] == "clean"
    if traces["lite_runs"][0]["status"] == "ok":
        assert ("clean", "lite") in packed
    for row in traces["counter_runs"]:  # the clean run again with PROF_COUNTERS=default
        assert row["name"] == "clean"
        if row["status"] == "ok":
            assert ("clean", "counters") in packed
            assert row["cupti"] is None  # the CPU records no CUPTI counters (ignored, with a warning)
    with tarfile.open(out / "traces.tar") as tar:
        names = set(tar.getnames())
        assert {"full/clean/rank-0.pt.trace.json.gz", "full/clean/analysis.json",
                "full/clean/run.json", "full/item_logging/analysis.json"} <= names
        doc = json.load(tar.extractfile("full/item_logging/analysis.json"))
    assert doc["schema"].startswith("goodhart-prof/analysis/")
    assert "item_logging" in {f["rule"] for f in doc["findings"]}
    assert "item_logging" in packed[("item_logging", "full")]["findings"]
    assert "item_logging" not in (packed[("clean", "full")]["findings"] or [])
    summary = (out / "summary.md").read_text()
    for title in ("## Environment", "## Smoke iteration", "## Trainer throughput", "## The zoo",
                  "## Traces"):
        assert title in summary


def test_a_budget_too_small_leaves_work_listed_not_dropped(tmp_path):
    res = acceptance("--dry-run", "--only", "bench", "--budget-s", "1", "--out", str(tmp_path / "o"),
                     "--work", str(tmp_path / "w"))
    results = json.loads((tmp_path / "o" / "results.json").read_text())
    runs = results["steps"]["bench"]["runs"]
    assert [r["status"] for r in runs] == ["not run (budget)"] * 4
    assert results["steps"]["bench"]["status"] == "failed" and res.returncode == 1
    assert "--resume" in res.stdout


def test_resume_keeps_what_an_earlier_call_finished(tmp_path):
    earlier = {"steps": {"bench": {"status": "partial", "runs": [
        {"n_envs": 16, "variant": "eager", "status": "ok", "sps": 123.0},
        {"n_envs": 32, "variant": "eager", "status": "not run (budget)"}]}}}
    (tmp_path / "earlier.json").write_text(json.dumps(earlier))
    res = acceptance("--dry-run", "--only", "bench", "--budget-s", "1", "--resume",
                     str(tmp_path / "earlier.json"), "--out", str(tmp_path / "o"), "--work", str(tmp_path / "w"))
    runs = json.loads((tmp_path / "o" / "results.json").read_text())["steps"]["bench"]["runs"]
    assert runs[0] == {"n_envs": 16, "variant": "eager", "status": "ok", "sps": 123.0,
                       "earlier_call": True}
    assert [r["status"] for r in runs[1:]] == ["not run (budget)"] * 3
    assert res.returncode == 0  # one run done, the step is partial, not failed


@pytest.mark.parametrize("args, message", [
    (["--only", "bench,nonsense"], "--only: unknown step 'nonsense'"),
    (["--resume", "{missing}"], "not a results.json of this script"),
    ([], "torch sees no CUDA device; on a CPU use --dry-run"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, message):
    if not args:
        import torch
        if torch.cuda.is_available():
            pytest.skip("this machine has a GPU: the script would run")
    args = [a.replace("{missing}", str(tmp_path / "missing.json")) for a in args]
    if "--resume" in args or "--only" in args:
        args = ["--dry-run", *args]
    res = acceptance("--out", str(tmp_path / "o"), *args, timeout=60)
    assert res.returncode == 2
    assert message in res.stderr and "Traceback" not in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
