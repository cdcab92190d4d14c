"""What a CUDA event wait waits for (analysis/critical/event_waits.py), by HTA's rules, worked out by
hand: on the fixture tests/data/ours/critical/event_waits.json.gz (its docstring: event_waits.py beside
it) and on small hand-made traces, one rule each."""
from __future__ import annotations

import gzip
import json

import pytest

from goodhart_prof.analysis.critical.graph import RankTables
from goodhart_prof.trace.load import load
from tests.support.events import X, load_events, rt
from tests.support.paths import DATA

FIXTURE = DATA / "ours" / "critical" / "event_waits.json.gz"
SIMPLE_ADD = DATA / "hta" / "critical_path_simple_add.json.gz"


def k(name, ts, corr, stream, dur=10):
    return X(name, "kernel", ts, dur, pid=0, tid=stream, device=0, stream=stream, correlation=corr)


def sync(kind, ts, corr, stream, wait_stream, record, dur=2):
    return X(kind, "cuda_sync", ts, dur, pid=0, tid=max(stream, 0), device=0, stream=stream,
             correlation=corr, wait_on_stream=wait_stream, wait_on_cuda_event_record_corr_id=record)


def stream_wait(ts, corr, stream, wait_stream, record, tid=100, dur=2):
    return [rt("cudaStreamWaitEvent", ts, dur, corr, tid=tid),
            sync("Stream Wait Event", ts, corr, stream, wait_stream, record, dur=dur)]


def named(ctx, positions) -> list[tuple[str, int]]:
    return [(str(ctx.names[ctx.code[p]]), int(ctx.ts[p])) for p in positions.tolist()]


def waits_of(trace):
    ctx = RankTables(trace, 0)
    w = ctx.waits
    return (dict(zip(named(ctx, w.waiter), named(ctx, w.awaited))),
            list(zip(named(ctx, w.sync), named(ctx, w.call), named(ctx, w.sync_awaited))))


def test_the_fixture_by_hand():
    # KB waits for KA (recorded on 7, stream 8 waits); KE and KG for KC (record corr 12, waited
    # by streams 8 and 9); KF for KE; KH for KF; cudaEventSynchronize for KB (recorded on 8).
    trace = load(FIXTURE, progress=False)
    waiters, syncs = waits_of(trace)
    assert waiters == {("KB", 525): ("KA", 20), ("KE", 822): ("KC", 715), ("KF", 835): ("KE", 822),
                       ("KG", 770): ("KC", 715), ("KH", 1036): ("KF", 835)}
    assert syncs == [(("Event Sync", 100), ("cudaEventSynchronize", 100), ("KB", 525))]
    # the loader's columns, recounted from the raw JSON
    raw = json.loads(gzip.decompress(FIXTURE.read_bytes()))["traceEvents"]
    raw = [e for e in raw if e["cat"] == "cuda_sync"]
    rows = trace.events[trace.events["cat"] == "cuda_sync"]
    assert sorted(zip(rows["ts"], rows["wait_on_stream"], rows["wait_on_correlation"])) == sorted(
        (e["ts"], e["args"].get("wait_on_stream", -1), e["args"].get("wait_on_cuda_event_record_corr_id", -1))
        for e in raw)


def test_the_awaited_is_the_last_launch_onto_the_recorded_stream_from_any_thread(tmp_path):
    # stream 7: K1 launched at 10 by thread 100, K2 at 20 by thread 200; K3 onto stream 8 at 24;
    # the record at 25 (thread 100), K4 onto stream 7 at 30 after it: the record stands for K2.
    events = [rt("cudaLaunchKernel", 10, 2, 1), k("K1", 40, 1, 7),
              rt("cudaLaunchKernel", 20, 2, 2, tid=200), k("K2", 50, 2, 7),
              rt("cudaLaunchKernel", 24, 1, 3), k("K3", 60, 3, 8),
              rt("cudaEventRecord", 25, 1, 4), rt("cudaLaunchKernel", 30, 2, 5), k("K4", 70, 5, 7),
              *stream_wait(33, 6, 9, 7, 4), rt("cudaLaunchKernel", 36, 2, 7), k("K5", 80, 7, 9)]
    assert waits_of(load_events(tmp_path, events))[0] == {("K5", 80): ("K2", 50)}


@pytest.mark.parametrize("record,wait", [("cudaEventRecordWithFlags", "cudaStreamWaitEvent"),
                                         ("hipEventRecord", "hipStreamWaitEvent")])
def test_a_record_with_flags_or_on_rocm_is_a_record_too(tmp_path, record, wait):
    # torch 2.11 records with cudaEventRecordWithFlags (HTA knows cudaEventRecord only); ROCm's calls
    events = [rt("cudaLaunchKernel", 10, 2, 1), k("KA", 15, 1, 7), rt(record, 20, 1, 2),
              rt(wait, 30, 2, 3), sync("Stream Wait Event", 30, 3, 8, 7, 2),
              rt("cudaLaunchKernel", 36, 1, 6), k("K8", 60, 6, 8)]
    assert waits_of(load_events(tmp_path, events))[0] == {("K8", 60): ("KA", 15)}
    other = [e if e.get("name") != record else {**e, "name": "cudaEventQuery"} for e in events]
    (tmp_path / "other").mkdir()
    assert waits_of(load_events(tmp_path / "other", other))[0] == {}  # no record call: no wait


def test_the_waiter_is_the_next_launch_by_the_thread_onto_the_waiting_stream(tmp_path):
    # after the wait at 30 (thread 100, stream 8): a launch onto stream 8 by thread 200 at 32 and
    # one onto stream 7 by thread 100 at 34 are not it; the launch at 36 is (K8); one at 40 is later
    events = [rt("cudaLaunchKernel", 10, 2, 1), k("KA", 15, 1, 7), rt("cudaEventRecord", 20, 1, 2),
              *stream_wait(30, 3, 8, 7, 2),
              rt("cudaLaunchKernel", 32, 1, 4, tid=200), k("KX", 50, 4, 8),
              rt("cudaLaunchKernel", 34, 1, 5), k("KY", 52, 5, 7),
              rt("cudaLaunchKernel", 36, 1, 6), k("K8", 60, 6, 8),
              rt("cudaLaunchKernel", 40, 1, 7), k("K9", 70, 7, 8)]
    assert waits_of(load_events(tmp_path, events))[0] == {("K8", 60): ("KA", 15)}


def test_the_last_wait_ending_before_the_waiter_is_kept(tmp_path):
    # two events recorded (KA on 7 at 12, KB on 9 at 22); stream 8 waits for the first at 30 and
    # for the second at 34 (2 us each), then K8 is launched at 40 and starts at 100: the wait
    # ending last (36) is kept. A third wait (on KA) lasting until 150, after K8 started, is not.
    events = [rt("cudaLaunchKernel", 10, 1, 1), k("KA", 15, 1, 7), rt("cudaEventRecord", 12, 1, 2),
              rt("cudaLaunchKernel", 20, 1, 3), k("KB", 25, 3, 9), rt("cudaEventRecord", 22, 1, 4),
              *stream_wait(30, 5, 8, 7, 2), *stream_wait(34, 6, 8, 9, 4),
              *stream_wait(38, 7, 8, 7, 2, dur=112),
              rt("cudaLaunchKernel", 40, 1, 8), k("K8", 100, 8, 8)]
    assert waits_of(load_events(tmp_path, events))[0] == {("K8", 100): ("KB", 25)}


def test_a_record_with_nothing_launched_before_it_awaits_nothing(tmp_path):
    # the record at 5 on stream 7 comes before any launch onto it: no wait, no Event Sync edge
    events = [rt("cudaEventRecord", 5, 1, 1), rt("cudaLaunchKernel", 10, 1, 2), k("KA", 15, 2, 7),
              *stream_wait(20, 3, 8, 7, 1), rt("cudaLaunchKernel", 25, 1, 4), k("K8", 30, 4, 8),
              rt("cudaEventSynchronize", 40, 10, 5), sync("Event Sync", 40, 5, -1, 7, 1, dur=10)]
    assert waits_of(load_events(tmp_path, events)) == ({}, [])


def test_without_the_record_id_nothing_waits():
    # HTA's simple_add: 20 Stream Wait Events, written before Kineto named the record (no
    # wait_on_cuda_event_record_corr_id) and no cudaEventRecord call
    trace = load(SIMPLE_ADD, progress=False)
    sync_rows = trace.events[trace.events["name"] == "Stream Wait Event"]
    assert len(sync_rows) == 20 and (sync_rows["wait_on_correlation"] == -1).all()
    assert waits_of(trace) == ({}, [])
