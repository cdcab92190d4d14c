"""The files `SourceIndex` reads (analysis/host/source_files.py): found beside the trace, parsed
once, not when edited after the trace was written, at the run's recorded git revision where there
is one (`recorded_source`)."""
from __future__ import annotations

import os
import subprocess

from goodhart_prof.analysis.host.source_files import SourceIndex, recorded_source


LOOP = ("def train(t, xs):\n"      # 1
        "    a = t.item()\n"        # 2
        "    return a\n")           # 3


def test_source_index_reads_a_frames_file_beside_the_trace(tmp_path):
    (tmp_path / "loop.py").write_text(LOOP)
    index = SourceIndex([tmp_path / "missing", tmp_path])
    body = index.body("loop.py", "train", 1, running=False)
    assert (body.function, body.def_line, body.running) == ("train", 1, False)
    assert [s.line for s in body.candidates("item", -1)] == [2]
    assert index.body("loop.py", "train", 1, running=False) is body  # parsed and found once
    assert index.body("other.py", "train", 1) is None  # no such file
    assert index.body("<stdin>", "train", 1) is None   # no file at all
    (tmp_path / "broken.py").write_text("def train(:\n")
    assert index.body("broken.py", "train", 1) is None  # unparsable: no line claimed


def test_a_file_edited_after_the_trace_is_not_read(tmp_path):
    path = tmp_path / "loop.py"
    path.write_text(LOOP)
    written = path.stat().st_mtime
    assert SourceIndex([tmp_path], recorded=written).body("loop.py", "train", 1, running=False) is not None
    os.utime(path, (written + 60, written + 60))  # edited a minute after the trace was written
    assert SourceIndex([tmp_path], recorded=written).body("loop.py", "train", 1, running=False) is None


def test_the_source_at_the_recorded_revision(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()

    def git(*args):
        subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                       env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
                            "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"})
    git("init", "-q")
    path = repo / "loop.py"
    path.write_text(LOOP)
    git("add", "loop.py")
    git("commit", "-q", "-m", "traced")
    path.write_text("# moved down\n" + LOOP)  # edited since: train's def is on line 2 now
    assert recorded_source(path, "HEAD") == LOOP.encode()
    assert recorded_source(path, "no-such-revision") is None
    assert recorded_source(tmp_path / "elsewhere.py", "HEAD") is None  # no repository
    # the index reads the code traced, whatever the file holds now
    body = SourceIndex([repo], revision="HEAD").body("loop.py", "train", 1, running=False)
    assert body is not None and body.def_line == 1
    assert SourceIndex([repo]).body("loop.py", "train", 1, running=False) is None
