"""A small CNN actor-critic with a shared trunk, and two value heads with one interface.

The update calls `value_head.prepare_targets(...)` and `value_head(features)` whatever the head is:
the plain head passes targets through, PopArt normalises them. No branch on the head's kind
appears in the hot path, so a compiled update sees one straight-line graph.
"""
from __future__ import annotations

from typing import Callable, NamedTuple

import torch
from torch import nn

from .config import POPART_BETA as DEFAULT_BETA  # per-iteration step (PopArtValueHead: why)

SumFn = Callable[[torch.Tensor], torch.Tensor]


def _this_rank(x: torch.Tensor) -> torch.Tensor:
    """The sum over ranks when there is one rank."""
    return x


class ValueHead(nn.Module):
    """Plain value head: predicts returns directly.

    Its Linear runs in float32 even under bf16 autocast (the trunk stays bf16): a bf16 output has
    8 significant bits, so values near a return of 20 would be quantised to steps of 0.125, as
    coarse as the advantages it is meant to resolve. One (batch, hidden) x (hidden, 1) product
    costs nothing next to the trunk.
    """

    def __init__(self, hidden: int):
        super().__init__()
        self.fc = nn.Linear(hidden, 1)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        """The value in training units (normalised for PopArt), shape (batch,), float32."""
        with torch.autocast(features.device.type, enabled=False):
            return self.fc(features.float()).squeeze(-1)

    def denormalize(self, value: torch.Tensor) -> torch.Tensor:
        return value

    def prepare_targets(self, returns: torch.Tensor, old_values: torch.Tensor
                        ) -> tuple[torch.Tensor, torch.Tensor]:
        """Returns and old values (both raw) in training units."""
        return returns, old_values

    @torch.no_grad()
    def update_stats(self, returns: torch.Tensor, sum_across_ranks: SumFn = _this_rank) -> None:
        """Track return statistics (PopArt only); a no-op here, with no collective across ranks."""


class PopArtValueHead(ValueHead):
    """PopArt: normalised value targets whose running mean/std adapt while outputs are preserved.

    Statistics: `mu` = E[R], `nu` = E[R^2] over the returns of every rank, moved once per
    iteration by a step w_k = max(beta, 1/k) at the k-th update: for the first 1/beta updates
    an exact running average of all returns seen (the first batch sets them outright, instead
    of creeping from mu = 0, nu = 1), then an exponential average over about the last 1/beta
    iterations. beta = 0.1 (DEFAULT_BETA): the returns' scale moves as the policy learns, over
    tens of iterations, so the statistics follow it within ~10 while one iteration's batch
    (thousands of returns per rank) is already a precise estimate that needs little smoothing.
    PopArt's per-sample beta (3e-4 in the paper) applied once per iteration would move them
    ~2% in a 56-iteration run: PopArt off in all but name.
    """

    def __init__(self, hidden: int, beta: float = DEFAULT_BETA):
        super().__init__(hidden)
        if not 0.0 < beta <= 1.0:
            raise ValueError(f"PopArt beta must be in (0, 1], not {beta}")
        self.beta = beta
        self.register_buffer("mu", torch.zeros(()))
        self.register_buffer("nu", torch.ones(()))
        self.register_buffer("updates", torch.zeros(()))

    def _sigma(self, mu: torch.Tensor, nu: torch.Tensor) -> torch.Tensor:
        return (nu - mu * mu).clamp(min=1e-4).sqrt()

    def denormalize(self, value: torch.Tensor) -> torch.Tensor:
        return value * self._sigma(self.mu, self.nu) + self.mu

    def prepare_targets(self, returns, old_values):
        sigma = self._sigma(self.mu, self.nu)
        return (returns - self.mu) / sigma, (old_values - self.mu) / sigma

    @torch.no_grad()
    def update_stats(self, returns: torch.Tensor, sum_across_ranks: SumFn = _this_rank) -> None:
        """Move the statistics towards this iteration's returns on all ranks: one all-reduce of
        (sum R, sum R^2, count), so that E[R^2] is that of every return (averaging the ranks'
        returns element by element first would understate it) and ranks of unequal batch
        sizes weigh by their counts."""
        r = returns.detach().to(torch.float64).flatten()
        moments = sum_across_ranks(torch.stack((r.sum(), (r * r).sum(), r.new_full((), r.numel()))))
        batch_mu, batch_nu = moments[0] / moments[2], moments[1] / moments[2]
        w = (1.0 / (self.updates + 1.0)).clamp(min=self.beta)
        mu = ((1 - w) * self.mu + w * batch_mu).to(self.mu.dtype)
        nu = ((1 - w) * self.nu + w * batch_nu).to(self.nu.dtype)
        old_sigma, new_sigma = self._sigma(self.mu, self.nu), self._sigma(mu, nu)
        # Preserve unnormalised outputs: W' = W s/s', b' = (s b + m - m') / s'.
        self.fc.weight.mul_(old_sigma / new_sigma)
        self.fc.bias.mul_(old_sigma).add_(self.mu - mu).div_(new_sigma)
        self.mu.copy_(mu)
        self.nu.copy_(nu)
        self.updates.add_(1)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        # Checkpoints written before `updates` existed: their statistics are long warmed up.
        state_dict.setdefault(prefix + "updates", torch.full((), 1.0 / self.beta))
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)


class ActOutput(NamedTuple):
    action: torch.Tensor     # (n,) int64
    logprob: torch.Tensor    # (n,) float32
    value: torch.Tensor      # (n,) float32, raw (denormalised)


class ActorCritic(nn.Module):
    def __init__(self, obs_shape: tuple[int, int, int], n_actions: int, channels: int = 16,
                 hidden: int = 128, value_head: str = "plain", popart_beta: float = DEFAULT_BETA):
        super().__init__()
        c, h, w = obs_shape
        self.trunk = nn.Sequential(
            nn.Conv2d(c, channels, 3, padding=1), nn.ReLU(),
            nn.Conv2d(channels, 2 * channels, 3, padding=1), nn.ReLU(),
            nn.Flatten(), nn.Linear(2 * channels * h * w, hidden), nn.ReLU(),
        )
        self.actor = nn.Linear(hidden, n_actions)
        self.value_head = PopArtValueHead(hidden, popart_beta) if value_head == "popart" else ValueHead(hidden)
        nn.init.orthogonal_(self.actor.weight, 0.01)
        nn.init.zeros_(self.actor.bias)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Action logits and the value in training units."""
        features = self.trunk(obs)
        return self.actor(features), self.value_head(features)


def sample_actions(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Gumbel-max sampling (compile-friendly, draws from torch's default generator)."""
    logits = logits.float()
    noise = -torch.log(-torch.log(torch.rand_like(logits).clamp_(min=1e-20)))
    action = (logits + noise).argmax(dim=-1)
    logprob = torch.log_softmax(logits, dim=-1).gather(-1, action.unsqueeze(-1)).squeeze(-1)
    return action, logprob


def act(policy: ActorCritic, obs: torch.Tensor) -> ActOutput:
    """One batched forward and sample for the rollout (no grad)."""
    with torch.no_grad():
        logits, value = policy(obs)
        action, logprob = sample_actions(logits)
        return ActOutput(action, logprob, policy.value_head.denormalize(value.float()))


def act_and_value(policy: ActorCritic, obs: torch.Tensor, n: int) -> tuple[ActOutput, torch.Tensor]:
    """`act` on the first `n` rows of `obs`, and in the same forward the raw values of the rows
    after them (no grad): one batch of n + k rows instead of a second forward for k rows (the
    rollout values the final states of truncated episodes this way: the env hands both over in
    one tensor, StepResult.policy_obs, so nothing is concatenated here)."""
    with torch.no_grad():
        logits, value = policy(obs)
        action, logprob = sample_actions(logits[:n])
        value = policy.value_head.denormalize(value.float())
        return ActOutput(action, logprob, value[:n]), value[n:]


def evaluate(policy: nn.Module, obs: torch.Tensor, actions: torch.Tensor
             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Log-probs of taken actions, entropy, and values in training units (with grad)."""
    logits, value = policy(obs)
    logp_all = torch.log_softmax(logits.float(), dim=-1)
    logprob = logp_all.gather(-1, actions.unsqueeze(-1)).squeeze(-1)
    entropy = -(logp_all.exp() * logp_all).sum(-1)
    return logprob, entropy, value.float()
