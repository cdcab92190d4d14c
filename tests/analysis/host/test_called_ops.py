"""Which ops the user's code called, and fresh-tensor moves (analysis/host/called_ops.py): top-level
ops with their neighbours, `.to()` of a tensor just made on the host (by a factory, or from host
data) with the copies it launched, torch's own ops left out, and the CPU-only reading of a move.
Hand-made traces worked by hand."""
from __future__ import annotations

import pandas as pd

from goodhart_prof.analysis.host.called_ops import (fresh_moves, inside_torch_annotation, launch_in_cpu_op,
                                                    top_level_ops)
from tests.support.events import ann, load_events, memcpy, op, rt


def htod(name, ts, corr):
    event = memcpy(name, ts, 20, corr)
    event["args"]["bytes"] = 4096
    return event


def move(ts, corr, memory="Pageable"):
    """`.to(device)` of 60 us: its _to_copy and copy_, and the 4 KiB copy of 20 us it launches."""
    return [op("aten::to", ts, 60), op("aten::_to_copy", ts + 1, 58), op("aten::copy_", ts + 2, 56),
            rt("cudaMemcpyAsync", ts + 5, 30, corr), htod(f"Memcpy HtoD ({memory} -> Device)", ts + 10, corr)]


EVENTS = [op("aten::zeros", 0, 10), *move(20, 1),                          # torch.zeros(n).to(dev)
          op("aten::mm", 100, 10),
          ann("Optimizer.step#Adam.step", 195, 100), op("aten::ones", 200, 5), *move(210, 2),  # torch's own
          op("aten::lift_fresh", 400, 5), *move(410, 3, "Pinned"),         # torch.from_numpy(a).to(dev)
          rt("cudaMemcpyAsync", 600, 10, 4), htod("Memcpy HtoD (Pageable -> Device)", 610, 4)]  # no op around


def test_top_level_ops_and_their_neighbours(tmp_path):
    ops = top_level_ops(load_events(tmp_path, EVENTS))
    top = ops[ops["top"]]
    assert top["name"].astype(str).tolist() == ["aten::zeros", "aten::to", "aten::mm", "aten::ones",
                                                "aten::to", "aten::lift_fresh", "aten::to"]
    assert top["prev_top"].astype(str).tolist()[1:3] == ["aten::zeros", "aten::to"]
    assert top["next_top"].astype(str).tolist()[-2] == "aten::to"
    assert pd.isna(top["prev_top"].iloc[0]) and pd.isna(top["next_top"].iloc[-1])  # the thread's ends
    # the moves' _to_copy and copy_ are inside them: not top-level; each starts a child but copy_
    inner = ops[~ops["top"]]
    assert set(inner["name"].astype(str)) == {"aten::_to_copy", "aten::copy_"}
    assert ops.set_index("name", append=True)["has_child"].xs("aten::copy_", level=1).tolist() == [False] * 3


def test_fresh_moves_with_their_copies(tmp_path):
    moves = fresh_moves(load_events(tmp_path, EVENTS))
    got = moves[["ts", "creator", "kind", "gpu", "copies", "bytes", "copy_us", "pageable"]].to_dict("records")
    # the .to() inside Optimizer.step# is torch's own bookkeeping, not a move of the user's
    assert got == [
        {"ts": 20.0, "creator": "aten::zeros", "kind": "factory", "gpu": True, "copies": 1,
         "bytes": 4096.0, "copy_us": 20.0, "pageable": 1},
        {"ts": 410.0, "creator": "aten::lift_fresh", "kind": "host_data", "gpu": True, "copies": 1,
         "bytes": 4096.0, "copy_us": 20.0, "pageable": 0}]


def test_on_a_cpu_only_trace_a_move_is_a_to_without_a_child(tmp_path):
    events = [op("aten::lift_fresh", 0, 5), op("aten::to", 10, 5),            # moves nothing: a move
              op("aten::zeros", 20, 5), op("aten::to", 30, 20), op("aten::_to_copy", 31, 18),  # converts
              op("aten::empty", 60, 5), op("aten::to", 70, 5), op("aten::lift_fresh", 80, 5)]  # torch.tensor
    moves = fresh_moves(load_events(tmp_path, events))
    assert moves[["ts", "kind", "gpu", "copies"]].to_dict("records") == [
        {"ts": 10.0, "kind": "host_data", "gpu": False, "copies": 0}]


def test_torch_annotation_and_launches_in_ops(tmp_path):
    trace = load_events(tmp_path, EVENTS)
    rows = pd.DataFrame({"rank": [0, 0, 0], "pid": [100] * 3, "tid": [100, 100, 101],
                         "ts": [200.0, 300.0, 200.0], "end": [205.0, 301.0, 205.0]})
    assert inside_torch_annotation(trace, rows).tolist() == [True, False, False]
    gpu = trace.gpu.sort_values("ts")
    # the three copies launched inside an aten::to, the last launched from no op
    assert launch_in_cpu_op(trace, gpu.index.to_numpy()).tolist() == [True, True, True, False]
