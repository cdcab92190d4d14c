"""Names, sites and paths from a hostile trace reach the terminal escaped (`textsafe.printable`):
`analyze`, `diff`, `log add/show/compare` and the one-line errors hold no raw control byte, the
escaped form is shown, and `--json` keeps the real strings."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from goodhart_prof.textsafe import printable, quote_path
from tests.support.events import X
from tests.support.helpers import clean_env, item_sync_events
from tests.support.paths import ROOT

EVIL = "\x1b[2J\x07\r\x9b\u202e\t\x7f\b"   # clear screen, bell, CR, CSI, bidi override, tab, DEL, BS
SHOWN = "\\x1b[2J\\x07\\r\\x9b\\u202e\\t\\x7f\\x08"
# Raw bytes a terminal acts on: C0 but newline, DEL, C1 in UTF-8, U+2028/9, bidi controls.
RAW = re.compile(rb"[\x00-\x09\x0b-\x1f\x7f]|\xc2[\x80-\x9f]|\xe2\x80[\xa8-\xae\x8e\x8f]|\xe2\x81[\xa6-\xa9]")


def hostile_trace(path: Path, scale: float = 1.0) -> Path:
    """A kernel, an op, a thread and a Python frame's file path holding control characters (and
    rich markup), around one `.item()` sync whose site is that frame."""
    s = scale
    events = [
        {"ph": "M", "name": "thread_name", "pid": 100, "tid": 100, "args": {"name": "main" + EVIL + "\n"}},
        X("ProfilerStep#1", "user_annotation", 0, 2000),
        X(f"/tmp/evil{EVIL}dir/train.py(42): step", "python_function", 10, 1900,
          **{"Python id": 1, "Python parent id": None}),
        X(f"aten::mm{EVIL}\n[/x]", "cpu_op", 20, 50 * s, **{"External id": 1}),
        X("cudaLaunchKernel", "cuda_runtime", 22, 5, correlation=7, **{"External id": 1}),
        X(f"gemm{EVIL}\nkernel[/z]", "kernel", 30, 300 * s, pid=0, tid=7, device=0, stream=7, correlation=7),
    ] + item_sync_events()
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """The command line, its output as bytes (a control byte must not hide in a decoding)."""
    return subprocess.run([sys.executable, "-m", "goodhart_prof.cli", *args], capture_output=True,
                          timeout=120, env=clean_env(COLUMNS="200"), cwd=cwd or ROOT)


def assert_no_raw_control(res: subprocess.CompletedProcess) -> None:
    for stream in (res.stdout, res.stderr):
        found = RAW.findall(stream)
        assert not found, (found[:5], stream.decode(errors="replace")[:2000])
    assert b"Traceback" not in res.stderr, res.stderr.decode(errors="replace")


def test_printable_and_quote_path():
    assert printable("gemm" + EVIL) == "gemm" + SHOWN
    assert printable("a\nb\u2028c\u2029d\u2066e\u2069f\u200eg\ud8ffh") == \
        "a\\nb\\u2028c\\u2029d\\u2066e\\u2069f\\u200eg\\ud8ffh"
    for kept in ("aten::mm", "void at::native::vectorized<float>", "café ünïcode 模型 🙂", "a\\nb"):
        assert printable(kept) == kept  # normal text and Unicode unchanged, backslashes kept
    assert quote_path("/data/run 1.json") == "/data/run 1.json"  # normal paths print unchanged
    assert quote_path("/data/a\nb.json") == "'/data/a\\nb.json'"
    assert quote_path("/d/it's\\x\x1b.json") == "'/d/it\\'s\\\\x\\x1b.json'"
    assert quote_path(Path("/tmp/\udcff.json")) == "'/tmp/\\udcff.json'"  # undecodable byte
    assert quote_path(None) == "None"


@pytest.fixture(scope="module")
def hostile(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("hostile")
    return hostile_trace(folder / f"tr{EVIL}ace.json")


def test_analyze_escapes_names_sites_and_paths(hostile):
    res = cli("analyze", str(hostile))
    assert res.returncode == 0
    assert_no_raw_control(res)
    out = res.stdout.decode()
    assert f"tr{SHOWN}ace.json" in out                 # the trace's file name
    assert f"gemm{SHOWN}\\nkernel[/z]" in out           # the kernel (and its markup, shown)
    assert f"aten::mm{SHOWN}\\n[/x]" in out             # the op
    # the sync's Python site (the file is not there: the function named, no line claimed)
    assert f"in function step (/tmp/evil{SHOWN}dir/train.py, frame line 42)" in out
    # The JSON document keeps the real strings (json escapes the controls itself).
    doc = json.loads(cli("analyze", str(hostile), "--json").stdout)
    assert doc["kernels"][0]["name"] == f"gemm{EVIL}\nkernel[/z]"


def test_diff_and_perflog_escape_names(hostile, tmp_path):
    b = hostile_trace(tmp_path / "b.json", scale=2.0)
    res = cli("diff", str(hostile), str(b))
    assert res.returncode == 0
    assert_no_raw_control(res)
    assert f"tr{SHOWN}ace.json" in res.stdout.decode()
    log = tmp_path / "PERFLOG.md"
    for path, change in ((hostile, f"first{EVIL}"), (b, "second")):
        res = cli("log", "add", str(path), "--change", change, "--log", str(log))
        assert res.returncode == 0
        assert_no_raw_control(res)
    assert not RAW.search(log.read_bytes())  # the markdown log too
    show = cli("log", "show", "--log", str(log))
    compare = cli("log", "compare", "2", "1", "--log", str(log))
    for res in (show, compare):
        assert res.returncode == 0
        assert_no_raw_control(res)
    change = printable(" ".join(f"first{EVIL}".split()))  # `log add` folds whitespace (CR, tab)
    assert "B: id 1 2" in compare.stdout.decode() and change in compare.stdout.decode()
    assert "\\x1b[2J" in show.stdout.decode()  # the change and top kernel (folded in their columns)
    rows = [json.loads(line) for line in log.with_suffix(".jsonl").read_text().splitlines()]
    assert rows[0]["change"] == "first\x1b[2J\x07 \x9b\u202e \x7f\b"  # the real string


def test_errors_about_hostile_names_are_one_escaped_line(hostile, tmp_path):
    broken = tmp_path / f"bro{EVIL}\nken.json"
    broken.write_text('{"traceEvents": [')
    missing = tmp_path / f"mis{EVIL}\nsing.json"
    for path, problem in ((broken, "not valid JSON"), (missing, "no such file or folder")):
        res = cli("analyze", str(path))
        assert res.returncode == 2
        assert_no_raw_control(res)
        lines = res.stderr.decode().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"Error: '{printable(str(path))}': "), lines
        assert problem in lines[0]
    res = cli("analyze", str(hostile), "--rank", "5")  # an error naming the trace, not a load error
    assert res.returncode == 2 and res.stderr.decode().splitlines() == [
        f"Error: '{printable(str(hostile))}': no rank 5 (ranks: [0])"]
