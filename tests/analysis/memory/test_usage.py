"""Memory (analysis/memory/usage.py, rules/memory.py) on real traces, checked against a plain pass over
the raw JSON written here; the loader's memory table on every load path; memory_growth planted in
our own trainer; run.json's memory per traced iteration (the memory rules on built traces:
tests/analysis/rules/test_memory.py)."""
from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

import goodhart_prof.trace.load as loader
from goodhart_prof.analysis import analyze
from goodhart_prof.analysis.compare.comparison import compare
from goodhart_prof.report.diff import document as diff_json
from goodhart_prof.report.text import report as text
from goodhart_prof.report.html.page import render_html
from goodhart_prof.report.json_report import to_document
from goodhart_prof.trace.load import load
from tests.support.helpers import clean_env, write_tiny_config
from tests.support.events import load_events, memory_event, op
from tests.support.paths import DATA

V100 = DATA / "hta" / "v100_ddp_rank1.json.gz"
OWL = DATA / "tracelens" / "h100_owlv2_inference.json.gz"
RESNET_2021 = DATA / "kineto" / "resnet50_v100_2021.pt.trace.json.gz"
QWEN = DATA / "tracelens" / "mi300_qwen_inference.json.gz"


# -- the independent calculation: the raw JSON, one plain pass -----------------------------------
def raw_memory(path: Path) -> dict:
    """Per (device_type, device id): peak Total Allocated/Reserved, allocations (Bytes > 0), and
    per ProfilerStep#N the allocations inside it and Total Allocated after the last event by
    its end (or the running sum of Bytes where no total is recorded)."""
    with gzip.open(path, "rt") as fh:
        events = json.load(fh)["traceEvents"]
    steps = sorted((e["ts"], e["ts"] + e["dur"], int(e["name"].split("#")[1])) for e in events
                   if e.get("ph") == "X" and e.get("cat") in ("user_annotation", "Operator", "cpu_op")
                   and str(e.get("name", "")).startswith("ProfilerStep#"))
    mem = sorted((e for e in events if e.get("ph") == "i" and e.get("name") == "[memory]"),
                 key=lambda e: e["ts"])  # sorted() is stable: file order on equal stamps
    out: dict = defaultdict(lambda: {"peak_allocated": None, "peak_reserved": None, "allocations": 0,
                                     "per_step": defaultdict(int), "end": {}, "running": 0})
    for e in mem:
        a = e["args"]
        d = out[(a["Device Type"], a["Device Id"])]
        d["running"] += a["Bytes"]
        total = a.get("Total Allocated", d["running"])
        d["peak_allocated"] = total if d["peak_allocated"] is None else max(d["peak_allocated"], total)
        if "Total Reserved" in a:
            d["peak_reserved"] = max(d["peak_reserved"] or 0, a["Total Reserved"])
        for start, end, n in steps:
            if e["ts"] <= end:
                d["end"][n] = total  # the last event at or before each later step's end wins
            if a["Bytes"] > 0 and start <= e["ts"] <= end:
                d["per_step"][n] += 1
        d["allocations"] += a["Bytes"] > 0
    return dict(out)


@pytest.mark.parametrize("path", [V100, OWL, QWEN, RESNET_2021], ids=lambda p: p.name.split(".")[0])
def test_figures_equal_a_plain_pass_over_the_raw_json(path):
    want = raw_memory(path)
    mem = analyze(load(path)).memory
    got = {(int(r.device_type), int(r.device)): r for r in mem.devices.itertuples()}
    assert set(got) == set(want)
    for key, w in want.items():
        r = got[key]
        assert r.allocations == w["allocations"], key
        assert r.peak_allocated == pytest.approx(w["peak_allocated"]), key
        if key[0] == 0 or w["peak_reserved"] is None:  # the host has no caching allocator
            assert np.isnan(r.peak_reserved), key
        else:
            assert r.peak_reserved == w["peak_reserved"], key
            assert r.reserved_ratio == pytest.approx(w["peak_reserved"] / w["peak_allocated"])
        its = mem.iterations[(mem.iterations["device_type"] == key[0]) & (mem.iterations["device"] == key[1])]
        assert dict(zip(its["iteration"], its["allocations"])) == {n: w["per_step"][n] for n in its["iteration"]}
        ends = [w["end"][n] for n in sorted(w["end"])]
        assert r.growth == pytest.approx(ends[-1] - ends[0]), key
        assert r.iterations == len(ends)


def test_v100_figures_and_a_silent_verdict():
    a = analyze(load(V100))
    gpu = a.memory.devices.set_index("label").loc["rank1/gpu1"]
    assert gpu["peak_reserved"] == 12_782_141_440 and gpu["peak_allocated"] == 6_629_508_096
    assert gpu["allocations_per_iteration"] == 2677 and gpu["growth"] == 0
    assert not {"allocator_waste", "memory_growth", "alloc_churn"} & {f.rule for f in a.findings}
    doc = to_document(a)
    assert doc["memory"]["rank1/gpu1"]["peak_reserved"] == 12_782_141_440
    assert doc["memory"]["rank1/host"]["peak_reserved"] is None
    assert len(doc["memory"]["rank1/gpu1"]["per_iteration"]) == 5
    json.dumps(doc)


def test_a_2021_trace_has_relative_allocated_and_no_reserved():
    a = analyze(load(RESNET_2021))
    d = a.memory.devices.set_index("label")
    assert not d["absolute"].any() and d["peak_reserved"].isna().all()
    skipped = {n.rule: n.reason for n in a.not_judged}
    assert "Total Reserved" in skipped["allocator_waste"]


# -- the loader: every path carries the memory table ---------------------------------------------
def test_split_decode_and_the_lenient_path_keep_memory_events(tmp_path, monkeypatch):
    whole = load(V100, workers=1)
    monkeypatch.setattr(loader, "PIECE_BYTES", 8 << 20)  # the 35 MB document in pieces
    split = load(V100, workers=3)
    assert len(whole.memory) == 28010 and split.memory.equals(whole.memory)
    with gzip.open(V100, "rt") as fh:
        doc = json.load(fh)
    doc["traceEvents"].append({"ph": "X", "name": "broken", "ts": {"not": "a number"}})
    (tmp_path / "broken.json").write_text(json.dumps(doc))
    lenient = load(tmp_path / "broken.json")
    assert lenient.skipped_events == 1
    assert lenient.memory.reset_index(drop=True).equals(whole.memory)


def test_a_folder_of_ranks_keeps_each_ranks_memory(tmp_path):
    with gzip.open(V100, "rt") as fh:
        doc = json.load(fh)
    shutil.copy(V100, tmp_path / "rank1.json.gz")
    doc["distributedInfo"]["rank"] = 0
    for e in doc["traceEvents"]:
        if e.get("name") == "[memory]":
            e["args"]["Bytes"] *= 2
    (tmp_path / "rank0.json").write_text(json.dumps(doc))
    t = load(tmp_path)
    assert t.ranks == [0, 1] and sorted(set(t.memory["rank"])) == [0, 1]
    per = t.memory.groupby("rank")["bytes"].apply(lambda b: b[b > 0].sum())
    assert per[0] == 2 * per[1]
    assert len(t.select(rank=0).memory) == len(t.memory) // 2


def test_other_instants_and_odd_args_are_dropped_not_fatal(tmp_path):
    events = [op("aten::empty", 0, 10), {"ph": "i", "name": "Iteration Start", "ts": 1, "pid": 1, "tid": 1},
              memory_event(2, 512, 512, 2048), memory_event(3, "lots", None, [1], addr="x")]
    t = load_events(tmp_path, events)
    assert len(t.memory) == 2 and t.skipped_events == 0
    odd = t.memory.iloc[1]
    assert np.isnan(odd["bytes"]) and np.isnan(odd["total_allocated"]) and odd["addr"] == -1


MB = 10**6


# -- reports -------------------------------------------------------------------------------------
def test_text_html_and_diff_show_memory():
    a, b = analyze(load(OWL)), analyze(load(V100))
    console = Console(record=True, width=200)
    text.render(a, console)
    out = console.export_text()
    assert "Memory" in out and "rank0/gpu0" in out and "n/a (host)" in out
    page = render_html(a)
    assert 'id="fig-memory"' in page and "Memory per device" in page
    c = compare(a, b)
    rows = c.memory.set_index("label")
    assert rows.loc["rank0/gpu0", "peak_allocated_a"] == 2_707_847_680
    assert np.isnan(rows.loc["rank0/gpu0", "peak_allocated_b"])  # B's GPU is rank1/gpu1
    assert rows.loc["rank1/gpu1", "allocations_per_iteration_b"] == 2677
    assert diff_json.to_document(c)["memory"][0]["label"] == "rank0/gpu0"


# -- our own trainer: run.json (memory_growth planted: tests/trainer/test_antipatterns.py) -----------------------
@pytest.fixture(scope="module")
def clean_run(tmp_path_factory) -> Path:
    """A clean CPU run, three traced iterations, full mode."""
    root = tmp_path_factory.mktemp("memory")
    argv = [sys.executable, "-m", "goodhart_prof.cli", "run", "--iterations", "2-4", "--mode", "full",
            "--config", str(write_tiny_config(root)), "--output-dir", str(root), "--name", "clean", "--no-progress"]
    res = subprocess.run(argv, env=clean_env(OMP_NUM_THREADS="1"), capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    return root / "clean"


@pytest.mark.slow
def test_run_json_keeps_memory_per_traced_iteration(clean_run):
    record = json.loads((clean_run / "run.json").read_text())
    rows = record["memory_per_iteration"]["0"]
    assert [r["iteration"] for r in rows] == record["profiling"]["iterations_traced"] == [2, 3, 4]
    assert all(r["rss_bytes"] > 10 * MB for r in rows)
    assert all(r["max_memory_allocated"] is None and r["max_memory_reserved"] is None for r in rows)


@pytest.mark.slow
def test_our_trainer_shows_its_host_memory(clean_run):
    raw = raw_memory(clean_run / "rank-0.pt.trace.json.gz")
    assert set(raw) == {(0, -1)}  # a CPU run: the host only
    want = raw[(0, -1)]
    a = analyze(load(clean_run))
    host = a.memory.devices.set_index("label").loc["rank0/host"]
    assert host["peak_allocated"] == want["peak_allocated"] and host["allocations"] == want["allocations"]
    assert np.isnan(host["peak_reserved"]) and host["iterations"] == 3
