"""The rollout's storage: the buffer holds V(final obs) wherever an episode was truncated, the
static storage of the CUDA-graph path gives the same iterations as the default one (run on the
CPU without graphs), the policy input's two views, and draining the episode totals."""
from __future__ import annotations

import copy

import torch

from tests.support.helpers import write_tiny_config
from trainer.config import build_config
from trainer.train import Trainer


def _tiny(tmp_path, **overrides):
    return build_config(str(write_tiny_config(tmp_path)), device="cpu", output_dir=str(tmp_path),
                        progress=False, **overrides)


def test_rollout_stores_the_value_of_each_truncated_final_state(tmp_path):
    """The final state of every truncated episode is valued by the next step's forward (the
    last step's by the last-value forward): the buffer holds V(final obs) of the policy that
    ran the rollout, wherever an episode was truncated."""
    cfg = _tiny(tmp_path, max_episode_steps=5)
    trainer = Trainer(cfg)
    seen = []
    env_step = trainer.env_step

    def spy(state, action):
        res = env_step(state, action)
        seen.append((res.final_obs.clone(), res.final_rows.clone(), res.truncated.clone()))
        return res
    trainer.env_step = spy
    rollout_policy = copy.deepcopy(trainer.policy)
    trainer.run_iteration(0, None)
    assert len(seen) == cfg.rollout_steps
    for t, (final_obs, rows, truncated) in enumerate(seen):
        assert 3 <= int(truncated.sum()) <= trainer.max_truncated  # 16 envs, clocks of 5 steps
        assert final_obs.shape[0] == rows.shape[0] == trainer.max_truncated  # k rows, not n
        ended = truncated[rows]
        assert int(ended.sum()) == int(truncated.sum())  # the k rows hold every truncated env
        with torch.no_grad():
            expected = rollout_policy.value_head.denormalize(rollout_policy(final_obs)[1].float())
        assert torch.allclose(trainer.buf.final_values[t][rows[ended]], expected[ended], atol=1e-5), t


def test_static_storage_gives_the_same_iterations(tmp_path):
    """The CUDA-graph path's storage (each step written into the buffer at once, state and
    observations copied into trainer-owned tensors that never move), run on the CPU without
    graphs: two iterations give the same buffer, weights and env state, bit for bit, and the
    warm-up's restore keeps the tensors' addresses."""
    cfg = _tiny(tmp_path, value_head="popart")
    plain, static = Trainer(cfg), Trainer(cfg, static_storage=True)
    addresses = [x.data_ptr() for x in (*static.state, static.policy_obs, static.final_rows)]
    for trainer in (plain, static):  # one after the other, from the same random state
        torch.manual_seed(7)
        trainer.warm_up()
        for it in range(2):
            trainer.run_iteration(it, None)
    assert [x.data_ptr() for x in (*static.state, static.policy_obs, static.final_rows)] == addresses
    for name, a in vars(plain.buf).items():
        assert torch.equal(a, getattr(static.buf, name)), name
    for a, b in zip(plain.state, static.state):
        assert torch.equal(a, b)
    assert torch.equal(plain.policy_obs, static.policy_obs)
    for (name, a), b in zip(plain.policy.state_dict().items(), static.policy.state_dict().values()):
        assert torch.equal(a, b), name


def test_obs_and_final_obs_are_the_two_parts_of_the_policy_input(tmp_path):
    """Setting `obs` keeps the final rows: a new tensor by default, in place (same address)
    with static storage."""
    cfg = _tiny(tmp_path)
    n = cfg.n_envs
    for static in (False, True):
        trainer = Trainer(cfg, static_storage=static)
        k, address = trainer.max_truncated, trainer.policy_obs.data_ptr()
        assert trainer.obs.shape[0] == n and trainer.final_obs.shape[0] == k
        final = trainer.final_obs.clone()
        new = torch.full_like(trainer.obs, 0.5)
        trainer.obs = new
        assert torch.equal(trainer.policy_obs[:n], new) and torch.equal(trainer.final_obs, final)
        assert (trainer.policy_obs.data_ptr() == address) == static


def test_draining_returns_the_episode_totals_and_zeroes_them(tmp_path):
    cfg = _tiny(tmp_path)
    for static in (False, True):
        trainer = Trainer(cfg, static_storage=static)
        totals = torch.arange(trainer.state.stats.numel(), dtype=trainer.state.stats.dtype)
        trainer.state.stats.copy_(totals.view_as(trainer.state.stats))
        stats = trainer.state.stats
        assert torch.equal(trainer._drain_stats(), totals.view_as(stats))
        assert not trainer.state.stats.any()
        assert (trainer.state.stats is stats) == static  # the static state is never replaced
