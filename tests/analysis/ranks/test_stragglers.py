"""Ranks side by side (analysis/ranks/stragglers.py) and the rank rules, on the 8 DLRM ranks of one V100
job: each figure is checked against a calculation written here from the raw JSON (gzip + json,
no goodhart_prof reading code)."""
from __future__ import annotations

import gzip
import io
import json
import math
import statistics
from pathlib import Path

import pytest
from rich.console import Console

from goodhart_prof.analysis import analyze
from goodhart_prof.analysis.compare.comparison import compare
from goodhart_prof.report.html.page import render_html
from goodhart_prof.report.json_report import to_document
from goodhart_prof.report.text.report import render
from goodhart_prof.trace.load import load
from tests.support.helpers import merged
from tests.support.paths import DATA

DLRM = DATA / "param" / "dlrm_8rank"
SAMPLED = DATA / "hta" / "sampled_128rank"


def _raw(path: Path) -> dict:
    with gzip.open(path, "rt") as fh:
        return json.load(fh)


def _rank_files() -> dict[int, dict]:
    docs = [_raw(p) for p in sorted(DLRM.glob("*.json.gz"))]
    return {d["distributedInfo"]["rank"]: d for d in docs}


def _nccl(doc: dict) -> list[dict]:
    """The NCCL kernels of one rank file, by start."""
    return sorted((e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "kernel"
                   and e["name"].startswith("ncclKernel")), key=lambda e: e["ts"])


def _overlap(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> float:
    return sum(max(0.0, min(e1, e2) - max(s1, s2)) for s1, e1 in a for s2, e2 in b)


@pytest.fixture(scope="module")
def dlrm():
    return analyze(load(DLRM, progress=False))


@pytest.fixture(scope="module")
def expected():
    """Per collective (the j-th NCCL kernel of every rank, in start order): each rank's start and
    end; per rank its ProfilerStep#10 start and duration, and its exposed communication."""
    files = _rank_files()
    kernels = {r: _nccl(d) for r, d in files.items()}
    counts = {len(k) for k in kernels.values()}
    assert counts == {8}  # the same 8 collectives on every rank
    steps, exposed = {}, {}
    for r, d in files.items():
        (step,) = [e for e in d["traceEvents"] if e.get("name") == "ProfilerStep#10"]
        steps[r] = step
        comm = merged([(k["ts"], k["ts"] + k["dur"]) for k in kernels[r]])
        compute = merged([(e["ts"], e["ts"] + e["dur"]) for e in d["traceEvents"]
                          if e.get("ph") == "X" and e.get("cat") == "kernel"
                          and not e["name"].startswith("ncclKernel")])
        exposed[r] = sum(e - s for s, e in comm) - _overlap(comm, compute)
    return kernels, steps, exposed


def test_each_collective_is_matched_across_the_8_ranks_and_ends_together(dlrm, expected):
    kernels, _, _ = expected
    ranks = dlrm.ranks
    assert ranks.reason is None and ranks.unmatched == 0 and ranks.offsets_us == {}
    assert len(ranks.collectives) == 8 and set(ranks.collectives["ranks"]) == {8}
    for j, row in ranks.collectives.iterrows():
        starts = {r: kernels[r][j]["ts"] for r in kernels}
        ends = [kernels[r][j]["ts"] + kernels[r][j]["dur"] for r in kernels]
        last = max(starts, key=starts.get)
        assert row["last_rank"] == last
        assert row["skew_us"] == pytest.approx(max(starts.values()) - min(starts.values()))
        assert row["end_spread_us"] == pytest.approx(max(ends) - min(ends))
        assert row["end_spread_us"] <= 7  # one clock: NCCL completes on all ranks together
        waits = [starts[last] - s for r, s in starts.items() if r != last]
        assert row["others_wait_us"] == pytest.approx(sum(waits) / len(waits))


def test_each_rank_waits_and_exposes_what_the_raw_kernels_say(dlrm, expected):
    kernels, steps, exposed = expected
    table = dlrm.ranks.ranks.set_index("rank")
    for r in kernels:
        waits = [max(kernels[q][j]["ts"] for q in kernels) - kernels[r][j]["ts"] for j in range(8)]
        assert table.at[r, "wait_us"] == pytest.approx(sum(waits))
        assert table.at[r, "step_us"] == steps[r]["dur"]
        assert table.at[r, "exposed_us"] == pytest.approx(exposed[r])
    assert table["last_count"].sum() == 8


def test_rank_7_is_the_straggler_because_it_began_the_step_late(dlrm, expected):
    kernels, steps, _ = expected
    (it,) = dlrm.ranks.iterations.itertuples()
    assert (it.iteration, it.ranks, it.collectives, it.slowest_rank) == (10, 8, 8, 7)
    lasts = dlrm.ranks.collectives
    caused = lasts.loc[lasts["last_rank"] == 7, "others_wait_us"].sum()
    assert it.caused_wait_us == pytest.approx(caused) and it.caused_wait_us > 5000
    # its worst collective is the first all_to_all; it began ProfilerStep#10 late
    assert (it.worst_seq, it.worst_kind) == (0, "all_to_all")
    others = [r for r in kernels if r != 7]
    assert it.late_us == pytest.approx(kernels[7][0]["ts"] - statistics.median(kernels[r][0]["ts"] for r in others))
    assert it.late_start_us == pytest.approx(steps[7]["ts"] - statistics.median(steps[r]["ts"] for r in others))
    assert it.late_start_us > 0.9 * it.late_us
    (finding,) = [f for f in dlrm.findings if f.rule == "straggler_rank"]
    assert finding.evidence["rank"] == 7 and finding.evidence["cause"] == "start"
    assert finding.title.startswith("rank 7 holds the others back")
    mean_step = statistics.mean(s["dur"] for s in steps.values())
    assert finding.evidence["share_of_step"] == pytest.approx(caused / mean_step, abs=1e-4)
    # the exposed time is that waiting, so no exposed_communication finding on top of it
    assert "exposed_communication" not in {f.rule for f in dlrm.findings}


ELEMENT = {"float": 4, "long int": 8, "int": 4}  # the Input types these files use


def _message_bytes(doc: dict, kernel: dict) -> float:
    """S of one NCCL kernel from the raw file: the largest tensor operand (Input Dims x element
    size) of the innermost c10d:: op and nccl: annotation around the runtime call that launched
    it (same correlation id)."""
    (launch,) = [e for e in doc["traceEvents"] if e.get("cat") == "cuda_runtime"
                 and e.get("args", {}).get("correlation") == kernel["args"]["correlation"]]
    best = 0.0
    for prefix in ("c10d::", "nccl:"):
        around = [e for e in doc["traceEvents"] if e.get("ph") == "X" and e["name"].startswith(prefix)
                  and e["tid"] == launch["tid"] and e["ts"] <= launch["ts"] <= e["ts"] + e["dur"]]
        call = max(around, key=lambda e: e["ts"])
        for dims, typ in zip(call["args"]["Input Dims"], call["args"]["Input type"]):
            if typ in ELEMENT and dims and all(isinstance(d, int) for d in dims):
                best = max(best, float(math.prod(dims)) * ELEMENT[typ])
    return best


def test_dlrm_sizes_come_from_the_shapes_and_bandwidth_from_the_kernels(dlrm, expected):
    """The DLRM c10d records no message size: S is read off the shapes of the c10d op and nccl:
    annotation around each launch; the group is all 8 ranks (world_size 8, every collective ran
    on all 8 and ended together); busbw = S / t x 2(n-1)/n (all_reduce) or (n-1)/n (all_to_all),
    and once all arrived over t - wait (wait: the last rank's start - this rank's)."""
    kernels, _, _ = expected
    files = _rank_files()
    factor = {"all_reduce": 2 * 7 / 8, "all_to_all": 7 / 8}
    table = dlrm.communication.collectives.set_index(["rank", "kind"])
    for r, mine in kernels.items():
        sums: dict[str, list[float]] = {}
        for j, k in enumerate(mine):
            kind = "all_reduce" if "AllReduce" in k["name"] else "all_to_all"
            wait = max(kernels[q][j]["ts"] for q in kernels) - k["ts"]
            acc = sums.setdefault(kind, [0.0, 0.0, 0.0])
            acc[0] += _message_bytes(files[r], k)
            acc[1] += k["dur"]
            acc[2] += wait
        for kind, (s_bytes, dur, wait) in sums.items():
            row = table.loc[(r, kind)]
            assert (row["size_source"], row["group_size"], row["group_source"]) == ("shapes", 8, "all ranks")
            assert row["bytes"] == s_bytes
            assert row["algbw_gbps"] == pytest.approx(s_bytes / dur / 1e3)
            assert row["busbw_gbps"] == pytest.approx(s_bytes * factor[kind] / dur / 1e3)
            assert row["wait_us"] == pytest.approx(wait)
            assert row["arrived_busbw_gbps"] == pytest.approx(s_bytes * factor[kind] / (dur - wait) / 1e3)
    # worker0: 3 all_reduce of 394,241 + 112 + 226,960 floats; 5 all_to_all moving 64,448 B
    assert table.loc[(0, "all_reduce"), "bytes"] == (394241 + 112 + 226960) * 4
    assert table.loc[(0, "all_to_all"), "bytes"] == 64448
    # waiting for rank 7 is most of the kernel time; once all arrived the all_reduce runs at 25 GB/s
    assert table.loc[(0, "all_reduce"), "busbw_gbps"] < 3 < 20 < table.loc[(0, "all_reduce"), "arrived_busbw_gbps"]


def test_a_group_size_is_not_assumed_without_every_rank():
    """One DLRM rank alone: sizes from the shapes, but its group size is not recorded and the
    other ranks are not there to show it, so no busbw (algbw only)."""
    a = analyze(load(sorted(DLRM.glob("*.json.gz"))[0], progress=False))
    c = a.communication.collectives
    assert (c["size_source"] == "shapes").all() and c["bytes"].notna().all()
    assert c["group_size"].isna().all() and c["busbw_gbps"].isna().all() and c["wait_us"].isna().all()
    assert c["algbw_gbps"].notna().all()


def test_a_rank_on_another_clock_is_aligned_on_collective_ends(tmp_path, dlrm):
    """Rank 3's whole file 2.5 ms later (another host's clock): the offset is found from the
    collective ends, and every arrival figure is what it was."""
    for path in sorted(DLRM.glob("*.json.gz")):
        doc = _raw(path)
        if doc["distributedInfo"]["rank"] == 3:
            for e in doc["traceEvents"]:
                if "ts" in e:
                    e["ts"] += 2500
        with gzip.open(tmp_path / path.name, "wt") as fh:
            json.dump(doc, fh)
    shifted = analyze(load(tmp_path, progress=False)).ranks
    assert shifted.reason is None
    assert shifted.offsets_us == {3: pytest.approx(2500, abs=3)}
    for col in ("last_rank", "skew_us", "others_wait_us"):
        assert shifted.collectives[col].to_numpy() == pytest.approx(dlrm.ranks.collectives[col].to_numpy(), abs=3)


def test_collectives_that_do_not_pair_up_are_not_judged():
    a = analyze(load(SAMPLED, progress=False))
    assert "do not end together" in a.ranks.reason
    assert a.ranks.iterations.empty and not a.ranks.ranks.empty  # per-rank figures still there
    skipped = {n.rule: n.reason for n in a.not_judged}
    assert skipped["straggler_rank"] == a.ranks.reason
    (f,) = [f for f in a.findings if f.rule == "exposed_communication"]
    assert "may be waiting for slower ranks" in f.title


def test_process_groups_are_matched_apart(tmp_path):
    """Two ranks run collectives of two process groups in a different interleaving: matched by
    group, each pair ends together and the late rank is found per group."""
    def rank_file(rank: int, order: list[tuple[str, float, float]]) -> dict:
        events = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1,
                   "ts": 0, "dur": 10_000}]
        for i, (pg, start, end) in enumerate(order):
            events += [
                {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 1, "tid": 1,
                 "ts": 100 * i + 10, "dur": 50, "args": {"Collective name": "allreduce",
                                                         "Process Group Name": pg, "Group size": 2,
                                                         "In msg nelems": 1024, "dtype": "Float"}},
                {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                 "ts": 100 * i + 20, "dur": 5, "args": {"correlation": i + 1}},
                {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
                 "pid": 0, "tid": 7, "ts": start, "dur": end - start,
                 "args": {"device": 0, "stream": 7, "correlation": i + 1}}]
        return {"traceEvents": events, "distributedInfo": {"rank": rank, "world_size": 2}}
    # pg "a" ends at 1000 and 3000, pg "b" at 2000: rank 1 issues b first, and is late to a#0
    r0 = rank_file(0, [("a", 500, 1000), ("b", 1500, 2000), ("a", 2500, 3000)])
    r1 = rank_file(1, [("b", 1200, 2000), ("a", 900, 1000), ("a", 2800, 3000)])
    for rank, doc in ((0, r0), (1, r1)):
        (tmp_path / f"rank{rank}.json").write_text(json.dumps(doc))
    ranks = analyze(load(tmp_path, progress=False)).ranks
    assert ranks.reason is None and ranks.unmatched == 0
    got = ranks.collectives[["process_group", "last_rank", "skew_us", "end_spread_us"]]
    assert sorted(map(tuple, got.to_numpy().tolist())) == [("a", 1, 300.0, 0.0), ("a", 1, 400.0, 0.0),
                                                          ("b", 0, 300.0, 0.0)]


def test_reports_show_the_ranks(dlrm):
    out = io.StringIO()
    render(dlrm, Console(file=out, width=200, color_system=None))
    text = out.getvalue()
    assert "Ranks (mean per traced iteration, 1 iteration)" in text
    assert "iteration 10: rank 7 arrived last at 5 of 8 collectives" in text
    assert "c10d::alltoall_base_" in text  # where the collectives are called from
    doc = to_document(dlrm)
    json.dumps(doc, allow_nan=False)
    assert doc["ranks"]["iterations"][0]["slowest_rank"] == 7
    assert {r["rank"] for r in doc["ranks"]["ranks"]} == set(range(8))
    assert doc["communication_sites"][0]["kind"] == "all_to_all"
    page = render_html(dlrm)
    assert 'id="ranks"' in page and 'id="fig-arrivals"' in page and 'id="fig-ranks"' in page


def test_diff_pairs_communication_by_collective(dlrm):
    other = analyze(load(SAMPLED, progress=False))
    c = compare(dlrm, other)
    comm = c.communication.set_index("kind")
    assert comm.at["all_gather", "presence"] == "b_only"
    assert comm.at["all_to_all", "total_us_a"] == pytest.approx(
        dlrm.communication.collectives.query("kind == 'all_to_all'")["total_us"].sum())
    summary = c.summary.set_index("metric")
    assert summary.at["straggler_wait_per_iteration_us", "a"] == pytest.approx(
        dlrm.ranks.iterations["caused_wait_us"].mean())
    assert summary.at["straggler_wait_per_iteration_us", "b"] != summary.at["straggler_wait_per_iteration_us", "b"]
