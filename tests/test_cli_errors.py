"""Issue 32, items 5, 9, 10, 12, 13 and 14: every error one line, nothing left out silently.

- 5: `--workers` beyond the rank files or the cores is capped, with one line saying so.
- 9: a run's metrics.jsonl with a torn last line (inside a UTF-8 character) or an out-of-range
  `iteration`: `diff` and `log add` warn, naming the file and the line (the reading itself:
  tests/trace/test_run_record.py).
- 10: a malformed `--scheduler` address is one line, exit 2, before Dask loads; "" is not "none".
- 12: too few open files for `--workers N`: the soft limit is raised where the hard one allows,
  else one line saying how many are needed.
- 13: out of memory in the main process: one line naming the file, its size and the memory limit.
- 14: a dangling or looping symlink in a folder of ranks is a warning, like an unreadable file.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from goodhart_prof.trace.load import TraceError, load
from goodhart_prof.trace.run_record import read_run
from tests.support.helpers import clean_env, error_lines
from tests.support.paths import DATA

DLRM = DATA / "param" / "dlrm_8rank"
RUN = DATA / "ours" / "ab" / "clean_1"
MI250 = DATA / "hta" / "mi250_minitoy_rocm.json.gz"


def _cli(*args: str, prelude: str = "", timeout: float = 120) -> subprocess.CompletedProcess:
    code = f"{prelude}\nfrom goodhart_prof.cli import main\nmain({list(args)!r})"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=timeout, env=clean_env())


def _one_line_error(res: subprocess.CompletedProcess) -> str:
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    (line,) = error_lines(res.stderr)
    assert line.startswith("Error: ")
    return line


def _run_copy(tmp_path: Path, name: str = "run") -> Path:
    folder = tmp_path / name
    shutil.copytree(RUN, folder)
    return folder


# -- 9: metrics.jsonl read robustly ----------------------------------------------------------------
def test_diff_and_log_add_warn_for_a_torn_metrics_line(tmp_path):
    a, b = _run_copy(tmp_path, "a"), _run_copy(tmp_path, "b")
    with open(a / "metrics.jsonl", "ab") as fh:
        fh.write(b'{"iteration": 99, "note": "\xc3')
    rows = [json.loads(line) for line in (b / "metrics.jsonl").read_text().splitlines()]
    rows[3]["iteration"] = 2**70
    (b / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    res = _cli("diff", str(a), str(b))
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
    warnings = [line for line in error_lines(res.stderr) if line.startswith("warning: ")]
    assert warnings == [f"warning: {a / 'metrics.jsonl'}: skipped line 17, its last: torn (the "
                        "run was still writing it, or was stopped)",
                        f"warning: {b / 'metrics.jsonl'}: skipped line 4: iteration "
                        "1180591620717411303424 is out of range (0 to 2**63 - 1)"]
    log = tmp_path / "PERFLOG.md"
    res = _cli("log", "add", str(a), "--change", "torn", "--log", str(log))
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
    assert error_lines(res.stderr) == [f"warning: {a / 'metrics.jsonl'}: skipped line 17, its last: torn "
                                       "(the run was still writing it, or was stopped)"]
    assert "added to" in res.stdout


# -- 10: --scheduler validated before Dask ---------------------------------------------------------
@pytest.mark.parametrize("address, why", [
    ("foo://x", "protocol foo:// is not one Dask speaks (tcp, tls, ws, wss, ucx)"),
    ("127.0.0.1", "no port"),
    ("http://127.0.0.1:8786", "protocol http:// is not one Dask speaks (tcp, tls, ws, wss, ucx)"),
    ("tcp://[::1", "an IPv6 host needs its closing ]"),
    ("tcp://host:99999", "port 99999 is not 1 to 65535"),
    ("tcp://ho st:8786", "host 'ho st' is not a host name or IP address"),
    ("tcp://:8786", "no host"),
])
def test_a_malformed_scheduler_address_is_one_line_before_dask(address, why):
    from goodhart_prof.trace.cluster import check_scheduler
    from goodhart_prof.errors import UserError
    with pytest.raises(UserError) as info:
        check_scheduler(address)
    assert info.value.format_message() == (f"--scheduler {address}: not a scheduler address: {why} "
                                           "(expected e.g. tcp://127.0.0.1:8786)")


@pytest.mark.parametrize("address", ["tcp://127.0.0.1:8786", "tls://node-3.cluster:8786",
                                     "tcp://[::1]:8786", "10.0.0.2:8786", "ws://h:1"])
def test_well_formed_scheduler_addresses_pass(address):
    from goodhart_prof.trace.cluster import check_scheduler
    check_scheduler(address)


@pytest.mark.parametrize("address", ["", "foo://x", "tcp://[::1"])
def test_the_cli_refuses_a_malformed_or_empty_scheduler_in_one_line(address):
    res = _cli("analyze", str(DLRM), "--scheduler", address,
               prelude="import atexit, sys\natexit.register(lambda: print('dask' if 'distributed' "
                       "in sys.modules else 'no dask', file=sys.stderr))")
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    error, loaded = error_lines(res.stderr)
    assert loaded == "no dask"  # refused before a cluster (a local one, for "") was started
    if address:
        assert error.startswith(f"Error: --scheduler {address}: not a scheduler address: ")
    else:
        assert error == "Error: --scheduler: the address is empty (expected e.g. tcp://127.0.0.1:8786)"


# -- 5: --workers capped ---------------------------------------------------------------------------
def test_workers_are_capped_by_rank_files_and_cores():
    from goodhart_prof.trace.cluster import worker_count
    assert worker_count(10**20, files=8, cores=2) == (2, "--workers 100000000000000000000: using 2 "
                                                         "(8 rank files, 2 cores)")
    assert worker_count(10**20, files=3, cores=16) == (3, "--workers 100000000000000000000: using 3 "
                                                          "(3 rank files, 16 cores)")
    assert worker_count(2, files=8, cores=2) == (2, None)
    assert worker_count(None, files=8, cores=4) == (1, None)


def test_a_huge_workers_count_runs_capped_and_says_so(tmp_path):
    pytest.importorskip("distributed")
    folder = tmp_path / "ranks"
    folder.mkdir()
    for path in sorted(DLRM.iterdir())[:2]:
        shutil.copy(path, folder / path.name)
    res = _cli("analyze", str(folder), "--json", "--workers", "100000000000000000000")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["trace"]["ranks"] == [0, 1]
    cores = min(len(os.sched_getaffinity(0)), 2)
    assert error_lines(res.stderr) == [f"warning: --workers 100000000000000000000: using {cores} "
                                       f"(2 rank files, {len(os.sched_getaffinity(0))} cores)"]


# -- 12: open files for --workers ------------------------------------------------------------------
def test_too_few_open_files_for_the_workers_is_one_line():
    pytest.importorskip("distributed")
    from goodhart_prof.trace.cluster import files_needed
    res = _cli("analyze", str(DLRM), "--workers", "2",
               prelude="import resource\nresource.setrlimit(resource.RLIMIT_NOFILE, (30, 30))")
    line = _one_line_error(res)
    assert line == (f"Error: --workers 2: needs about {files_needed(2)} open files, and the limit is "
                    f"30 (ulimit -n; raise it, or use fewer workers)")


def test_the_soft_open_files_limit_is_raised_to_the_hard_one():
    pytest.importorskip("distributed")
    from goodhart_prof.trace.cluster import files_needed
    res = _cli("analyze", str(DLRM), "--workers", "2", "--json",
               prelude="import resource\nresource.setrlimit(resource.RLIMIT_NOFILE, "
                       f"(30, {files_needed(2)}))")
    assert res.returncode == 0 and error_lines(res.stderr) == [], res.stderr
    assert json.loads(res.stdout)["trace"]["ranks"] == list(range(8))


def test_too_little_address_space_for_the_workers_is_one_line():
    """Found by our own round (ulimit -v): at 600 MB a worker could not start a thread ("Nanny
    failed to start" traceback), at 400 MB workers could not import pandas and the load hung."""
    pytest.importorskip("distributed")
    res = _cli("analyze", str(DLRM), "--workers", "2",
               prelude="import resource\nresource.setrlimit(resource.RLIMIT_AS, (600 << 20, 600 << 20))")
    assert _one_line_error(res) == ("Error: --workers 2: each Dask process needs about 1,074 MB of "
                                    "address space, and the limit is 629 MB (ulimit -v; raise it, or "
                                    "analyse without --workers)")


@pytest.mark.parametrize("name, code, line", [("SIGINT", 130, "Aborted."),
                                              ("SIGTERM", 143, "Aborted (SIGTERM).")])
def test_a_signal_while_the_local_cluster_starts_stops_it_cleanly(name, code, line):
    """Found by our own round (signals at random moments): a SIGINT while the LocalCluster was
    starting left it half-started, and distributed's exit hook printed an AssertionError
    traceback. Now the signal waits until the cluster is up, then closes it: one line."""
    pytest.importorskip("distributed")
    prelude = ("import os, signal, threading, distributed\n"
               "start = distributed.LocalCluster.__init__\n"
               "def starting(self, *a, **k):\n"  # the signal comes 0.3 s into the start
               f"    threading.Timer(0.3, os.kill, (os.getpid(), signal.{name})).start()\n"
               "    start(self, *a, **k)\n"
               "distributed.LocalCluster.__init__ = starting")
    res = _cli("analyze", str(DLRM), "--workers", "2", "--json", prelude=prelude)
    assert res.returncode == code and "Traceback" not in res.stderr, res.stderr
    assert error_lines(res.stderr) == [line] and res.stdout == ""


# -- 13: out of memory -----------------------------------------------------------------------------
def test_out_of_memory_while_analysing_is_one_line_naming_the_file():
    size = MI250.stat().st_size
    res = _cli("analyze", str(MI250),
               prelude="import resource\nimport goodhart_prof.analysis as a\n"
                       "def oom(trace):\n    raise MemoryError\n"
                       "a.analyze = oom\n"
                       "resource.setrlimit(resource.RLIMIT_AS, (3 << 30, resource.RLIM_INFINITY))")
    line = _one_line_error(res)
    assert line.startswith(f"Error: {MI250} ({size / 1e6:.1f} MB): out of memory loading or analysing "
                           f"it: it needed more than the 3,221 MB this process may use (ulimit -v; ")


@pytest.mark.parametrize("command", [["export", "-o", "OUT.json.gz"], ["log", "add", "--change", "x", "--log", "OUT.md"],
                                     ["diff", str(MI250)]])
def test_out_of_memory_in_every_command_that_analyses_names_the_input(command, tmp_path):
    args = [part.replace("OUT", str(tmp_path / "out")) for part in command]
    args = args[:2] + [str(MI250)] + args[2:] if command[0] == "log" else [args[0], str(MI250), *args[1:]]
    res = _cli(*args, prelude="import goodhart_prof.analysis as a\n"
                              "def oom(trace):\n    raise MemoryError\n"
                              "a.analyze = oom")
    line = _one_line_error(res)
    assert line.startswith(f"Error: {MI250} (") and ": out of memory loading or analysing " in line, line
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_out_of_memory_for_real_in_the_loader_is_one_line(tmp_path):
    """A trace that cannot be read into the 30 MB of address space left: the real MemoryError.
    (Not much more: msgspec 0.22 dies of SIGSEGV when an allocation fails while it decodes.)"""
    big = tmp_path / "big.json"
    event = '{"ph":"X","name":"%s","cat":"kernel","ts":%d,"dur":1,"pid":1,"tid":1}'
    with open(big, "w") as fh:
        fh.write('{"traceEvents":[')
        fh.write(",".join(event % ("k" * 40 + str(i % 5000), i) for i in range(500_000)))
        fh.write("]}")
    prelude = ("import resource, goodhart_prof.cli, goodhart_prof.trace.load, goodhart_prof.analysis\n"
               "vm = int(next(l for l in open('/proc/self/status') if l.startswith('VmSize')).split()[1])\n"
               "resource.setrlimit(resource.RLIMIT_AS, ((vm << 10) + (30 << 20), resource.RLIM_INFINITY))")
    res = _cli("analyze", str(big), "--no-progress", prelude=prelude)
    line = _one_line_error(res)
    assert line.startswith(f"Error: {big} ({big.stat().st_size / 1e6:.1f} MB): out of memory")


# -- 14: dangling and looping symlinks -------------------------------------------------------------
def _ranks_with_bad_links(tmp_path: Path) -> Path:
    folder = tmp_path / "ranks"
    folder.mkdir()
    for path in sorted(DLRM.iterdir())[:2]:
        shutil.copy(path, folder / path.name)
    (folder / "worker5_step_12.pt.trace.json.gz").symlink_to(tmp_path / "gone.json.gz")
    (folder / "worker6_step_12.pt.trace.json.gz").symlink_to("worker6_step_12.pt.trace.json.gz")
    (folder / "notes.txt").symlink_to(tmp_path / "gone.txt")  # not a trace name: not looked at
    return folder


def test_dangling_and_looping_symlinks_are_warned_for(tmp_path):
    folder = _ranks_with_bad_links(tmp_path)
    trace = load(folder)
    assert trace.ranks == [0, 1]
    assert trace.warnings[:2] == [
        f"skipped rank file worker5_step_12.pt.trace.json.gz: a dangling symbolic link (to "
        f"{tmp_path / 'gone.json.gz'}) (the other ranks are analysed; --strict stops instead)",
        "skipped rank file worker6_step_12.pt.trace.json.gz: a symbolic link loop "
        "(the other ranks are analysed; --strict stops instead)"]
    with pytest.raises(TraceError, match="worker5_step_12.pt.trace.json.gz: a dangling symbolic link"):
        load(folder, strict=True)


def test_a_folder_of_only_broken_links_names_one(tmp_path):
    folder = tmp_path / "ranks"
    folder.mkdir()
    (folder / "rank-0.json").symlink_to(tmp_path / "gone.json")
    with pytest.raises(TraceError, match=r"rank-0.json: a dangling symbolic link"):
        load(folder)


def test_the_cli_prints_the_link_warnings(tmp_path):
    folder = _ranks_with_bad_links(tmp_path)
    res = _cli("analyze", str(folder), "--json")
    assert res.returncode == 0, res.stderr
    assert [line.split(":")[1] for line in error_lines(res.stderr)][:2] == \
        [" skipped rank file worker5_step_12.pt.trace.json.gz", " skipped rank file worker6_step_12.pt.trace.json.gz"]


@pytest.mark.parametrize("field, value, where", [
    ("world_size", 10**400, "$.world_size"),
    ("profiling", {"enabled": True, "iterations": [2**70, 2**71]}, "$.profiling.iterations[0]"),
])
def test_a_run_json_number_out_of_range_is_one_line(tmp_path, field, value, where):
    from goodhart_prof.trace.run_json import RunJsonError
    folder = _run_copy(tmp_path)
    record = json.loads((folder / "run.json").read_text())
    record[field] = value
    (folder / "run.json").write_text(json.dumps(record))
    with pytest.raises(RunJsonError, match=rf"run.json: not a run.json \(Expected `int` <= \d+ - at `{re.escape(where)}`\)"):
        read_run(folder)
