"""Checkpoint and resume in process: a snapshot restored replays the same iteration bit for bit
(weights, optimizer, env state, random generator), a checkpoint file does the same for a fresh
trainer, a checkpoint from before flat agent cells is read, and the file is named per rank."""
from __future__ import annotations

from pathlib import Path

import torch

from tests.support.helpers import write_tiny_config
from trainer.checkpoint import checkpoint_path
from trainer.config import build_config
from trainer.train import Trainer


def _tiny(tmp_path, **overrides):
    return build_config(str(write_tiny_config(tmp_path)), device="cpu", output_dir=str(tmp_path),
                        progress=False, **overrides)


def _weights(trainer) -> dict:
    return {k: v.clone() for k, v in trainer.policy.state_dict().items()}


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_checkpoint_path_is_per_rank():
    assert checkpoint_path("out", 3) == Path("out") / "checkpoint-rank3.pt"


def test_a_restored_snapshot_replays_the_same_iteration(tmp_path):
    trainer = Trainer(_tiny(tmp_path))
    trainer.run_iteration(0, None)
    snap = trainer.snapshot()
    trainer.run_iteration(1, None)
    after_once, state_once = _weights(trainer), [x.clone() for x in trainer.state]
    trainer.restore(snap)
    assert trainer.iteration == 1
    trainer.run_iteration(1, None)
    assert _same(_weights(trainer), after_once) and not _same(snap["policy"], after_once)
    assert all(torch.equal(a, b) for a, b in zip(trainer.state, state_once))


def test_a_checkpoint_file_resumes_a_fresh_trainer(tmp_path):
    cfg = _tiny(tmp_path)
    first = Trainer(cfg)
    first.run_iteration(0, None)
    path = checkpoint_path(tmp_path, 0)
    first.save_checkpoint(path)
    first.run_iteration(1, None)
    other = Trainer(_tiny(tmp_path, seed=9))  # another seed: nothing left over from construction
    other.load_checkpoint(path)
    assert other.iteration == 1
    other.run_iteration(1, None)
    assert _same(_weights(other), _weights(first))
    assert [p.name for p in tmp_path.iterdir() if p.suffix == ".pt"] == ["checkpoint-rank0.pt"]


def test_a_checkpoint_with_row_column_positions_gets_flat_cells(tmp_path):
    trainer = Trainer(_tiny(tmp_path))
    snap = trainer.snapshot()
    cells = snap["env_state"].pop("cell")
    padded = trainer.env.padded
    snap["env_state"]["pos"] = torch.stack((cells // padded, cells % padded), dim=1)
    trainer.state.cell.zero_()
    trainer.restore(snap)
    assert torch.equal(trainer.state.cell, cells)
