"""The training loop: rollout on the device, GAE, PPO update, async metrics, hooks, checkpoints."""
from __future__ import annotations

import contextlib
import copy
import os
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Callable

import torch
import torch.distributed as dist

from goodhart_prof.fileio import writing
from goodhart_prof.hooks import NoHooks, ProfSettings, make_hooks

from . import antipatterns
from .config import Config
from .env import N_ACTIONS, EnvState, GoodhartGridWorld, StepResult
from .logger import AsyncLogger
from .policy import ActorCritic, ActOutput, act_and_value
from .ppo import (UPDATE_STAT_NAMES, RolloutBuffer, clip_grad_norm_no_sync, compute_gae, ppo_loss,
                  ppo_update, truncation_rows)

METRIC_NAMES = ("episodes", "proxy_return", "true_return", "episode_length", "proxy_per_step",
                "true_per_step") + UPDATE_STAT_NAMES


def checkpoint_path(output_dir: str | Path, rank: int) -> Path:
    return Path(output_dir) / f"checkpoint-rank{rank}.pt"


@dataclass
class RunResult:
    iterations_run: int
    env_steps: int
    wall_s: float
    env_steps_per_s: float | None
    rows: list[dict[str, Any]] = field(default_factory=list)
    trace_path: Path | None = None
    memory: list[dict[str, Any]] = field(default_factory=list)  # memory_row of each traced iteration


class Trainer:
    """Owns the env, the policy, the optimizer and the rollout storage of one rank."""

    def __init__(self, cfg: Config, hooks=None, rank: int = 0, world_size: int = 1):
        self.cfg, self.rank, self.world_size = cfg, rank, world_size
        self.hooks = hooks or NoHooks()
        self.device = torch.device(cfg.device)
        cuda = self.device.type == "cuda"
        self.amp = cfg.amp == "on" or (cfg.amp == "auto" and cuda)
        self.compiled = cfg.compile == "on" or (cfg.compile == "auto" and cuda)
        # Planted anti-patterns (empty for a clean run): looked up here, once, never per step.
        self.inject = antipatterns.parse(cfg.inject)
        self.reward_log: list[float] = []  # filled by the item_logging pattern only
        self.loss_history: list[torch.Tensor] = []  # filled by the memory_growth pattern only
        torch.manual_seed(cfg.seed + rank)
        if cuda:
            torch.set_float32_matmul_precision("high")
            torch.backends.cudnn.benchmark = True
        obs_dtype = torch.bfloat16 if (self.amp and cuda) else torch.float32
        self.env = GoodhartGridWorld.from_config(cfg, self.device, obs_dtype)
        self.state, self.obs = self.env.reset()
        policy_cls = antipatterns.NanCheckedActorCritic if "nan_checks" in self.inject else ActorCritic
        self.policy = policy_cls(self.env.obs_shape, N_ACTIONS, cfg.channels, cfg.hidden,
                                 cfg.value_head, cfg.popart_beta).to(self.device)
        if "branchy_value_head" in self.inject:
            antipatterns.make_branchy(self.policy.value_head)
        self.model: torch.nn.Module = self.policy
        if world_size > 1:
            self.model = torch.nn.parallel.DistributedDataParallel(self.policy)
        self.params = list(self.policy.parameters())
        self.optimizer = self._make_optimizer()
        self.buf = RolloutBuffer.allocate(cfg.rollout_steps, cfg.n_envs, self.env.obs_shape,
                                          obs_dtype, self.device)
        # The final observations of the last step's truncated envs (and a few more rows: a fixed
        # shape), valued by the next policy forward; at a rollout's start they are already valued.
        self.max_truncated = min(self.env.max_truncations_per_step, cfg.n_envs)
        self.final_rows = torch.arange(self.max_truncated, device=self.device)
        self.final_obs = torch.zeros((self.max_truncated, *self.env.obs_shape), dtype=obs_dtype,
                                     device=self.device)
        self._steps: list[tuple] = []   # the rollout's steps until finish_rollout stores them
        self._final: list[tuple] = []   # (rows, final values) of each step, in step order
        self._build_step_functions()
        self.iteration = 0  # next iteration to run

    # -- construction ----------------------------------------------------------------------------
    def _make_optimizer(self) -> torch.optim.Optimizer:
        if "unfused_adam" in self.inject:
            return antipatterns.unfused_adam(self.params, self.cfg.lr)
        # Fused Adam: one kernel per step for all parameters (the foreach path records ~280 ops
        # per step, a tenth of an iteration's ops on the CPU preset, and reads each step count
        # back with .item()). On CUDA a tensor lr never needs a host read.
        lr = torch.tensor(self.cfg.lr, device=self.device) if self.device.type == "cuda" else self.cfg.lr
        return torch.optim.Adam(self.params, lr=lr, eps=1e-5, fused=True)

    def _autocast(self):
        return torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.amp)

    def _build_step_functions(self) -> None:
        cfg = self.cfg

        def act_fn(obs, final_obs):
            with self._autocast():
                return act_and_value(self.policy, obs, final_obs)

        def loss_fn(mb):
            with self._autocast():
                return ppo_loss(self.model, self.policy.value_head, mb, cfg.clip_coef,
                                cfg.vf_coef, cfg.ent_coef)

        gae_fn: Callable = partial(compute_gae, gamma=cfg.gamma, lam=cfg.gae_lambda)
        env_step = self.env.step
        if self.compiled:
            act_fn, gae_fn, env_step = torch.compile(act_fn), torch.compile(gae_fn), torch.compile(env_step)
            if "eager_update" not in self.inject:
                loss_fn = torch.compile(loss_fn)
        if "memory_growth" in self.inject:
            gae_fn = antipatterns.value_loss_history_gae(gae_fn, self.policy, self.buf.obs,
                                                         self.loss_history, self._autocast)
        self.act_fn, self.loss_fn, self.gae_fn = act_fn, loss_fn, gae_fn
        self.env_step = self._planted_env_step(env_step)
        self.clip_grads = (antipatterns.clip_grad_norm_with_readback if "sync_grad_clip" in self.inject
                           else clip_grad_norm_no_sync)

    def _planted_env_step(self, env_step: Callable) -> Callable:
        """The env step with the injected rollout patterns wrapped around it (outside compile)."""
        if "item_logging" in self.inject:
            env_step = antipatterns.item_logging_step(env_step, self.reward_log)
        if "cpu_alloc" in self.inject:
            env_step = antipatterns.cpu_alloc_step(env_step, self.cfg.n_envs, self.device)
        if "pageable_htod" in self.inject:
            env_step = antipatterns.pageable_htod_step(env_step, self.env)
        return env_step

    # -- one iteration ---------------------------------------------------------------------------
    def run_iteration(self, it: int, logger: AsyncLogger | None) -> None:
        cfg, buf, phase = self.cfg, self.buf, self.hooks.phase
        with self.hooks.iteration(it):
            with phase("rollout"):
                for t in range(cfg.rollout_steps):
                    with phase("policy_act"):
                        out, final_values = self.act_fn(self.obs, self.final_obs)
                    with phase("env_step"):
                        res = self.env_step(self.state, out.action)
                    with phase("store"):
                        self.store_step(t, out, res, final_values)
                    self.state, self.obs = res.state, res.obs
                with phase("policy_act"):
                    out, final_values = self.act_fn(self.obs, self.final_obs)
                    last_value = out.value
                with phase("store"):
                    self.finish_rollout(final_values)
            with phase("gae"):
                # The agent is trained on the proxy reward: that is the Goodhart setting.
                advantages, returns = self.gae_fn(buf.rewards, buf.values, buf.terminated,
                                                  buf.truncated, buf.final_values, last_value)
            with phase("ppo_update"):
                self.policy.value_head.update_stats(returns, sum_across_ranks)
                update_stats = ppo_update(self.loss_fn, self.params, self.optimizer, buf,
                                          advantages, returns, cfg.epochs, cfg.minibatches,
                                          cfg.max_grad_norm, phase, self.clip_grads)
            with phase("logging"):
                self.state, episode = GoodhartGridWorld.drain_stats(self.state)
                if logger is not None:
                    logger.submit(it, self.steps_per_iteration, self._metrics(episode, update_stats))
        self.iteration = it + 1

    def store_step(self, t: int, out: ActOutput, res: StepResult, final_values: torch.Tensor) -> None:
        """Keep step t of the rollout (the observation the policy acted on) and step t-1's final
        values (`final_values`: this step's forward valued them) for `finish_rollout`; keep the
        final observations of this step's truncated envs for the next forward.

        Nothing is copied per step: the buffer is filled once per rollout (a stack per field),
        since every per-step copy is a few more ops for the profiler and, on a GPU, launches."""
        if t == 0:
            self._steps, self._final = [], []
        else:
            self._final.append((self.final_rows, final_values))
        self._steps.append((self.obs, out.action, out.logprob, out.value, res.proxy_reward,
                            res.true_reward, res.terminated, res.truncated))
        self.final_rows = truncation_rows(res.truncated, self.max_truncated)
        self.final_obs = res.final_obs.index_select(0, self.final_rows)

    def finish_rollout(self, final_values: torch.Tensor) -> None:
        """Fill the buffer from the kept steps; `final_values` values the last step's final
        observations (the last-value forward did)."""
        buf, steps = self.buf, self._steps
        self._final.append((self.final_rows, final_values))
        fields = (buf.obs, buf.actions, buf.logprobs, buf.values, buf.rewards, buf.true_rewards,
                  buf.terminated, buf.truncated)
        for i, field in enumerate(fields):
            torch.stack([step[i] for step in steps], out=field)
        # V(final state) of each step's valued rows, scattered into (T, n) at once.
        rows, values = zip(*self._final)
        offsets = torch.arange(0, len(rows) * self.cfg.n_envs, self.cfg.n_envs, device=self.device)
        flat_rows = (torch.stack(rows) + offsets.view(-1, 1)).view(-1)
        buf.final_values.view(-1).index_copy_(0, flat_rows, torch.stack(values).view(-1))
        self._steps, self._final = [], []

    @property
    def steps_per_iteration(self) -> int:
        return self.cfg.n_envs * self.cfg.rollout_steps

    def _metrics(self, episode: torch.Tensor, update_stats: torch.Tensor) -> torch.Tensor:
        n_done = episode[0]
        per_episode = episode[1:] / n_done  # NaN when no episode ended this iteration
        per_step = torch.stack((self.buf.rewards.mean(), self.buf.true_rewards.mean()))
        return torch.cat((n_done.view(1), per_episode, per_step, update_stats.float()))

    # -- warm-up, checkpoints ----------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        snap = {
            "iteration": self.iteration,
            "policy": copy.deepcopy(self.policy.state_dict()),
            "optimizer": copy.deepcopy(self.optimizer.state_dict()),
            "env_state": {k: v.clone() for k, v in self.state._asdict().items()},
            "obs": self.obs.clone(),
            "rng_cpu": torch.get_rng_state(),
        }
        if self.device.type == "cuda":
            snap["rng_cuda"] = torch.cuda.get_rng_state(self.device)
        return snap

    def restore(self, snap: dict[str, Any]) -> None:
        self.iteration = snap["iteration"]
        self.policy.load_state_dict(snap["policy"])
        self.optimizer.load_state_dict(snap["optimizer"])
        self.state = EnvState(**{k: v.to(self.device) for k, v in snap["env_state"].items()})
        self.obs = snap["obs"].to(self.device)
        torch.set_rng_state(snap["rng_cpu"])
        if "rng_cuda" in snap and self.device.type == "cuda":
            torch.cuda.set_rng_state(snap["rng_cuda"], self.device)

    def warm_up(self) -> float:
        """One full iteration (compiles, autotunes, allocator warm-up), then every state is restored."""
        snap = self.snapshot()
        start = time.perf_counter()
        hooks, self.hooks = self.hooks, NoHooks()
        try:
            self.run_iteration(self.iteration, None)
            _synchronize(self.device)
        finally:
            self.hooks = hooks
        self.restore(snap)
        return time.perf_counter() - start

    def save_checkpoint(self, path: Path) -> None:
        with writing(path) as tmp:
            torch.save(self.snapshot(), tmp)

    def load_checkpoint(self, path: Path) -> None:
        snap = torch.load(path, map_location=self.device, weights_only=False)
        self.restore(snap)


def sum_across_ranks(x: torch.Tensor) -> torch.Tensor:
    """`x` summed over all ranks (itself with one rank). Only PopArt calls it: a plain value
    head needs no collective."""
    if dist.is_available() and dist.is_initialized():
        x = x.clone()
        dist.all_reduce(x)
    return x


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def train(cfg: Config, settings: ProfSettings, rank: int = 0, world_size: int = 1,
          resume: bool = False, on_warmup: Callable[[float], None] | None = None) -> RunResult:
    """Train `cfg.total_iterations` iterations of this rank; returns what was measured."""
    out_dir = Path(cfg.output_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    device_type = torch.device(cfg.device).type
    hooks = make_hooks(settings, rank, device_type)
    trainer = Trainer(cfg, hooks, rank, world_size)
    if resume:
        trainer.load_checkpoint(checkpoint_path(out_dir, rank))
    if cfg.warmup:
        seconds = trainer.warm_up()
        if on_warmup:
            on_warmup(seconds)
    main = rank == 0
    # Iterations with a profiler run slower (the warm-up one before the window sets it up, the
    # traced ones record), and the one after the window also pays for writing the trace: none of
    # them counts towards the measured throughput.
    traced = frozenset(i for i in range(trainer.iteration, cfg.total_iterations)
                       if settings.profiler_on(i) or settings.traced(i - 1))
    logger = AsyncLogger(METRIC_NAMES, out_dir / "metrics.jsonl" if main else None, trainer.device,
                         progress=main and cfg.progress, total=cfg.total_iterations,
                         initial=trainer.iteration, exclude_from_rate=traced)
    start_iteration = trainer.iteration
    recorded = frozenset(i for i in range(start_iteration, cfg.total_iterations) if settings.traced(i))
    memory: list[dict[str, Any]] = []
    start = time.perf_counter()
    try:
        for it in range(start_iteration, cfg.total_iterations):
            if it in recorded:
                reset_peak_memory(trainer.device)
            trainer.run_iteration(it, logger)
            if it in recorded:
                memory.append(memory_row(it, trainer.device))
            if cfg.checkpoint_every and (it + 1) % cfg.checkpoint_every == 0:
                trainer.save_checkpoint(checkpoint_path(out_dir, rank))
        _synchronize(trainer.device)
    except BaseException:
        hooks.abort()
        with contextlib.suppress(Exception):  # what stopped the loop is the error to report
            logger.close()
        raise
    hooks.close()
    logger.close()
    wall = time.perf_counter() - start
    done = cfg.total_iterations - start_iteration
    return RunResult(iterations_run=done, env_steps=done * trainer.steps_per_iteration,
                     wall_s=wall, env_steps_per_s=logger.env_steps_per_s, rows=logger.rows,
                     trace_path=hooks.trace_path if hooks.enabled else None, memory=memory)


def host_rss_bytes() -> int | None:
    """The process's resident set size now (Linux /proc/self/statm), None where unreadable."""
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def reset_peak_memory(device: torch.device) -> None:
    """Start a traced iteration's device peaks afresh (CUDA only), so each is that iteration's."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def memory_row(it: int, device: torch.device) -> dict[str, Any]:
    """run.json's memory of a traced iteration, taken when it ends: host RSS, and on CUDA the
    allocator's peak allocated and reserved bytes during the iteration (null on the CPU)."""
    cuda = device.type == "cuda"
    return {"iteration": it, "rss_bytes": host_rss_bytes(),
            "max_memory_allocated": torch.cuda.max_memory_allocated(device) if cuda else None,
            "max_memory_reserved": torch.cuda.max_memory_reserved(device) if cuda else None}
