"""Performance log: concurrent appends lose nothing, rows are newest first, figures are right,
env-steps/s come from run.json, compare gives the right deltas, bad input is one line, exit 2."""
from __future__ import annotations

import gzip
import json
import multiprocessing
import shutil
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from goodhart_prof import perflog

from tests.support.helpers import clean_env, run_main
from tests.support.paths import DATA

H100 = DATA / "tracelens" / "h100_owlv2_inference.json.gz"
MI250 = DATA / "hta" / "mi250_minitoy_rocm.json.gz"
N_CELLS = len(perflog.COLUMNS)


def cells(line: str) -> list[str]:
    """The cells of a markdown table row, honouring backslash escapes (`\\|` is not a border)."""
    out, cur, i = [], "", 0
    body = line.strip()
    assert body.startswith("|") and body.endswith("|") and not body.endswith("\\|"), line
    body = body[1:-1]
    while i < len(body):
        if body[i] == "\\" and i + 1 < len(body):
            cur += body[i: i + 2]
            i += 2
            continue
        if body[i] == "|":
            out.append(cur.strip())
            cur = ""
        else:
            cur += body[i]
        i += 1
    return out + [cur.strip()]


def table(log: Path) -> list[list[str]]:
    """The log's table rows as cells, after checking the table is well-formed."""
    lines = log.read_text().splitlines()
    assert lines.count(perflog.HEADER) == 1
    start = lines.index(perflog.HEADER)
    assert lines[start + 1] == perflog.SEPARATOR
    rows = []
    for line in lines[start + 2:]:
        if not line.strip():
            break
        rows.append(cells(line))
        assert len(rows[-1]) == N_CELLS, line
    assert all(not line.strip() for line in lines[start + 2 + len(rows):])  # nothing after the table
    return rows


def jsonl(log: Path) -> list[dict]:
    return [json.loads(line) for line in perflog.jsonl_path(log).read_text().splitlines()]


def one_line_error(code: int, err: str, *words: str) -> None:
    assert code == 2 and err.startswith("Error: ") and err.strip().count("\n") == 0, err
    for word in words:
        assert word in err


def measured(**figures) -> dict:
    base = {"trace": "t.json", "iteration_ms": 10.0, "env_steps_per_s": 1000.0, "gpu_busy_pct": 50.0,
            "syncs_per_iteration": 4.0, "top_kernel": "k1", "top_kernel_pct": 30.0, "memcpy_htod_ms": 2.0}
    return {**base, **figures}


# -- concurrent writers ----------------------------------------------------------------------------
def _writer(log: str, who: int, rows: int, barrier) -> None:
    barrier.wait()
    for j in range(rows):
        perflog.append(measured(iteration_ms=float(who * 100 + j)), f"writer {who} | row {j}", log)


def check_consistent(log: Path, expected_changes: set[str]) -> None:
    rows, records = table(log), jsonl(log)
    ids = [int(r[0]) for r in rows]
    assert len(rows) == len(records) == len(expected_changes)
    assert ids == sorted(ids, reverse=True) == list(range(len(rows), 0, -1))  # newest first, no gaps
    assert [r["id"] for r in records] == list(range(1, len(records) + 1))  # append order
    assert {r["change"] for r in records} == expected_changes
    assert {r[2].replace("\\|", "|") for r in rows} == expected_changes
    by_id = {r["id"]: r for r in records}
    for row in rows:  # the markdown row and the JSON row with the same id agree
        assert row[2].replace("\\|", "|") == by_id[int(row[0])]["change"]


def test_concurrent_appends_lose_no_row(tmp_path):
    log = tmp_path / "PERFLOG.md"
    context = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else None)
    writers, rows = 6, 5
    barrier = context.Barrier(writers)
    procs = [context.Process(target=_writer, args=(str(log), i, rows, barrier)) for i in range(writers)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0] * writers
    check_consistent(log, {f"writer {i} | row {j}" for i in range(writers) for j in range(rows)})
    # Each writer's own rows keep their order (ids increase with its j).
    seen = defaultdict(list)
    for r in jsonl(log):
        seen[int(r["change"].split()[1])].append(r["iteration_ms"])
    assert all(v == sorted(v) for v in seen.values())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["PERFLOG.jsonl", "PERFLOG.md", "PERFLOG.md.lock"]


def test_concurrent_cli_adds(tmp_path):
    log = tmp_path / "PERFLOG.md"
    log.write_text("# Notes on this project\n\nSome text that must survive.\n")
    procs = [subprocess.Popen([sys.executable, "-m", "goodhart_prof.cli", "log", "add", str(MI250),
                               "--change", f"cli {i}", "--log", str(log)], env=clean_env(),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(6)]
    results = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0] * 6, results
    assert all("added to" in out for out, _ in results)
    check_consistent(log, {f"cli {i}" for i in range(6)})
    text = log.read_text()
    assert text.startswith("# Notes on this project\n\nSome text that must survive.\n")
    assert text.count(perflog.TITLE) == 1


# -- figures ---------------------------------------------------------------------------------------
def raw_events(path: Path) -> list[dict]:
    with gzip.open(path, "rt") as fh:
        return json.load(fh)["traceEvents"]


def test_row_figures_match_the_trace(tmp_path):
    log = tmp_path / "PERFLOG.md"
    row = perflog.add(H100, "baseline", log)
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


def test_env_steps_from_run_json(tmp_path):
    run = tmp_path / "traces"
    run.mkdir()
    shutil.copy(MI250, run / "rank-0.pt.trace.json.gz")
    (run / "run.json").write_text(json.dumps({"schema": "goodhart-prof/run/v1", "env_steps_per_s": 16991.4}))
    log = tmp_path / "PERFLOG.md"
    by_folder = perflog.add(run, "folder", log)
    by_file = perflog.add(run / "rank-0.pt.trace.json.gz", "file", log)
    assert by_folder["env_steps_per_s"] == by_file["env_steps_per_s"] == 16991.4
    assert [r[5] for r in table(log)] == ["16,991", "16,991"]
    (run / "run.json").write_text("{not json")
    with pytest.raises(perflog.PerfLogError, match="run.json"):
        perflog.add(run, "broken", log)
    assert len(jsonl(log)) == 2


def test_newest_first_and_existing_text_kept(tmp_path):
    log = tmp_path / "notes.md"
    log.write_text("# Optimisation notes\n\n| other | table |\n|---|---|\n| a | b |\n")
    for i in range(3):
        perflog.append(measured(), f"change {i}", log)
    assert [r[2] for r in table(log)] == ["change 2", "change 1", "change 0"]
    assert log.read_text().startswith("# Optimisation notes\n\n| other | table |\n|---|---|\n| a | b |\n")
    assert perflog.jsonl_path(log).name == "notes.jsonl"
    assert [r["change"] for r in perflog.read_rows(log)] == ["change 2", "change 1", "change 0"]


# -- compare ---------------------------------------------------------------------------------------
def test_compare_rows_and_command(tmp_path, capsys):
    log = tmp_path / "PERFLOG.md"
    perflog.append(measured(), "baseline", log)
    perflog.append(measured(iteration_ms=8.0, env_steps_per_s=1250.0, gpu_busy_pct=60.0,
                            syncs_per_iteration=0.0, top_kernel="k2", top_kernel_pct=25.0,
                            memcpy_htod_ms=1.0), "no .item()", log)
    rows = perflog.read_rows(log)
    a, b = perflog.select(rows, "2"), perflog.select(rows, "id:2")
    assert (a["change"], b["change"]) == ("baseline", "no .item()")
    fields = {f["field"]: f for f in perflog.compare_rows(a, b)}
    # rows without a recorded spread (as older rows) never call time or env-steps/s better or worse
    expect = {"iteration_ms": (-2.0, 0.8, "no spread recorded"),
              "env_steps_per_s": (250.0, 1.25, "no spread recorded"),
              "gpu_busy_pct": (10.0, 1.2, "better"), "syncs_per_iteration": (-4.0, 0.0, "better"),
              "top_kernel_pct": (-5.0, 25 / 30, None), "memcpy_htod_ms": (-1.0, 0.5, "better")}
    for name, (delta, ratio, verdict) in expect.items():
        f = fields[name]
        assert (f["delta"], f["verdict"]) == (pytest.approx(delta), verdict), name
        assert f["ratio"] == pytest.approx(ratio), name
    assert fields["top_kernel"]["verdict"] == "changed" and fields["top_kernel"]["delta"] is None
    assert [f["verdict"] for f in perflog.compare_rows(b, a)][:4] == ["no spread recorded", "no spread recorded", "worse", "worse"]
    spread = {"env_steps_per_s_low": 900.0, "env_steps_per_s_high": 1100.0, "env_steps_per_s_n": 5}
    for b_low, b_high, n, verdict in ((1050.0, 1400.0, 5, "within noise"), (1150.0, 1400.0, 5, "better"),
                                      (1150.0, 1400.0, 2, "not judged")):
        b2 = {**b, "env_steps_per_s_low": b_low, "env_steps_per_s_high": b_high, "env_steps_per_s_n": n}
        got = {f["field"]: f["verdict"] for f in perflog.compare_rows({**a, **spread}, b2)}
        assert got["env_steps_per_s"] == verdict, (b_low, n)

    code, out, _ = run_main(["log", "compare", "2", "1", "--log", str(log)], capsys)
    assert code == 0
    lines = {line.split()[0]: line for line in out.splitlines() if line.split()}
    assert "-2.00" in lines["iteration_ms"] and "0.800x" in lines["iteration_ms"] and "no spread recorded" in lines["iteration_ms"]
    assert "+250" in lines["env_steps_per_s"] and "1.250x" in lines["env_steps_per_s"]
    assert "-4.00" in lines["syncs_per_iteration"] and "changed" in lines["top_kernel"]
    code, out, _ = run_main(["log", "show", "--log", str(log)], capsys)
    assert code == 0 and out.index("no .item()") < out.index("baseline")


# -- bad input -------------------------------------------------------------------------------------
def test_bad_input_is_one_line_exit_2(tmp_path, capsys):
    log = tmp_path / "PERFLOG.md"
    one_line_error(*run_main(["log", "show", "--log", str(log)], capsys)[::2], "no performance log rows")
    one_line_error(*run_main(["log", "add", str(tmp_path / "missing.json"), "--change", "x", "--log", str(log)],
                             capsys)[::2], "missing.json")
    assert not log.exists() and not perflog.jsonl_path(log).exists()
    perflog.append(measured(), "only row", log)
    for ref, words in (("0", ("no such row",)), ("2", ("no such row",)), ("abc", ("abc",)),
                       ("id:7", ("id:7",)), ("-1", ())):
        one_line_error(*run_main(["log", "compare", ref, "1", "--log", str(log)], capsys)[::2], *words)
    one_line_error(*run_main(["log", "add", str(MI250), "--change", "  ", "--log", str(log)], capsys)[::2],
                   "--change")
    one_line_error(*run_main(["log", "add", str(MI250), "--log", str(log)], capsys)[::2], "--change")
    assert len(jsonl(log)) == 1 and len(table(log)) == 1
