"""The trainer's hot-loop fixes, checked against straightforward references.

* What keeps the random stream (final observations for k rows only, the (n + k) policy input
  without a cat, flat agent cells, the truncation top-k inside the step): a step is compared,
  exactly, with a plain per-env reference that consumes the same random draws.
* What changes the random stream (resets gather k layouts, respawn by random candidates): their
  invariants, the respawn's distribution and its fallback, and the shapes the step touches.
* The CUDA-graph path: its config errors on the CPU (its static storage giving the same iteration
  as the default path is tests/trainer/test_rollout_storage.py).
"""
from __future__ import annotations

import dataclasses
from collections import Counter

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from tests.support.helpers import TINY_CONFIG, clean_env, run_cmd
from trainer.config import Config, ConfigError, build_config
from trainer.env import (DECOY, EMPTY, FOOD, RESPAWN_CANDIDATES, WALL, EnvState,
                         GoodhartGridWorld, truncation_rows)
from trainer.train import Trainer

MOVES = ((0, 0), (-1, 0), (1, 0), (0, -1), (0, 1))


def reference_step(env: GoodhartGridWorld, state: EnvState, actions: torch.Tensor, seed: int):
    """One step written env by env from the rules, drawing what `step` draws (respawn candidates
    (n, RESPAWN_CANDIDATES), then k bank indices) from the same seed."""
    n, k, P = env.n_envs, env.max_truncations_per_step, env.padded
    torch.manual_seed(seed)
    draws = torch.randint(0, env.interior_flat.numel(), (n, RESPAWN_CANDIDATES))
    bank_idx = torch.randint(0, env.bank_grid.shape[0], (k,))
    grid, pos = state.grid.clone(), state.pos.clone()
    t, ep_proxy, ep_true = state.t.clone() + 1, state.ep_proxy.clone(), state.ep_true.clone()
    stats, whole = state.stats.clone(), state.whole.clone()
    proxy, true = torch.zeros(n), torch.zeros(n)
    for i in range(n):
        r, c = pos[i].tolist()
        dr, dc = MOVES[int(actions[i])]
        if int(grid[i, r + dr, c + dc]) != WALL:
            old, (r, c) = (r, c), (r + dr, c + dc)
        else:
            old = (r, c)
        item = int(grid[i, r, c])
        if item in (FOOD, DECOY):
            proxy[i] = env.proxy_value
            true[i] = env.food_value if item == FOOD else env.decoy_value
            spots = [divmod(int(env.interior_flat[d]), P) for d in draws[i]] + [old]
            spot = next(s for s in spots if int(grid[i, s[0], s[1]]) == EMPTY)
            grid[i, r, c] = EMPTY
            grid[i, spot[0], spot[1]] = item
        pos[i] = torch.tensor([r, c])
    ep_proxy, ep_true = ep_proxy + proxy, ep_true + true
    truncated = t >= env.max_steps
    for i in torch.nonzero(truncated & whole).view(-1).tolist():
        stats += torch.tensor([1.0, float(ep_proxy[i]), float(ep_true[i]), float(t[i])])
    final_all = env.observe(grid, pos)
    rows = truncation_rows(truncated, k)
    for j, i in enumerate(rows.tolist()):
        if truncated[i]:
            grid[i] = env.bank_grid[bank_idx[j]]
            pos[i] = env.bank_pos[bank_idx[j]]
    t[truncated], ep_proxy[truncated], ep_true[truncated] = 0, 0.0, 0.0
    return dict(grid=grid, pos=pos, t=t, ep_proxy=ep_proxy, ep_true=ep_true, stats=stats,
                whole=whole | truncated, obs=env.observe(grid, pos), proxy=proxy, true=true,
                truncated=truncated, rows=rows, final_obs=final_all[rows])


def test_step_equals_a_per_env_reference_with_the_same_draws():
    """50 steps of 10 envs (k = 3 rows a step, fill rows included) against the reference: grids,
    agent cells, clocks, returns, stats, rewards, observations and the k final observations
    all equal, exactly; policy_obs is obs then final_obs."""
    n, max_steps = 10, 4
    torch.manual_seed(1)
    env = GoodhartGridWorld(n, grid_size=7, view_size=5, n_food=3, n_decoy=3,
                            max_episode_steps=max_steps, bank_size=32)
    state, _ = env.reset()
    ate = 0
    for s in range(50):
        actions = torch.randint(0, 5, (n,))
        want = reference_step(env, state, actions, seed=1000 + s)
        torch.manual_seed(1000 + s)
        res = env.step(state, actions)
        got = res.state
        for name in ("grid", "t", "ep_proxy", "ep_true", "stats", "whole"):
            assert torch.equal(getattr(got, name), want[name]), (s, name)
        assert torch.equal(got.pos, want["pos"]), s
        assert torch.equal(got.cell, want["pos"][:, 0] * env.padded + want["pos"][:, 1])
        assert torch.equal(res.proxy_reward, want["proxy"]) and torch.equal(res.true_reward, want["true"])
        assert torch.equal(res.truncated, want["truncated"])
        assert torch.equal(res.final_rows, want["rows"])
        assert torch.equal(res.obs, want["obs"]) and torch.equal(res.final_obs, want["final_obs"])
        assert torch.equal(res.policy_obs, torch.cat((want["obs"], want["final_obs"])))
        ate += int((want["proxy"] != 0).sum())
        state = got
    assert ate > 20 and int(state.stats[0]) > 0  # respawns and whole episodes were exercised


def test_respawn_is_uniform_over_the_empty_cells():
    """2,000 copies of one layout, the agent eating the food to its right: the food reappears
    on an empty cell, never under the agent, and each empty cell (the one the agent left
    included) gets its share (within 5 sigma of a uniform draw)."""
    n = 2000
    env = GoodhartGridWorld(n, grid_size=7, view_size=5, n_food=1, n_decoy=1,
                            max_episode_steps=1000, bank_size=8)
    P, pad = env.padded, env.pad
    grid = torch.full((P, P), WALL, dtype=torch.int8)
    grid[pad + 1:pad + 6, pad + 1:pad + 6] = EMPTY
    grid[pad + 1, pad + 1] = WALL
    grid[pad + 3, pad + 4] = FOOD
    grid[pad + 5, pad + 5] = DECOY
    agent = (pad + 3) * P + pad + 3
    state = EnvState(grid.expand(n, P, P).clone(), torch.full((n,), agent), torch.zeros(n, dtype=torch.int32),
                     torch.zeros(n), torch.zeros(n), torch.zeros(4), torch.ones(n, dtype=torch.bool))
    torch.manual_seed(3)
    res = env.step(state, torch.full((n,), 4))  # right: onto the food
    new = res.state.grid.view(n, -1)
    assert bool((res.state.cell == agent + 1).all()) and bool((res.proxy_reward == env.proxy_value).all())
    assert bool(((new == FOOD).sum(1) == 1).all()) and bool(((new == DECOY).sum(1) == 1).all())
    assert bool(((new == WALL).sum(1) == (grid == WALL).sum()).all())
    spots = Counter((new == FOOD).to(torch.uint8).argmax(1).tolist())
    free = {int(i) for i in torch.nonzero(grid.view(-1) == EMPTY).view(-1)} - {agent + 1}
    assert set(spots) == free  # 22 empty cells: the old agent cell in, the new one out
    mean, sigma = n / len(free), (n / len(free) * (1 - 1 / len(free))) ** 0.5
    assert all(abs(count - mean) < 5 * sigma for count in spots.values()), spots


def test_respawn_falls_back_to_the_cell_the_agent_left():
    """A field whose only empty interior cell, once the agent has moved, is the one it left:
    candidates mostly hit occupied cells, and the item must still land there (counts kept)."""
    n = 500
    env = GoodhartGridWorld(n, grid_size=5, view_size=3, n_food=2, n_decoy=1,
                            max_episode_steps=1000, bank_size=8)
    P, pad = env.padded, env.pad
    field = [[WALL] * 5, [WALL, FOOD, DECOY, WALL, WALL], [WALL, EMPTY, FOOD, WALL, WALL],
             [WALL, WALL, WALL, WALL, WALL], [WALL] * 5]
    grid = torch.full((P, P), WALL, dtype=torch.int8)
    grid[pad:pad + 5, pad:pad + 5] = torch.tensor(field, dtype=torch.int8)
    agent = (pad + 2) * P + pad + 1
    state = EnvState(grid.expand(n, P, P).clone(), torch.full((n,), agent), torch.zeros(n, dtype=torch.int32),
                     torch.zeros(n), torch.zeros(n), torch.zeros(4), torch.ones(n, dtype=torch.bool))
    torch.manual_seed(4)
    res = env.step(state, torch.full((n,), 4))  # right: onto the food at (2, 2)
    new = res.state.grid
    assert bool((new[:, pad + 2, pad + 1] == FOOD).all())  # the cell the agent left
    assert bool((new[:, pad + 2, pad + 2] == EMPTY).all())  # the agent's cell, eaten empty
    flat = new.view(n, -1)
    assert bool(((flat == FOOD).sum(1) == 2).all()) and bool(((flat == DECOY).sum(1) == 1).all())


def test_step_touches_k_rows_of_the_bank_and_no_interior_score():
    """Per step: bank gathers of k = max_truncations_per_step rows only, no (n, interior)
    tensor (the old respawn scored every interior cell of every env), no div or mod of cells."""
    n, max_steps, bank = 64, 16, 40
    torch.manual_seed(5)
    env = GoodhartGridWorld(n, max_episode_steps=max_steps, bank_size=bank)
    k, interior = env.max_truncations_per_step, env.interior_flat.numel()
    state, _ = env.reset()
    actions = torch.randint(0, 5, (n,))
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for _ in range(3):
            state = env.step(state, actions).state
    events = [e for e in prof.events() if e.name.startswith("aten::")]
    names = {e.name for e in events}
    assert "aten::index_select" in names and "aten::index_copy_" in names
    assert not names & {"aten::div", "aten::floor_divide", "aten::remainder", "aten::cat_interior"}
    bank_reads = [e.input_shapes for e in events
                  if e.name == "aten::index_select" and e.input_shapes and e.input_shapes[0][:1] == [bank]]
    assert len(bank_reads) == 3 * 2  # grid and agent cell, each step
    assert all(shapes[2] == [k] for shapes in bank_reads)
    shapes = [s for e in events for s in (e.input_shapes or []) if isinstance(s, list)]
    assert [n, interior] not in shapes and [n, interior, 1] not in shapes


def _tiny(tmp_path, **overrides) -> Config:
    path = tmp_path / "tiny.toml"
    path.write_text(TINY_CONFIG)
    return build_config(str(path), device="cpu", output_dir=str(tmp_path), progress=False,
                        **overrides)


def test_rollout_values_final_observations_without_a_cat(tmp_path):
    """The rollout's forward reads the env's (n + k) tensor as it is (no aten::cat) and acts
    as the two-part call does."""
    cfg = _tiny(tmp_path, max_episode_steps=5)
    trainer = Trainer(cfg)
    n, k = cfg.n_envs, trainer.max_truncated
    assert trainer.policy_obs.shape[0] == n + k
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        torch.manual_seed(0)
        out, values = trainer.act_all(trainer.policy_obs)
    assert "aten::cat" not in {e.name for e in prof.events()}
    torch.manual_seed(0)
    out2, values2 = trainer.act_fn(trainer.obs, trainer.final_obs)  # callers holding two parts
    assert torch.equal(out.action, out2.action) and torch.equal(values, values2)

    # That the buffer holds V(final obs) wherever an episode was truncated is
    # tests/trainer/test_rollout_storage.py.


def test_cudagraphs_is_a_config_error_without_cuda_or_compile(tmp_path):
    with pytest.raises(ConfigError, match="^cudagraphs needs a CUDA device"):
        build_config(None, device="cpu", cudagraphs=True)
    with pytest.raises(ConfigError, match=r"^cudagraphs needs torch.compile \(compile is off\)$"):
        Config(device="cuda", compile="off", cudagraphs=True).validate()
    cfg = _tiny(tmp_path)
    with pytest.raises(ConfigError, match="^cudagraphs needs a CUDA device$"):
        Trainer(dataclasses.replace(cfg, compile="on", cudagraphs=True))


def test_cudagraphs_flag_on_the_cpu_is_one_line_and_exit_2(tmp_path):
    from goodhart_prof.capture.run_options import TRAINER_OPTIONS, trainer_argv
    unset = {option.name: None for option in TRAINER_OPTIONS}
    assert trainer_argv({**unset, "cudagraphs": True}) == ["--cudagraphs"]  # run forwards it
    assert trainer_argv({**unset, "cudagraphs": False}) == []
    res = run_cmd(["-m", "trainer", "--cudagraphs", "--device", "cpu", "--output-dir", str(tmp_path)],
                  env=clean_env())
    assert res.returncode == 2
    assert res.stderr.strip().splitlines() == ["Error: cudagraphs needs a CUDA device (device is cpu)"]
