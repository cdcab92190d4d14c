"""The tracks of the Perfetto export and the names a person reads on them.

One Perfetto process per rank; under it a thread track per CPU thread of the trace, a track
`GPU <d> stream <s>` per GPU stream, overflow tracks, and our own tracks (iterations, counters).
Names come from the trace's metadata events (`process_name`, `process_labels`,
`process_sort_index`, `thread_name`, `thread_sort_index`): a single-rank trace's process is named
as its main CPU process (`python3`), a rank of a multi-rank or merged trace `rank <r>` (the
metadata name and labels become the process's labels); a thread is its `thread_name`, else
`thread <tid>`, prefixed by its process's name (`Spans / PyTorch Profiler`) when it is not in the
rank's main process. Ids are kept as the trace wrote them: the text of a string id, never the
loader's negative stand-in for it (`text_ids` recovers the text).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ...trace.extra_events import Extras
from ...trace.model import GPU_ACTIVITY_CATS

SYNTHETIC_ID_BASE = 10_000_000
INT32_MAX = 2**31 - 1
_RANK_NAME = re.compile(r"^\s*rank\s*[-_#:]?\s*(\d{1,9})\s*$", re.IGNORECASE)


@dataclass
class Track:
    uuid: int
    name: str
    rank: int
    kind: str                 # process, thread, gpu, overflow, counter, iterations, global
    pid: int = 0              # Perfetto pid (process and thread tracks)
    tid: int = 0              # Perfetto tid (thread tracks)
    parent: int = 0           # parent track uuid (0: none)
    labels: list = field(default_factory=list)   # process labels
    sort_index: "int | None" = None              # legacy_sort_index (process and thread tracks)
    unit: str = ""            # counter tracks
    overflow: list = field(default_factory=list)  # uuids of this track's overflow tracks


@dataclass
class Metadata:
    """Names from the trace's `ph: M` events, per (rank, pid) and (rank, pid, tid)."""

    process_name: dict = field(default_factory=dict)
    process_labels: dict = field(default_factory=dict)
    process_sort: dict = field(default_factory=dict)
    thread_name: dict = field(default_factory=dict)
    thread_sort: dict = field(default_factory=dict)


def file_ranks(trace, extras: list[Extras]) -> list["int | None"]:
    """Each file's rank as the loader assigned it (None: by pid, a merged file)."""
    if len(trace.file_ranks) == len(extras):
        return list(trace.file_ranks)
    if len(extras) > 1:
        if trace.rank_source == "distributedInfo":
            return [e.distributed_rank for e in extras]
        return list(range(len(extras)))
    if trace.rank_source == "process names":
        return [None]
    return [trace.ranks[0] if trace.ranks else 0]


class RankOf:
    """The rank of a pid of file f: the file's own, or (merged files) the rank its pid's events
    were loaded with, or its `rank <r>` process name."""

    def __init__(self, trace, extras: list[Extras], ranks: list["int | None"]):
        ev = trace.events
        pairs = ev[["pid", "rank"]].drop_duplicates("pid").to_numpy().tolist() if len(ev) else []
        self.by_pid = {int(p): int(r) for p, r in pairs}
        for e, r in zip(extras, ranks):
            if r is None:
                for name, pid, _, args in e.metadata:
                    match = _RANK_NAME.match(str(args.get("name", ""))) if name == "process_name" else None
                    if match and pid not in self.by_pid:
                        self.by_pid[pid] = int(match.group(1))
        self.ranks = ranks
        self.default = trace.ranks[0] if trace.ranks else 0

    def __call__(self, f: int, pid) -> int:
        r = self.ranks[f]
        return r if r is not None else self.by_pid.get(pid, self.default)


def metadata(extras: list[Extras], rank_of: RankOf) -> Metadata:
    meta = Metadata()
    for f, e in enumerate(extras):
        for name, pid, tid, args in e.metadata:
            rank = rank_of(f, pid)
            if name == "process_name" and args.get("name") is not None:
                meta.process_name[(rank, pid)] = str(args["name"]).strip()
            elif name == "process_labels" and args.get("labels") is not None:
                labels = [s.strip() for s in str(args["labels"]).split(",") if s.strip()]
                meta.process_labels[(rank, pid)] = labels
            elif name == "process_sort_index" and args.get("sort_index").__class__ is int:
                meta.process_sort[(rank, pid)] = args["sort_index"]
            elif name == "thread_name" and args.get("name") is not None:
                meta.thread_name[(rank, pid, tid)] = str(args["name"]).strip()
            elif name == "thread_sort_index" and args.get("sort_index").__class__ is int:
                meta.thread_sort[(rank, pid, tid)] = args["sort_index"]
    return meta


def text_ids(ev: pd.DataFrame, extras: list[Extras]) -> tuple[dict, dict]:
    """The text of the loader's negative stand-ins for string pids and tids: (rank, pid) -> pid
    text and (rank, pid, tid) -> tid text, found by matching the complete events that have text
    ids in the file (same ts and name) to the loaded rows with stand-in ids (-2 and below)."""
    pid_text: dict = {}
    tid_text: dict = {}
    odd = [o for e in extras for o in e.odd_complete]
    if not odd or not len(ev):
        return pid_text, tid_text
    pid, tid = ev["pid"].to_numpy(), ev["tid"].to_numpy()
    rows = np.flatnonzero((pid < -1) | (tid < -1))
    sub = ev.iloc[rows]
    index: dict = {}
    for r, p, t, ts, name in zip(sub["rank"].tolist(), sub["pid"].tolist(), sub["tid"].tolist(),
                                 sub["ts"].tolist(), sub["name"].astype(str).tolist()):
        index.setdefault((ts, name), []).append((r, p, t))
    for ts, name, raw_pid, raw_tid in odd:
        for r, p, t in index.get((ts, name), ()):
            if isinstance(raw_pid, str) and p < -1:
                pid_text[(r, p)] = raw_pid
            if isinstance(raw_tid, str) and t < -1:
                tid_text[(r, p, t)] = raw_tid
    return pid_text, tid_text


def loaded_keys(ev: pd.DataFrame) -> tuple[np.ndarray, list]:
    """Per loaded event a code into `combos`: (True, rank, device, stream) for a GPU stream or
    (False, rank, pid, tid) for a CPU thread. GPU activity goes on its stream; any other event on
    the (rank, pid, tid) of a GPU activity (a GPU-side annotation) on that stream."""
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
    if not len(keys):
        return np.empty(0, np.int64), []
    codes, combos = pd.factorize(pd.MultiIndex.from_frame(keys))
    return codes, [(bool(g), int(r), int(a), int(b)) for g, r, a, b in combos.tolist()]


class Layout:
    """The tracks, built from every CPU thread (rank, pid, tid) the export writes to: ids as the
    trace wrote them (int or text). `main_pid[rank]`: the pid of the rank's main CPU process."""

    def __init__(self, ranks: list[int], threads: list[tuple], main_pid: dict, meta: Metadata,
                 by_rank: bool):
        self.tracks: list[Track] = []
        self.process: dict[int, Track] = {}
        self._threads: dict = {}
        self._gpus: dict = {}
        self._global: "Track | None" = None
        self.meta, self.main_pid = meta, main_pid
        self._used: set[int] = set()
        self._next = SYNTHETIC_ID_BASE
        self._real_ids = _unique_ids(threads)
        for r in sorted(set(ranks) | {t[0] for t in threads}):
            self._add_process(int(r), by_rank)

    def _id(self, wanted) -> int:
        if wanted.__class__ is int and wanted in self._real_ids and wanted not in self._used:
            self._used.add(wanted)
            return wanted
        while self._next in self._real_ids or self._next in self._used:
            self._next += 1
        self._used.add(self._next)
        return self._next

    def _new(self, **kw) -> Track:
        track = Track(uuid=len(self.tracks) + 1, **kw)
        self.tracks.append(track)
        return track

    def _add_process(self, rank: int, by_rank: bool) -> None:
        main = self.main_pid.get(rank, -1)
        meta_name = self.meta.process_name.get((rank, main))
        labels = list(self.meta.process_labels.get((rank, main), []))
        if by_rank or not meta_name:
            name = f"rank {rank}"
            if meta_name and not _RANK_NAME.match(meta_name):
                labels.insert(0, meta_name)
        else:
            name = meta_name
        self.process[rank] = self._new(name=name, rank=rank, kind="process", pid=self._id(main),
                                       labels=labels,
                                       sort_index=self.meta.process_sort.get((rank, main)))

    def thread(self, rank: int, pid, tid) -> Track:
        key = (rank, pid, tid)
        track = self._threads.get(key)
        if track is None:
            track = self._threads[key] = self._add_thread(rank, pid, tid)
        return track

    def _add_thread(self, rank: int, pid, tid) -> Track:
        proc = self.process[rank]
        main = pid == self.main_pid.get(rank)
        name = self.meta.thread_name.get((rank, pid, tid)) or (
            tid if isinstance(tid, str) and tid else f"thread {tid}")
        if not main:
            pname = self.meta.process_name.get((rank, pid))
            labels = self.meta.process_labels.get((rank, pid))
            if pname and labels:
                pname = f"{pname} ({', '.join(labels)})"
            prefix = pname or (pid if isinstance(pid, str) and pid else f"process {pid}")
            name = f"{prefix} / {name}"
        ptid = proc.pid if main and pid == tid else self._id(tid)
        return self._new(name=name, rank=rank, kind="thread", pid=proc.pid, tid=ptid,
                         sort_index=self.meta.thread_sort.get((rank, pid, tid)))

    def gpu(self, rank: int, device: int, stream: int) -> Track:
        key = (rank, device, stream)
        track = self._gpus.get(key)
        if track is None:
            track = self._gpus[key] = self._new(name=f"GPU {device} stream {stream}", rank=rank,
                                                kind="gpu", parent=self.process[rank].uuid)
        return track

    def lane(self, track: Track, k: int) -> int:
        """uuid of lane k of a track (0: the track itself, k > 0: its k-th overflow track)."""
        if k == 0:
            return track.uuid
        while len(track.overflow) < k:
            extra = self._new(name=f"{track.name} (overlap {len(track.overflow) + 1})",
                              rank=track.rank, kind="overflow", parent=self.process[track.rank].uuid)
            track.overflow.append(extra.uuid)
        return track.overflow[k - 1]

    def custom(self, rank: int, name: str, kind: str, unit: str = "") -> Track:
        return self._new(name=name, rank=rank, kind=kind, parent=self.process[rank].uuid, unit=unit)

    def global_track(self) -> Track:
        """The track of global-scope instants (`s: g`), at the top level."""
        if self._global is None:
            self._global = self._new(name="global instants", rank=-1, kind="global")
        return self._global


def _unique_ids(threads: list[tuple]) -> set[int]:
    """Positive 32-bit ids used once among all (rank, pid) processes and their tids; a process's
    main thread (tid == pid) may share its pid's id. Only these are kept as Perfetto ids."""
    procs = {(r, p) for r, p, _ in threads}
    ids = [p for _, p in procs] + [t for _, _, t in threads]
    ids = [i for i in ids if i.__class__ is int]
    counts: dict = {}
    for i in ids:
        counts[i] = counts.get(i, 0) + 1
    for _, p, t in set(threads):
        if p == t and p.__class__ is int:
            counts[p] -= 1
    return {v for v, c in counts.items() if 0 < v <= INT32_MAX and c <= 1}
