"""A DQN written the way Stable-Baselines3 structures it: a numpy vectorised env, a numpy replay
buffer, `collect_rollouts` then `train` (train_freq=4 env steps, gradient_steps=1), numpy <-> torch
conversions every env step (`th.as_tensor(obs, device=...)` in, `actions.cpu().numpy()` out),
the sampled batch moved with `th.tensor(array, device=...)`, epsilon-greedy exploration, a
soft target update (`polyak_update`, tau=0.005, every env step), Huber loss, `clip_grad_norm_`,
`losses.append(loss.item())` logged as a numpy mean. One profiled iteration = one
collect_rollouts + train cycle. Instrumented with goodhart_prof.capture.hooks in full mode:

    PROF_ENABLED=1 PROF_MODE=full PROF_ITERATIONS=3-5 PROF_OUTPUT_DIR=OUT python sb3_dqn.py
"""
import numpy as np
import torch as th
import torch.nn as nn
import torch.nn.functional as F

from goodhart_prof.capture.hooks import ProfSettings, make_hooks


class VecCartPole:
    """n CartPoles stepped together in numpy (gym's physics), auto-reset."""

    def __init__(self, n, seed=0):
        self.n, self.rng = n, np.random.default_rng(seed)
        self.state = self.rng.uniform(-0.05, 0.05, (n, 4))

    def reset(self):
        self.state = self.rng.uniform(-0.05, 0.05, (self.n, 4))
        return self.state.astype(np.float32)

    def step(self, actions):
        x, x_dot, theta, theta_dot = self.state.T
        force = np.where(actions == 1, 10.0, -10.0)
        cos, sin = np.cos(theta), np.sin(theta)
        temp = (force + 0.05 * theta_dot ** 2 * sin) / 1.1
        theta_acc = (9.8 * sin - cos * temp) / (0.5 * (4.0 / 3.0 - 0.1 * cos ** 2 / 1.1))
        x_acc = temp - 0.05 * theta_acc * cos / 1.1
        self.state = np.stack([x + 0.02 * x_dot, x_dot + 0.02 * x_acc,
                               theta + 0.02 * theta_dot, theta_dot + 0.02 * theta_acc], axis=1)
        dones = (np.abs(self.state[:, 0]) > 2.4) | (np.abs(self.state[:, 2]) > 0.2095)
        self.state[dones] = self.rng.uniform(-0.05, 0.05, (int(dones.sum()), 4))
        return self.state.astype(np.float32), np.ones(self.n, dtype=np.float32), dones


class ReplayBuffer:
    def __init__(self, size, n_envs, device):
        self.obs = np.zeros((size, n_envs, 4), dtype=np.float32)
        self.next_obs = np.zeros((size, n_envs, 4), dtype=np.float32)
        self.actions = np.zeros((size, n_envs, 1), dtype=np.int64)
        self.rewards = np.zeros((size, n_envs), dtype=np.float32)
        self.dones = np.zeros((size, n_envs), dtype=np.float32)
        self.size, self.n_envs, self.device, self.pos, self.full = size, n_envs, device, 0, False

    def add(self, obs, next_obs, action, reward, done):
        self.obs[self.pos], self.next_obs[self.pos] = obs, next_obs
        self.actions[self.pos] = action.reshape(self.n_envs, 1)
        self.rewards[self.pos], self.dones[self.pos] = reward, done
        self.pos += 1
        if self.pos == self.size:
            self.full, self.pos = True, 0

    def to_torch(self, array):
        return th.tensor(array, device=self.device)

    def sample(self, batch_size):
        upper = self.size if self.full else self.pos
        idx = np.random.randint(0, upper, size=batch_size)
        env = np.random.randint(0, self.n_envs, size=batch_size)
        data = (self.obs[idx, env], self.actions[idx, env], self.next_obs[idx, env],
                self.dones[idx, env].reshape(-1, 1), self.rewards[idx, env].reshape(-1, 1))
        return tuple(map(self.to_torch, data))


def polyak_update(params, target_params, tau):
    with th.no_grad():
        for param, target_param in zip(params, target_params):
            target_param.data.mul_(1 - tau)
            th.add(target_param.data, param.data, alpha=tau, out=target_param.data)


class DQN:
    def __init__(self, env, device="cpu", batch_size=32, gamma=0.99, tau=0.005, train_freq=4,
                 gradient_steps=1, learning_starts=64):
        self.env, self.device = env, device
        self.q_net = nn.Sequential(nn.Linear(4, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 2))
        self.q_net_target = nn.Sequential(nn.Linear(4, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 2))
        self.q_net_target.load_state_dict(self.q_net.state_dict())
        self.optimizer = th.optim.Adam(self.q_net.parameters(), lr=1e-3)
        self.buffer = ReplayBuffer(2048, env.n, device)
        self.batch_size, self.gamma, self.tau = batch_size, gamma, tau
        self.train_freq, self.gradient_steps, self.learning_starts = train_freq, gradient_steps, learning_starts
        self.num_timesteps, self.exploration_rate = 0, 1.0
        self._last_obs = env.reset()
        self.log = {}

    def predict(self, obs):
        if np.random.rand() < self.exploration_rate:
            return np.random.randint(0, 2, size=self.env.n)
        with th.no_grad():
            obs_tensor = th.as_tensor(obs, device=self.device)
            q_values = self.q_net(obs_tensor)
            actions = q_values.argmax(dim=1).reshape(-1)
        return actions.cpu().numpy()

    def collect_rollouts(self, hooks):
        for _ in range(self.train_freq):
            with hooks.phase("policy_act"):
                actions = self.predict(self._last_obs)
            with hooks.phase("env_step"):
                new_obs, rewards, dones = self.env.step(actions)
            with hooks.phase("store"):
                self.buffer.add(self._last_obs, new_obs, actions, rewards, dones)
            self._last_obs = new_obs
            self.num_timesteps += self.env.n
            self.exploration_rate = max(0.05, 1.0 - self.num_timesteps / 100)
            polyak_update(self.q_net.parameters(), self.q_net_target.parameters(), self.tau)

    def train(self, hooks):
        losses = []
        for _ in range(self.gradient_steps):
            with hooks.phase("minibatch"):
                obs, actions, next_obs, dones, rewards = self.buffer.sample(self.batch_size)
                with th.no_grad():
                    next_q_values = self.q_net_target(next_obs)
                    next_q_values, _ = next_q_values.max(dim=1)
                    next_q_values = next_q_values.reshape(-1, 1)
                    target_q_values = rewards + (1 - dones) * self.gamma * next_q_values
                current_q_values = self.q_net(obs)
                current_q_values = th.gather(current_q_values, dim=1, index=actions.long())
                loss = F.smooth_l1_loss(current_q_values, target_q_values)
                losses.append(loss.item())
            with hooks.phase("optimizer_step"):
                self.optimizer.zero_grad()
                loss.backward()
                th.nn.utils.clip_grad_norm_(self.q_net.parameters(), 10)
                self.optimizer.step()
        with hooks.phase("logging"):
            self.log["train/loss"] = np.mean(losses)
            self.log["rollout/exploration_rate"] = self.exploration_rate

    def learn(self, iterations, hooks):
        for it in range(iterations):
            with hooks.iteration(it):
                with hooks.phase("rollout"):
                    self.collect_rollouts(hooks)
                if self.num_timesteps >= self.learning_starts:
                    self.train(hooks)


th.manual_seed(0)
np.random.seed(0)
hooks = make_hooks(ProfSettings.from_env(), rank=0, device_type="cpu")
model = DQN(VecCartPole(8))
model.learn(7, hooks)
hooks.close()
print(model.log)
