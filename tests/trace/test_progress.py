"""goodhart_prof/trace/progress.py: the loading bar. No bar when it is not shown (adding is then
free of effects); with one, bytes read advance it and each result's events (table rows, frames,
memory events) are counted on it."""
from __future__ import annotations

import json

from goodhart_prof.trace.decode import decode
from goodhart_prof.trace.progress import Progress, progress_bar
from goodhart_prof.trace.ranges import tables_of


def _piece():
    events = [{"ph": "X", "cat": "cpu_op", "name": "op", "pid": 1, "tid": 1, "ts": i, "dur": 1} for i in range(3)]
    events += [{"ph": "X", "cat": "python_function", "name": "a.py(1): f", "pid": 1, "tid": 1, "ts": 0, "dur": 5},
               {"ph": "i", "name": "[memory]", "pid": 1, "tid": 1, "ts": 1, "args": {"Bytes": 8}}]
    return tables_of(*decode(json.dumps({"traceEvents": events}).encode()))


def test_no_bar_when_it_is_not_shown():
    assert progress_bar(2, 1000, show=False) is None
    progress = Progress(None)
    progress.add(100, _piece())
    assert (progress.bytes, progress.events) == (0, 0)


def test_the_bar_counts_bytes_and_events(capsys):
    bar = progress_bar(2, 1000, show=True)
    try:
        assert bar.total == 1000 and bar.desc == "loading 2 file(s)"
        progress = Progress(bar)
        progress.add(300, _piece())  # 3 events, 1 frame, 1 memory event
        progress.add(200)
        assert (progress.bytes, progress.events, bar.n) == (500, 5, 500)
        assert bar.postfix == "5 events"
    finally:
        bar.close()
