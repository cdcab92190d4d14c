"""Where a rollout's steps go: the trainer's current env state and policy input, moved on after
each step, and the rollout buffer, filled from the kept steps once per rollout (default) or a
step at a time into tensors that never move (static storage, what CUDA graph replays need).

`RolloutStorage` is mixed into `train.Trainer`; it uses the trainer's `buf`, `state`,
`policy_obs`, `final_rows`, `n_envs`, `static`, `cfg` and `device`."""
from __future__ import annotations

import torch

from .env import GoodhartGridWorld, StepResult
from .policy import ActOutput


class RolloutStorage:
    """The rollout's per-step storage of one Trainer (see the module docstring)."""

    @property
    def obs(self) -> torch.Tensor:
        """The n envs' current observations (a view of `policy_obs`)."""
        return self.policy_obs[:self.n_envs]

    @obs.setter
    def obs(self, value: torch.Tensor) -> None:
        if self.static:
            self.policy_obs[:self.n_envs].copy_(value)
        else:
            self.policy_obs = torch.cat((value, self.final_obs))

    @property
    def final_obs(self) -> torch.Tensor:
        """The final observations of the last step's `final_rows` (a view of `policy_obs`)."""
        return self.policy_obs[self.n_envs:]

    def store_step(self, t: int, out: ActOutput, res: StepResult, final_values: torch.Tensor) -> None:
        """Keep step t of the rollout (the observation the policy acted on) and step t-1's final
        values (`final_values`: this step's forward valued them) for `finish_rollout`, and move
        on to the step's new state and observations (`policy_obs`: the next forward's input).

        Nothing is copied per step: the buffer is filled once per rollout (a stack per field),
        since every per-step copy is a few more ops for the profiler and, on a GPU, launches.
        With static storage (`--cudagraphs`) `_store_step_now` runs instead."""
        if t == 0:
            self._steps, self._final = [], []
        else:
            self._final.append((self.final_rows, final_values))
        self._steps.append((self.obs, out.action, out.logprob, out.value, res.proxy_reward,
                            res.true_reward, res.terminated, res.truncated))
        self.take_step(res)

    def take_step(self, res: StepResult) -> None:
        """Move on to a step's new state, policy input and truncation rows: the step's own
        tensors, or with static storage copies into the trainer's (fixed addresses: under CUDA
        graph trees a replay overwrites the previous replay's outputs)."""
        if self.static:
            for mine, new in zip(self.state, res.state):
                mine.copy_(new)
            self.policy_obs.copy_(res.policy_obs)
            self.final_rows.copy_(res.final_rows)
        else:
            self.state, self.policy_obs, self.final_rows = res.state, res.policy_obs, res.final_rows

    def finish_rollout(self, final_values: torch.Tensor) -> None:
        """Fill the buffer from the kept steps; `final_values` values the last step's final
        observations (the last-value forward did)."""
        buf, steps = self.buf, self._steps
        self._final.append((self.final_rows, final_values))
        fields = (buf.obs, buf.actions, buf.logprobs, buf.values, buf.rewards, buf.true_rewards,
                  buf.terminated, buf.truncated)
        for i, store in enumerate(fields):
            torch.stack([step[i] for step in steps], out=store)
        # V(final state) of each step's valued rows, scattered into (T, n) at once.
        rows, values = zip(*self._final)
        offsets = torch.arange(0, len(rows) * self.cfg.n_envs, self.cfg.n_envs, device=self.device)
        flat_rows = (torch.stack(rows) + offsets.view(-1, 1)).view(-1)
        buf.final_values.view(-1).index_copy_(0, flat_rows, torch.stack(values).view(-1))
        self._steps, self._final = [], []

    def _store_step_now(self, t: int, out: ActOutput, res: StepResult, final_values: torch.Tensor
                        ) -> None:
        """store_step for static storage: step t goes into the buffer at once, and the new
        state, observations and rows are copied into the trainer's own tensors (fixed
        addresses). Under CUDA graph trees a replay overwrites the previous replay's outputs,
        so nothing a step returned may be kept until the next step."""
        buf = self.buf
        if t > 0:
            buf.final_values[t - 1].index_copy_(0, self.final_rows, final_values)
        for store, value in ((buf.obs, self.obs), (buf.actions, out.action),
                             (buf.logprobs, out.logprob), (buf.values, out.value),
                             (buf.rewards, res.proxy_reward), (buf.true_rewards, res.true_reward),
                             (buf.terminated, res.terminated), (buf.truncated, res.truncated)):
            store[t].copy_(value)
        self.take_step(res)

    def _finish_rollout_now(self, final_values: torch.Tensor) -> None:
        self.buf.final_values[-1].index_copy_(0, self.final_rows, final_values)

    def _drain_stats(self) -> torch.Tensor:
        """The finished-episode totals, zeroed in the state (in place with static storage)."""
        if self.static:
            episode = self.state.stats.clone()
            self.state.stats.zero_()
            return episode
        self.state, episode = GoodhartGridWorld.drain_stats(self.state)
        return episode
