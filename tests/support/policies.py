"""A small actor-critic for the trainer's tests: its observation shape and a seeded policy whose
logits are spread a little (the action distribution is not uniform)."""
from __future__ import annotations

import torch

from trainer.policy import ActorCritic

OBS_SHAPE = (3, 5, 5)


def small_policy(value_head: str) -> ActorCritic:
    torch.manual_seed(0)
    policy = ActorCritic(OBS_SHAPE, 5, channels=4, hidden=16, value_head=value_head)
    # Spread the logits a little so the action distribution is not uniform.
    with torch.no_grad():
        policy.actor.weight.normal_(0.0, 0.5)
    return policy
