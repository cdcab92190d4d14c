"""A performance log row's figures: they match the trace's own events, and env-steps/s come from
the run's run.json (a broken one fails the add before anything is written)."""
from __future__ import annotations

import gzip
import json
import shutil
from collections import defaultdict
from pathlib import Path

import pytest

from goodhart_prof.perflog.log_file import PerfLogError
from goodhart_prof.perflog.measure import add, memcpy_htod_us
from tests.support.events import ann, kernel, load_events, memcpy, rt
from tests.support.paths import DATA
from tests.support.perflog_tables import jsonl, table

H100 = DATA / "tracelens" / "h100_owlv2_inference.json.gz"
MI250 = DATA / "hta" / "mi250_minitoy_rocm.json.gz"


def raw_events(path: Path) -> list[dict]:
    with gzip.open(path, "rt") as fh:
        return json.load(fh)["traceEvents"]


def test_row_figures_match_the_trace(tmp_path):
    log = tmp_path / "PERFLOG.md"
    row = add(H100, "baseline", log)
    events = [e for e in raw_events(H100) if e.get("ph") == "X"]
    steps = [e["dur"] for e in events if e["name"].startswith("ProfilerStep#") and e["cat"] == "user_annotation"]
    gpu = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    htod = sum(e["dur"] for e in gpu if e["cat"] == "gpu_memcpy" and e["name"].startswith("Memcpy HtoD"))
    totals = defaultdict(float)
    for e in gpu:
        totals[e["name"]] += e["dur"]
    top = max(totals, key=totals.get)
    assert len(steps) == 1 and row["iteration_ms"] == pytest.approx(steps[0] / 1e3)  # one step: its own time
    assert row["iteration_ms_n"] == 1 and row["iteration_ms_low"] is None  # under 3: no interval
    assert row["gpu_busy_pct"] == pytest.approx(100 * 566_759.473 / 1_078_288.379, rel=1e-6)  # docs/report.md
    assert row["memcpy_htod_ms"] == pytest.approx(htod / 1e3) and htod > 0
    assert row["top_kernel"] == top
    assert row["top_kernel_pct"] == pytest.approx(100 * totals[top] / sum(totals.values()))
    assert row["syncs_per_iteration"] == 81  # 82 sync points, one outside ProfilerStep#6
    assert row["env_steps_per_s"] is None  # no run.json beside the fixture
    (cells_,) = table(log)
    assert cells_[0] == "1" and cells_[2] == "baseline" and cells_[5] == ""  # env-steps/s empty
    assert cells_[4] == f"{row['iteration_ms']:,.2f}"
    assert jsonl(log) == [row]


def test_memcpy_htod_sums_only_host_to_device_copies(tmp_path):
    events = [ann("ProfilerStep#0", 0, 1000), rt("cudaMemcpyAsync", 10, 5, 1), rt("cudaMemcpyAsync", 30, 5, 2),
              rt("cudaMemcpyAsync", 50, 5, 3), kernel("k", 100, 40, 4), rt("cudaLaunchKernel", 60, 5, 4),
              memcpy("Memcpy HtoD (Pageable -> Device)", 20, 7.5, 1),
              memcpy("Memcpy HtoD (Pinned -> Device)", 40, 2.5, 2),
              memcpy("Memcpy DtoH (Device -> Pageable)", 200, 30, 3)]
    assert memcpy_htod_us(load_events(tmp_path, events)) == pytest.approx(10.0)  # 7.5 + 2.5, not the DtoH
    assert memcpy_htod_us(load_events(tmp_path, [ann("ProfilerStep#0", 0, 10)], "none.json")) == 0.0


def test_env_steps_from_run_json(tmp_path):
    run = tmp_path / "traces"
    run.mkdir()
    shutil.copy(MI250, run / "rank-0.pt.trace.json.gz")
    (run / "run.json").write_text(json.dumps({"schema": "goodhart-prof/run/v1", "env_steps_per_s": 16991.4}))
    log = tmp_path / "PERFLOG.md"
    by_folder = add(run, "folder", log)
    by_file = add(run / "rank-0.pt.trace.json.gz", "file", log)
    assert by_folder["env_steps_per_s"] == by_file["env_steps_per_s"] == 16991.4
    assert [r[5] for r in table(log)] == ["16,991", "16,991"]
    (run / "run.json").write_text("{not json")
    with pytest.raises(PerfLogError, match="run.json"):
        add(run, "broken", log)
    assert len(jsonl(log)) == 2


def test_host_reads_per_iteration_on_a_cpu_run(tmp_path):
    """A CPU-only run with `.item()` planted: no sync point, but 90 host reads over its 3 traced
    iterations (ProfilerStep#3-5, 30 each, counted from the trace's aten::item ops by
    tests/analysis/host tests), so the row says 30.00 host reads per iteration, not only 0 syncs."""
    path = DATA / "ours" / "cpu_item_logging_lite.json.gz"
    events = raw_events(path)
    steps = [e for e in events if e.get("ph") == "X" and e["name"].startswith("ProfilerStep#")]
    items = [e for e in events if e.get("ph") == "X" and e["name"] == "aten::item"
             and any(s["ts"] <= e["ts"] < s["ts"] + s["dur"] for s in steps)]
    row = add(path, "item_logging", tmp_path / "PERFLOG.md")
    assert row["syncs_per_iteration"] == 0.0
    assert row["host_reads_per_iteration"] == pytest.approx(len(items) / len(steps)) == 30.0
    assert "| 0.00 | 30.00 |" in (tmp_path / "PERFLOG.md").read_text()
