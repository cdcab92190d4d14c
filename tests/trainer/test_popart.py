"""PopArt statistics across ranks: two ranks agree with one rank fed all their returns, in the
head alone and in a two-rank training run. (The head on one rank: tests/trainer/test_policy.py.)"""
from __future__ import annotations

import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from tests.support.helpers import TINY_CONFIG, clean_env, run_cmd
from trainer.policy import PopArtValueHead
from trainer.train import sum_across_ranks

# Per update, rank 0 and rank 1 see batches of different sizes and scales.
SIZES = ((300, 100), (64, 500), (128, 128))


def _batches(update: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(100 + update)
    a, b = SIZES[update]
    return (20.0 + 5.0 * torch.randn(a, generator=g), -3.0 + 40.0 * torch.randn(b, generator=g))


def _head(beta: float = 0.5) -> PopArtValueHead:
    torch.manual_seed(0)
    return PopArtValueHead(8, beta=beta)


def _rank_main(rank: int, store_path: str, out_dir: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{store_path}", rank=rank, world_size=2)
    try:
        head = _head()
        for update in range(len(SIZES)):
            head.update_stats(_batches(update)[rank], sum_across_ranks)
        torch.save(head.state_dict(), os.path.join(out_dir, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


def test_two_ranks_track_the_statistics_of_all_their_returns(tmp_path):
    """With 2 ranks (gloo, the trainer's CPU backend) each rank's head ends exactly where one
    rank fed every return ends: E[R^2] over all returns (the old element-wise average of the
    ranks' returns understated it), ranks weighted by their batch sizes."""
    mp.spawn(_rank_main, args=(str(tmp_path / "store"), str(tmp_path)), nprocs=2, join=True)
    one = _head()
    for update in range(len(SIZES)):
        one.update_stats(torch.cat(_batches(update)))
    for rank in (0, 1):
        got = torch.load(tmp_path / f"rank{rank}.pt")
        for key, want in one.state_dict().items():
            assert torch.allclose(got[key], want, rtol=1e-5, atol=1e-5), (rank, key)
    # The figures are not trivially equal: the second moment is far from the old estimate.
    a, b = _batches(0)
    elementwise = (a[:100] + b) / 2  # what averaging rank tensors element by element gave
    assert float((elementwise ** 2).mean()) < 0.8 * float((torch.cat((a, b)) ** 2).mean())


def test_two_rank_popart_training_keeps_ranks_in_agreement(tmp_path):
    """The trainer with `--nproc 2` and a PopArt head: both ranks hold the same statistics, and
    they moved from their initial (0, 1)."""
    cfg = tmp_path / "popart.toml"
    cfg.write_text(TINY_CONFIG + 'value_head = "popart"\n')
    out = tmp_path / "out"
    res = run_cmd(["-m", "trainer", "--config", str(cfg), "--nproc", "2", "--total-iterations", "3",
                   "--checkpoint-every", "3", "--output-dir", str(out), "--no-progress"],
                  env=clean_env())
    assert res.returncode == 0, res.stderr
    heads = [torch.load(out / f"checkpoint-rank{r}.pt", weights_only=False)["policy"] for r in (0, 1)]
    for key in ("value_head.mu", "value_head.nu", "value_head.updates"):
        assert torch.equal(heads[0][key], heads[1][key]), key
    assert float(heads[0]["value_head.updates"]) == 3.0
    assert float(heads[0]["value_head.mu"]) != 0.0
