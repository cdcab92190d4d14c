"""Containment on one thread for intervals that are not tree nodes (analysis/tree/spans.py):
which rows a span covers, the outermost of nested items, sums of items inside each span, the
launches inside a span, and points between two kinds of events. Small tables worked by hand."""
from __future__ import annotations

import pandas as pd

from goodhart_prof.analysis.tree.spans import (between, covered, launched_inside, outermost,
                                               starts_inside, sums_inside)


def rows(*items, **extra) -> pd.DataFrame:
    """Rows (tid, ts, end) on rank 0, pid 1; extra columns as keyword lists."""
    frame = pd.DataFrame([{"rank": 0, "pid": 1, "tid": t, "ts": float(s), "end": float(e)}
                          for t, s, e in items], columns=["rank", "pid", "tid", "ts", "end"])
    frame["dur"] = frame["end"] - frame["ts"]
    return frame.assign(**extra)


def test_covered_needs_one_span_of_the_same_thread_around_the_row():
    spans = rows((1, 0, 100), (1, 200, 300), (2, 0, 1000))
    q = rows((1, 10, 90), (1, 90, 210), (1, 200, 300), (2, 500, 600), (3, 10, 20), (1, 310, 320))
    # across two spans is not inside one; tid 3 has no span; after the last span: outside
    assert covered(spans, q).tolist() == [True, False, True, True, False, False]
    assert covered(spans.iloc[:0], q).tolist() == [False] * 6
    assert starts_inside(spans, q).tolist() == [True, True, True, True, False, False]


def test_outermost_keeps_items_in_no_earlier_item():
    items = rows((1, 0, 100), (1, 10, 50), (1, 60, 150), (1, 200, 210), (1, 200, 210), (2, 20, 30),
                 order=[5, 4, 3, 9, 1, 0])
    # (10, 50) lies in (0, 100); (60, 150) ends past it: kept. On the identical (200, 210) the
    # lower `order` (row 4) is the outer one. Positions in (thread, start) order.
    assert outermost(items, "order").tolist() == [0, 2, 4, 5]
    assert outermost(items.iloc[:0], "order").tolist() == []


def test_sums_inside_counts_and_sums_each_spans_items():
    spans = rows((1, 0, 100), (1, 50, 250), (2, 0, 100))
    items = rows((1, 0, 1), (1, 100, 101), (1, 250, 251), (1, 251, 252), (2, 500, 501),
                 bytes=[1.0, 10.0, 100.0, 1000.0, 5.0])
    count, total = sums_inside(spans, items, "ts", [None, items["bytes"].to_numpy()])
    # [0, 100] holds ts 0 and 100 (both ends in); [50, 250] holds 100 and 250; tid 2's span none
    assert count.tolist() == [2.0, 2.0, 0.0]
    assert total.tolist() == [11.0, 110.0, 0.0]


def test_launched_inside_pairs_each_span_with_its_launches():
    spans = rows((1, 0, 100), (1, 300, 400), (2, 0, 100), (1, 140, 320)).set_index(pd.Index(["a", "b", "c", "d"]))
    links = pd.DataFrame({"rank": [0, 0, 0, 0, 0], "pid": [1, 1, 1, 1, 1], "tid": [1, 1, 2, 1, 1],
                          "launch_ts": [50.0, 10.0, 500.0, 150.0, 310.0], "correlation": [7, 8, 9, 10, 11]})
    span_at, link_at = launched_inside(spans, links)
    # "a" holds the launches at 10 and 50 (in time order); "d" [140, 320] those at 150 and 310;
    # "b" [300, 400] the one at 310 too; tid 2's launch lies outside "c"
    got = sorted(zip(spans.index[span_at], links["correlation"].to_numpy()[link_at].tolist()))
    assert got == [("a", 7), ("a", 8), ("b", 11), ("d", 10), ("d", 11)]
    assert links["correlation"].to_numpy()[link_at[span_at == 0]].tolist() == [8, 7]
    empty = launched_inside(spans.iloc[:0], links)
    assert [len(x) for x in empty] == [0, 0]


def test_between_an_after_event_and_the_next_before_event():
    after = rows((1, 0, 10), (2, 0, 10))            # e.g. a gradient-norm op
    before = rows((1, 100, 110), (2, 5, 6))         # e.g. the optimizer step
    points = rows((1, 50, 50), (1, 5, 5), (1, 120, 120), (2, 50, 50), (3, 50, 50))
    # 50 on tid 1: after the norm ended, the step still to come; 5: the norm not yet ended;
    # 120: the step already started; tid 2: its step started at 5 with none after; tid 3: nothing
    assert between(points, after, before).tolist() == [True, False, False, False, False]
    assert between(points, after.iloc[:0], before).tolist() == [False] * 5
