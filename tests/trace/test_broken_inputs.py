"""Broken and hostile trace input (tests/support/broken_corpus.py): `goodhart-prof analyze` and `export`
as subprocesses give a one-line error naming the file with exit code 2, or a report that counts
what was skipped; never a traceback, never a hang, never unbounded memory."""
from __future__ import annotations

import gzip
import json
import resource
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.support import broken_corpus
import goodhart_prof.trace.decode as decode
import goodhart_prof.trace.file_bytes as file_bytes
from goodhart_prof.textsafe import quote_path
from goodhart_prof.trace.load import TraceError, load
from tests.support.helpers import clean_env, error_lines

with tempfile.TemporaryDirectory() as _scratch:
    NAMES = list(broken_corpus.build(Path(_scratch)))
    broken_corpus.restore_permissions(Path(_scratch))

TIMEOUT_S = 60          # "never a hang": a case that takes this long fails
MEMORY_LIMIT = 3 << 30  # address space of each command: no case may need more


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def _run(args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "goodhart_prof.cli", *args], capture_output=True,
                          text=True, timeout=TIMEOUT_S, env=clean_env(), preexec_fn=_limit_memory)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("broken")
    cases = broken_corpus.build(root)
    jobs = {}
    for name, case in cases.items():
        if case.skip_reason:
            continue
        jobs[name, "text"] = ["analyze", str(case.path)]
        if case.error is None:
            jobs[name, "json"] = ["analyze", str(case.path), "--json"]
    with ThreadPoolExecutor(4) as pool:  # each command is ~0.5 s of imports
        futures = {key: pool.submit(_run, args) for key, args in jobs.items()}
        results = {key: f.result() for key, f in futures.items()}
    yield cases, results
    broken_corpus.restore_permissions(root)


def assert_one_line_error(res: subprocess.CompletedProcess, path: Path, piece: str) -> None:
    assert "Traceback" not in res.stderr, res.stderr
    assert res.returncode == 2, (res.returncode, res.stderr)
    lines = error_lines(res.stderr)
    assert len(lines) == 1, res.stderr
    # names the file (a folder: inside it), quoted with escapes when the name holds control characters
    assert lines[0].startswith(f"Error: {quote_path(path)}"), lines[0]
    assert piece in lines[0], lines[0]


@pytest.mark.parametrize("name", NAMES)
def test_analyze(corpus, name):
    cases, results = corpus
    case = cases[name]
    if case.skip_reason:
        pytest.skip(case.skip_reason)
    res = results[name, "text"]
    if case.error is not None:
        assert_one_line_error(res, case.path, case.error)
        assert res.stdout == ""
        return
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
    assert "GPU time" in res.stdout and "Findings" in res.stdout
    if case.skipped:
        assert f"skipped {case.skipped:,} malformed event(s)" in res.stdout
    else:
        assert "malformed" not in res.stdout
    if case.warning:  # the report wraps it at the width (100 when piped)
        assert " ".join(case.warning.split()) in " ".join(res.stdout.split())
    as_json = results[name, "json"]
    assert as_json.returncode == 0 and "Traceback" not in as_json.stderr, as_json.stderr
    doc = json.loads(as_json.stdout)
    assert doc["trace"]["skipped_events"] == case.skipped and doc["trace"]["events"] > 0
    warnings = [line for line in error_lines(as_json.stderr)]
    assert warnings == [f"warning: {w}" for w in doc["trace"]["warnings"]]
    if case.skipped:
        assert any(f"skipped {case.skipped:,} malformed" in w for w in warnings)


def test_unreadable_file_reads_as_a_one_line_error(tmp_path, monkeypatch):
    """The same error as chmod 000 gives, made where chmod cannot (root): open() refuses."""
    path = tmp_path / "locked.json"
    path.write_bytes(json.dumps(broken_corpus.good_doc()).encode())
    real_open = open

    def refusing_open(file, *args, **kwargs):
        if str(file) == str(path):
            raise PermissionError(13, "Permission denied", str(file))
        return real_open(file, *args, **kwargs)
    monkeypatch.setattr("builtins.open", refusing_open)
    with pytest.raises(TraceError, match=r"locked\.json: cannot read \(Permission denied\)"):
        load(path)


@pytest.mark.parametrize("expand", [1 << 20, 8 << 20])
def test_gzip_bomb_stops_at_the_limit(tmp_path, monkeypatch, expand):
    """A small .gz that expands to far more than a trace compresses to is refused before it can
    take the machine's memory (the floor is lowered here; it is 1 GiB)."""
    bomb = tmp_path / "bomb.json.gz"
    bomb.write_bytes(gzip.compress(b'{"traceEvents": [' + b" " * (64 << 20) + b"]}"))
    assert bomb.stat().st_size < 200_000
    monkeypatch.setattr(file_bytes, "GUNZIP_FLOOR", expand)
    with pytest.raises(TraceError, match="gzip data expands past"):
        load(bomb)
    limit = file_bytes.gunzip_limit(bomb.stat().st_size)
    assert limit == max(expand, file_bytes.GUNZIP_RATIO * bomb.stat().st_size)


def test_nan_documents_past_the_slow_parser_limit_are_refused(tmp_path, monkeypatch):
    path = tmp_path / "nan.json"
    path.write_bytes(b'{"traceEvents":[{"ph":"X","ts":NaN,"dur":1}]}')
    monkeypatch.setattr(decode, "NONSTANDARD_MAX_BYTES", 10)
    with pytest.raises(TraceError, match="uses NaN/Infinity"):
        load(path)


def test_export_broken_and_partly_broken(corpus, tmp_path):
    cases, _ = corpus
    jobs = {
        "truncated": ["export", str(cases["truncated"].path), "-o", str(tmp_path / "t.pftrace")],
        "deep": ["export", str(cases["deep_nesting_in_event"].path), "-o", str(tmp_path / "d.json")],
        "wrong_types": ["export", str(cases["wrong_types"].path), "-o", str(tmp_path / "w.json.gz")],
        "nan": ["export", str(cases["nan_infinity"].path), "-o", str(tmp_path / "n.json")],
        "bad_utf8": ["export", str(cases["non_utf8_name"].path), "-o", str(tmp_path / "u.pftrace")],
    }
    with ThreadPoolExecutor(4) as pool:
        res = dict(zip(jobs, pool.map(_run, jobs.values())))
    assert_one_line_error(res["truncated"], cases["truncated"].path, "not valid JSON")
    assert_one_line_error(res["deep"], cases["deep_nesting_in_event"].path, "nested too deeply")
    assert not (tmp_path / "t.pftrace").exists() and not (tmp_path / "d.json").exists()
    for key, skipped in (("wrong_types", 10), ("nan", 2), ("bad_utf8", 1)):
        assert res[key].returncode == 0 and "Traceback" not in res[key].stderr, res[key].stderr
        assert f"warning: skipped {skipped} malformed event(s)" in res[key].stderr
        assert res[key].stdout.startswith("wrote ")
    # The Chrome JSON exports load again, with the same complete events skipped.
    assert load(tmp_path / "w.json.gz").skipped_events == 10
    reloaded = load(tmp_path / "n.json")  # NaN/Infinity were written back as null
    assert reloaded.skipped_events == 2 and len(reloaded.events) == 4


def test_export_of_a_folder_with_hostile_events(tmp_path):
    folder = tmp_path / "ranks"
    folder.mkdir()
    events = broken_corpus.good_events()
    for rank in (0, 1):
        doc = broken_corpus.good_doc(events + [1, "x", broken_corpus.event(args=[1])],
                                     distributedInfo={"rank": rank})
        text = json.dumps(doc).encode().replace(b'"x"', b'"caf\xe9"')  # and one bad UTF-8 string
        (folder / f"rank-{rank}.json").write_bytes(text)
    res = _run(["export", str(folder), "-o", str(tmp_path / "merged.json")])
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
    merged = load(tmp_path / "merged.json")
    assert merged.ranks == [0, 1] and len(merged.events) == 2 * len(events)
