"""CleanRL's ppo.py as users write it (one script, module-level loop), on a CartPole written in
numpy (the physics of gymnasium's CartPole-v1), 4 envs, instrumented with goodhart_prof.capture.hooks as
docs/trainer.md says. Threads: `--threads N` calls torch.set_num_threads(N) (CleanRL leaves torch's
default, one per core).

    PROF_ENABLED=1 PROF_MODE=full PROF_ITERATIONS=2-3 PROF_OUTPUT_DIR=OUT \
        python ppo_cleanrl.py --threads 2 --iterations 4
"""
import argparse
import math

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
from torch.distributions.categorical import Categorical

from goodhart_prof.capture.hooks import ProfSettings, make_hooks

p = argparse.ArgumentParser()
p.add_argument("--threads", type=int, default=0)
p.add_argument("--iterations", type=int, default=4)
p.add_argument("--num-envs", type=int, default=4)
p.add_argument("--num-steps", type=int, default=32)
p.add_argument("--epochs", type=int, default=2)
p.add_argument("--minibatches", type=int, default=4)
args = p.parse_args()
if args.threads:
    torch.set_num_threads(args.threads)


class CartPole:
    """gymnasium CartPole-v1's dynamics, vectorised over n envs, auto-reset."""

    def __init__(self, n, seed=1):
        self.n, self.rng = n, np.random.default_rng(seed)
        self.state = self.rng.uniform(-0.05, 0.05, (n, 4))
        self.t = np.zeros(n, int)

    def step(self, action):
        x, x_dot, th, th_dot = self.state.T
        force = np.where(action == 1, 10.0, -10.0)
        cos, sin = np.cos(th), np.sin(th)
        temp = (force + 0.05 * th_dot ** 2 * sin) / 1.1
        th_acc = (9.8 * sin - cos * temp) / (0.5 * (4.0 / 3.0 - 0.1 * cos ** 2 / 1.1))
        x_acc = temp - 0.05 * th_acc * cos / 1.1
        self.state = np.stack([x + 0.02 * x_dot, x_dot + 0.02 * x_acc, th + 0.02 * th_dot,
                               th_dot + 0.02 * th_acc], 1)
        self.t += 1
        term = (np.abs(self.state[:, 0]) > 2.4) | (np.abs(self.state[:, 2]) > 12 * 2 * math.pi / 360)
        trunc = self.t >= 500
        done = term | trunc
        self.state[done] = self.rng.uniform(-0.05, 0.05, (int(done.sum()), 4))
        self.t[done] = 0
        return self.state.copy(), np.ones(self.n), term, trunc


def layer_init(layer, std=np.sqrt(2), bias_const=0.0):
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


class Agent(nn.Module):
    def __init__(self):
        super().__init__()
        self.critic = nn.Sequential(layer_init(nn.Linear(4, 64)), nn.Tanh(),
                                    layer_init(nn.Linear(64, 64)), nn.Tanh(),
                                    layer_init(nn.Linear(64, 1), std=1.0))
        self.actor = nn.Sequential(layer_init(nn.Linear(4, 64)), nn.Tanh(),
                                   layer_init(nn.Linear(64, 64)), nn.Tanh(),
                                   layer_init(nn.Linear(64, 2), std=0.01))

    def get_value(self, x):
        return self.critic(x)

    def get_action_and_value(self, x, action=None):
        logits = self.actor(x)
        probs = Categorical(logits=logits)
        if action is None:
            action = probs.sample()
        return action, probs.log_prob(action), probs.entropy(), self.critic(x)


torch.manual_seed(1)
device = torch.device("cpu")
envs = CartPole(args.num_envs)
agent = Agent().to(device)
optimizer = optim.Adam(agent.parameters(), lr=2.5e-4, eps=1e-5)
batch_size = args.num_envs * args.num_steps
minibatch_size = batch_size // args.minibatches

obs = torch.zeros((args.num_steps, args.num_envs, 4)).to(device)
actions = torch.zeros((args.num_steps, args.num_envs)).to(device)
logprobs = torch.zeros((args.num_steps, args.num_envs)).to(device)
rewards = torch.zeros((args.num_steps, args.num_envs)).to(device)
dones = torch.zeros((args.num_steps, args.num_envs)).to(device)
values = torch.zeros((args.num_steps, args.num_envs)).to(device)

next_obs = torch.Tensor(envs.state.copy()).to(device)
next_done = torch.zeros(args.num_envs).to(device)
hooks = make_hooks(ProfSettings.from_env(), rank=0, device_type="cpu")
for iteration in range(args.iterations):
    with hooks.iteration(iteration):
        with hooks.phase("rollout"):
            for step in range(0, args.num_steps):
                obs[step] = next_obs
                dones[step] = next_done
                with torch.no_grad():
                    action, logprob, _, value = agent.get_action_and_value(next_obs)
                    values[step] = value.flatten()
                actions[step] = action
                logprobs[step] = logprob
                next_obs, reward, terminations, truncations = envs.step(action.cpu().numpy())
                next_done = np.logical_or(terminations, truncations)
                rewards[step] = torch.tensor(reward).to(device).view(-1)
                next_obs, next_done = torch.Tensor(next_obs).to(device), torch.Tensor(next_done).to(device)
        with hooks.phase("gae"):
            with torch.no_grad():
                next_value = agent.get_value(next_obs).reshape(1, -1)
                advantages = torch.zeros_like(rewards).to(device)
                lastgaelam = 0
                for t in reversed(range(args.num_steps)):
                    if t == args.num_steps - 1:
                        nextnonterminal = 1.0 - next_done
                        nextvalues = next_value
                    else:
                        nextnonterminal = 1.0 - dones[t + 1]
                        nextvalues = values[t + 1]
                    delta = rewards[t] + 0.99 * nextvalues * nextnonterminal - values[t]
                    advantages[t] = lastgaelam = delta + 0.99 * 0.95 * nextnonterminal * lastgaelam
                returns = advantages + values
        with hooks.phase("ppo_update"):
            b_obs = obs.reshape((-1, 4))
            b_logprobs = logprobs.reshape(-1)
            b_actions = actions.reshape(-1)
            b_advantages = advantages.reshape(-1)
            b_returns = returns.reshape(-1)
            b_inds = np.arange(batch_size)
            clipfracs = []
            for epoch in range(args.epochs):
                np.random.shuffle(b_inds)
                for start in range(0, batch_size, minibatch_size):
                    mb_inds = b_inds[start:start + minibatch_size]
                    _, newlogprob, entropy, newvalue = agent.get_action_and_value(
                        b_obs[mb_inds], b_actions.long()[mb_inds])
                    logratio = newlogprob - b_logprobs[mb_inds]
                    ratio = logratio.exp()
                    with torch.no_grad():
                        approx_kl = ((ratio - 1) - logratio).mean()
                        clipfracs += [((ratio - 1.0).abs() > 0.2).float().mean().item()]
                    mb_advantages = b_advantages[mb_inds]
                    mb_advantages = (mb_advantages - mb_advantages.mean()) / (mb_advantages.std() + 1e-8)
                    pg_loss = torch.max(-mb_advantages * ratio,
                                        -mb_advantages * torch.clamp(ratio, 0.8, 1.2)).mean()
                    v_loss = 0.5 * ((newvalue.view(-1) - b_returns[mb_inds]) ** 2).mean()
                    loss = pg_loss - 0.01 * entropy.mean() + v_loss * 0.5
                    optimizer.zero_grad()
                    loss.backward()
                    nn.utils.clip_grad_norm_(agent.parameters(), 0.5)
                    optimizer.step()
        with hooks.phase("logging"):
            print(f"iteration {iteration} loss {loss.item():.4f} kl {approx_kl.item():.4f} "
                  f"clipfrac {np.mean(clipfracs):.3f}")
hooks.close()
