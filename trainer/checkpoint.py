"""Checkpoint and resume: a trainer's whole state (iteration, weights, optimizer, env state,
observations, random generators) as a snapshot in memory (the warm-up restores one) or a file
per rank (`checkpoint-rank{N}.pt`, written atomically), and restored from either.

`Checkpoints` is mixed into `train.Trainer`; it uses the trainer's `iteration`, `policy`,
`optimizer`, `state`, `obs`, `final_rows`, `env`, `static` and `device`."""
from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import torch

from goodhart_prof.fileio import writing

from .env import EnvState


def checkpoint_path(output_dir: str | Path, rank: int) -> Path:
    return Path(output_dir) / f"checkpoint-rank{rank}.pt"


class Checkpoints:
    """Snapshot, restore, save and load of one Trainer (see the module docstring)."""

    def snapshot(self) -> dict[str, Any]:
        snap = {
            "iteration": self.iteration,
            "policy": copy.deepcopy(self.policy.state_dict()),
            "optimizer": copy.deepcopy(self.optimizer.state_dict()),
            "env_state": {k: v.clone() for k, v in self.state._asdict().items()},
            "obs": self.obs.clone(),
            "final_rows": self.final_rows.clone(),
            "rng_cpu": torch.get_rng_state(),
        }
        if self.device.type == "cuda":
            snap["rng_cuda"] = torch.cuda.get_rng_state(self.device)
        return snap

    def restore(self, snap: dict[str, Any]) -> None:
        self.iteration = snap["iteration"]
        self.policy.load_state_dict(snap["policy"])
        self.optimizer.load_state_dict(snap["optimizer"])
        saved = {k: v.to(self.device) for k, v in snap["env_state"].items()}
        if "pos" in saved:  # a checkpoint from before states held flat agent cells
            pos = saved.pop("pos")
            saved["cell"] = pos[:, 0] * self.env.padded + pos[:, 1]
        state = EnvState(**saved)
        obs = snap["obs"].to(self.device)
        rows = snap.get("final_rows", self.final_rows).to(self.device)
        if self.static:  # the tensors CUDA graphs read keep their addresses
            for mine, new in zip(self.state, state):
                mine.copy_(new)
            self.final_rows.copy_(rows)
        else:
            self.state, self.final_rows = state, rows
        self.obs = obs  # in place with static storage (the setter)
        torch.set_rng_state(snap["rng_cpu"])
        if "rng_cuda" in snap and self.device.type == "cuda":
            torch.cuda.set_rng_state(snap["rng_cuda"], self.device)

    def save_checkpoint(self, path: Path) -> None:
        with writing(path) as tmp:
            try:
                torch.save(self.snapshot(), tmp)
            except RuntimeError as exc:  # torch's zip writer says a short write so (ulimit -f, disk full)
                raise OSError(f"torch.save stopped short (disk full or a file size limit?): "
                              f"{str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__}") from None

    def load_checkpoint(self, path: Path) -> None:
        snap = torch.load(path, map_location=self.device, weights_only=False)
        self.restore(snap)
