"""The anti-pattern zoo: known slowdowns, planted in our own trainer behind `--inject NAME[,NAME...]`.

Each pattern is real code doing what its description says, taken from the experience reports the
project grew from. Its name is also the `rule` id of the finding in `goodhart_prof.analysis.rules`
that must detect it, so `goodhart-prof run --inject X` followed by `goodhart-prof analyze` checks the
analyzer end to end (`scripts/bench_zoo.py` does that for the whole zoo).

The zoo's catalogue (names, what each plants, `parse`, `config_overrides`) is zoo.py, which the
configuration reads without loading torch; this module holds the planted code.

The clean trainer pays nothing for the zoo: the Trainer looks the injected names up once, at
construction, and swaps in the planted functions below (a wrapped env step, a checked policy, a
different clip function, ...). No per-step `if` on the injected set exists on the hot path.

`cuda_only` patterns cost something (and can be detected) only on a CUDA device: on the CPU, fused
Adam, bf16 autocast and torch.compile are not what makes the loop fast or slow (`amp` and `compile`
are already off there by default), so the planted change is a no-op or nearly so.
"""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np
import torch

from .env import OBS_CHANNELS, GoodhartGridWorld, StepResult
from .policy import ActorCritic, ValueHead


# -- env step wrappers (the rollout's hot path) -----------------------------------------------------
StepFn = Callable[..., StepResult]


def item_logging_step(step: StepFn, log: list[float]) -> StepFn:
    def step_and_log(state, actions):
        res = step(state, actions)
        log.append(res.proxy_reward.mean().item())  # a host read-back every env step
        return res
    return step_and_log


def graph_break_step(step: StepFn) -> StepFn:
    """Compiled with the env step: a graph break before the step (what a print, a logger call or
    another untraceable call does), so each call runs a first graph, eager code, and the step in a
    resume function dynamo compiles as a frame of its own. Reads nothing back."""
    def step_with_break(state, actions):
        actions = actions.clone()  # the first graph
        torch._dynamo.graph_break()
        return step(state, actions)  # resumed: torch_dynamo_resume_in_step_with_break_at_<line>
    return step_with_break


def cpu_alloc_step(step: StepFn, n_envs: int, device: torch.device) -> StepFn:
    def step_with_shaping(state, actions):
        res = step(state, actions)
        shaping = torch.zeros(n_envs).to(device)  # made on the CPU, then moved, every step
        return res._replace(proxy_reward=res.proxy_reward + shaping)
    return step_with_shaping


def pageable_htod_step(step: StepFn, env: GoodhartGridWorld) -> StepFn:
    """Observations built on the host with numpy from the new state, copied to the device."""
    offsets = np.arange(-env.pad, env.pad + 1)
    channels = np.array(OBS_CHANNELS, dtype=np.int8).reshape(1, -1, 1, 1)
    env_idx = np.arange(env.n_envs).reshape(-1, 1, 1)
    np_dtype = np.float32

    def step_host_obs(state, actions):
        res = step(state, actions)
        grid = res.state.grid.cpu().numpy()
        pos = res.state.pos.cpu().numpy()
        rows = pos[:, 0].reshape(-1, 1, 1) + offsets.reshape(1, -1, 1)
        cols = pos[:, 1].reshape(-1, 1, 1) + offsets.reshape(1, 1, -1)
        obs = (grid[env_idx, rows, cols][:, None] == channels).astype(np_dtype)
        # Pageable host memory: the copy cannot be asynchronous and the driver stages it.
        return res._replace(obs=torch.from_numpy(obs).to(env.device, dtype=env.obs_dtype))
    return step_host_obs


# -- policy and update ----------------------------------------------------------------------------
def _locate_nan_rows(name: str, x: torch.Tensor) -> None:
    bad_rows = torch.isnan(x).reshape(len(x), -1).any(dim=1)
    rows = torch.where(bad_rows)[0]  # nonzero: a data-dependent shape, so a host sync
    if len(rows):
        raise FloatingPointError(f"NaN in {name}, rows {rows[:8].tolist()}")


class NanCheckedActorCritic(ActorCritic):
    """The same network, validating its input and outputs on every forward, unconditionally."""

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        _locate_nan_rows("obs", obs)
        features = self.trunk(obs)
        _locate_nan_rows("features", features)
        logits, value = self.actor(features), self.value_head(features)
        _locate_nan_rows("logits", logits)
        return logits, value


def clip_grad_norm_with_readback(params: list[torch.Tensor], max_norm: float) -> torch.Tensor:
    """The classic hand-written clip: per-tensor norms, the total read back, a host-side branch."""
    grads = [p.grad for p in params if p.grad is not None]
    total_norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
    norm = total_norm.item()  # waits for the whole backward pass
    if not math.isfinite(norm):
        raise FloatingPointError(f"gradient norm is {norm}")
    if norm > max_norm:
        for g in grads:
            g.mul_(max_norm / (norm + 1e-6))
    return total_norm


# memory_growth's bound: each iteration values the first VALUED_ROWS rows of the rollout (not the
# whole rollout: at the CUDA preset, 8192 envs x 64 steps, that kept ~23 GB per iteration), and the
# history keeps the last KEPT_LOSSES losses (older ones are dropped, and their graphs freed). 64
# covers the default window (iterations 50-55 of 56, plus the warm-up's loss): allocated memory
# grows every iteration up to iteration KEPT_LOSSES - 2 (one loss per iteration and one from the
# warm-up), then stays flat. Measured with the CUDA preset's network under bf16 autocast
# (tests/trainer/test_antipatterns.py pins it): one kept loss holds 4,446,912 B (its graph's saved activations, the
# bf16 weight copies autocast made for it, the float32 value head's input), so the history holds
# at most 64 x 4,446,912 B = 284,602,368 B (about 285 MB).
VALUED_ROWS = 256
KEPT_LOSSES = 64


def value_loss_history_gae(gae_fn: Callable, policy: ActorCritic, obs: torch.Tensor,
                           history: list[torch.Tensor], autocast: Callable[[], Any]) -> Callable:
    """GAE, then a value loss over the rollout's first VALUED_ROWS rows kept for a later plot: the
    classic leak of logging a loss tensor instead of loss.item() (the graph and its saved
    activations stay). The forward runs under `autocast`, the trainer's (bf16 on CUDA, where the
    observation buffer is bf16 too); `history` keeps the last KEPT_LOSSES losses."""
    def gae_and_keep_loss(*args):
        advantages, returns = gae_fn(*args)
        rows = obs.flatten(0, 1)[:VALUED_ROWS]
        with autocast():
            _, value = policy(rows)  # grad on: the graph holds the forward's activations
        target = returns.flatten()[:len(rows)]
        history.append(((value.float() - target) ** 2).mean())  # kept, never .item()'d
        del history[:-KEPT_LOSSES]
        return advantages, returns
    return gae_and_keep_loss


def make_branchy(head: ValueHead) -> None:
    """Give this value head a prepare_targets that branches on a tensor value in the update."""
    straight = head.prepare_targets

    def prepare_targets(returns: torch.Tensor, old_values: torch.Tensor):
        if returns.std() > 0:  # `if tensor:` -- a host sync, and a graph break under compile
            return straight(returns, old_values)
        return returns - returns.mean(), old_values - returns.mean()
    head.prepare_targets = prepare_targets  # type: ignore[method-assign]


def unfused_adam(params: list[torch.Tensor], lr: float) -> torch.optim.Optimizer:
    """Adam as most code writes it: no fused=True (foreach on CUDA, a loop per tensor on the CPU)."""
    return torch.optim.Adam(params, lr=lr, eps=1e-5)
