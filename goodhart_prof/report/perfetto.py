"""Native Perfetto export: `goodhart-prof export PATH -o out.pftrace`.

Perfetto's JSON importer drops complete events that overlap partially on one thread, so this
writes TrackEvent protobuf packets (the `perfetto` package's `TraceProtoBuilder`) on tracks laid
out here:

- every rank is a process named `rank <r>`; each CPU thread of it a thread track (`thread <tid>`,
  `pid <pid> thread <tid>` when the rank has several CPU processes); each GPU stream its own track
  `GPU <d> stream <s>` under the rank. Every complete event is one slice (TYPE_SLICE_BEGIN/END;
  name = event name, category = normalised `cat`). GPU-side annotations (`gpu_user_annotation`)
  go on the stream track their kernels are on.
- nesting: on a track a slice must lie inside the slice open below it. Events are never clipped:
  an event that would overlap the open slice partially goes to the first overflow track
  `<track> (overlap k)` of that track (a sibling under the rank) where it nests, so every slice keeps
  its own start and end, and the overflow tracks show exactly where the profiler's events overlap.
- flows: one flow per GPU activity whose launch call is in the trace, from the launch call's slice
  to the activity's slice (`flow_ids` / `terminating_flow_ids`).
- counters: per GPU device a track `GPU <d> utilization` (percent) with one sample per burstiness
  window at the window's start (`analysis.burstiness`), and 0 at the device's last activity end.
- instants: one per sync point, named `sync <kind>`, on the thread it happened on (lane 0), with
  debug annotations kind, site, iteration and dur_us.
- iterations: a track `iterations` per rank with one slice `iteration N` per `ProfilerStep#N`.

Times: our trace clock is kept. A timestamp is the event's microseconds times 1000, as integer
nanoseconds (no shift to zero; Perfetto reads them on its default clock), computed from the start
and end microseconds so that slices that nest in the trace nest exactly in the export. A trace with
negative times cannot be written (Perfetto timestamps are unsigned).

Thread and process ids: a rank's Perfetto pid is its main CPU pid and a thread keeps its tid when
those are positive 32-bit ids used once in the whole trace; otherwise (merged traces, where pid =
rank, string ids, tids reused across ranks) a synthetic id from 10,000,000 up is used. The original
tid stays in the track name.

Packets are built in chunks of `CHUNK_PACKETS` and each chunk is serialised as its own `Trace`
message; concatenated `Trace` messages are one valid trace (the packet field is repeated).
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import numpy as np
import pandas as pd

from ..fileio import atomic_path
from ..trace.model import GPU_ACTIVITY_CATS, Trace
from .export_common import ExportError, ExportSummary, check_output, linked_launches, to_ns, utilization_samples

CHUNK_PACKETS = 50_000
SYNTHETIC_ID_BASE = 10_000_000
INT32_MAX = 2**31 - 1
SEQUENCE_ID = 1

# Operation codes of the packet plan (packets of equal time keep the order they were planned in).
_BEGIN, _END, _BEGIN_ITERATION, _INSTANT, _COUNTER = 1, 2, 3, 4, 5


# -- track layout ---------------------------------------------------------------------------------
@dataclass
class _Track:
    uuid: int
    name: str
    rank: int
    kind: str                 # process, thread, gpu, overflow, counter, iterations
    pid: int = 0              # Perfetto pid (process and thread tracks)
    tid: int = 0              # Perfetto tid (thread tracks)
    parent: int = 0           # parent track uuid (0: none)
    overflow: list = field(default_factory=list)  # uuids of this track's overflow tracks


class _Layout:
    """Tracks and Perfetto ids: one process per rank, thread and GPU stream tracks, overflows.

    `event_track[i]` is the track (index into `tracks`) of event i: GPU activity by (rank, device,
    stream); any other event on a GPU activity's (rank, pid, tid), such as a GPU-side annotation,
    goes to that stream's track; the rest to their (rank, pid, tid) thread.
    """

    def __init__(self, ev: pd.DataFrame, ranks: list[int]):
        self.tracks: list[_Track] = []
        self.process: dict[int, _Track] = {}
        self._used: set[int] = set()
        self._next = SYNTHETIC_ID_BASE
        keys = _track_keys(ev)
        threads = keys.loc[keys["gpu"] == 0, ["rank", "a", "b"]].drop_duplicates()
        threads.columns = ["rank", "pid", "tid"]
        counts = keys[keys["gpu"] == 0].groupby(["rank", "a"]).size().reset_index(name="n")
        self._main_pid = (counts.sort_values(["rank", "n"], ascending=[True, False], kind="stable")
                          .drop_duplicates("rank").set_index("rank")["a"].to_dict())
        self._real_ids = _unique_ids(threads)
        for r in sorted(set(ranks) | set(ev["rank"].unique().tolist())):
            self._add_process(int(r))
        several = (threads.groupby("rank")["pid"].nunique() > 1).to_dict()
        codes, combos = pd.factorize(pd.MultiIndex.from_frame(keys[["gpu", "rank", "a", "b"]]))
        positions = []
        for g, r, a, b in combos.tolist():
            track = (self._gpu(int(r), int(a), int(b)) if g else
                     self._thread(int(r), int(a), int(b), several.get(r, False)))
            positions.append(track.uuid - 1)
        self.event_track = np.asarray(positions, dtype=np.int64)[codes] if len(codes) else \
            np.empty(0, dtype=np.int64)

    def _id(self, wanted: int) -> int:
        if wanted in self._real_ids and wanted not in self._used:
            self._used.add(wanted)
            return wanted
        while self._next in self._real_ids or self._next in self._used:
            self._next += 1
        self._used.add(self._next)
        return self._next

    def _new(self, **kw) -> _Track:
        track = _Track(uuid=len(self.tracks) + 1, **kw)
        self.tracks.append(track)
        return track

    def _add_process(self, rank: int) -> None:
        pid = self._id(int(self._main_pid.get(rank, -1)))
        self.process[rank] = self._new(name=f"rank {rank}", rank=rank, kind="process", pid=pid)

    def _thread(self, rank: int, pid: int, tid: int, several_pids: bool) -> _Track:
        proc = self.process[rank]
        main_thread = pid == tid == proc.pid  # Perfetto's main thread: tid == pid
        ptid = proc.pid if main_thread else self._id(tid)
        name = f"pid {pid} thread {tid}" if several_pids else f"thread {tid}"
        return self._new(name=name, rank=rank, kind="thread", pid=proc.pid, tid=ptid)

    def _gpu(self, rank: int, device: int, stream: int) -> _Track:
        return self._new(name=f"GPU {device} stream {stream}", rank=rank, kind="gpu",
                         parent=self.process[rank].uuid)

    def lane(self, track: _Track, k: int) -> int:
        """uuid of lane k of a track (0: the track itself, k > 0: its k-th overflow track)."""
        if k == 0:
            return track.uuid
        while len(track.overflow) < k:
            extra = self._new(name=f"{track.name} (overlap {len(track.overflow) + 1})",
                              rank=track.rank, kind="overflow", parent=self.process[track.rank].uuid)
            track.overflow.append(extra.uuid)
        return track.overflow[k - 1]

    def custom(self, rank: int, name: str, kind: str) -> _Track:
        return self._new(name=name, rank=rank, kind=kind, parent=self.process[rank].uuid)


def _track_keys(ev: pd.DataFrame) -> pd.DataFrame:
    """Per event: gpu (1 for a stream track), rank, a, b ((device, stream) or (pid, tid))."""
    is_gpu = ev["cat"].isin(GPU_ACTIVITY_CATS).to_numpy()
    rank, pid, tid = (ev[c].to_numpy(np.int64) for c in ("rank", "pid", "tid"))
    device, stream = ev["device"].to_numpy(np.int64), ev["stream"].to_numpy(np.int64)
    keys = pd.DataFrame({"gpu": is_gpu.astype(np.int8), "rank": rank,
                         "a": np.where(is_gpu, device, pid), "b": np.where(is_gpu, stream, tid)})
    streams = (pd.DataFrame({"rank": rank[is_gpu], "pid": pid[is_gpu], "tid": tid[is_gpu],
                             "device": device[is_gpu], "stream": stream[is_gpu]})
               .drop_duplicates(["rank", "pid", "tid"]))
    if len(streams):
        on_stream = pd.DataFrame({"rank": rank, "pid": pid, "tid": tid}).merge(
            streams, on=["rank", "pid", "tid"], how="left")
        moved = ~is_gpu & on_stream["device"].notna().to_numpy()
        keys.loc[moved, "gpu"] = 1
        keys.loc[moved, "a"] = on_stream.loc[moved, "device"].to_numpy(np.int64)
        keys.loc[moved, "b"] = on_stream.loc[moved, "stream"].to_numpy(np.int64)
    return keys


def _unique_ids(threads: pd.DataFrame) -> set[int]:
    """Positive 32-bit ids used once among all (rank, pid) processes and their tids; a process's
    main thread (tid == pid) may share its pid's id. Only these are kept as Perfetto ids."""
    procs = threads[["rank", "pid"]].drop_duplicates()["pid"]
    ids = np.concatenate([procs.to_numpy(), threads["tid"].to_numpy()])
    vals, counts = np.unique(ids, return_counts=True)
    main = threads.loc[threads["pid"] == threads["tid"], "tid"].to_numpy()
    main_vals, main_counts = np.unique(main, return_counts=True)
    shared = dict(zip(main_vals.tolist(), main_counts.tolist()))
    return {v for v, c in zip(vals.tolist(), counts.tolist())
            if 0 < v <= INT32_MAX and c - shared.get(v, 0) <= 1}


def assign_lanes(begin: list[int], end: list[int]) -> tuple[list[int], list[tuple[int, int, int]]]:
    """First-fit nesting of intervals already sorted by (begin, -end).

    Returns each interval's lane and the BEGIN/END operations as (time, op, index), in an order
    valid per lane: an interval goes to the first lane where, once the slices that ended by its
    start are closed, it fits inside the open slice (or nothing is open). Closing comes before an
    opening at the same time, so back-to-back slices never overlap.
    """
    stacks: list[list[tuple[int, int]]] = []
    lanes: list[int] = []
    ops: list[tuple[int, int, int]] = []
    for i, (b, e) in enumerate(zip(begin, end)):
        for k, stack in enumerate(stacks):
            while stack and stack[-1][0] <= b:
                t, j = stack.pop()
                ops.append((t, _END, j))
            if not stack or e <= stack[-1][0]:
                break
        else:
            k = len(stacks)
            stacks.append([])
            stack = stacks[k]
        stack.append((e, i))
        lanes.append(k)
        ops.append((b, _BEGIN, i))
    for stack in stacks:
        while stack:
            t, j = stack.pop()
            ops.append((t, _END, j))
    return lanes, ops


# -- the writer -----------------------------------------------------------------------------------
def write_perfetto(analysis, path: str | os.PathLike, force: bool = False) -> ExportSummary:
    """Write `analysis` (its trace plus our additions) as a native Perfetto trace to `path`."""
    out = check_output(path, force)
    plan = _Plan(analysis)
    with atomic_path(out) as tmp:
        with open(tmp, "wb") as fh:
            for chunk in plan.chunks():
                fh.write(chunk)
    plan.summary.path = out
    return plan.summary


class _Plan:
    """Everything the protobuf holds: the track layout, then timed operations as parallel lists
    (time ns, op code, track uuid, ref: an event position, a step number, or an index into the
    sync or counter lists)."""

    def __init__(self, analysis):
        trace: Trace = analysis.trace
        ev = trace.events
        if len(ev) and not (float(ev["ts"].min()) >= 0 and np.isfinite(ev["end"].to_numpy()).all()):
            raise ExportError(f"{_name(trace)}: has negative or non-finite times; Perfetto "
                              f"timestamps are unsigned nanoseconds")
        self.layout = _Layout(ev, trace.ranks)
        self.summary = ExportSummary(Path(), "perfetto")
        self.time: list[int] = []
        self.code: list[int] = []
        self.track: list[int] = []
        self.ref: list[int] = []
        self._columns(ev)
        self._slices(ev)
        self._flows(trace)
        self._syncs(analysis.sync_points, ev)
        self._counters(analysis)
        self._iterations(ev)
        self.summary.overflow_tracks = sum(len(t.overflow) for t in self.layout.tracks)

    def _add(self, t: int, code: int, uuid: int, ref) -> None:
        self.time.append(t)
        self.code.append(code)
        self.track.append(uuid)
        self.ref.append(ref)

    def _columns(self, ev: pd.DataFrame) -> None:
        names = ev["name"].cat.categories.astype(str).tolist()
        cats = ev["cat"].cat.categories.astype(str).tolist()
        self.name = [names[c] for c in ev["name"].cat.codes.tolist()]
        self.cat = [cats[c] for c in ev["cat"].cat.codes.tolist()]
        self.is_gpu = ev["cat"].isin(GPU_ACTIVITY_CATS).to_numpy().tolist()
        self.cols = {c: ev[c].tolist() for c in ("device", "stream", "correlation", "external_id",
                                                 "bytes")}

    def _slices(self, ev: pd.DataFrame) -> None:
        begin, end = to_ns(ev["ts"].to_numpy()), to_ns(ev["end"].to_numpy())
        end = np.maximum(end, begin)
        tracks = self.layout.event_track
        order = np.lexsort((np.arange(len(ev)), -end, begin, tracks))
        bounds = np.flatnonzero(np.diff(tracks[order])) + 1
        for idx in (np.split(order, bounds) if len(order) else []):
            track = self.layout.tracks[int(tracks[idx[0]])]
            lanes, ops = assign_lanes(begin[idx].tolist(), end[idx].tolist())
            uuids = [self.layout.lane(track, k) for k in range(max(lanes) + 1)]
            self.summary.overflow_slices += sum(1 for k in lanes if k)
            rows = idx.tolist()
            for t, op, j in ops:
                self._add(t, op, uuids[lanes[j]], rows[j])
        self.summary.slices = len(ev)
        self.summary.gpu_slices = int(sum(self.is_gpu))

    def _flows(self, trace: Trace) -> None:
        links = linked_launches(trace)
        self.flow_out: dict[int, list[int]] = {}
        self.flow_in: dict[int, int] = {}
        pairs = links[["gpu_pos", "launch_pos"]].to_numpy().tolist()
        for flow_id, (gpu_pos, launch_pos) in enumerate(pairs, 1):
            self.flow_out.setdefault(launch_pos, []).append(flow_id)
            self.flow_in[gpu_pos] = flow_id
        self.summary.flows = len(pairs)

    def _syncs(self, points: pd.DataFrame, ev: pd.DataFrame) -> None:
        """An instant per sync point on the track of its own event (the host op or call; the GPU
        or sync event when the host call is not in the trace), lane 0."""
        positions = ev.index.get_indexer(points["row"].to_numpy())
        self.syncs = list(points[["kind", "site", "iteration", "dur"]].itertuples(index=False))
        for k, (t, pos) in enumerate(zip(to_ns(points["ts"].to_numpy()).tolist(), positions.tolist())):
            self._add(t, _INSTANT, int(self.layout.event_track[pos]) + 1, k)
        self.summary.sync_instants = len(points)

    def _counters(self, analysis) -> None:
        self.counter_values: list[float] = []
        for rank, device, times, values in utilization_samples(analysis):
            track = self.layout.custom(rank, f"GPU {device} utilization", "counter")
            for t, v in zip(to_ns(times).tolist(), values.tolist()):
                self._add(t, _COUNTER, track.uuid, len(self.counter_values))
                self.counter_values.append(v)
            self.summary.counter_tracks += 1
            self.summary.counter_samples += len(times)

    def _iterations(self, ev: pd.DataFrame) -> None:
        from ..analysis.tree import profiler_steps

        for rank, s in profiler_steps(ev).groupby("rank", sort=True):
            s = s.sort_values(["ts", "end"], ascending=[True, False], kind="stable")
            track = self.layout.custom(int(rank), "iterations", "iterations")
            lanes, ops = assign_lanes(to_ns(s["ts"].to_numpy()).tolist(),
                                      to_ns(s["end"].to_numpy()).tolist())
            uuids = [self.layout.lane(track, k) for k in range(max(lanes) + 1)]
            steps = s["step"].tolist()
            for t, op, j in ops:
                self._add(t, _BEGIN_ITERATION if op == _BEGIN else _END, uuids[lanes[j]], steps[j])
            self.summary.iterations += len(s)

    # -- packets ----------------------------------------------------------------------------------
    def chunks(self) -> Iterator[bytes]:
        """Serialised `Trace` messages: track descriptors, then events in time order."""
        from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import TracePacket, TrackEvent
        from perfetto.trace_builder.proto_builder import TraceProtoBuilder

        builder = TraceProtoBuilder()
        for track in self.layout.tracks:
            _descriptor(builder.add_packet(), track)
        # No interning is used; the flag just starts the sequence cleanly for the reader.
        builder.trace.packet[0].sequence_flags = TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
        order = np.argsort(np.asarray(self.time, dtype=np.int64), kind="stable").tolist()
        for n, i in enumerate(order, 1):
            self._event(builder.add_packet(), i, TrackEvent)
            if n % CHUNK_PACKETS == 0:
                yield builder.serialize()
                builder = TraceProtoBuilder()
        yield builder.serialize()

    def _event(self, packet, i: int, TrackEvent) -> None:
        code, ref = self.code[i], self.ref[i]
        packet.timestamp = self.time[i]
        packet.trusted_packet_sequence_id = SEQUENCE_ID
        te = packet.track_event
        te.track_uuid = self.track[i]
        if code == _END:
            te.type = TrackEvent.TYPE_SLICE_END
        elif code == _BEGIN:
            te.type = TrackEvent.TYPE_SLICE_BEGIN
            self._slice_fields(te, ref)
        elif code == _BEGIN_ITERATION:
            te.type = TrackEvent.TYPE_SLICE_BEGIN
            te.name = f"iteration {ref}"
            te.categories.append("iteration")
            _annotate(te, "iteration", ref)
        elif code == _INSTANT:
            kind, site, iteration, dur = self.syncs[ref]
            te.type = TrackEvent.TYPE_INSTANT
            te.name = f"sync {kind}"
            te.categories.append("sync")
            _annotate(te, "kind", str(kind))
            _annotate(te, "site", str(site))
            _annotate(te, "iteration", int(iteration))
            _annotate(te, "dur_us", float(dur))
        else:
            te.type = TrackEvent.TYPE_COUNTER
            te.double_counter_value = self.counter_values[ref]

    def _slice_fields(self, te, i: int) -> None:
        cols = self.cols
        te.name = self.name[i]
        te.categories.append(self.cat[i])
        if self.is_gpu[i]:
            _annotate(te, "device", cols["device"][i])
            _annotate(te, "stream", cols["stream"][i])
            if math.isfinite(cols["bytes"][i]):
                _annotate(te, "bytes", float(cols["bytes"][i]))
        if cols["correlation"][i] >= 0:
            _annotate(te, "correlation", cols["correlation"][i])
        if cols["external_id"][i] >= 0:
            _annotate(te, "external_id", cols["external_id"][i])
        flow_in = self.flow_in.get(i)
        if flow_in is not None:
            te.terminating_flow_ids.append(flow_in)
        flows_out = self.flow_out.get(i)
        if flows_out:
            te.flow_ids.extend(flows_out)


def _descriptor(packet, track: _Track) -> None:
    packet.trusted_packet_sequence_id = SEQUENCE_ID
    desc = packet.track_descriptor
    desc.uuid = track.uuid
    if track.kind == "process":
        desc.process.pid = track.pid
        desc.process.process_name = track.name
    elif track.kind == "thread":
        desc.thread.pid = track.pid
        desc.thread.tid = track.tid
        desc.thread.thread_name = track.name
    else:
        desc.name = track.name
        desc.parent_uuid = track.parent
        if track.kind == "counter":
            desc.counter.unit_name = "%"


def _annotate(te, name: str, value) -> None:
    ann = te.debug_annotations.add()
    ann.name = name
    if isinstance(value, str):
        ann.string_value = value
    elif isinstance(value, int):
        ann.int_value = value
    else:
        ann.double_value = value


def _name(trace: Trace) -> str:
    return str(trace.paths[0]) if len(trace.paths) == 1 else f"{len(trace.paths)} trace files"


PERFETTO_SUFFIXES = (".pftrace", ".perfetto-trace", ".perfetto", ".pb")
JSON_SUFFIXES = (".json", ".json.gz")


def output_format(path: str | os.PathLike) -> str:
    """`perfetto` or `chrome-json`, from the output file's name."""
    name = Path(path).name.lower()
    if name.endswith(PERFETTO_SUFFIXES):
        return "perfetto"
    if name.endswith(JSON_SUFFIXES):
        return "chrome-json"
    raise ExportError(f"{path}: unknown output format; name it .pftrace (Perfetto protobuf) or "
                      f".json / .json.gz (Chrome trace JSON)")
