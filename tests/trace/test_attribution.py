"""The attribution trace beside a trace (trace/attribution.py): where it is looked for, loaded with
a lite trace and not with one that has stacks, an unreadable one a warning."""
from __future__ import annotations

import shutil

from goodhart_prof.trace.attribution import attribution_path
from goodhart_prof.trace.load import load
from tests.support.events import X, ann, load_events, op
from tests.support.paths import DATA

LITE = DATA / "ours" / "ab" / "clean_1" / "rank-0.pt.trace.json.gz"  # no Python frames
FULL = DATA / "ours" / "cpu_full_mode.pt.trace.json.gz"             # Python frames


def _run(tmp_path, companion=FULL):
    folder = tmp_path / "run"
    (folder / "attribution").mkdir(parents=True)
    shutil.copy(LITE, folder / "rank-0.pt.trace.json.gz")
    shutil.copy(companion, folder / "attribution" / "rank-0.pt.trace.json.gz")
    return folder


def test_where_the_attribution_trace_is(tmp_path):
    folder = _run(tmp_path)
    rank = folder / "rank-0.pt.trace.json.gz"
    assert attribution_path(rank) == folder / "attribution" / rank.name      # a rank file: its namesake
    assert attribution_path(folder) == folder / "attribution"                # a run folder: all ranks
    (folder / "merged_trace.json").write_text("{}")
    assert attribution_path(folder / "merged_trace.json") == folder / "attribution"  # a merge: the folder
    assert attribution_path(LITE) is None


def test_a_lite_trace_is_loaded_with_it(tmp_path):
    folder = _run(tmp_path)
    trace = load(folder / "rank-0.pt.trace.json.gz")
    assert len(trace.frames) == 0 and trace.attribution is not None
    assert len(trace.attribution.frames) == len(load(FULL).frames) > 0
    assert trace.attribution.paths == [folder / "attribution" / "rank-0.pt.trace.json.gz"]
    assert load(folder).attribution is not None
    assert trace.select(rank=0).attribution is not None


def test_a_trace_with_stacks_or_a_companion_without_them_gets_none(tmp_path):
    assert _run(tmp_path / "a", companion=LITE) and load(tmp_path / "a" / "run").attribution is None
    folder = tmp_path / "b"
    (folder / "attribution").mkdir(parents=True)
    shutil.copy(FULL, folder / "t.json.gz")
    shutil.copy(FULL, folder / "attribution" / "t.json.gz")
    assert load(folder / "t.json.gz").attribution is None  # it has stacks of its own


def test_an_unreadable_attribution_trace_is_a_warning(tmp_path):
    folder = _run(tmp_path)
    broken = folder / "attribution" / "rank-0.pt.trace.json.gz"
    broken.write_bytes(b"not a trace")
    trace = load(folder / "rank-0.pt.trace.json.gz")
    assert trace.attribution is None and len(trace.events) > 0
    (warning,) = [w for w in trace.warnings if "attribution" in w]
    assert warning.startswith(f"{broken}: the attribution trace is not read (") and warning.endswith(
        "); sites are op chains")
