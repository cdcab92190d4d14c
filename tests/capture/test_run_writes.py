"""Issue 32, item 3: `run` under a file size limit (`ulimit -f`, as a full disk would): the trace
writer's temporaries are beside the trace (never in TMPDIR), what was written is checked, and the
run stops with the one-line `cannot write` error (exit 2), no file under a final trace name and no
temporary left anywhere."""
from __future__ import annotations

import resource
import signal
import subprocess
import sys
from pathlib import Path

from tests.support.helpers import TINY_CONFIG, clean_env, error_lines

LIMIT = 200 * 1024  # the tiny run's trace is ~1 MB of JSON (73 KB gzipped); its metrics < 1 KB


def _limited(nbytes: int):
    def preexec():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, (nbytes, nbytes))
    return preexec


def _run(tmp_path: Path, root: Path, preexec=None, *extra: str) -> subprocess.CompletedProcess:
    """The tiny run (iterations 0-1, window 1) into root/r, TMPDIR an empty folder of its own."""
    cfg = tmp_path / "tiny.toml"
    cfg.write_text(TINY_CONFIG + "warmup = false\n")
    tmpdir = tmp_path / "tmpdir"
    tmpdir.mkdir(exist_ok=True)
    return subprocess.run([sys.executable, "-m", "goodhart_prof.cli", "run", "--iterations", "1",
                           "--config", str(cfg), "--output-dir", str(root), "--no-progress",
                           "--name", "r", *extra], capture_output=True, text=True, timeout=300,
                          env=clean_env(OMP_NUM_THREADS="1", TMPDIR=str(tmpdir)),
                          preexec_fn=preexec)


def test_a_file_size_limit_while_the_trace_is_written_is_one_line(tmp_path):
    root = tmp_path / "traces"
    res = _run(tmp_path, root, _limited(LIMIT))
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    errors = [line for line in error_lines(res.stderr) if line.startswith("Error: ")]
    trace = root / "r" / "rank-0.pt.trace.json.gz"
    assert errors == [f"Error: {trace}: cannot write: File too large"], res.stderr
    left = sorted(p.name for p in (root / "r").iterdir())
    assert left == ["metrics.jsonl"], left  # no trace, no merged trace, no run.json, no temporary
    assert _traces_in(tmp_path / "tmpdir") == []  # nothing of the trace went to TMPDIR
    assert not (root / "latest").exists()


def test_the_trace_is_written_beside_and_checked(tmp_path):
    """The same run without a limit: a complete trace, TMPDIR untouched, nothing hidden left."""
    import gzip
    import json

    root = tmp_path / "traces"
    res = _run(tmp_path, root)
    assert res.returncode == 0, res.stderr
    trace = root / "r" / "rank-0.pt.trace.json.gz"
    doc = json.loads(gzip.decompress(trace.read_bytes()))
    assert any(e.get("name") == "ProfilerStep#1" for e in doc["traceEvents"])
    assert sorted(p.name for p in (root / "r").iterdir()) == [  # one rank: no merged_trace.json
        "attribution", "metrics.jsonl", "rank-0.pt.trace.json.gz", "run.json"]
    assert [p.name for p in (root / "r" / "attribution").iterdir()] == ["rank-0.pt.trace.json.gz"]
    assert _traces_in(tmp_path / "tmpdir") == []


def _traces_in(folder: Path) -> list[Path]:
    """Files of a trace under folder (torch.compile's own cache, torchinductor_<user>, may be there)."""
    return [p for p in folder.rglob("*") if ".json" in p.name]


def test_a_killed_writers_trace_temporaries_are_removed(tmp_path):
    """A writer killed while Kineto wrote (SIGKILL: no cleanup) leaves `.tmp.json.tmp` and
    `.tmp.json`; the next write of the trace removes them (the writer's pid is gone)."""
    from goodhart_prof.fileio import remove_stale_temporaries

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    final = tmp_path / "rank-0.pt.trace.json.gz"
    left = [tmp_path / f".{final.name}.{dead.pid}.ab_1.tmp{suffix}"
            for suffix in (".json", ".json.tmp", ".gz")]
    for path in left:
        path.write_text("partial")
    assert sorted(remove_stale_temporaries(final)) == sorted(left)
    assert list(tmp_path.iterdir()) == []


def test_a_checkpoint_cut_short_is_one_line(tmp_path):
    """torch.save reports a short write as a RuntimeError from its zip writer (a traceback, exit 1
    before): it is the one-line `cannot write` of the checkpoint, exit 2, no checkpoint left."""
    root = tmp_path / "traces"
    res = _run(tmp_path, root, _limited(20 * 1024), "--checkpoint-every", "1")
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    errors = [line for line in error_lines(res.stderr) if line.startswith("Error: ")]
    checkpoint = root / "r" / "checkpoint-rank0.pt"
    assert len(errors) == 1 and errors[0].startswith(
        f"Error: {checkpoint}: cannot write: torch.save stopped short (disk full or a file size "
        f"limit?)"), res.stderr
    assert sorted(p.name for p in (root / "r").iterdir()) == ["metrics.jsonl"]


def test_a_short_json_without_a_known_cause_says_how_much_was_written(tmp_path):
    import pytest

    from goodhart_prof.capture.trace_files import check_json_written

    cut = tmp_path / "t.json"
    cut.write_bytes(b'{"traceEvents": [{"ph": "X", "name": "a"')
    with pytest.raises(OSError, match=r"^\[Errno 5\] the profiler's JSON stops short \(40 bytes written\)$"):
        check_json_written(cut)
    with pytest.raises(OSError, match=r"stops short \(0 bytes written\)"):
        check_json_written(tmp_path / "never_written.json")
    whole = tmp_path / "w.json"
    whole.write_bytes(b'{"traceEvents": []}\n')
    assert check_json_written(whole) == 20
