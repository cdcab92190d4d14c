"""The Perfetto export's packets (report/export/perfetto.py plans them): a plan's track
descriptors and timed operations serialised as TrackEvent protobuf, in chunks of `CHUNK_PACKETS`
packets, each its own `Trace` message (concatenated `Trace` messages are one valid trace).
"""
from __future__ import annotations

import math
from typing import Iterator

import msgspec
import numpy as np

from ...trace.extra_events import PYTHON_CAT
from .perfetto_tracks import Track

CHUNK_PACKETS = 50_000
SEQUENCE_ID = 1

# Operation codes of the packet plan (packets of equal time keep the order they were planned in).
BEGIN, END, BEGIN_ITERATION, INSTANT, COUNTER, TRACE_INSTANT, BEGIN_PATH = 1, 2, 3, 4, 5, 6, 7


def serialise(plan) -> Iterator[bytes]:
    """A plan's serialised `Trace` messages: track descriptors, then events in time order."""
    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import TracePacket, TrackEvent
    from perfetto.trace_builder.proto_builder import TraceProtoBuilder

    builder = TraceProtoBuilder()
    for track in plan.layout.tracks:
        _descriptor(builder.add_packet(), track)
    # No interning is used; the flag just starts the sequence cleanly for the reader.
    builder.trace.packet[0].sequence_flags = TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
    order = np.argsort(np.asarray(plan.time, dtype=np.int64), kind="stable").tolist()
    for n, i in enumerate(order, 1):
        _event(plan, builder.add_packet(), i, TrackEvent)
        if n % CHUNK_PACKETS == 0:
            yield builder.serialize()
            builder = TraceProtoBuilder()
    yield builder.serialize()


def _event(plan, packet, i: int, TrackEvent) -> None:
    code, ref = plan.code[i], plan.ref[i]
    packet.timestamp = plan.time[i]
    packet.trusted_packet_sequence_id = SEQUENCE_ID
    te = packet.track_event
    te.track_uuid = plan.track[i]
    if code == END:
        te.type = TrackEvent.TYPE_SLICE_END
    elif code == BEGIN:
        te.type = TrackEvent.TYPE_SLICE_BEGIN
        _slice_fields(plan, te, ref)
    elif code == BEGIN_ITERATION:
        te.type = TrackEvent.TYPE_SLICE_BEGIN
        te.name = f"iteration {ref}"
        te.categories.append("iteration")
        _annotate(te, "iteration", ref)
    elif code == BEGIN_PATH:
        name, side = plan.path_spans[ref]
        te.type = TrackEvent.TYPE_SLICE_BEGIN
        te.name = name
        te.categories.append("critical_path")
        _annotate(te, "side", side)
    elif code == INSTANT:
        kind, site, iteration, dur = plan.syncs[ref]
        te.type = TrackEvent.TYPE_INSTANT
        te.name = f"sync {kind}"
        te.categories.append("sync")
        _annotate(te, "kind", str(kind))
        _annotate(te, "site", str(site))
        _annotate(te, "iteration", int(iteration))
        _annotate(te, "dur_us", float(dur))
    elif code == TRACE_INSTANT:
        name, cat, args = plan.instants[ref]
        te.type = TrackEvent.TYPE_INSTANT
        te.name = name
        if cat:
            te.categories.append(cat)
        annotate_args(te, args)
    else:
        te.type = TrackEvent.TYPE_COUNTER
        te.double_counter_value = plan.counter_values[ref]


def _slice_fields(plan, te, i: int) -> None:
    te.name = plan.name[i]
    if i >= plan.n_events:
        te.categories.append(PYTHON_CAT)
        return
    cols = plan.cols
    te.categories.append(plan.cat[i])
    if plan.is_gpu[i]:
        _annotate(te, "device", cols["device"][i])
        _annotate(te, "stream", cols["stream"][i])
        if math.isfinite(cols["bytes"][i]):
            _annotate(te, "bytes", float(cols["bytes"][i]))
    if cols["correlation"][i] >= 0:
        _annotate(te, "correlation", cols["correlation"][i])
    if cols["external_id"][i] >= 0:
        _annotate(te, "external_id", cols["external_id"][i])
    flow_in = plan.flow_in.get(i)
    if flow_in is not None:
        te.terminating_flow_ids.append(flow_in)
    flows_out = plan.flow_out.get(i)
    if flows_out:
        te.flow_ids.extend(flows_out)


def _descriptor(packet, track: Track) -> None:
    packet.trusted_packet_sequence_id = SEQUENCE_ID
    desc = packet.track_descriptor
    desc.uuid = track.uuid
    if track.kind == "process":
        desc.process.pid = track.pid
        desc.process.process_name = track.name
        desc.process.process_labels.extend(track.labels)
        if track.sort_index is not None:
            desc.process.legacy_sort_index = _int32(track.sort_index)
    elif track.kind == "thread":
        desc.thread.pid = track.pid
        desc.thread.tid = track.tid
        desc.thread.thread_name = track.name
        if track.sort_index is not None:
            desc.thread.legacy_sort_index = _int32(track.sort_index)
    else:
        desc.name = track.name
        if track.parent:
            desc.parent_uuid = track.parent
        if track.kind == "counter" and track.unit:
            desc.counter.unit_name = track.unit


def _int32(v: int) -> int:
    return max(-(2**31), min(2**31 - 1, v))


def annotate_args(te, args: bytes) -> None:
    """A trace event's `args` as debug annotations: numbers and strings as they are, anything
    else (lists, objects) as its JSON text."""
    if not args:
        return
    try:
        values = msgspec.json.decode(args)
    except (msgspec.DecodeError, UnicodeDecodeError):
        return
    if not isinstance(values, dict):
        return
    for key, value in values.items():
        if value.__class__ is bool or value is None or not isinstance(value, (int, float, str)):
            value = msgspec.json.encode(value).decode()
        elif value.__class__ is int and not -(2**63) <= value < 2**63:
            value = float(value)
        _annotate(te, str(key), value)


def _annotate(te, name: str, value) -> None:
    ann = te.debug_annotations.add()
    ann.name = name
    if isinstance(value, str):
        ann.string_value = value
    elif isinstance(value, int):
        ann.int_value = value
    else:
        ann.double_value = value
