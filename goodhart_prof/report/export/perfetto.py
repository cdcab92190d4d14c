"""Native Perfetto export: `goodhart-prof export PATH -o out.pftrace`.

Perfetto's JSON importer drops complete events that overlap partially on one thread, so this
writes TrackEvent protobuf packets (the `perfetto` package's `TraceProtoBuilder`) on tracks laid
out here:

- every rank is a process (named as its main CPU process in the trace's metadata, `python3`, or
  `rank <r>` in a multi-rank or merged trace); each CPU thread of it a thread track named from the
  metadata (`perfetto_tracks.py`); each GPU stream its own track `GPU <d> stream <s>` under the
  rank. Every complete event of the trace is one slice (TYPE_SLICE_BEGIN/END; name = event name,
  category = normalised `cat`): the events table's rows, and every `python_function` frame (torch's
  own too), read again from the file (`trace/extra_events.py`). GPU-side annotations
  (`gpu_user_annotation`) go on the stream track their kernels are on.
- the trace's instants (`ph: i`/`I`, `[memory]` and the rest) as instants with their args as
  debug annotations: on their thread (`s: t`), their rank's process (`s: p`) or the top-level
  track `global instants` (`s: g`); the trace's counters (`ph: C`) as counter tracks
  `<name> <series>` under the rank.
- nesting: on a track a slice must lie inside the slice open below it. Events are never clipped:
  an event that would overlap the open slice partially goes to the first overflow track
  `<track> (overlap k)` of that track (a sibling under the rank) where it nests, so every slice keeps
  its own start and end, and the overflow tracks show exactly where the profiler's events overlap.
- flows: one flow per GPU activity whose launch call is in the trace, from the launch call's slice
  to the activity's slice (`flow_ids` / `terminating_flow_ids`).
- counters: per GPU device a track `GPU <d> utilization` (percent) with one sample per burstiness
  window at the window's start (`analysis.burstiness`), and 0 at the device's last activity end.
- sync instants: one per sync point, named `sync <kind>`, on the thread it happened on (lane 0), with
  debug annotations kind, site, iteration and dur_us.
- iterations: a track `iterations` per rank with one slice `iteration N` per `ProfilerStep#N`.
- critical path: per path computed (analysis/critical/path.py: the median iteration, or the whole
  trace) a track `critical path (rank R, iteration N)` (`..., whole trace)`) under the rank, one
  slice (category `critical_path`, debug annotation `side`) per span of the path: a run of it on
  one event, named by the event (`(launch wait)`, `(gap between kernels)`); their durations add
  up to the path's length.

Times: our trace clock is kept. A timestamp is the event's microseconds times 1000, as integer
nanoseconds (no shift to zero; Perfetto reads them on its default clock), computed from the start
and end microseconds so that slices that nest in the trace nest exactly in the export. A trace with
negative times cannot be written (Perfetto timestamps are unsigned).

Thread and process ids: a rank's Perfetto pid is its main CPU pid and a thread keeps its tid when
those are positive 32-bit ids used once in the whole trace; otherwise (merged traces, where pid =
rank, string ids, tids reused across ranks) a synthetic id from 10,000,000 up is used. Track names
keep the trace's own ids (the text of a string id, never the loader's negative stand-in).

This module plans the tracks and the timed operations; perfetto_packets.py serialises them, in
chunks of packets that are each their own `Trace` message (concatenated `Trace` messages are one
valid trace: the packet field is repeated).
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd

from ...fileio import writing
from ...trace.decode import DecodeError
from ...trace.extra_events import Extras, read_extras
from ...trace.model import GPU_ACTIVITY_CATS, Trace
from .common import ExportError, ExportSummary, check_output, linked_launches, to_ns, utilization_samples
from .perfetto_packets import (BEGIN, BEGIN_ITERATION, BEGIN_PATH, COUNTER, END, INSTANT, TRACE_INSTANT,
                               serialise)
from .perfetto_tracks import Layout, RankOf, file_ranks, loaded_keys, metadata, text_ids
from ...textsafe import quote_path


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
                ops.append((t, END, j))
            if not stack or e <= stack[-1][0]:
                break
        else:
            k = len(stacks)
            stacks.append([])
            stack = stacks[k]
        stack.append((e, i))
        lanes.append(k)
        ops.append((b, BEGIN, i))
    for stack in stacks:
        while stack:
            t, j = stack.pop()
            ops.append((t, END, j))
    return lanes, ops


# -- the writer -----------------------------------------------------------------------------------
def write_perfetto(analysis, path: str | os.PathLike, force: bool = False) -> ExportSummary:
    """Write `analysis` (its trace plus our additions) as a native Perfetto trace to `path`."""
    out = check_output(path, force)
    plan = _Plan(analysis)
    with writing(out, exclusive=not force) as tmp:
        with open(tmp, "wb") as fh:
            for chunk in serialise(plan):
                fh.write(chunk)
    plan.summary.path = out
    return plan.summary


class _Plan:
    """Everything the protobuf holds: the track layout, then timed operations as parallel lists
    (time ns, op code, track uuid, ref: a slice position (the trace's events table, then the
    Python frames), a step number, or an index into the instant or counter lists)."""

    def __init__(self, analysis):
        trace: Trace = analysis.trace
        ev = trace.events
        self.extras = _read_extras(trace)
        _check_times(trace, self.extras)
        ranks = file_ranks(trace, self.extras)
        self.rank_of = RankOf(trace, self.extras, ranks)
        self.summary = ExportSummary(Path(), "perfetto")
        self.time: list[int] = []
        self.code: list[int] = []
        self.track: list[int] = []
        self.ref: list[int] = []
        self._tracks(trace, ev)
        self._columns(ev)
        self._slices(ev)
        self._flows(trace)
        self._syncs(analysis.sync_points, ev)
        self._trace_instants()
        self._trace_counters()
        self._counters(analysis)
        self._iterations(ev)
        self._critical_path(analysis.critical_path)
        self.summary.overflow_tracks = sum(len(t.overflow) for t in self.layout.tracks)

    def _add(self, t: int, code: int, uuid: int, ref) -> None:
        self.time.append(t)
        self.code.append(code)
        self.track.append(uuid)
        self.ref.append(ref)

    # -- tracks -----------------------------------------------------------------------------------
    def _tracks(self, trace: Trace, ev: pd.DataFrame) -> None:
        """Every event's track: the events table's rows by their (rank, pid, tid) or GPU stream,
        the file's own events (Python frames, instants) by the ids they carry."""
        pid_text, tid_text = text_ids(ev, self.extras)
        codes, combos = loaded_keys(ev)
        shown = [(g, r, a, b) if g else (g, r, pid_text.get((r, a), a), tid_text.get((r, a, b), b))
                 for g, r, a, b in combos]
        gpu = ev[ev["cat"].isin(GPU_ACTIVITY_CATS).to_numpy()]
        on_stream = {(r, p, t): (d, s) for r, p, t, d, s in gpu[["rank", "pid", "tid", "device", "stream"]]
                     .drop_duplicates(["rank", "pid", "tid"]).to_numpy().tolist()}
        self.extra_keys = []  # per file, per interned thread: (gpu, rank, a, b)
        for f, e in enumerate(self.extras):
            keys = []
            for pid, tid in e.threads:
                rank = self.rank_of(f, pid)
                stream = on_stream.get((rank, pid, tid))
                keys.append((True, rank) + stream if stream else (False, rank, pid, tid))
            self.extra_keys.append(keys)
        cpu = [k for k in shown if not k[0]]
        # a rank's main process: the CPU pid with the most slices (events and Python frames)
        counts: dict = {}
        for k, n in zip(shown, np.bincount(codes, minlength=len(combos)).tolist() if len(codes) else []):
            if not k[0]:
                counts[k[1], k[2]] = counts.get((k[1], k[2]), 0) + n
        for f, e in enumerate(self.extras):
            for k, n in zip(self.extra_keys[f], np.bincount(e.py_thread, minlength=len(e.threads)).tolist()):
                if not k[0]:
                    counts[k[1], k[2]] = counts.get((k[1], k[2]), 0) + n
        main: dict = {}
        for (rank, pid), n in sorted(counts.items(), key=lambda kn: -kn[1]):
            main.setdefault(rank, pid)
        threads = list(dict.fromkeys([(r, a, b) for _, r, a, b in cpu] +
                                     [(r, a, b) for keys in self.extra_keys for g, r, a, b in keys if not g]))
        by_rank = len(trace.ranks) > 1 or trace.rank_source != "single file"
        meta = metadata(self.extras, self.rank_of)
        self.layout = Layout(trace.ranks, threads, main, meta, by_rank)
        positions = np.asarray([self._track_of(k).uuid - 1 for k in shown], dtype=np.int64)
        self.event_track = positions[codes] if len(codes) else np.empty(0, dtype=np.int64)

    def _track_of(self, key: tuple):
        g, r, a, b = key
        return self.layout.gpu(r, a, b) if g else self.layout.thread(r, a, b)

    # -- slices -----------------------------------------------------------------------------------
    def _columns(self, ev: pd.DataFrame) -> None:
        names = ev["name"].cat.categories.astype(str).tolist()
        cats = ev["cat"].cat.categories.astype(str).tolist()
        self.n_events = len(ev)
        self.name = [names[c] for c in ev["name"].cat.codes.tolist()]
        self.cat = [cats[c] for c in ev["cat"].cat.codes.tolist()]
        for e in self.extras:  # Python frames follow the events table's rows
            self.name.extend(e.names[c] for c in e.py_name.tolist())
        self.is_gpu = ev["cat"].isin(GPU_ACTIVITY_CATS).to_numpy().tolist()
        self.cols = {c: ev[c].tolist() for c in ("device", "stream", "correlation", "external_id",
                                                 "bytes")}

    def _slices(self, ev: pd.DataFrame) -> None:
        begin = [to_ns(ev["ts"].to_numpy())]
        end = [to_ns(ev["end"].to_numpy())]
        tracks = [self.event_track]
        for f, e in enumerate(self.extras):
            begin.append(to_ns(e.py_ts))
            end.append(to_ns(e.py_ts + e.py_dur))
            uuids = np.full(len(e.threads), -1, dtype=np.int64)
            for k in np.unique(e.py_thread).tolist():  # threads with frames only: no empty track
                uuids[k] = self._track_of(self.extra_keys[f][k]).uuid - 1
            tracks.append(uuids[e.py_thread])
        begin, end, tracks = np.concatenate(begin), np.concatenate(end), np.concatenate(tracks)
        end = np.maximum(end, begin)
        order = np.lexsort((np.arange(len(begin)), -end, begin, tracks))
        bounds = np.flatnonzero(np.diff(tracks[order])) + 1
        for idx in (np.split(order, bounds) if len(order) else []):
            track = self.layout.tracks[int(tracks[idx[0]])]
            lanes, ops = assign_lanes(begin[idx].tolist(), end[idx].tolist())
            uuids = [self.layout.lane(track, k) for k in range(max(lanes) + 1)]
            self.summary.overflow_slices += sum(1 for k in lanes if k)
            rows = idx.tolist()
            for t, op, j in ops:
                self._add(t, op, uuids[lanes[j]], rows[j])
        self.summary.slices = len(begin)
        self.summary.python_slices = len(begin) - len(ev)
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

    # -- instants and counters --------------------------------------------------------------------
    def _syncs(self, points: pd.DataFrame, ev: pd.DataFrame) -> None:
        """An instant per sync point on the track of its own event (the host op or call; the GPU
        or sync event when the host call is not in the trace), lane 0."""
        positions = ev.index.get_indexer(points["row"].to_numpy())
        self.syncs = list(points[["kind", "site", "iteration", "dur"]].itertuples(index=False))
        for k, (t, pos) in enumerate(zip(to_ns(points["ts"].to_numpy()).tolist(), positions.tolist())):
            self._add(t, INSTANT, int(self.event_track[pos]) + 1, k)
        self.summary.sync_instants = len(points)

    def _trace_instants(self) -> None:
        """The trace's own instants: on their thread (`s: t`), their rank's process (`s: p`) or
        the global track (`s: g`)."""
        self.instants: list[tuple] = []
        for f, e in enumerate(self.extras):
            for thread, name, cat, scope, ts, args in e.instants:
                if scope == "g":
                    uuid = self.layout.global_track().uuid
                elif scope == "p":
                    uuid = self.layout.process[self.rank_of(f, e.threads[thread][0])].uuid
                else:
                    uuid = self._track_of(self.extra_keys[f][thread]).uuid
                self._add(int(to_ns(ts)), TRACE_INSTANT, uuid, len(self.instants))
                self.instants.append((e.names[name], e.names[cat], args))
        self.summary.trace_instants = len(self.instants)

    def _trace_counters(self) -> None:
        """The trace's counters (`ph: C`): a counter track per (rank, pid, name, id, series)."""
        self.counter_values: list[float] = []
        tracks: dict = {}
        for f, e in enumerate(self.extras):
            for pid, name, cid, ts, series in e.counters:
                rank = self.rank_of(f, pid)
                for key, value in series.items():
                    label = name if len(series) == 1 and key in (name, "value") else f"{name} {key}"
                    if cid is not None:
                        label = f"{label} (id {cid})"
                    ident = (rank, pid, label)
                    if ident not in tracks:
                        tracks[ident] = self.layout.custom(rank, label, "counter")
                    self._add(int(to_ns(ts)), COUNTER, tracks[ident].uuid, len(self.counter_values))
                    self.counter_values.append(value)
                    self.summary.trace_counter_samples += 1
        self.summary.trace_counter_tracks = len(tracks)

    def _counters(self, analysis) -> None:
        for rank, device, times, values in utilization_samples(analysis):
            track = self.layout.custom(rank, f"GPU {device} utilization", "counter", unit="%")
            for t, v in zip(to_ns(times).tolist(), values.tolist()):
                self._add(t, COUNTER, track.uuid, len(self.counter_values))
                self.counter_values.append(v)
            self.summary.counter_tracks += 1
            self.summary.counter_samples += len(times)

    def _iterations(self, ev: pd.DataFrame) -> None:
        from ...analysis.tree import profiler_steps

        s = profiler_steps(ev)
        if s.empty:
            return
        rank, ts, end = s["rank"].to_numpy(), s["ts"].to_numpy(), s["end"].to_numpy()
        # rank by rank, each by start, longer first (stable): one sort for all ranks (a pandas
        # group and sort per rank cost ~0.4 ms: 8 s over 20,000 ranks)
        order = np.lexsort((-end, ts, rank))
        rank = rank[order]
        begin_ns, end_ns = to_ns(ts[order]).tolist(), to_ns(end[order]).tolist()
        steps = s["step"].to_numpy()[order].tolist()
        bounds = np.r_[np.flatnonzero(np.r_[True, rank[1:] != rank[:-1]]), len(rank)].tolist()
        for a, b in zip(bounds[:-1], bounds[1:]):
            track = self.layout.custom(int(rank[a]), "iterations", "iterations")
            lanes, ops = assign_lanes(begin_ns[a:b], end_ns[a:b])
            uuids = [self.layout.lane(track, k) for k in range(max(lanes) + 1)]
            for t, op, j in ops:
                self._add(t, BEGIN_ITERATION if op == BEGIN else END, uuids[lanes[j]], steps[a + j])
            self.summary.iterations += b - a

    def _critical_path(self, cp) -> None:
        """A track per path computed, a slice per span of it (module docstring)."""
        self.path_spans: list[tuple[str, str]] = []
        for it in (cp.iterations if cp is not None else []):
            if it.spans.empty:
                continue
            what = "whole trace" if it.step < 0 else f"iteration {it.step}"
            track = self.layout.custom(int(cp.rank), f"critical path (rank {cp.rank}, {what})",
                                       "critical_path")
            start = int(to_ns(np.asarray([it.ts]))[0])
            begin = (start + it.spans["start_ns"].to_numpy(np.int64)).tolist()
            end = (start + it.spans["end_ns"].to_numpy(np.int64)).tolist()
            lanes, ops = assign_lanes(begin, end)
            uuids = [self.layout.lane(track, k) for k in range(max(lanes) + 1)]
            first = len(self.path_spans)
            self.path_spans += list(zip(it.spans["name"].tolist(), it.spans["side"].tolist()))
            for t, op, j in ops:
                self._add(t, BEGIN_PATH if op == BEGIN else END, uuids[lanes[j]], first + j)
            self.summary.critical_path_slices += len(begin)

    # -- packets ----------------------------------------------------------------------------------


def _read_extras(trace: Trace) -> list[Extras]:
    out = []
    for path in trace.paths:
        try:
            out.append(read_extras(path))
        except DecodeError as exc:
            raise ExportError(f"{quote_path(path)}: {exc} (reading it again for the export)") from None
    return out


def _check_times(trace: Trace, extras: list[Extras]) -> None:
    ev = trace.events
    ok = not len(ev) or (float(ev["ts"].min()) >= 0 and np.isfinite(ev["end"].to_numpy()).all())
    for e in extras:
        ok = ok and (not e.py_count() or float(e.py_ts.min()) >= 0)
        ok = ok and all(i[4] >= 0 for i in e.instants) and all(c[3] >= 0 for c in e.counters)
    if not ok:
        raise ExportError(f"{_name(trace)}: has negative or non-finite times; Perfetto "
                          f"timestamps are unsigned nanoseconds")

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
    raise ExportError(f"{quote_path(path)}: unknown output format; name it .pftrace (Perfetto protobuf) or "
                      f".json / .json.gz (Chrome trace JSON)")
