"""PPO pieces checked against independent reference computations."""
from __future__ import annotations

import math

import pytest
import torch
from torch.distributions import Categorical
from torch.profiler import ProfilerActivity, profile

from tests.support.policies import OBS_SHAPE, small_policy
from trainer.policy import ActorCritic, act, act_and_value
from trainer.env import truncation_rows
from trainer.ppo import Minibatch, N_UPDATE_STATS, clip_grad_norm_no_sync, compute_gae, ppo_loss

SYNC_OPS = {"aten::item", "aten::_local_scalar_dense", "aten::nonzero", "aten::is_nonzero"}


# -- GAE -----------------------------------------------------------------------------------------
def reference_gae(rewards, values, terminated, truncated, final_values, last_value, gamma, lam):
    """A_t = sum_k (gamma*lam)^k delta_{t+k}, summed forwards and cut at the episode's end.

    Step k bootstraps from V(s_{k+1}): nothing after a termination, the final state's value after
    a truncation, else the next stored value (or last_value); the sum stops at either ending.
    """
    steps, n = len(rewards), len(rewards[0])
    adv = [[0.0] * n for _ in range(steps)]
    for e in range(n):
        for t in range(steps):
            total, coef = 0.0, 1.0
            for k in range(t, steps):
                next_v = last_value[e] if k == steps - 1 else values[k + 1][e]
                if truncated[k][e]:
                    next_v = final_values[k][e]
                if terminated[k][e]:
                    next_v = 0.0
                total += coef * (rewards[k][e] + gamma * next_v - values[k][e])
                if terminated[k][e] or truncated[k][e]:
                    break
                coef *= gamma * lam
            adv[t][e] = total
    returns = [[adv[t][e] + values[t][e] for e in range(n)] for t in range(steps)]
    return adv, returns


def no_endings(steps: int, n: int) -> torch.Tensor:
    return torch.zeros(steps, n, dtype=torch.bool)


@pytest.mark.parametrize("gamma, lam", [(0.95, 0.9), (0.99, 0.95), (0.8, 0.0), (0.9, 1.0)])
def test_compute_gae_matches_reference(gamma, lam):
    g = torch.Generator().manual_seed(0)
    steps, n = 20, 7
    rewards = torch.randn(steps, n, generator=g)
    values = torch.randn(steps, n, generator=g)
    final_values = torch.randn(steps, n, generator=g)
    last_value = torch.randn(n, generator=g)
    ended = torch.rand(steps, n, generator=g) < 0.2
    terminated = ended & (torch.rand(steps, n, generator=g) < 0.5)
    truncated = ended & ~terminated
    terminated[7, :3], truncated[7, :3] = True, False   # endings in the middle
    truncated[8, 2], terminated[8, 2] = True, False     # back-to-back episode ends
    terminated[-1, 0], truncated[-1, 0] = True, False   # termination last: no last_value
    truncated[-1, 6], terminated[-1, 6] = True, False   # truncation last: final value, not last
    terminated[:, 5], truncated[:, 5] = False, False    # one env never ends: bootstraps all the way
    adv, ret = compute_gae(rewards, values, terminated, truncated, final_values, last_value,
                           gamma, lam)
    ref_adv, ref_ret = reference_gae(rewards.tolist(), values.tolist(), terminated.tolist(),
                                     truncated.tolist(), final_values.tolist(),
                                     last_value.tolist(), gamma, lam)
    assert adv.shape == ret.shape == (steps, n)
    assert torch.allclose(adv, torch.tensor(ref_adv), atol=1e-5)
    assert torch.allclose(ret, torch.tensor(ref_ret), atol=1e-5)


def test_compute_gae_monte_carlo_case():
    # gamma = lam = 1 without endings: the return is the sum of the remaining rewards + last value.
    rewards = torch.tensor([[1.0], [2.0], [3.0]])
    values = torch.tensor([[0.5], [-1.0], [4.0]])
    final_values = torch.full((3, 1), 100.0)
    adv, ret = compute_gae(rewards, values, no_endings(3, 1), no_endings(3, 1), final_values,
                           torch.tensor([10.0]), 1.0, 1.0)
    assert torch.allclose(ret[:, 0], torch.tensor([16.0, 15.0, 13.0]))
    assert torch.allclose(adv, ret - values)
    # A termination after step 1 cuts the sum there.
    terminated = no_endings(3, 1)
    terminated[1, 0] = True
    _, ret = compute_gae(rewards, values, terminated, no_endings(3, 1), final_values,
                         torch.tensor([10.0]), 1.0, 1.0)
    assert torch.allclose(ret[:, 0], torch.tensor([3.0, 2.0, 13.0]))


def test_compute_gae_hand_computed_termination_and_truncation():
    # gamma = lam = 0.5 (gamma * lam = 0.25), T = 3 steps, n = 2 envs with the same rewards and
    # values; both episodes end with step 1, env 0 terminated, env 1 truncated with V(s_final) = 10.
    rewards = torch.tensor([[1.0, 1.0], [2.0, 2.0], [4.0, 4.0]])
    values = torch.tensor([[2.0, 2.0], [4.0, 4.0], [8.0, 8.0]])
    last_value = torch.tensor([16.0, 16.0])
    terminated = torch.tensor([[False, False], [True, False], [False, False]])
    truncated = torch.tensor([[False, False], [False, True], [False, False]])
    # 99 wherever no truncation happened: those entries must never be read.
    final_values = torch.tensor([[99.0, 99.0], [99.0, 10.0], [99.0, 99.0]])
    adv, ret = compute_gae(rewards, values, terminated, truncated, final_values, last_value,
                           0.5, 0.5)
    # Step 2 (both): delta = 4 + 0.5*16 - 8 = 4, A2 = 4.
    # Env 0, step 1 terminated: delta = 2 - 4 = -2, A1 = -2 (A2 belongs to the next episode).
    #        step 0: delta = 1 + 0.5*V1 - V0 = 1 + 2 - 2 = 1, A0 = 1 + 0.25*(-2) = 0.5.
    # Env 1, step 1 truncated: delta = 2 + 0.5*10 - 4 = 3, A1 = 3 (still cut from A2).
    #        step 0: delta = 1, A0 = 1 + 0.25*3 = 1.75.
    # (Treating the truncation as terminal would give env 1 the values of env 0.)
    assert torch.allclose(adv, torch.tensor([[0.5, 1.75], [-2.0, 3.0], [4.0, 4.0]]))
    # Returns = advantages + values.
    assert torch.allclose(ret, torch.tensor([[2.5, 3.75], [2.0, 7.0], [12.0, 12.0]]))


@pytest.mark.parametrize("max_truncated", [2, 3, 6, 9])
def test_final_values_come_from_the_next_forward(max_truncated):
    """truncation_rows picks every truncated env (and fills up to a fixed k); act_and_value
    values those rows in the policy forward of the next step, which acts exactly as `act`."""
    policy = small_policy("plain")
    gen = torch.Generator().manual_seed(3)
    final_obs, obs = torch.rand(6, *OBS_SHAPE, generator=gen), torch.rand(6, *OBS_SHAPE, generator=gen)
    truncated = torch.tensor([False, True, False, False, True, False])
    rows = truncation_rows(truncated, max_truncated)
    assert rows.shape == (min(max_truncated, 6),) and {1, 4} <= set(rows.tolist())
    torch.manual_seed(7)
    out, values = act_and_value(policy, torch.cat((obs, final_obs[rows])), 6)
    torch.manual_seed(7)
    alone = act(policy, obs)
    assert torch.equal(out.action, alone.action)
    assert torch.allclose(out.logprob, alone.logprob, atol=1e-6)
    assert torch.allclose(out.value, alone.value, atol=1e-6)
    stored = torch.full((6,), 99.0).index_copy_(0, rows, values)
    with torch.no_grad():
        full = policy(final_obs)[1]
    assert torch.allclose(stored[truncated], full[truncated], atol=1e-6)  # envs 1 and 4
    assert not values.requires_grad


# -- PPO loss ------------------------------------------------------------------------------------
def make_minibatch(policy: ActorCritic, batch: int = 128) -> Minibatch:
    g = torch.Generator().manual_seed(1)
    obs = (torch.rand(batch, *OBS_SHAPE, generator=g) < 0.3).float()
    actions = torch.randint(0, 5, (batch,), generator=g)
    with torch.no_grad():
        logits, value = policy(obs)
        logp = torch.log_softmax(logits, -1).gather(-1, actions[:, None]).squeeze(-1)
        raw_value = policy.value_head.denormalize(value)
    # Old log-probs and values away from the current ones, so ratios and values get clipped.
    old_logp = logp + 0.3 * torch.randn(batch, generator=g)
    old_values = raw_value + 0.6 * torch.randn(batch, generator=g)
    advantages = 2.0 * torch.randn(batch, generator=g) + 0.5
    returns = raw_value + torch.randn(batch, generator=g)
    return Minibatch(obs, actions, old_logp, advantages, returns, old_values)


def reference_loss(policy, mb, clip, vf_coef, ent_coef, mu=0.0, sigma=1.0):
    logits, value = policy(mb.obs)
    dist = Categorical(logits=logits)
    logp = dist.log_prob(mb.actions)
    entropy = dist.entropy().mean()
    log_ratio = logp - mb.logprobs
    ratio = torch.exp(log_ratio)
    adv = (mb.advantages - mb.advantages.mean()) / (mb.advantages.std() + 1e-8)
    surrogate = torch.minimum(ratio * adv, torch.clamp(ratio, 1 - clip, 1 + clip) * adv)
    policy_loss = -surrogate.mean()
    target = (mb.returns - mu) / sigma
    old = (mb.values - mu) / sigma
    clipped_value = torch.where(value > old + clip, old + clip,
                                torch.where(value < old - clip, old - clip, value))
    err = torch.maximum((value - target).pow(2), (clipped_value - target).pow(2))
    value_loss = 0.5 * err.mean()
    loss = policy_loss + vf_coef * value_loss - ent_coef * entropy
    approx_kl = (ratio - 1 - log_ratio).mean()
    clip_frac = ((ratio < 1 - clip) | (ratio > 1 + clip)).float().mean()
    unclipped = {"policy_loss": -(ratio * adv).mean().detach(),
                 "value_loss": 0.5 * (value - target).pow(2).mean().detach()}
    return loss, [loss, policy_loss, value_loss, entropy, approx_kl, clip_frac], unclipped


@pytest.mark.parametrize("head", ["plain", "popart"])
def test_ppo_loss_matches_reference(head):
    policy = small_policy(head)
    mu, sigma = 0.0, 1.0
    if head == "popart":
        mu, sigma = 1.5, 2.0
        policy.value_head.mu.fill_(mu)
        policy.value_head.nu.fill_(sigma ** 2 + mu ** 2)
    mb = make_minibatch(policy)
    clip, vf_coef, ent_coef = 0.2, 0.5, 0.01
    loss, stats = ppo_loss(policy, policy.value_head, mb, clip, vf_coef, ent_coef)
    assert stats.shape == (N_UPDATE_STATS,) and not stats.requires_grad
    grads = torch.autograd.grad(loss, list(policy.parameters()))

    ref, ref_stats, unclipped = reference_loss(policy, mb, clip, vf_coef, ent_coef, mu, sigma)
    ref_grads = torch.autograd.grad(ref, list(policy.parameters()))
    ref_stats = torch.stack([s.detach() for s in ref_stats])
    names = ("loss", "policy_loss", "value_loss", "entropy", "approx_kl", "clip_frac")
    for name, got, want in zip(names, stats, ref_stats):
        assert torch.allclose(got, want, atol=1e-6, rtol=1e-5), name
    assert torch.allclose(loss, ref, atol=1e-6, rtol=1e-5)
    for got, want in zip(grads, ref_grads):
        assert torch.allclose(got, want, atol=1e-6, rtol=1e-4)

    # The case is one where clipping matters, for the ratio and for the value.
    clip_frac = float(stats[5])
    assert 0.0 < clip_frac < 1.0
    assert abs(float(unclipped["policy_loss"]) - float(stats[1])) > 1e-3
    assert abs(float(unclipped["value_loss"]) - float(stats[2])) > 1e-3
    assert float(stats[4]) > 0.0  # approx KL of a perturbed policy is positive
    assert 0.0 < float(stats[3]) < math.log(5)


# -- gradient clipping ---------------------------------------------------------------------------
def grads_with_norm(norm: float) -> list[torch.nn.Parameter]:
    g = torch.Generator().manual_seed(5)
    params = [torch.nn.Parameter(torch.zeros(s)) for s in ((4, 3), (7,), (2, 2, 2))]
    raw = [torch.randn(p.shape, generator=g) for p in params]
    total = torch.sqrt(sum((r * r).sum() for r in raw))
    for p, r in zip(params, raw):
        p.grad = r * (norm / total)
    params.append(torch.nn.Parameter(torch.zeros(3)))  # one without a gradient
    return params


def global_norm(params) -> float:
    return math.sqrt(sum(float((p.grad.double() ** 2).sum()) for p in params if p.grad is not None))


def test_clip_grad_norm_scales_down_large_gradients():
    params = grads_with_norm(5.0)
    before = [p.grad.clone() for p in params[:-1]]
    total = clip_grad_norm_no_sync(params, 1.0)
    assert float(total) == pytest.approx(5.0, rel=1e-5)
    assert global_norm(params) == pytest.approx(1.0, rel=1e-5)
    for p, g in zip(params, before):
        assert torch.allclose(p.grad, g / 5.0, rtol=1e-5, atol=1e-7)
    assert params[-1].grad is None


def test_clip_grad_norm_leaves_small_gradients():
    params = grads_with_norm(0.3)
    before = [p.grad.clone() for p in params[:-1]]
    total = clip_grad_norm_no_sync(params, 1.0)
    assert float(total) == pytest.approx(0.3, rel=1e-5)
    assert all(torch.equal(p.grad, g) for p, g in zip(params, before))


def test_clip_grad_norm_does_not_sync():
    params = grads_with_norm(5.0)
    clip_grad_norm_no_sync(params, 1.0)  # warm up outside the profiler
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        clip_grad_norm_no_sync(params, 1.0)
    names = {e.name for e in prof.events()}
    assert any("norm" in name for name in names), "the profiler saw the norm"
    assert not names & SYNC_OPS, f"host syncs in clipping: {sorted(names & SYNC_OPS)}"
