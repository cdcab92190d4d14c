"""A small CNN actor-critic with a shared trunk, and two value heads with one interface.

The update calls `value_head.prepare_targets(...)` and `value_head(features)` whatever the head is:
the plain head passes targets through, PopArt normalises them. No branch on the head's kind
appears in the hot path, so a compiled update sees one straight-line graph.
"""
from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn


class ValueHead(nn.Module):
    """Plain value head: predicts returns directly."""

    def __init__(self, hidden: int):
        super().__init__()
        self.fc = nn.Linear(hidden, 1)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        """The value in training units (normalised for PopArt), shape (batch,)."""
        return self.fc(features).squeeze(-1)

    def denormalize(self, value: torch.Tensor) -> torch.Tensor:
        return value

    def prepare_targets(self, returns: torch.Tensor, old_values: torch.Tensor
                        ) -> tuple[torch.Tensor, torch.Tensor]:
        """Returns and old values (both raw) in training units."""
        return returns, old_values

    @torch.no_grad()
    def update_stats(self, returns: torch.Tensor) -> None:
        """Track return statistics (PopArt only); a no-op here."""


class PopArtValueHead(ValueHead):
    """PopArt: normalised value targets whose running mean/std adapt while outputs are preserved."""

    def __init__(self, hidden: int, beta: float = 3e-4):
        super().__init__(hidden)
        self.beta = beta
        self.register_buffer("mu", torch.zeros(()))
        self.register_buffer("nu", torch.ones(()))

    def _sigma(self, mu: torch.Tensor, nu: torch.Tensor) -> torch.Tensor:
        return (nu - mu * mu).clamp(min=1e-4).sqrt()

    def denormalize(self, value: torch.Tensor) -> torch.Tensor:
        return value * self._sigma(self.mu, self.nu) + self.mu

    def prepare_targets(self, returns, old_values):
        sigma = self._sigma(self.mu, self.nu)
        return (returns - self.mu) / sigma, (old_values - self.mu) / sigma

    @torch.no_grad()
    def update_stats(self, returns: torch.Tensor) -> None:
        returns = returns.float()
        mu = (1 - self.beta) * self.mu + self.beta * returns.mean()
        nu = (1 - self.beta) * self.nu + self.beta * (returns * returns).mean()
        old_sigma, new_sigma = self._sigma(self.mu, self.nu), self._sigma(mu, nu)
        # Preserve unnormalised outputs: W' = W s/s', b' = (s b + m - m') / s'.
        self.fc.weight.mul_(old_sigma / new_sigma)
        self.fc.bias.mul_(old_sigma).add_(self.mu - mu).div_(new_sigma)
        self.mu.copy_(mu)
        self.nu.copy_(nu)


class ActOutput(NamedTuple):
    action: torch.Tensor     # (n,) int64
    logprob: torch.Tensor    # (n,) float32
    value: torch.Tensor      # (n,) float32, raw (denormalised)


class ActorCritic(nn.Module):
    def __init__(self, obs_shape: tuple[int, int, int], n_actions: int, channels: int = 16,
                 hidden: int = 128, value_head: str = "plain", popart_beta: float = 3e-4):
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


def evaluate(policy: nn.Module, obs: torch.Tensor, actions: torch.Tensor
             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Log-probs of taken actions, entropy, and values in training units (with grad)."""
    logits, value = policy(obs)
    logp_all = torch.log_softmax(logits.float(), dim=-1)
    logprob = logp_all.gather(-1, actions.unsqueeze(-1)).squeeze(-1)
    entropy = -(logp_all.exp() * logp_all).sum(-1)
    return logprob, entropy, value.float()
