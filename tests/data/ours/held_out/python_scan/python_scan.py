"""A REINFORCE-style update whose discounted returns and per-sample advantage weights are computed
by a Python loop over the tensor's elements (the way the maths is written on paper:
`returns[t] = rewards[t] + gamma * returns[t + 1]`, then a per-element clamp-and-scale loop),
hundreds of one-element ops per update; the loss is not logged. torch's default threads.
Instrumented with goodhart_prof.capture.hooks in full mode:

    PROF_ENABLED=1 PROF_MODE=full PROF_ITERATIONS=2-4 PROF_OUTPUT_DIR=OUT python python_scan.py
"""
import torch
import torch.nn as nn

from goodhart_prof.capture.hooks import ProfSettings, make_hooks

torch.manual_seed(0)
T, gamma = 128, 0.99
policy = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 4))
opt = torch.optim.Adam(policy.parameters(), lr=3e-4)


def discounted_returns(rewards, dones):
    returns = torch.zeros_like(rewards)
    running = torch.zeros(())
    for t in reversed(range(len(rewards))):
        running = rewards[t] + gamma * running * (1.0 - dones[t])
        returns[t] = running
    return returns


def weights_of(adv):
    w = torch.empty_like(adv)
    for t in range(len(adv)):
        w[t] = torch.clamp(adv[t], -2.0, 2.0) * 0.5
    return w


hooks = make_hooks(ProfSettings.from_env(), rank=0, device_type="cpu")
for it in range(6):
    with hooks.iteration(it):
        with hooks.phase("rollout"):
            obs = torch.randn(T, 8)
            with torch.no_grad():
                actions = torch.distributions.Categorical(logits=policy(obs), validate_args=False).sample()
            rewards = torch.rand(T)
            dones = (torch.rand(T) < 0.05).float()
        with hooks.phase("gae"):
            returns = discounted_returns(rewards, dones)
            adv = (returns - returns.mean()) / (returns.std() + 1e-8)
            w = weights_of(adv)
        with hooks.phase("ppo_update"):
            logp = torch.log_softmax(policy(obs), -1).gather(1, actions[:, None]).squeeze(1)
            loss = -(logp * w).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
hooks.close()
