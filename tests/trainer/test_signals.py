"""Runs that stop, stop cleanly (issue 32, items 4, 6, 7, 8 and 11): a window far past the last
iteration ends with the run; SIGINT/SIGTERM/SIGHUP to the `goodhart-prof run` process alone reach
the trainer; a Ctrl-C while the trainer imports torch is an interruption, not a traceback; a dead
rank is named with its signal, what was written is merged and run.json records it; seeds and
rank counts out of range are one-line errors."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from goodhart_prof.capture.settings import ProfSettings
from tests.support.helpers import clean_env, error_lines, read_trace, step_labels, write_tiny_config
from tests.support.processes import descendants, leftovers, metrics_rows, still_running, wait_for
from tests.support.paths import ROOT

ONE_THREAD = {"OMP_NUM_THREADS": "1"}


def ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # as a shell starts `cmd &` in a script


def start_run(tmp_path: Path, *args: str, name: str = "r", environ: dict | None = None,
              new_session: bool = False, sigint_ignored: bool = False) -> tuple[subprocess.Popen, Path]:
    """`goodhart-prof run` on the tiny config into tmp_path/traces/<name>."""
    cfg = write_tiny_config(tmp_path)
    root = tmp_path / "traces"
    proc = subprocess.Popen([sys.executable, "-m", "goodhart_prof.cli", "run", "--config", str(cfg),
                             "--output-dir", str(root), "--name", name, "--no-progress", *args],
                            env=environ or clean_env(**ONE_THREAD), cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=new_session,
                            preexec_fn=ignore_sigint if sigint_ignored else None)
    return proc, root / name


def trainer_started(proc: subprocess.Popen) -> bool:
    """The CLI's child (the trainer) exists: the CLI itself is past its imports."""
    return bool(descendants(proc.pid))


# -- item 4: a window far past the last iteration -------------------------------------------------

def test_window_iterations_are_bounded_by_the_iterations_that_run():
    from trainer.train import window_iterations

    far = ProfSettings(enabled=True, first=3, last=999_999_999_999)
    assert window_iterations(far, 0, 4) == range(3, 4)
    assert window_iterations(far, 0, 4, before=1, after=1) == range(2, 4)
    assert window_iterations(far, 10, 12) == range(10, 12)  # a resume inside the window
    assert list(window_iterations(ProfSettings(enabled=True, first=50, last=55), 0, 10)) == []
    assert window_iterations(ProfSettings(enabled=False), 0, 10**15) == range(0)


@pytest.mark.slow
@pytest.mark.parametrize("how", ["flag", "PROF_ITERATIONS"])
def test_a_window_past_the_last_iteration_ends_with_the_run(tmp_path, how):
    window = "3-999999999999"
    args = ["--iterations", window] if how == "flag" else []
    environ = clean_env(**ONE_THREAD, **({"PROF_ITERATIONS": window} if how != "flag" else {}))
    began = time.monotonic()
    proc, out = start_run(tmp_path, *args, "--total-iterations", "4", environ=environ)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr
    assert time.monotonic() - began < 60  # not a loop over 10**12 iterations
    record = json.loads((out / "run.json").read_text())
    assert record["profiling"]["iterations"] == [3, 999_999_999_999]
    assert record["profiling"]["iterations_traced"] == [3]
    assert (record["traces"], record["merged_trace"]) == ({"0": str(out / "rank-0.pt.trace.json.gz")}, None)
    assert step_labels(read_trace(out / "rank-0.pt.trace.json.gz")["traceEvents"]) == ["ProfilerStep#3"]
    assert not (out / "merged_trace.json").exists()  # one rank: no merged copy
    assert (out.parent / "latest").resolve() == out.resolve()


# -- items 6 and 8: signals to the run process alone, during the imports, SIGHUP -------------------

@pytest.mark.slow
@pytest.mark.parametrize("signum,ignored", [(signal.SIGINT, False), (signal.SIGHUP, False),
                                            (signal.SIGINT, True)],
                         ids=["SIGINT", "SIGHUP", "SIGINT-to-a-background-job"])
def test_a_signal_to_the_run_process_alone_stops_the_trainer(tmp_path, signum, ignored):
    """`kill -INT <pid of goodhart-prof run>` (and SIGHUP, a closed terminal) used to be ignored:
    the run completed, exited 0 and moved `latest`. A script's `goodhart-prof run &` starts with
    SIGINT ignored: a `kill -INT` of it stops the run all the same."""
    proc, out = start_run(tmp_path, "--iterations", "3-390", "--total-iterations", "400",
                          sigint_ignored=ignored)
    wait_for(lambda: len(metrics_rows(out)) >= 4, proc, "iteration 4", timeout=60)
    children = descendants(proc.pid)
    os.kill(proc.pid, signum)  # the CLI process only, not its group
    _, stderr = proc.communicate(timeout=60)
    name = signal.Signals(signum).name
    assert proc.returncode == 128 + signum, stderr
    assert "Traceback" not in stderr
    record = json.loads((out / "run.json").read_text())
    assert record["interrupted"]["signal"] == name
    assert record["interrupted"]["at_iteration"] == record["iterations_run"] == len(metrics_rows(out))
    assert record["iterations_run"] < 400 and record["merged_trace"] is None
    assert error_lines(stderr) == [line for line in error_lines(stderr) if "interrupted" in line]
    assert f"interrupted by {name} at iteration" in stderr
    assert not list(out.glob("*trace*")) and leftovers(out) == []
    assert not (out.parent / "latest").exists()  # an interrupted run is not `latest`
    assert still_running(children) == []


@pytest.mark.slow
def test_ctrl_c_at_the_terminal_reaches_the_trainer_once(tmp_path):
    """A terminal's Ctrl-C goes to the whole foreground group: the trainer runs in its own group,
    so it gets the signal once, from `run`, and records it (a second one would stop it at once)."""
    proc, out = start_run(tmp_path, "--iterations", "2-3", "--total-iterations", "400",
                          new_session=True)
    wait_for(lambda: len(metrics_rows(out)) >= 6, proc, "iteration 6", timeout=60)
    os.killpg(proc.pid, signal.SIGINT)  # as the terminal does
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    record = json.loads((out / "run.json").read_text())
    assert record["interrupted"]["signal"] == "SIGINT"
    assert record["profiling"]["iterations_traced"] == [2, 3]  # the finished window, in its rank trace
    trace = out / "rank-0.pt.trace.json.gz"
    assert (record["traces"], record["merged_trace"]) == ({"0": str(trace)}, None)
    assert step_labels(read_trace(trace)["traceEvents"]) == ["ProfilerStep#2", "ProfilerStep#3"]
    assert f"| the finished window 2-3 is in {trace} |" in stderr
    assert leftovers(out) == []
    assert not (out.parent / "latest").exists()


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGHUP, signal.SIGTERM],
                         ids=["SIGINT", "SIGHUP", "SIGTERM"])
def test_a_signal_while_the_trainer_imports_is_an_interruption(tmp_path, signum):
    """Ctrl-C in the first seconds of `run` printed a KeyboardInterrupt traceback from torch's
    imports; SIGHUP was not handled at all."""
    proc, out = start_run(tmp_path, "--iterations", "2-3", "--total-iterations", "400")
    wait_for(lambda: trainer_started(proc), proc, "the trainer to start", timeout=30)
    time.sleep(0.3)  # the trainer is importing torch (seconds)
    os.kill(proc.pid, signum)
    _, stderr = proc.communicate(timeout=60)
    name = signal.Signals(signum).name
    assert proc.returncode == 128 + signum, stderr
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr
    assert error_lines(stderr) == [f"interrupted by {name} before training started | nothing "
                                   f"trained, no run.json written"]
    assert not out.exists()  # the empty run folder is removed
    assert not (out.parent / "latest").exists()


@pytest.mark.slow
def test_python_m_trainer_interrupted_during_its_imports(tmp_path):
    cfg = write_tiny_config(tmp_path)
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "trainer", "--config", str(cfg),
                             "--total-iterations", "400", "--output-dir", str(out)],
                            env=clean_env(**ONE_THREAD), cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    time.sleep(0.5)  # in the imports (torch's take seconds)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    assert error_lines(stderr) == ["interrupted by SIGINT before training started | nothing "
                                   "trained, no run.json written"]
    assert not out.exists()


# -- item 7: one rank of three killed ---------------------------------------------------------------

def rank_processes(pid: int) -> list[int]:
    """The trainer's rank processes (multiprocessing's spawned children), oldest first."""
    found = []
    for child in descendants(pid):
        try:
            cmdline = Path(f"/proc/{child}/cmdline").read_bytes()
        except OSError:
            continue
        if b"spawn_main" in cmdline:
            found.append(child)
    return sorted(found)


@pytest.mark.slow
def test_one_rank_killed_is_named_merged_and_recorded(tmp_path):
    """One rank of --nproc 3 killed with SIGKILL: 55 lines with two tracebacks, exit 1, the finished
    window's rank traces unmerged and no run.json."""
    proc, out = start_run(tmp_path, "--iterations", "1-2", "--total-iterations", "400",
                          "--nproc", "3")
    wait_for(lambda: len(metrics_rows(out)) >= 4, proc, "iteration 4", timeout=90)
    ranks = rank_processes(proc.pid)
    assert len(ranks) == 3
    everything = descendants(proc.pid)
    os.kill(ranks[1], signal.SIGKILL)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 1, stderr
    assert "Traceback" not in stderr
    lines = error_lines(stderr)
    assert len(lines) == 1, stderr
    record = json.loads((out / "run.json").read_text())
    [failed] = record["failed_ranks"]
    assert failed["signal"] == "SIGKILL" and failed["rank"] in (0, 1, 2)
    assert failed["at_iteration"] == record["iterations_run"] >= 4
    assert record["interrupted"] is None
    assert lines[0].startswith(f"rank {failed['rank']} was killed by SIGKILL at iteration "
                               f"{failed['at_iteration']}; the other ranks were stopped")
    # The window 1-2 was finished on every rank before the kill: its traces are merged.
    assert sorted(record["traces"]) == ["0", "1", "2"]
    assert record["profiling"]["iterations_traced"] == [1, 2]
    merged = read_trace(out / "merged_trace.json")
    assert merged["goodhartProf"]["merged_ranks"] == [0, 1, 2]
    assert f"{record['merged_trace']}" in lines[0]
    assert leftovers(out) == []
    assert not (out.parent / "latest").exists()  # a failed run is not complete
    assert still_running(everything) == []


# -- item 11: integers out of range ----------------------------------------------------------------

@pytest.mark.parametrize("args,expected", [
    (["--seed", "1180591620717411303424"],
     "Error: Invalid value for '--seed': 1180591620717411303424 is not in the range "
     "0<=x<=9223372036854775807."),
    (["--seed", "-1"], "Error: Invalid value for '--seed': -1 is not in the range "
                       "0<=x<=9223372036854775807."),
    (["--nproc", "100000000000000000000"],
     "Error: Invalid value for '--nproc': 100000000000000000000 is not in the range 1<=x<=1024."),
    (["--checkpoint-every", "-1"],
     "Error: Invalid value for '--checkpoint-every': -1 is not in the range x>=0."),
], ids=["seed-2**70", "seed-negative", "nproc-10**20", "checkpoint-every-negative"])
def test_integers_out_of_range_are_one_line_errors(tmp_path, args, expected):
    res = subprocess.run([sys.executable, "-m", "goodhart_prof.cli", "run", *args,
                          "--output-dir", str(tmp_path / "traces")], env=clean_env(), cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2, res.stderr
    assert error_lines(res.stderr) == [expected]
    assert not (tmp_path / "traces").exists()


def test_more_ranks_than_the_cpu_can_hold(tmp_path):
    cores = len(os.sched_getaffinity(0))
    res = subprocess.run([sys.executable, "-m", "trainer", "--nproc", str(4 * cores + 1),
                          "--device", "cpu", "--output-dir", str(tmp_path / "out")],
                         env=clean_env(), cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert res.returncode == 2, res.stderr
    assert error_lines(res.stderr) == [f"Error: --nproc {4 * cores + 1}: at most 4 ranks per CPU "
                                       f"core on the CPU ({4 * cores} here, {cores} core(s))"]
