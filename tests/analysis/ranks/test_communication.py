"""Communication per rank (analysis/ranks/communication.py) on real NCCL traces, each figure checked against a
calculation written here from the raw JSON (gzip + json, no goodhart_prof reading code)."""
from __future__ import annotations

import gzip
import io
import json
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

from goodhart_prof.analysis import analyze
from goodhart_prof.analysis.ranks.communication import bus_factor, communication
from goodhart_prof.report.json_report import to_document
from goodhart_prof.report.text.report import render
from goodhart_prof.trace.load import load
from tests.support.paths import DATA

DLRM = DATA / "param" / "dlrm_8rank"
SAMPLED = DATA / "hta" / "sampled_128rank"
MI300 = DATA / "tracelens" / "mi300_resnet_act_checkpoint_train.json.gz"
NO_COMM = DATA / "tracelens" / "h100_bert_small_inference.json.gz"

# c10d op / record_param_comms collective -> kind, as the host called it
OP_KIND = {"c10d::alltoall_base_": "all_to_all", "c10d::allreduce_": "all_reduce",
           "c10d::_allgather_base_": "all_gather", "c10d::broadcast_": "broadcast",
           "allreduce": "all_reduce", "broadcast": "broadcast"}


def _raw(path: Path) -> dict:
    with gzip.open(path, "rt") as fh:
        return json.load(fh)


def _expected(path: Path, holder) -> tuple[int, list[dict]]:
    """The rank of a file and its NCCL kernels, each with the host event `holder` picks around
    its launch call (the runtime call with the kernel's correlation, on the same thread)."""
    doc = _raw(path)
    events = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    launches = {e["args"]["correlation"]: e for e in events
                if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})}
    out = []
    for e in events:
        if e.get("cat") != "kernel" or not e["name"].lower().startswith("nccl"):
            continue
        launch = launches.get(e["args"]["correlation"])
        around = None
        if launch is not None:
            holding = [h for h in events if holder(h) and h["pid"] == launch["pid"]
                       and h["tid"] == launch["tid"] and h["ts"] <= launch["ts"]
                       and h["ts"] + h["dur"] >= launch["ts"] + launch["dur"]]
            around = max(holding, key=lambda h: h["ts"]) if holding else None  # innermost
        out.append({"kernel": e, "around": around})
    return doc["distributedInfo"]["rank"], out


def _is_c10d(e: dict) -> bool:
    return e.get("cat") == "cpu_op" and e["name"].startswith("c10d::")


def _by_kind(paths) -> dict[tuple[int, str], tuple[int, float]]:
    """(rank, kind) -> (count, summed kernel duration), the kind from the c10d op around the launch."""
    sums: dict = defaultdict(lambda: [0, 0.0])
    for path in paths:
        rank, kernels = _expected(path, _is_c10d)
        for k in kernels:
            kind = OP_KIND[k["around"]["name"]]
            sums[(rank, kind)][0] += 1
            sums[(rank, kind)][1] += k["kernel"]["dur"]
    return {key: (c, t) for key, (c, t) in sums.items()}


def _covered(points: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Whether each point lies inside some [start, end): checked against every interval."""
    if not len(starts):
        return np.zeros(len(points), dtype=bool)
    return ((points[:, None] >= starts[None, :]) & (points[:, None] < ends[None, :])).any(axis=1)


def _overlap(path: Path) -> tuple[int, float, float]:
    """rank, communication time (union) and the part of it with a compute kernel running: cut
    the timeline at every kernel start and end, and test each piece's midpoint."""
    doc = _raw(path)
    kernels = [e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "kernel"]
    comm = np.array([(e["ts"], e["ts"] + e["dur"]) for e in kernels if e["name"].startswith("nccl")])
    compute = np.array([(e["ts"], e["ts"] + e["dur"]) for e in kernels if not e["name"].startswith("nccl")])
    cuts = np.unique(np.concatenate([comm.ravel(), compute.ravel()]).astype(float))
    mid, length = (cuts[1:] + cuts[:-1]) / 2, np.diff(cuts)
    in_comm = _covered(mid, comm[:, 0], comm[:, 1])
    in_compute = _covered(mid, compute[:, 0], compute[:, 1])
    return (doc["distributedInfo"]["rank"], float(length[in_comm].sum()),
            float(length[in_comm & in_compute].sum()))


@pytest.fixture(scope="module")
def dlrm():
    return communication(load(DLRM, progress=False))


@pytest.fixture(scope="module")
def sampled():
    return communication(load(SAMPLED, progress=False))


def _table(comm) -> dict[tuple[int, str], tuple[int, float]]:
    return {(int(r.rank), r.kind): (int(r.count), float(r.total_us))
            for r in comm.collectives.itertuples()}


def test_dlrm_collectives_per_rank_match_the_raw_kernels(dlrm):
    expected = _by_kind(sorted(DLRM.glob("*.json.gz")))
    assert _table(dlrm).keys() == expected.keys()
    for key, (count, total) in expected.items():
        assert _table(dlrm)[key][0] == count
        assert _table(dlrm)[key][1] == pytest.approx(total, abs=1e-6)
    # worker0: its 5 SendRecv kernels are the all_to_all it called, its 3 AllReduce an all_reduce
    assert _table(dlrm)[(0, "all_to_all")] == (5, 3999.0)
    assert _table(dlrm)[(0, "all_reduce")] == (3, 1799.0)
    assert set(dlrm.collectives["rank"]) == set(range(8))


def test_dlrm_sizes_are_read_off_the_shapes_but_not_its_group(dlrm):
    """DLRM's c10d records no message size (record_param_comms has no nelems): the sizes come
    from the nccl:/c10d shapes (checked per kernel in test_ranks.py); without the ranks side by
    side no group size is known, so algbw but no busbw."""
    c = dlrm.collectives
    assert (c["sized_count"] == c["count"]).all() and (c["size_source"] == "shapes").all()
    assert c["algbw_gbps"].notna().all() and c["busbw_gbps"].isna().all()
    assert dlrm.sizes_recorded


def test_dlrm_overlap_matches_an_independent_sweep(dlrm):
    rows = {int(r.rank): r for r in dlrm.overlap.itertuples()}
    assert sorted(rows) == list(range(8))
    for path in sorted(DLRM.glob("*.json.gz")):
        rank, comm_us, overlapped = _overlap(path)
        r = rows[rank]
        assert r.comm_us == pytest.approx(comm_us, abs=1e-6)
        assert r.overlapped_us == pytest.approx(overlapped, abs=1e-6)
        assert r.exposed_us == pytest.approx(comm_us - overlapped, abs=1e-6)
        assert r.overlap == pytest.approx(overlapped / comm_us)
    assert rows[0].comm_us == 5798.0 and rows[0].overlapped_us == 261.0


def test_sampled_128rank_collectives_and_overlap(sampled):
    paths = sorted(SAMPLED.glob("*.json.gz"))
    expected = _by_kind(paths)
    table = _table(sampled)
    assert table.keys() == expected.keys()
    for key, (count, total) in expected.items():
        assert table[key] == (count, pytest.approx(total, abs=1e-6))
    # every NCCL kernel here is named SendRecv; the ops that launched them say what they were
    assert {k: c for (r, k), (c, _) in table.items() if r == 0} == \
        {"all_to_all": 4, "all_reduce": 4, "all_gather": 2}
    rows = {int(r.rank): r for r in sampled.overlap.itertuples()}
    for path in paths:
        rank, comm_us, overlapped = _overlap(path)
        assert rows[rank].comm_us == pytest.approx(comm_us, abs=1e-6)
        assert rows[rank].overlapped_us == pytest.approx(overlapped, abs=1e-6)
        assert 0 < overlapped < comm_us


def _is_param_comms(e: dict) -> bool:
    return e.get("cat") == "cpu_op" and e["name"] == "record_param_comms"


def test_message_sizes_and_bus_bandwidth_follow_nccl_tests():
    """mi300 trace: record_param_comms records Collective name, In/Out msg nelems, Group size,
    dtype; S = max(in, out) x element size, busbw = algbw x 2(n-1)/n (all_reduce), x 1 (broadcast)."""
    rank, kernels = _expected(MI300, _is_param_comms)
    element = {"BFloat16": 2, "Long": 8}
    sums: dict = defaultdict(lambda: [0.0, 0.0, 0.0])  # kind -> bytes, bus bytes, time
    unlinked = 0
    for k in kernels:
        op = k["around"]
        if op is None:
            unlinked += 1
            continue
        a = op["args"]
        kind = OP_KIND[a["Collective name"]]
        size = max(a["In msg nelems"], a["Out msg nelems"]) * element[a["dtype"]]
        n = a["Group size"]
        factor = 2 * (n - 1) / n if kind == "all_reduce" else 1.0
        sums[kind][0] += size
        sums[kind][1] += size * factor
        sums[kind][2] += k["kernel"]["dur"]
    comm = communication(load(MI300, progress=False))
    rows = {r.kind: r for r in comm.collectives.itertuples()}
    assert set(rows) == set(sums) | {"other"}
    for kind, (nbytes, bus, t) in sums.items():
        r = rows[kind]
        assert r.sized_count == r.count
        assert r.bytes == pytest.approx(nbytes)
        assert r.algbw_gbps == pytest.approx(nbytes / t / 1e3)
        assert r.busbw_gbps == pytest.approx(bus / t / 1e3)
    assert rows["all_reduce"].busbw_gbps == pytest.approx(rows["all_reduce"].algbw_gbps * 1.75)
    # kernels whose launch is not in the trace: no op, no kind, no size (never guessed)
    assert rows["other"].count == unlinked == 5 and rows["other"].sized_count == 0
    assert np.isnan(rows["other"].bytes) and np.isnan(rows["other"].busbw_gbps)
    assert comm.sizes_recorded


def test_bus_factor():
    kinds = np.array(["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast",
                      "send_recv", "other", "all_reduce", "broadcast"])
    n = np.array([8, 8, 4, 2, 8, 2, 8, np.nan, np.nan])
    got = bus_factor(kinds, n)
    assert got[:6].tolist() == [1.75, 0.875, 0.75, 0.5, 1.0, 1.0]
    assert np.isnan(got[6]) and np.isnan(got[7]) and got[8] == 1.0


def test_analyze_reports_communication_only_when_there_is_some():
    a = analyze(load(DLRM, progress=False))
    doc = to_document(a)
    assert [e["rank"] for e in doc["communication"]] == list(range(8))
    first = doc["communication"][0]
    assert first["comm_us"] == 5798.0 and first["exposed_us"] == 5537.0
    assert {c["kind"]: c["count"] for c in first["collectives"]} == {"all_to_all": 5, "all_reduce": 3}
    to_all = first["collectives"][0]
    assert (to_all["bytes"], to_all["group_size"], to_all["size_source"], to_all["group_source"]) == \
        (64448.0, 8.0, "shapes", "all ranks")
    out = io.StringIO()
    render(a, Console(file=out, width=200, color_system=None))
    text = out.getvalue()
    assert "Communication (NCCL/RCCL kernels)" in text and "message sizes: from the shapes" in text
    assert "busbw once all arrived" in text and "62.9 KiB" in text
    assert "n (group size): not recorded; the job's world size" in text

    quiet = analyze(load(NO_COMM, progress=False))
    assert to_document(quiet)["communication"] == []
    out = io.StringIO()
    render(quiet, Console(file=out, width=140, color_system=None))
    assert "Communication" not in out.getvalue()


def test_odd_collective_args_load_blank(tmp_path):
    """A value of the wrong type drops that value (never the event)."""
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 1, "tid": 1, "ts": 0, "dur": 10,
         "args": {"Collective name": ["allreduce"], "In msg nelems": "12", "Out msg nelems": 12.0,
                  "Group size": -3, "dtype": "Float", "Process Group Name": 7}},
        {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_Generic", "pid": 0, "tid": 7, "ts": 2, "dur": 4,
         "args": {"device": 0, "stream": 7, "correlation": 1, "In msg nelems": 5, "Group size": 2,
                  "Process Group Name": "tp"}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 20, "dur": 1,
         "args": {"In msg nelems": 99}}]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    ev = load(path, progress=False).events.set_index("name")
    assert len(ev) == 3
    assert ev.loc["record_param_comms", "comm_args"] == "||12||Float|"
    assert ev.loc["ncclDevKernel_Generic", "comm_args"] == "|5||2||tp"
    assert ev["comm_args"].isna()["aten::mm"]  # only collective ops and NCCL kernels keep them


def test_all_gather_size_is_the_gathered_output(tmp_path):
    """In msg nelems is one rank's part, Out msg nelems the gathered whole: S is the whole (nccl-tests)."""
    def x(cat, name, ts, dur, tid, **args):
        return {"ph": "X", "cat": cat, "name": name, "pid": 1 if cat != "kernel" else 0, "tid": tid,
                "ts": ts, "dur": dur, "args": args}
    events = [
        x("cpu_op", "record_param_comms", 0, 20, 1, **{"Collective name": "_allgather_base",
          "In msg nelems": 4, "Out msg nelems": 32, "Group size": 8, "dtype": "Float"}),
        x("cuda_runtime", "cudaLaunchKernel", 5, 2, 1, correlation=9),
        x("kernel", "ncclDevKernel_AllGather_RING_LL", 100, 2, 7, device=0, stream=7, correlation=9),
        x("kernel", "gemm_kernel", 101, 10, 8, device=0, stream=8, correlation=10)]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    comm = communication(load(path, progress=False))
    (r,) = comm.collectives.itertuples()
    assert (r.kind, r.count, r.sized_count, r.bytes) == ("all_gather", 1, 1, 128.0)
    assert r.algbw_gbps == pytest.approx(128 / 2 / 1e3)
    assert r.busbw_gbps == pytest.approx(128 / 2 / 1e3 * 7 / 8)
    (o,) = comm.overlap.itertuples()
    assert (o.comm_us, o.overlapped_us, o.exposed_us, o.overlap) == (2.0, 1.0, 1.0, 0.5)
