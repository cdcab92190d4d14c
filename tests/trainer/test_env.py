"""Dynamics of the batched Goodhart grid world, checked on hand-built layouts.

Layouts are written as strings over the playing field (border walls included):
`#` wall, `.` empty, `F` food, `D` decoy, `A` the agent (standing on an empty cell).
"""
from __future__ import annotations

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from trainer.env import (ACTION_DELTAS, DECOY, EMPTY, FOOD, N_STATS, WALL, EnvState,
                         GoodhartGridWorld, layout_bank_size)
from tests.support.paths import ROOT

STAY, UP, DOWN, LEFT, RIGHT = range(5)
# Deliberately distinct values so a mix-up between them shows.
PROXY, FOOD_TRUE, DECOY_TRUE = 0.7, 1.3, -0.4
CODES = {"#": WALL, ".": EMPTY, "F": FOOD, "D": DECOY, "A": EMPTY}


def parse(rows: list[str]) -> tuple[list[list[int]], tuple[int, int]]:
    """Field codes (row-major lists) and the agent's (row, col) in field coordinates."""
    size = len(rows)
    assert all(len(r) == size for r in rows), "layouts are square"
    agent = [(r, c) for r, row in enumerate(rows) for c, ch in enumerate(row) if ch == "A"]
    assert len(agent) == 1
    return [[CODES[ch] for ch in row] for row in rows], agent[0]


def make_env(n: int, size: int, view: int = 5, max_steps: int = 1000, **kw) -> GoodhartGridWorld:
    kw.setdefault("n_food", 2)
    kw.setdefault("n_decoy", 2)
    return GoodhartGridWorld(n, grid_size=size, view_size=view, max_episode_steps=max_steps,
                             proxy_reward=PROXY, food_true_reward=FOOD_TRUE,
                             decoy_true_reward=DECOY_TRUE, **kw)


def make_state(env: GoodhartGridWorld, layouts: list[list[str]], t=None, ep_proxy=None,
               ep_true=None, stats=None) -> EnvState:
    """An EnvState holding the given layouts, padded with walls by hand."""
    n, pad, P = env.n_envs, env.pad, env.padded
    assert len(layouts) == n
    grid = torch.full((n, P, P), WALL, dtype=torch.int8)
    pos = torch.zeros(n, 2, dtype=torch.int64)
    for i, rows in enumerate(layouts):
        field, (r, c) = parse(rows)
        assert len(field) == env.size
        grid[i, pad:pad + env.size, pad:pad + env.size] = torch.tensor(field, dtype=torch.int8)
        pos[i] = torch.tensor([r + pad, c + pad])
    t = torch.zeros(n, dtype=torch.int32) if t is None else torch.tensor(t, dtype=torch.int32)
    ep_proxy = torch.zeros(n) if ep_proxy is None else torch.tensor(ep_proxy, dtype=torch.float32)
    ep_true = torch.zeros(n) if ep_true is None else torch.tensor(ep_true, dtype=torch.float32)
    stats = torch.zeros(N_STATS) if stats is None else torch.tensor(stats, dtype=torch.float32)
    cell = pos[:, 0] * P + pos[:, 1]  # the state holds flat agent cells
    return EnvState(grid, cell, t, ep_proxy, ep_true, stats, torch.ones(n, dtype=torch.bool))


def field_of(env: GoodhartGridWorld, grid: torch.Tensor) -> torch.Tensor:
    """The playing field (without padding) of one env's padded grid."""
    return grid[env.pad:env.pad + env.size, env.pad:env.pad + env.size]


def counts(grid: torch.Tensor) -> tuple[int, int]:
    return int((grid == FOOD).sum()), int((grid == DECOY).sum())


def in_interior(env: GoodhartGridWorld, r: int, c: int) -> bool:
    lo, hi = env.pad + 1, env.pad + env.size - 2
    return lo <= r <= hi and lo <= c <= hi


def assert_valid_layout(env: GoodhartGridWorld, grid: torch.Tensor, pos: torch.Tensor) -> None:
    """Walls on the padding and the field's border, exact item counts, agent on an empty cell."""
    pad, S = env.pad, env.size
    border = torch.ones(env.padded, env.padded, dtype=torch.bool)
    border[pad + 1:pad + S - 1, pad + 1:pad + S - 1] = False
    assert bool((grid[border] == WALL).all()), "padding and field border must be walls"
    assert counts(grid) == (env.n_food, env.n_decoy)
    r, c = pos.tolist()
    assert in_interior(env, r, c)
    assert int(grid[r, c]) == EMPTY


OPEN_7 = ["#######",
          "#.....#",
          "#.....#",
          "#..A..#",
          "#.....#",
          "#.....#",
          "#######"]


# -- movement -------------------------------------------------------------------------------------
def test_each_action_moves_by_its_delta():
    env = make_env(5, 7)
    state = make_state(env, [OPEN_7] * 5)
    start = state.pos.clone()
    res = env.step(state, torch.tensor([STAY, UP, DOWN, LEFT, RIGHT]))
    expected = start + torch.tensor([[0, 0], [-1, 0], [1, 0], [0, -1], [0, 1]])
    assert torch.equal(res.state.pos, expected)
    assert torch.equal(res.state.grid, state.grid)  # nothing eaten, nothing moved
    assert torch.equal(res.proxy_reward, torch.zeros(5))
    assert torch.equal(res.true_reward, torch.zeros(5))
    assert not bool(res.done.any())
    assert torch.equal(res.state.t, torch.ones(5, dtype=torch.int32))
    # The documented delta table agrees with what happened.
    assert torch.equal(expected - start, torch.tensor(ACTION_DELTAS))


def test_walls_block_movement():
    boxed = ["#######",
             "#.....#",
             "#..#..#",
             "#.#A#.#",
             "#..#..#",
             "#.....#",
             "#######"]
    top_left = ["#######",
                "#A....#",
                "#.....#",
                "#.....#",
                "#.....#",
                "#.....#",
                "#######"]
    bottom_right = ["#######",
                    "#.....#",
                    "#.....#",
                    "#.....#",
                    "#.....#",
                    "#....A#",
                    "#######"]
    layouts = [boxed] * 4 + [top_left] * 2 + [bottom_right] * 2
    actions = torch.tensor([UP, DOWN, LEFT, RIGHT, UP, LEFT, DOWN, RIGHT])
    env = make_env(len(layouts), 7)
    state = make_state(env, layouts)
    res = env.step(state, actions)
    assert torch.equal(res.state.pos, state.pos)
    assert torch.equal(res.state.grid, state.grid)
    # And the other way out of the corners is open.
    res = env.step(state, torch.tensor([UP, DOWN, LEFT, RIGHT, DOWN, RIGHT, UP, LEFT]))
    assert torch.equal(res.state.pos[:4], state.pos[:4])
    assert torch.equal(res.state.pos[4:], state.pos[4:] + torch.tensor(
        [[1, 0], [0, 1], [-1, 0], [0, -1]]))


def test_random_walk_stays_in_the_interior():
    torch.manual_seed(0)
    layout = ["######",
              "#A..F#",
              "#.#..#",
              "#..D.#",
              "#F..D#",
              "######"]
    env = make_env(16, 6, view=3)
    state = make_state(env, [layout] * 16)
    walls0 = state.grid == WALL
    for _ in range(200):
        state = env.step(state, torch.randint(0, 5, (16,))).state
        for r, c in state.pos.tolist():
            assert in_interior(env, r, c)
        assert bool((state.grid[env.env_idx, state.pos[:, 0], state.pos[:, 1]] == EMPTY).all())
        assert torch.equal(state.grid == WALL, walls0), "walls never move"
        for i in range(16):
            assert counts(state.grid[i]) == (2, 2)


# -- eating and respawn --------------------------------------------------------------------------
EAT = ["#######",
       "#.....#",
       "#.#...#",
       "#.DAF.#",
       "#.....#",
       "#..#..#",
       "#######"]


@pytest.mark.parametrize("action, kind, true_value", [(RIGHT, FOOD, FOOD_TRUE),
                                                      (LEFT, DECOY, DECOY_TRUE)])
def test_eating_pays_and_respawns(action, kind, true_value):
    torch.manual_seed(1)
    n = 64  # many copies, so the random respawn is exercised many times
    env = make_env(n, 7)
    state = make_state(env, [EAT] * n)
    before = state.grid.clone()
    res = env.step(state, torch.full((n,), action))
    new = res.state
    assert torch.allclose(res.proxy_reward, torch.full((n,), PROXY))
    assert torch.allclose(res.true_reward, torch.full((n,), true_value))
    assert torch.allclose(new.ep_proxy, torch.full((n,), PROXY))
    assert torch.allclose(new.ep_true, torch.full((n,), true_value))
    dr, dc = ACTION_DELTAS[action]
    eaten = (state.pos[0, 0].item() + dr, state.pos[0, 1].item() + dc)
    spots = set()
    for i in range(n):
        assert tuple(new.pos[i].tolist()) == eaten
        assert int(new.grid[i][eaten]) == EMPTY, "the eaten cell is empty (the agent is on it)"
        assert counts(new.grid[i]) == counts(before[i]) == (1, 1)
        changed = (new.grid[i] != before[i]).nonzero().tolist()
        assert len(changed) == 2 and list(eaten) in changed
        spot = tuple(next(rc for rc in changed if rc != list(eaten)))
        assert int(before[i][spot]) == EMPTY, "respawn lands on a cell that was empty"
        assert int(new.grid[i][spot]) == kind, "the respawned item is of the eaten kind"
        assert spot != tuple(new.pos[i].tolist())
        assert in_interior(env, *spot)
        spots.add(spot)
    assert len(spots) > 5, "respawn positions are random"


def test_respawn_never_under_the_agent():
    # Only two free cells: after eating, the agent stands on one, so the item must reappear on the
    # cell the agent just left. Walking back and forth then eats on every step.
    tight = ["######",
             "#AF###",
             "######",
             "######",
             "######",
             "######"]
    tight_decoy = ["######",
                   "######",
                   "######",
                   "####D#",
                   "####A#",
                   "######"]
    env = make_env(2, 6, view=3)
    state = make_state(env, [tight, tight_decoy])
    for k in range(20):
        actions = torch.tensor([RIGHT, UP] if k % 2 == 0 else [LEFT, DOWN])
        prev = state
        res = env.step(state, actions)
        state = res.state
        assert torch.allclose(res.proxy_reward, torch.tensor([PROXY, PROXY]))
        assert torch.allclose(res.true_reward, torch.tensor([FOOD_TRUE, DECOY_TRUE]))
        for i, kind in enumerate((FOOD, DECOY)):
            old_r, old_c = prev.pos[i].tolist()
            r, c = state.pos[i].tolist()
            assert (r, c) != (old_r, old_c)
            assert int(state.grid[i, r, c]) == EMPTY
            assert int(state.grid[i, old_r, old_c]) == kind
            assert counts(state.grid[i]) == ((1, 0) if kind == FOOD else (0, 1))
    assert torch.allclose(state.ep_proxy, torch.full((2,), 20 * PROXY))
    assert torch.allclose(state.ep_true, torch.tensor([20 * FOOD_TRUE, 20 * DECOY_TRUE]))


# -- observation ---------------------------------------------------------------------------------
def expected_obs(rows: list[str], view: int) -> torch.Tensor:
    """(3, V, V) window around the agent, read straight off the layout strings."""
    field, (r, c) = parse(rows)
    size, half = len(field), view // 2
    out = torch.zeros(3, view, view)
    for i in range(view):
        for j in range(view):
            rr, cc = r - half + i, c - half + j
            code = field[rr][cc] if 0 <= rr < size and 0 <= cc < size else WALL
            for ch, kind in enumerate((WALL, FOOD, DECOY)):
                out[ch, i, j] = float(code == kind)
    return out


CORNER_6 = ["######",
            "#AF..#",
            "#D#..#",
            "#....#",
            "#...F#",
            "######"]
MIDDLE_6 = ["######",
            "#.F..#",
            "#D#A.#",
            "#..D.#",
            "#...F#",
            "######"]


def test_observation_literal_window_at_the_corner():
    env = make_env(1, 6, view=5)
    state = make_state(env, [CORNER_6])
    obs = env.observe(state.grid, state.pos)
    assert obs.shape == (1, 3, 5, 5) == (1, *env.obs_shape)
    wall = [[1, 1, 1, 1, 1],
            [1, 1, 1, 1, 1],
            [1, 1, 0, 0, 0],
            [1, 1, 0, 1, 0],
            [1, 1, 0, 0, 0]]
    food = [[0] * 5, [0] * 5, [0, 0, 0, 1, 0], [0] * 5, [0] * 5]
    decoy = [[0] * 5, [0] * 5, [0] * 5, [0, 0, 1, 0, 0], [0] * 5]
    assert torch.equal(obs[0], torch.tensor([wall, food, decoy], dtype=torch.float32))


@pytest.mark.parametrize("view", [3, 5, 7, 9])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_observation_matches_layout(view, dtype):
    layouts = [CORNER_6, MIDDLE_6]
    env = make_env(2, 6, view=view, obs_dtype=dtype)
    state = make_state(env, layouts)
    obs = env.observe(state.grid, state.pos)
    assert obs.dtype == dtype
    for i, rows in enumerate(layouts):
        assert torch.equal(obs[i].float(), expected_obs(rows, view))
    # After a step the returned observation is of the new position.
    res = env.step(state, torch.tensor([DOWN, RIGHT]))
    # Env 0 ate the decoy at (2,1), which respawned somewhere random, so its window is compared
    # with the grid it now holds; env 1 ate nothing and is compared with the literal layout.
    moved = ["######", "#.F..#", "#D#.A#", "#..D.#", "#...F#", "######"]
    assert torch.equal(res.obs[1].float(), expected_obs(moved, view))
    assert torch.equal(res.obs, env.observe(res.state.grid, res.state.pos))
    assert float(res.true_reward[0]) == pytest.approx(DECOY_TRUE)


# -- episodes and auto-reset ---------------------------------------------------------------------
def test_auto_reset_at_max_steps():
    torch.manual_seed(2)
    max_steps = 5
    env = make_env(3, 7, max_steps=max_steps, n_food=2, n_decoy=1)
    finishing = ["#######",
                 "#.....#",
                 "#..AF.#",
                 "#.....#",
                 "#..D..#",
                 "#.....#",
                 "#######"]
    other = ["#######",
             "#D...F#",
             "#.#...#",
             "#..A..#",
             "#.....#",
             "#F...D#",
             "#######"]
    state = make_state(env, [finishing, other, other], t=[max_steps - 1, 1, max_steps - 2],
                       ep_proxy=[2 * PROXY, 3 * PROXY, PROXY],
                       ep_true=[FOOD_TRUE + DECOY_TRUE, 0.5, DECOY_TRUE],
                       stats=[1.0, 3.0, 2.0, 5.0])
    res = env.step(state, torch.tensor([RIGHT, DOWN, STAY]))
    new = res.state
    assert res.done.tolist() == [True, False, False]
    # The final step's reward is still reported.
    assert torch.allclose(res.proxy_reward, torch.tensor([PROXY, 0.0, 0.0]))
    assert torch.allclose(res.true_reward, torch.tensor([FOOD_TRUE, 0.0, 0.0]))
    assert new.t.tolist() == [0, 2, max_steps - 1]
    assert new.t.dtype == torch.int32
    assert torch.allclose(new.ep_proxy, torch.tensor([0.0, 3 * PROXY, PROXY]))
    assert torch.allclose(new.ep_true, torch.tensor([0.0, 0.5, DECOY_TRUE]))
    # Stats gain exactly the finished episode: proxy 3*PROXY, true 2*FOOD+DECOY, length 5.
    expected_stats = torch.tensor([1.0 + 1, 3.0 + 3 * PROXY, 2.0 + 2 * FOOD_TRUE + DECOY_TRUE,
                                   5.0 + max_steps])
    assert torch.allclose(new.stats, expected_stats)
    # The finished env got a fresh valid layout; the others kept their grid and moved as told.
    assert_valid_layout(env, new.grid[0], new.pos[0])
    assert not torch.equal(new.grid[0], state.grid[0])
    assert torch.equal(new.grid[1:], state.grid[1:])
    assert torch.equal(new.pos[1], state.pos[1] + torch.tensor([1, 0]))
    assert torch.equal(new.pos[2], state.pos[2])
    assert torch.equal(res.obs, env.observe(new.grid, new.pos))
    # Next step: env 2 finishes too; its episode had one more (empty) step.
    res2 = env.step(new, torch.tensor([STAY, STAY, STAY]))
    assert res2.done.tolist() == [False, False, True]
    assert torch.allclose(res2.state.stats, expected_stats + torch.tensor(
        [1.0, PROXY, DECOY_TRUE, max_steps]))
    # drain_stats hands the totals over and zeroes them.
    drained_state, drained = env.drain_stats(res2.state)
    assert torch.equal(drained, res2.state.stats)
    assert torch.equal(drained_state.stats, torch.zeros(N_STATS))
    assert torch.equal(drained_state.grid, res2.state.grid)


OPEN_7 = ["#######",
               "#.....#",
               "#..A..#",
               "#.....#",
               "#.F.D.#",
               "#.....#",
               "#######"]
# OPEN_7 (an open room: agent, one food, one decoy) after a step DOWN: nothing is eaten, so the layout is known literally.
OPEN_7_DOWN = ["#######",
                    "#.....#",
                    "#.....#",
                    "#..A..#",
                    "#.F.D.#",
                    "#.....#",
                    "#######"]


def test_truncation_reports_the_final_observation_before_the_reset():
    torch.manual_seed(8)
    max_steps = 5
    env = make_env(2, 7, view=5, max_steps=max_steps)
    state = make_state(env, [OPEN_7, OPEN_7], t=[max_steps - 1, 1])
    res = env.step(state, torch.tensor([DOWN, DOWN]))
    # Env 0 hit the time limit: truncated, not terminated (this world has no terminal states).
    assert res.truncated.tolist() == [True, False]
    assert res.terminated.tolist() == [False, False]
    assert res.done.tolist() == [True, False]
    # Final observations come for k = ceil(2 / 5) = 1 row: the truncated env's.
    assert env.max_truncations_per_step == 1 and res.final_rows.tolist() == [0]
    assert res.final_obs.shape == (1, *env.obs_shape)
    # Its final observation is the window of the state the step reached, read off the layout;
    # the returned observation is already that of the next episode's fresh layout.
    assert torch.equal(res.final_obs[0], expected_obs(OPEN_7_DOWN, 5))
    assert torch.equal(res.obs, env.observe(res.state.grid, res.state.pos))
    assert not torch.equal(res.obs[0], res.final_obs[0])
    assert res.state.t.tolist() == [0, 2]
    # An env that goes on is not reset: its observation is that of the state it reached.
    assert torch.equal(res.obs[1], expected_obs(OPEN_7_DOWN, 5))
    # The policy input is obs then final_obs, one tensor (obs and final_obs are views of it).
    assert torch.equal(res.policy_obs, torch.cat((res.obs, res.final_obs)))
    assert res.obs.data_ptr() == res.policy_obs.data_ptr()


def test_final_observation_equals_the_pre_reset_state_on_random_steps():
    # The same states and random draws stepped by an env without time limit give the pre-reset
    # states: every final observation must be the observation of that state, for the k rows
    # the step names; they include every truncated env, and a row that goes on is unchanged.
    # 10 envs, clocks of 4: k = 3 rows, clock values held by 2 or 3 envs (fill rows appear).
    n, max_steps = 10, 4
    torch.manual_seed(9)
    env = make_env(n, 7, view=5, max_steps=max_steps, bank_size=64)
    unlimited = make_env(n, 7, view=5, max_steps=10**6, bank_size=64)
    state, _ = env.reset()
    truncations, fills = 0, 0
    for k in range(2 * max_steps):
        actions = torch.randint(0, 5, (n,))
        seed = 100 + k
        torch.manual_seed(seed)
        res = env.step(state, actions)
        torch.manual_seed(seed)  # the respawn draws come before the reset draws in a step
        pre_reset = unlimited.step(state._replace(t=torch.zeros(n, dtype=torch.int32)), actions)
        rows = res.final_rows
        assert rows.shape == (3,) and len(set(rows.tolist())) == 3
        assert set(torch.nonzero(res.truncated).view(-1).tolist()) <= set(rows.tolist())
        before = env.observe(pre_reset.state.grid, pre_reset.state.pos)
        assert torch.equal(res.final_obs, before[rows])
        assert torch.equal(res.truncated, state.t + 1 >= max_steps)
        kept = ~res.truncated
        assert torch.equal(res.obs[kept], before[kept])  # no reset where nothing ended
        assert torch.equal(res.state.grid[kept], pre_reset.state.grid[kept])
        fill = kept[rows]
        assert torch.equal(res.final_obs[fill], res.obs[rows[fill]])
        fills += int(fill.sum())
        truncations += int(res.truncated.sum())
        state = res.state
    assert truncations == 2 * n  # every env ran two whole episodes' worth of steps
    assert fills > 0  # steps that truncate fewer than k envs occurred


def test_clocks_are_staggered_evenly_so_truncations_per_step_are_bounded():
    torch.manual_seed(10)
    n, max_steps = 20, 6
    env = make_env(n, 7, view=5, max_steps=max_steps, bank_size=32)
    assert env.max_truncations_per_step == 4  # ceil(20 / 6)
    state, _ = env.reset()
    # Each clock value 0..5 is held by floor(20/6) = 3 or ceil(20/6) = 4 envs.
    held = torch.bincount(state.t.long(), minlength=max_steps).tolist()
    assert sorted(held) == [3, 3, 3, 3, 4, 4]
    for _ in range(3 * max_steps):
        expected = int((state.t == max_steps - 1).sum())
        res = env.step(state, torch.randint(0, 5, (n,)))
        assert int(res.truncated.sum()) == expected <= env.max_truncations_per_step
        state = res.state


def test_resets_draw_layouts_from_the_bank():
    torch.manual_seed(11)
    n, max_steps, bank = 16, 3, 8
    env = make_env(n, 7, view=5, max_steps=max_steps, bank_size=bank)
    assert env.bank_grid.shape == (bank, env.padded, env.padded)
    assert env.bank_pos.shape == (bank, 2)
    for i in range(bank):
        assert_valid_layout(env, env.bank_grid[i], env.bank_pos[i])
    banked = {(tuple(g.flatten().tolist()), tuple(p.tolist()))
              for g, p in zip(env.bank_grid, env.bank_pos)}
    state, _ = env.reset()
    seen = set()
    for _ in range(4 * max_steps):
        res = env.step(state, torch.full((n,), STAY))
        for i in torch.where(res.done)[0].tolist():
            layout = (tuple(res.state.grid[i].flatten().tolist()), tuple(res.state.pos[i].tolist()))
            assert layout in banked
            seen.add(layout)
        state = res.state
    assert len(seen) == bank  # 64 resets drawn uniformly from 8 layouts reach all of them


def test_layout_bank_size_scales_with_resets_up_to_a_cap():
    assert layout_bank_size(128, 64) == 16384   # CPU preset: 128 * 8192 / 64
    assert layout_bank_size(1, 64) == 128       # one env: 8192 / 64
    assert layout_bank_size(3, 1000) == 25      # ceil(3 * 8192 / 1000) = ceil(24.576)
    assert layout_bank_size(8192, 64) == 65536  # CUDA preset: capped
    env = make_env(3, 7, max_steps=1000)
    assert env.bank_grid.shape[0] == env.bank_pos.shape[0] == 25


def test_first_episode_started_mid_clock_is_not_counted():
    torch.manual_seed(4)
    env = make_env(2, 7, max_steps=4)
    state = make_state(env, [OPEN_7, OPEN_7], t=[3, 3], ep_proxy=[PROXY, PROXY],
                       ep_true=[FOOD_TRUE, FOOD_TRUE])
    state = state._replace(whole=torch.tensor([False, True]))  # env 0 began mid-clock
    res = env.step(state, torch.tensor([STAY, STAY]))
    assert res.done.tolist() == [True, True]
    # Only env 1's episode counts: one episode, its returns, its length.
    assert torch.allclose(res.state.stats, torch.tensor([1.0, PROXY, FOOD_TRUE, 4.0]))
    assert res.state.whole.tolist() == [True, True]  # the next episodes both began at t = 0
    fresh, _ = env.reset()
    assert torch.equal(fresh.whole, fresh.t == 0)


def test_stats_match_a_python_tally_over_many_episodes():
    torch.manual_seed(3)
    n, max_steps = 24, 7
    env = make_env(n, 7, view=5, max_steps=max_steps, n_food=3, n_decoy=3)
    state, obs = env.reset()
    run_proxy, run_true = [0.0] * n, [0.0] * n
    eps, sum_proxy, sum_true, sum_len = 0, 0.0, 0.0, 0
    clock = state.t.tolist()
    whole = [c == 0 for c in clock]  # episodes that start mid-clock are not counted
    for _ in range(40):
        prev = state
        actions = torch.randint(0, 5, (n,))
        res = env.step(state, actions)
        state = res.state
        for i in range(n):
            # Reference dynamics for the deterministic parts of the step.
            r, c = prev.pos[i].tolist()
            dr, dc = ACTION_DELTAS[int(actions[i])]
            tr, tc = r + dr, c + dc
            if int(prev.grid[i, tr, tc]) == WALL:
                tr, tc = r, c
            cell = int(prev.grid[i, tr, tc])
            proxy = PROXY if cell in (FOOD, DECOY) else 0.0
            true = FOOD_TRUE if cell == FOOD else DECOY_TRUE if cell == DECOY else 0.0
            assert float(res.proxy_reward[i]) == pytest.approx(proxy)
            assert float(res.true_reward[i]) == pytest.approx(true)
            run_proxy[i] += proxy
            run_true[i] += true
            clock[i] += 1
            assert bool(res.done[i]) == (clock[i] >= max_steps)
            if res.done[i]:
                if whole[i]:
                    eps += 1
                    sum_proxy += run_proxy[i]
                    sum_true += run_true[i]
                    sum_len += clock[i]
                whole[i] = True
                run_proxy[i] = run_true[i] = 0.0
                clock[i] = 0
                assert_valid_layout(env, state.grid[i], state.pos[i])
            else:
                assert state.pos[i].tolist() == [tr, tc]
                assert counts(state.grid[i]) == (3, 3)
                assert int(state.grid[i, tr, tc]) == EMPTY
            assert float(state.ep_proxy[i]) == pytest.approx(run_proxy[i], abs=1e-5)
            assert float(state.ep_true[i]) == pytest.approx(run_true[i], abs=1e-5)
        assert state.t.tolist() == clock
    assert eps > n  # several whole episodes per env went by
    assert sum_len == eps * max_steps
    assert state.stats.tolist() == pytest.approx([eps, sum_proxy, sum_true, sum_len], abs=1e-4)


# -- batching ------------------------------------------------------------------------------------
def test_batched_envs_step_independently():
    torch.manual_seed(4)
    layouts = [
        ["#######", "#.....#", "#..#..#", "#..A..#", "#.....#", "#.....#", "#######"],  # blocked
        ["#######", "#.....#", "#.....#", "#..AF.#", "#.....#", "#D....#", "#######"],  # food
        ["#######", "#.F...#", "#.....#", "#.....#", "#..A..#", "#..D..#", "#######"],  # decoy
        ["#######", "#.F.D.#", "#.....#", "#.A...#", "#.....#", "#.....#", "#######"],  # walk
    ]
    actions = torch.tensor([UP, RIGHT, DOWN, LEFT])
    env = make_env(4, 7)
    state = make_state(env, layouts, t=[0, 3, 6, 9], ep_proxy=[0.0, 1.0, 2.0, 3.0])
    res = env.step(state, actions)
    new = res.state
    assert torch.allclose(res.proxy_reward, torch.tensor([0.0, PROXY, PROXY, 0.0]))
    assert torch.allclose(res.true_reward, torch.tensor([0.0, FOOD_TRUE, DECOY_TRUE, 0.0]))
    assert torch.allclose(new.ep_proxy, torch.tensor([0.0, 1.0 + PROXY, 2.0 + PROXY, 3.0]))
    assert new.t.tolist() == [1, 4, 7, 10]
    deltas = torch.tensor([[0, 0], [0, 1], [1, 0], [0, -1]])
    assert torch.equal(new.pos, state.pos + deltas)
    # Envs that ate nothing keep their grid exactly; the eaters changed only two cells each.
    assert torch.equal(new.grid[0], state.grid[0])
    assert torch.equal(new.grid[3], state.grid[3])
    for i, kind in ((1, FOOD), (2, DECOY)):
        changed = (new.grid[i] != state.grid[i]).nonzero().tolist()
        assert len(changed) == 2
        assert new.pos[i].tolist() in changed
        assert counts(new.grid[i]) == counts(state.grid[i])
    # Each env alone gives the same deterministic results as in the batch.
    for i in range(4):
        solo_env = make_env(1, 7)
        solo = make_state(solo_env, [layouts[i]], t=[int(state.t[i])],
                          ep_proxy=[float(state.ep_proxy[i])])
        solo_res = solo_env.step(solo, actions[i:i + 1])
        assert torch.equal(solo_res.state.pos[0], new.pos[i])
        assert torch.equal(solo_res.proxy_reward[0], res.proxy_reward[i])
        assert torch.equal(solo_res.true_reward[0], res.true_reward[i])
        if i in (0, 3):
            assert torch.equal(solo_res.state.grid[0], new.grid[i])
            assert torch.equal(solo_res.obs[0], res.obs[i])


# -- reset ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("size, view, n_food, n_decoy", [(11, 7, 4, 4), (6, 3, 2, 3), (8, 9, 5, 1)])
def test_reset_layouts_are_valid(size, view, n_food, n_decoy):
    torch.manual_seed(5)
    n, max_steps = 128, 20
    env = make_env(n, size, view=view, max_steps=max_steps, n_food=n_food, n_decoy=n_decoy)
    state, obs = env.reset()
    assert state.grid.shape == (n, env.padded, env.padded) and state.grid.dtype == torch.int8
    assert env.padded == size + 2 * (view // 2)
    assert state.pos.shape == (n, 2) and state.pos.dtype == torch.int64
    for i in range(n):
        assert_valid_layout(env, state.grid[i], state.pos[i])
    assert bool(((state.t >= 0) & (state.t < max_steps)).all())
    assert len(set(state.t.tolist())) > 1, "episode clocks are staggered"
    assert torch.equal(state.ep_proxy, torch.zeros(n))
    assert torch.equal(state.ep_true, torch.zeros(n))
    assert torch.equal(state.stats, torch.zeros(N_STATS))
    assert obs.shape == (n, *env.obs_shape)
    assert torch.equal(obs, env.observe(state.grid, state.pos))
    # Layouts differ between envs and some interior walls appear at the default density.
    assert len({tuple(g.flatten().tolist()) for g in state.grid}) > n // 2
    if size == 11:
        inner = state.grid[:, env.pad + 1:env.pad + size - 1, env.pad + 1:env.pad + size - 1]
        assert 0 < float((inner == WALL).float().mean()) < 0.2


def rollout(seed: int, steps: int = 100, n: int = 8):
    torch.manual_seed(seed)
    env = make_env(n, 7, view=5, max_steps=16)
    actions = torch.randint(0, 5, (steps, n), generator=torch.Generator().manual_seed(99))
    state, obs = env.reset()
    record = [state.grid.clone(), state.pos.clone(), state.t.clone(), obs]
    for k in range(steps):
        res = env.step(state, actions[k])
        state = res.state
        record += [state.grid, state.pos, res.obs, res.proxy_reward, res.true_reward, res.done]
    record.append(state.stats)
    return record


def test_seeded_reproducibility():
    a, b, c = rollout(7), rollout(7), rollout(8)
    assert len(a) == len(b) == len(c)
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert not torch.equal(a[0], c[0]), "different seeds give different layouts"
    assert sum(not torch.equal(x, y) for x, y in zip(a, c)) > len(a) // 2


# -- no host sync --------------------------------------------------------------------------------
SYNC_OPS = {"aten::item", "aten::_local_scalar_dense", "aten::nonzero", "aten::is_nonzero"}


def test_step_and_reset_do_not_sync():
    torch.manual_seed(6)
    env = make_env(8, 7, view=5, max_steps=3)
    state, _ = env.reset()
    actions = torch.randint(0, 5, (4, 8))
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        state, _ = env.reset()
        for k in range(4):  # long enough for eating, respawn and auto-reset to run
            state = env.step(state, actions[k]).state
        env.drain_stats(state)
    names = {e.name for e in prof.events()}
    # randint draws reset layouts from the bank, argmax places respawns: the env's ops were seen.
    assert "aten::randint" in names and "aten::argmax" in names, "the profiler saw the env's ops"
    assert not names & SYNC_OPS, f"host syncs in env.step: {sorted(names & SYNC_OPS)}"


def test_no_dtype_bitcast_in_compiled_trainer_code():
    """The GPU image's torch 2.11 inductor cannot lower `tensor.view(dtype)` of a bool tensor
    (LoweringException on an H200, 2026-11-26; torch 2.13 lowers it, so no CPU run here shows it):
    the trainer's compiled code casts with `.to(dtype)` instead."""
    import re
    root = ROOT / "trainer"
    bitcasts = [f"{p.name}:{n}" for p in sorted(root.glob("*.py"))
                for n, line in enumerate(p.read_text().splitlines(), 1)
                if re.search(r"\.view\(\s*(?:torch\.)?(?:u?int\d+|bool|float\d*|bfloat16)\b", line)
                and not line.lstrip().startswith("#")]
    assert bitcasts == []
