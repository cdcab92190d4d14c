"""Reading a .pftrace back for the tests, with the perfetto package's own protobuf classes
(trace_processor would need its shell binary, which is downloaded at run time), checking that
slices nest per track while reading."""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace as PerfettoTrace
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import TrackEvent


@dataclass
class Decoded:
    tracks: dict = field(default_factory=dict)        # uuid -> TrackDescriptor
    slices: list = field(default_factory=list)        # (uuid, begin, end, name, cat, depth)
    instants: list = field(default_factory=list)      # (uuid, ts, name, annotations, category)
    counters: dict = field(default_factory=lambda: defaultdict(list))  # uuid -> [(ts, value)]
    flows_out: list = field(default_factory=list)     # (flow id, cat of the slice)
    flows_in: list = field(default_factory=list)

    def name(self, uuid: int) -> str:
        d = self.tracks[uuid]
        if d.HasField("process"):
            return d.process.process_name
        return d.thread.thread_name if d.HasField("thread") else d.name

    def rank_of(self, uuid: int) -> str:
        """The process (`rank <r>`) a track belongs to."""
        d = self.tracks[uuid]
        if d.HasField("thread"):
            return next(self.name(u) for u, p in self.tracks.items()
                        if p.HasField("process") and p.process.pid == d.thread.pid)
        return self.name(d.parent_uuid) if d.parent_uuid else self.name(uuid)


def decode(path: Path) -> Decoded:
    """Read the file with the perfetto package's protos and check nesting while doing so: per
    track, times never go back, every END closes the innermost open slice, which lies inside the
    one below it, and nothing is left open."""
    trace = PerfettoTrace()
    trace.ParseFromString(Path(path).read_bytes())
    out = Decoded()
    stacks: dict[int, list] = defaultdict(list)
    last: dict[int, int] = {}
    for packet in trace.packet:
        if packet.HasField("track_descriptor"):
            desc = packet.track_descriptor
            assert desc.uuid not in out.tracks
            out.tracks[desc.uuid] = desc
            continue
        te, ts = packet.track_event, packet.timestamp
        uuid = te.track_uuid
        assert uuid in out.tracks, "event on an undeclared track"
        assert ts >= last.get(uuid, 0), "time goes back on a track"
        last[uuid] = ts
        stack = stacks[uuid]
        if te.type == TrackEvent.TYPE_SLICE_BEGIN:
            stack.append((ts, te.name, te.categories[0] if te.categories else ""))
            out.flows_out += [(f, stack[-1][2]) for f in te.flow_ids]
            out.flows_in += [(f, stack[-1][2]) for f in te.terminating_flow_ids]
        elif te.type == TrackEvent.TYPE_SLICE_END:
            assert stack, "END without an open slice"
            begin, name, cat = stack.pop()
            if stack:
                assert stack[-1][0] <= begin, "child begins before its parent"
            out.slices.append((uuid, begin, ts, name, cat, len(stack)))
        elif te.type == TrackEvent.TYPE_INSTANT:
            ann = {a.name: (a.string_value if a.HasField("string_value") else
                            a.int_value if a.HasField("int_value") else a.double_value)
                   for a in te.debug_annotations}
            out.instants.append((uuid, ts, te.name, ann, te.categories[0] if te.categories else ""))
        elif te.type == TrackEvent.TYPE_COUNTER:
            out.counters[uuid].append((ts, te.double_counter_value))
    assert not any(stacks.values()), "slices left open"
    return out
