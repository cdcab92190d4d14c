"""trainer/launch.py: the run's records around the training. A failed rank described in one line,
metrics.jsonl read back (torn lines skipped) and trimmed before a resume, what an interrupted run
finished, a resume's checkpoint, the files of an earlier run found and cleared, and run.json as
`finish_run` writes it from the ranks' outcomes (no training here)."""
from __future__ import annotations

import json
import shutil
import signal

import pytest
import torch

from goodhart_prof.capture.settings import ProfSettings
from goodhart_prof.errors import UserError
from trainer.config import Config
from trainer.launch import (RankFailed, RankOutcome, clear_earlier_outputs, describe_failure, earlier_outputs,
                            finish_run, interrupted_outcomes, read_metrics, resume_iteration, stale_traces,
                            trim_metrics)
from trainer.signals import STOP_SIGNALS
from tests.support.paths import DATA


def test_a_failed_rank_in_one_line():
    assert describe_failure({"rank": 1, "signal": "SIGKILL"}) == "rank 1 was killed by SIGKILL"
    assert describe_failure({"rank": 2, "exit_code": 3}) == "rank 2 exited with code 3"
    failed = [{"rank": 1, "signal": "SIGKILL"}, {"rank": 0, "exit_code": 1}]
    assert str(RankFailed(failed)) == "rank 1 was killed by SIGKILL, rank 0 exited with code 1"


def _metrics(folder, *iterations, tail=""):
    (folder / "metrics.jsonl").write_text("".join(json.dumps({"iteration": i, "loss": i / 10}) + "\n"
                                                  for i in iterations) + tail)


def test_metrics_read_back_and_trimmed_for_a_resume(tmp_path):
    assert read_metrics(tmp_path) == []
    _metrics(tmp_path, 0, 1, 2, 3, tail='"a string"\n{"iteration": "4"}\n{"iteration": 5, "lo')
    assert [r["iteration"] for r in read_metrics(tmp_path)] == [0, 1, 2, 3]
    trim_metrics(tmp_path, 2)
    assert (tmp_path / "metrics.jsonl").read_text() == '{"iteration": 0, "loss": 0.0}\n{"iteration": 1, "loss": 0.1}\n'


def test_what_an_interrupted_run_finished(tmp_path):
    _metrics(tmp_path, 0, 1, 2, 3, 4)
    cfg = Config(output_dir=str(tmp_path), n_envs=8, rollout_steps=4)
    settings = ProfSettings(enabled=True, output_dir=tmp_path / "traces")
    outcomes, at = interrupted_outcomes(cfg, settings, nproc=2, start_iteration=2)
    assert at == 5  # iterations 2, 3 and 4 finished; 5 was running
    assert [(o.rank, o.iterations_run, o.env_steps) for o in outcomes] == [(0, 3, 96), (1, 3, 96)]
    assert outcomes[0].last_row == {"iteration": 4, "loss": 0.4} and outcomes[1].last_row is None
    assert outcomes[1].trace_path == str(tmp_path / "traces" / "rank-1.pt.trace.json.gz")
    outcomes, at = interrupted_outcomes(cfg, ProfSettings(), nproc=1, start_iteration=7)
    assert (at, outcomes[0].iterations_run, outcomes[0].trace_path) == (7, 0, None)


def test_the_iteration_a_resume_starts_at(tmp_path):
    torch.save({"iteration": 7}, tmp_path / "checkpoint-rank0.pt")
    assert resume_iteration(Config(output_dir=str(tmp_path))) == 7
    (tmp_path / "checkpoint-rank0.pt").write_text("not a checkpoint")
    with pytest.raises(UserError, match=r"checkpoint-rank0\.pt: not a usable checkpoint \(\w+Error: "):
        resume_iteration(Config(output_dir=str(tmp_path)))


def test_an_earlier_runs_files_found_and_cleared(tmp_path):
    traces = tmp_path / "traces"
    traces.mkdir()
    names = ["run.json", "metrics.jsonl", "checkpoint-rank0.pt", ".run.json.x1.tmp", "notes.txt"]
    trace_names = ["rank-0.pt.trace.json.gz", "rank-2.pt.trace.json.gz", "merged_trace.json"]
    for name in names:
        (tmp_path / name).write_text("x")
    for name in trace_names:
        (traces / name).write_text("x")
    assert stale_traces(traces, 2) == [traces / "rank-2.pt.trace.json.gz"]
    cfg = Config(output_dir=str(tmp_path), checkpoint_every=5)
    settings = ProfSettings(enabled=True, output_dir=traces)
    found = earlier_outputs(cfg, settings, nproc=2, resume=False)
    assert sorted(p.name for p in found) == sorted(names[:4] + trace_names)
    resumed = earlier_outputs(cfg, settings, nproc=2, resume=True)  # the metrics and traces it continues
    assert sorted(p.name for p in resumed) == [".run.json.x1.tmp", "rank-2.pt.trace.json.gz", "run.json"]
    clear_earlier_outputs(found)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint-rank0.pt", "notes.txt", "run.json", "traces"]
    assert list(traces.iterdir()) == []


@pytest.fixture
def own_signals():
    """finish_run ignores the stop signals once run.json is written: this process's handlers back."""
    saved = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}
    yield
    for signum, handler in saved.items():
        signal.signal(signum, handler)


def test_run_json_from_the_ranks_outcomes(tmp_path, own_signals):
    cfg = Config(output_dir=str(tmp_path), total_iterations=10, device="cpu")
    settings = ProfSettings(enabled=True, first=2, last=3, output_dir=tmp_path / "traces")
    outcomes = [RankOutcome(r, 10, 1000 * (r + 1), 5.0, 100.0 + r, 0.5, {"iteration": 9} if r == 0 else None, None)
                for r in (0, 1)]
    record = finish_run(cfg, settings, outcomes, started=0.0, argv=["trainer"], merge=False)
    assert json.loads((tmp_path / "run.json").read_text()) == record
    assert (record["schema"], record["world_size"], record["env_steps"]) == ("goodhart-prof/run/v1", 2, 3000)
    assert record["env_steps_per_s"] == 201.0 and record["env_steps_per_s_per_rank"] == {"0": 100.0, "1": 101.0}
    assert record["final_metrics"] == {"iteration": 9} and record["warmup_s"] == 0.5
    assert record["profiling"]["iterations"] == [2, 3] and record["profiling"]["iterations_traced"] == []  # no trace
    assert (record["traces"], record["merged_trace"], record["interrupted"], record["failed_ranks"]) == ({}, None, None, [])
    assert record["config"]["total_iterations"] == 10 and record["run_name"] == tmp_path.name
    assert all(signal.getsignal(s) == signal.SIG_IGN for s in STOP_SIGNALS)  # recorded: nothing left to stop


def test_a_one_rank_run_records_its_rank_trace_and_no_merged_copy(tmp_path, own_signals):
    """One rank: run.json names the rank trace and no merged trace (issue 35 item 13); a copy an
    earlier version left in the folder a --resume reuses goes. A resume after the window began
    reads its traced iterations from the rank trace (the A/B fixture's ProfilerStep#10-#15)."""
    traces = tmp_path / "traces"
    traces.mkdir()
    rank0 = traces / "rank-0.pt.trace.json.gz"
    shutil.copy(DATA / "ours" / "ab" / "clean_1" / "rank-0.pt.trace.json.gz", rank0)
    (traces / "merged_trace.json").write_text("{}")
    cfg = Config(output_dir=str(tmp_path), total_iterations=16, device="cpu")
    settings = ProfSettings(enabled=True, first=10, last=15, output_dir=traces)
    outcome = RankOutcome(0, 4, 1024, 1.0, 6000.0, 0.5, None, str(rank0))
    record = finish_run(cfg, settings, [outcome], started=0.0, argv=["trainer"], start_iteration=12)
    assert (record["traces"], record["merged_trace"]) == ({"0": str(rank0)}, None)
    assert record["profiling"]["iterations_traced"] == [10, 11, 12, 13, 14, 15]
    assert sorted(p.name for p in traces.iterdir()) == ["rank-0.pt.trace.json.gz"]
    assert json.loads((tmp_path / "run.json").read_text())["merged_trace"] is None
