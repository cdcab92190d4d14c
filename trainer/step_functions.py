"""The functions one training iteration calls, built once per Trainer: the rollout forward
(`act_all`), the env step with the planted rollout patterns around it, GAE, the minibatch loss
and the gradient clip; torch.compile'd, and wrapped for CUDA graph trees, where the config says so.
Also what CUDA graphs need of the trainer: the config check and the static addresses."""
from __future__ import annotations

from functools import partial
from typing import Callable, NamedTuple

import torch

from . import antipatterns
from .config import ConfigError
from .policy import act_and_value
from .ppo import clip_grad_norm_no_sync, compute_gae, ppo_loss


class StepFunctions(NamedTuple):
    act_all: Callable
    loss_fn: Callable
    gae_fn: Callable
    env_step: Callable
    clip_grads: Callable


def build_step_functions(trainer) -> StepFunctions:
    """The trainer's step functions (its policy, model, env, buffer and injected patterns)."""
    cfg, n = trainer.cfg, trainer.n_envs

    def act_all(policy_obs):
        with trainer.autocast():
            return act_and_value(trainer.policy, policy_obs, n)

    def loss_fn(mb):
        with trainer.autocast():
            return ppo_loss(trainer.model, trainer.policy.value_head, mb, cfg.clip_coef,
                            cfg.vf_coef, cfg.ent_coef)

    gae_fn: Callable = partial(compute_gae, gamma=cfg.gamma, lam=cfg.gae_lambda)
    env_step = trainer.env.step
    if "graph_break" in trainer.inject:  # inside the compiled step: its rule needs it compiled
        env_step = antipatterns.graph_break_step(env_step)
    if trainer.compiled:
        # CUDA graph trees for the per-step functions and the minibatch step; GAE runs once
        # per iteration and its outputs live through the whole update, so it stays a plain
        # compiled graph (a replay of another graph must not overwrite them).
        graphs = {"mode": "reduce-overhead"} if trainer.cudagraphs else {}
        act_all, env_step = torch.compile(act_all, **graphs), torch.compile(env_step, **graphs)
        gae_fn = torch.compile(gae_fn)
        if "eager_update" not in trainer.inject:
            loss_fn = torch.compile(loss_fn, **graphs)
    if trainer.cudagraphs:
        act_all, loss_fn = step_begin(act_all), step_begin(loss_fn)
    if "memory_growth" in trainer.inject:
        gae_fn = antipatterns.value_loss_history_gae(gae_fn, trainer.policy, trainer.buf.obs,
                                                     trainer.loss_history, trainer.autocast)
    clip_grads = (antipatterns.clip_grad_norm_with_readback if "sync_grad_clip" in trainer.inject
                  else clip_grad_norm_no_sync)
    return StepFunctions(act_all, loss_fn, gae_fn, planted_env_step(trainer, env_step), clip_grads)


def planted_env_step(trainer, env_step: Callable) -> Callable:
    """The env step with the injected rollout patterns wrapped around it (outside compile)."""
    if "item_logging" in trainer.inject:
        env_step = antipatterns.item_logging_step(env_step, trainer.reward_log)
    if "cpu_alloc" in trainer.inject:
        env_step = antipatterns.cpu_alloc_step(env_step, trainer.cfg.n_envs, trainer.device)
    if "pageable_htod" in trainer.inject:
        env_step = host_obs_to_policy(antipatterns.pageable_htod_step(env_step, trainer.env))
    return env_step


def check_cudagraphs(cuda: bool, compiled: bool, world_size: int) -> None:
    """CUDA graphs need a CUDA device, torch.compile and one rank (ConfigError otherwise)."""
    if not cuda:
        raise ConfigError("cudagraphs needs a CUDA device")
    if not compiled:
        raise ConfigError("cudagraphs needs torch.compile (compile is off)")
    if world_size > 1:
        raise ConfigError("cudagraphs runs on one rank only (DDP's all-reduce is not captured)")


def mark_static(trainer) -> None:
    """Tensors a CUDA graph reads at a fixed address: the layout bank (tens of MB, else
    copied into a static input at every replay), the env's constants, and the trainer-owned
    state and observations the rollout writes in place."""
    env = trainer.env
    kept = [env.bank_flat, env.bank_cell, env.interior_flat, env.flat_deltas,
            env.view_flat, env.channel_types, env.ones, *trainer.state, trainer.policy_obs]
    for x in kept:
        torch._dynamo.mark_static_address(x)


def step_begin(fn: Callable) -> Callable:
    """`fn` after torch.compiler.cudagraph_mark_step_begin(): a new generation of CUDA graph
    trees begins, so the replay may reuse the memory of the previous replays' outputs (the
    trainer has copied out all it keeps by then)."""
    mark = torch.compiler.cudagraph_mark_step_begin

    def begin_then(*args):
        mark()
        return fn(*args)
    return begin_then


def host_obs_to_policy(step: Callable) -> Callable:
    """The pageable_htod pattern replaces `obs` with its host-built copy: the policy input
    (`policy_obs`) is rebuilt from it, so the policy acts on what the planted code made."""
    def step_with_host_obs(state, actions):
        res = step(state, actions)
        return res._replace(policy_obs=torch.cat((res.obs, res.final_obs)))
    return step_with_host_obs
