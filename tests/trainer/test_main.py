"""trainer/__main__.py: `python -m trainer`. Errors before training are one line with exit 2 (a
bad config, a window past the end, a resume with no checkpoint, too many ranks); `prepare` clears
an earlier run's files and says so; the summary, interrupted and failed-rank lines say what was
trained and kept."""
from __future__ import annotations

import os
import signal

import pytest

from goodhart_prof.capture.settings import ProfSettings
from goodhart_prof.errors import UserError
from tests.support.helpers import error_lines, write_tiny_config
from trainer.__main__ import (after_training_line, check_nproc, failed_line, interrupted_line, main, prepare,
                              summary_line)
from trainer.signals import STOP_SIGNALS


@pytest.fixture
def no_prof_env(monkeypatch):
    for name in [n for n in os.environ if n.startswith(("PROF_", "GOODHART_"))]:
        monkeypatch.delenv(name)


@pytest.fixture
def own_signals():
    """The command catches the stop signals for the run: this process's handlers back after it."""
    saved = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    yield
    for signum, handler in saved.items():
        signal.signal(signum, handler)
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)


def _main(args: list[str], capsys) -> tuple[int, list[str]]:
    """`python -m trainer ARGS` in this process: its exit code and the lines a user reads on stderr."""
    with pytest.raises(SystemExit) as info:
        main(args)
    return info.value.code, error_lines(capsys.readouterr().err)


def test_bad_config_is_one_line_error(tmp_path, no_prof_env, own_signals, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text("n_envs = 'many'\n")
    code, lines = _main(["--config", str(bad), "--output-dir", str(tmp_path / "o")], capsys)
    assert code == 2 and lines == ["Error: config key n_envs must be int, not str ('many')"]
    unknown = tmp_path / "unknown.toml"
    unknown.write_text("n_envz = 3\n")
    code, lines = _main(["--config", str(unknown)], capsys)
    assert code == 2 and lines == [f"Error: {unknown}: unknown config keys: n_envz"]
    assert not (tmp_path / "o").exists()


def test_window_past_the_end_is_refused(tmp_path, no_prof_env, own_signals, monkeypatch, capsys):
    monkeypatch.setenv("PROF_ENABLED", "1")
    monkeypatch.setenv("PROF_ITERATIONS", "50-55")
    code, lines = _main(["--config", str(write_tiny_config(tmp_path)), "--total-iterations", "5",
                         "--output-dir", str(tmp_path / "o")], capsys)
    assert code == 2 and lines == ["Error: PROF_ITERATIONS 50-55 starts after the last training iteration (4); "
                                   "raise --total-iterations"]


def _prepare(config, out, resume=False, nproc=1):
    return prepare(None, str(out), str(config), "cpu", None, None, resume, nproc, True, None, False)


def test_prepare_clears_an_earlier_run_and_says_so(tmp_path, no_prof_env, capsys):
    out = tmp_path / "o"
    out.mkdir()
    for name in ("run.json", "metrics.jsonl", "notes.txt"):
        (out / name).write_text("{}")
    cfg, settings, start = _prepare(write_tiny_config(tmp_path), out)
    assert (cfg.n_envs, cfg.output_dir, cfg.progress, start) == (16, str(out), False, 0)
    assert settings.enabled is False and settings.output_dir == out
    assert capsys.readouterr().err == (f"replacing 2 file(s) of an earlier run: {out / 'run.json'}, "
                                       f"{out / 'metrics.jsonl'}\n")
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt", "run.json"]  # run.json: replaced later


def test_a_resume_needs_each_ranks_checkpoint(tmp_path, no_prof_env):
    with pytest.raises(UserError) as info:
        _prepare(write_tiny_config(tmp_path), tmp_path / "o", resume=True)
    assert info.value.format_message() == f"{tmp_path / 'o' / 'checkpoint-rank0.pt'}: no checkpoint to resume from"


def test_ranks_per_cpu_core_are_capped():
    cores = len(os.sched_getaffinity(0))
    check_nproc(4 * cores, "cpu")
    with pytest.raises(UserError) as info:
        check_nproc(4 * cores + 1, "cpu")
    assert info.value.format_message() == (f"--nproc {4 * cores + 1}: at most 4 ranks per CPU core on the CPU "
                                           f"({4 * cores} here, {cores} core(s))")


RECORD = {"iterations_run": 5, "env_steps": 12_800, "world_size": 2, "device_type": "cpu",
          "env_steps_per_s": 5321.4, "run_dir": "/runs/a", "config": {"output_dir": "/runs/a"},
          "final_metrics": {"proxy_return": 3.456, "true_return": 1.2, "goodhart_gap": 2.256},
          "traces": {"0": "/runs/a/rank-0.pt.trace.json.gz", "1": "/runs/a/rank-1.pt.trace.json.gz"},
          "merged_trace": "/runs/a/merged_trace.json",
          "profiling": {"iterations_traced": [2, 3], "trace_dir": "/runs/a"},
          "interrupted": {"signal": "SIGINT", "at_iteration": 5},
          "failed_ranks": [{"rank": 1, "signal": "SIGKILL", "at_iteration": 5}]}


ONE_RANK = {**RECORD, "world_size": 1, "traces": {"0": "/runs/a/rank-0.pt.trace.json.gz"}, "merged_trace": None}


def test_the_summary_line():
    assert summary_line(RECORD) == (
        "trained 5 iterations (12,800 env-steps) on 2 rank(s), cpu | 5,321 env-steps/s | last iteration: "
        "proxy return 3.46, true return 1.20 (Goodhart gap 2.26) | merged trace: /runs/a/merged_trace.json | "
        "run folder: /runs/a (run.json)")
    bare = {**RECORD, "env_steps_per_s": None, "final_metrics": None, "merged_trace": None, "traces": {}}
    assert summary_line(bare) == ("trained 5 iterations (12,800 env-steps) on 2 rank(s), cpu | env-steps/s n/a | "
                                  "no trace | run folder: /runs/a (run.json)")


def test_a_one_rank_run_names_its_rank_trace():
    """One rank: no merged copy (issue 35 item 13); the lines name the rank trace itself."""
    one = {**ONE_RANK, "env_steps_per_s": None, "final_metrics": None}
    assert summary_line(one) == ("trained 5 iterations (12,800 env-steps) on 1 rank(s), cpu | env-steps/s n/a | "
                                 "trace: /runs/a/rank-0.pt.trace.json.gz | run folder: /runs/a (run.json)")
    assert interrupted_line(ONE_RANK, ProfSettings(enabled=True, first=2, last=3)) == (
        "interrupted by SIGINT at iteration 5 (5 iteration(s) finished) | the finished window 2-3 is in "
        "/runs/a/rank-0.pt.trace.json.gz | run record: /runs/a/run.json")
    assert after_training_line(ONE_RANK, "SIGTERM") == (
        "interrupted by SIGTERM after training, while recording the run | "
        "trace: /runs/a/rank-0.pt.trace.json.gz | run record: /runs/a/run.json")


def test_rank_traces_left_unmerged_are_named_by_their_folder():
    unmerged = {**RECORD, "merged_trace": None}
    assert after_training_line(unmerged, "SIGINT") == (
        "interrupted by SIGINT after training, while merging the traces | rank traces: /runs/a, not merged | "
        "run record: /runs/a/run.json")
    assert "| rank traces: /runs/a | run folder: /runs/a (run.json)" in summary_line(unmerged)


def test_the_interrupted_and_failed_lines_say_what_was_kept():
    window = ProfSettings(enabled=True, first=2, last=3)
    assert interrupted_line(RECORD, window) == (
        "interrupted by SIGINT at iteration 5 (5 iteration(s) finished) | the finished window 2-3 is in "
        "/runs/a/merged_trace.json | run record: /runs/a/run.json")
    unfinished = {**RECORD, "profiling": {"iterations_traced": []}}
    assert failed_line(unfinished, window) == (
        "rank 1 was killed by SIGKILL at iteration 5; the other ranks were stopped (5 iteration(s) finished) | "
        "no trace written (the window 2-3 was not finished) | run record: /runs/a/run.json")
    assert "| profiling was off |" in interrupted_line(RECORD, ProfSettings(enabled=False))
