"""Chrome trace JSON as the export tests read it back: the events' placement fields, and the check
that our added instants and flows sit where the viewer can anchor them."""
from __future__ import annotations

import gzip
from pathlib import Path

import msgspec

from goodhart_prof.report.export.chrome_json import FLOW_CAT, SYNC_CAT


class Event(msgspec.Struct):
    ph: object = None
    cat: object = None
    pid: object = None
    tid: object = None
    ts: object = None


class _Doc(msgspec.Struct):
    traceEvents: list[Event]


def read_events(path: Path) -> list[Event]:
    """The events of a Chrome JSON file, gzipped or not."""
    data = Path(path).read_bytes()
    return msgspec.json.decode(gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data,
                               type=_Doc).traceEvents


def check_anchors(events: list[Event]) -> None:
    """Instants sit on threads that have events; flow ends start exactly where a slice starts."""
    starts = {(e.pid, e.tid, e.ts) for e in events if e.ph == "X"}
    threads = {(p, t) for p, t, _ in starts}
    for e in events:
        if e.cat == SYNC_CAT:
            assert (e.pid, e.tid) in threads
        elif e.cat == FLOW_CAT:
            assert (e.pid, e.tid, e.ts) in starts
