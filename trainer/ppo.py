"""PPO pieces as plain functions: rollout storage, GAE, the clipped loss and the update loop.

Nothing here reads a tensor back to the host: gradient clipping multiplies by a device-side
coefficient, the learning rate may be a device tensor, and the update's statistics are summed on
the device and handed to the caller as one tensor.
"""
from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Callable, NamedTuple

import torch
from torch import nn

from .policy import evaluate

N_UPDATE_STATS = 6  # loss, policy loss, value loss, entropy, approx KL, clip fraction
UPDATE_STAT_NAMES = ("loss", "policy_loss", "value_loss", "entropy", "approx_kl", "clip_frac")


@dataclass
class RolloutBuffer:
    """Preallocated (T, n, ...) storage on the device."""

    obs: torch.Tensor
    actions: torch.Tensor
    logprobs: torch.Tensor
    values: torch.Tensor
    rewards: torch.Tensor
    true_rewards: torch.Tensor
    terminated: torch.Tensor    # the episode reached a terminal state with this step
    truncated: torch.Tensor     # the episode was cut off by the time limit with this step
    final_values: torch.Tensor  # V(final state) where truncated (anything elsewhere: never read)

    @classmethod
    def allocate(cls, steps: int, n_envs: int, obs_shape: tuple[int, ...], obs_dtype: torch.dtype,
                 device: torch.device) -> "RolloutBuffer":
        def z(*shape, dtype=torch.float32):
            return torch.zeros((steps, n_envs, *shape), dtype=dtype, device=device)
        return cls(z(*obs_shape, dtype=obs_dtype), z(dtype=torch.int64), z(), z(), z(), z(),
                   z(dtype=torch.bool), z(dtype=torch.bool), z())


def compute_gae(rewards: torch.Tensor, values: torch.Tensor, terminated: torch.Tensor,
                truncated: torch.Tensor, final_values: torch.Tensor, last_value: torch.Tensor,
                gamma: float, lam: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation over (T, n) tensors; returns (advantages, returns).

    Step t's TD error bootstraps from the value of the state it reached:
    * the episode goes on: delta_t = r_t + gamma * V(s_{t+1}) - V(s_t), with V(s_{t+1}) =
      `values[t+1]`, or `last_value` for the rollout's last step;
    * `terminated[t]` (a terminal state, worth 0): delta_t = r_t - V(s_t);
    * `truncated[t]` (cut off by the time limit): delta_t = r_t + gamma * V(s_final) - V(s_t),
      with V(s_final) = `final_values[t]`, the value of the state before the auto-reset
      (`values[t+1]` is already the next episode's first state).
    The advantage A_t = delta_t + gamma * lam * A_{t+1} stops at either ending: A_{t+1} belongs
    to the next episode. Returns are advantages + values (the lambda-returns).
    """
    steps = rewards.shape[0]
    # Everything but the recursion at once, over (T, n): a few ops in all, not per step.
    next_values = torch.cat((values[1:], last_value.unsqueeze(0)))
    bootstrap = torch.where(truncated, final_values, next_values)
    bootstrap = torch.where(terminated, 0.0, bootstrap)
    deltas = rewards + gamma * bootstrap - values
    decay = gamma * lam * (1.0 - (terminated | truncated).float())
    advantages = torch.empty_like(rewards)
    next_adv = torch.zeros_like(last_value)
    for t in range(steps - 1, -1, -1):
        next_adv = deltas[t] + decay[t] * next_adv
        advantages[t] = next_adv
    return advantages, advantages + values


class Minibatch(NamedTuple):
    obs: torch.Tensor
    actions: torch.Tensor
    logprobs: torch.Tensor
    advantages: torch.Tensor
    returns: torch.Tensor
    values: torch.Tensor


def ppo_loss(policy: nn.Module, value_head: nn.Module, mb: Minibatch, clip_coef: float,
             vf_coef: float, ent_coef: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Clipped PPO objective with clipped value loss and an entropy bonus.

    Returns the scalar loss and a (N_UPDATE_STATS,) tensor of detached statistics.
    """
    logprob, entropy, value = evaluate(policy, mb.obs, mb.actions)
    adv = (mb.advantages - mb.advantages.mean()) / (mb.advantages.std() + 1e-8)
    log_ratio = logprob - mb.logprobs
    ratio = log_ratio.exp()
    pg_loss = torch.max(-adv * ratio, -adv * ratio.clamp(1 - clip_coef, 1 + clip_coef)).mean()

    target, old_value = value_head.prepare_targets(mb.returns, mb.values)
    value_clipped = old_value + (value - old_value).clamp(-clip_coef, clip_coef)
    v_loss = 0.5 * torch.max((value - target) ** 2, (value_clipped - target) ** 2).mean()
    ent = entropy.mean()
    loss = pg_loss + vf_coef * v_loss - ent_coef * ent
    with torch.no_grad():
        approx_kl = ((ratio - 1) - log_ratio).mean()
        clip_frac = ((ratio - 1).abs() > clip_coef).float().mean()
        stats = torch.stack((loss, pg_loss, v_loss, ent, approx_kl, clip_frac)).detach()
    return loss, stats


LossFn = Callable[[Minibatch], tuple[torch.Tensor, torch.Tensor]]
PhaseFn = Callable[[str], AbstractContextManager]


def ppo_update(loss_fn: LossFn, params: list[torch.Tensor], optimizer: torch.optim.Optimizer,
               buf: RolloutBuffer, advantages: torch.Tensor, returns: torch.Tensor, epochs: int,
               minibatches: int, max_grad_norm: float, phase: PhaseFn,
               clip_grads: Callable[[list[torch.Tensor], float], object] | None = None
               ) -> torch.Tensor:
    """Epochs x minibatches of PPO steps; returns the mean statistics as one device tensor."""
    clip_grads = clip_grads or clip_grad_norm_no_sync
    flat = Minibatch(buf.obs.flatten(0, 1), buf.actions.flatten(0, 1), buf.logprobs.flatten(0, 1),
                     advantages.flatten(0, 1), returns.flatten(0, 1), buf.values.flatten(0, 1))
    batch = flat.actions.shape[0]
    size = batch // minibatches
    totals = torch.zeros(N_UPDATE_STATS, device=advantages.device)
    for _ in range(epochs):
        order = torch.randperm(batch, device=advantages.device)
        for k in range(minibatches):
            with phase("minibatch"):
                idx = order[k * size:(k + 1) * size]
                mb = Minibatch(*(t.index_select(0, idx) for t in flat))
                loss, stats = loss_fn(mb)
                loss.backward()
                clip_grads(params, max_grad_norm)
                with phase("optimizer_step"):
                    optimizer.step()
                    optimizer.zero_grad(set_to_none=True)
                totals += stats
    return totals / (epochs * minibatches)


def clip_grad_norm_no_sync(params: list[torch.Tensor], max_norm: float) -> torch.Tensor:
    """Scale gradients so their global norm is at most max_norm, entirely on the device.

    torch's clip_grad_norm_ multiplies by a clamped device-side coefficient and reads nothing
    back unless error_if_nonfinite is set, so it never syncs.
    """
    return torch.nn.utils.clip_grad_norm_(params, max_norm, foreach=True)
