"""A training loop with helper functions, instrumented as docs/trainer.md says.

Planted host reads, each on its own line (tests/test_line_sites.py names the lines): two reads in
one helper (`stats`), a read inside a for loop among others of its kind (`log_each`, whose line the
trace cannot tell), and reads in the loop's own function (`train`).
Run: PROF_ENABLED=1 PROF_MODE=full PROF_ITERATIONS=2-3 PROF_OUTPUT_DIR=out python helper_loop.py
"""
import numpy as np
import torch

from goodhart_prof.capture.hooks import ProfSettings, make_hooks


def collect(model, it):
    obs = torch.randn(32, 8)
    reward_np = np.random.default_rng(it).random(32).astype(np.float32)
    rewards = torch.as_tensor(reward_np)
    return obs, rewards


def stats(values):
    mean = values.mean().item()
    top = values.max().item()
    return mean, top


def log_each(values):
    out = []
    for v in values[:3]:
        out.append(v.item())
    out.append(values.sum().item())
    return out


def update(model, opt, obs, rewards):
    loss = (model(obs).logsumexp(dim=1) - rewards).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    if bool(loss > 100):
        print("diverging")
    return loss


def train(total=4):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    hooks = make_hooks(ProfSettings.from_env(), rank=0, device_type="cpu")
    for it in range(total):
        with hooks.iteration(it):
            with hooks.phase("rollout"):
                obs, rewards = collect(model, it)
                best = (rewards > 0.5).nonzero()
            with hooks.phase("ppo_update"):
                loss = update(model, opt, obs, rewards)
            with hooks.phase("logging"):
                mean, top = stats(rewards)
                logged = log_each(rewards)
                print(loss.detach())
    hooks.close()
    return best, mean, top, logged


if __name__ == "__main__":
    train()
