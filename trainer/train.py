"""The training loop: one rank's Trainer (an iteration: rollout on the device, GAE, PPO update,
async metrics, hooks; its warm-up) and `train`, the run: the iterations, the profiled window's
memory rows, checkpoints every N iterations, and the run's result.

The Trainer's parts live beside it: its step functions (step_functions.py), the rollout's storage
(rollout_storage.py), checkpoint and resume (checkpoint.py) and the memory of a traced iteration
(iteration_memory.py)."""
from __future__ import annotations

import contextlib
import dataclasses
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch
import torch.distributed as dist

from goodhart_prof.capture.hooks import NoHooks, ProfSettings, make_hooks

from . import antipatterns, zoo
from .checkpoint import Checkpoints, checkpoint_path
from .config import Config
from .env import N_ACTIONS, EnvState, GoodhartGridWorld
from .iteration_memory import memory_row, reset_peak_memory
from .logger import AsyncLogger
from .policy import ActorCritic, ActOutput
from .ppo import UPDATE_STAT_NAMES, RolloutBuffer, ppo_update
from .rollout_storage import RolloutStorage
from .step_functions import build_step_functions, check_cudagraphs, mark_static

METRIC_NAMES = ("episodes", "proxy_return", "true_return", "episode_length", "proxy_per_step",
                "true_per_step") + UPDATE_STAT_NAMES


@dataclass
class RunResult:
    iterations_run: int
    env_steps: int
    wall_s: float
    env_steps_per_s: float | None
    rows: list[dict[str, Any]] = field(default_factory=list)
    trace_path: Path | None = None
    memory: list[dict[str, Any]] = field(default_factory=list)  # memory_row of each traced iteration


class Trainer(RolloutStorage, Checkpoints):
    """Owns the env, the policy, the optimizer and the rollout storage of one rank."""

    def __init__(self, cfg: Config, hooks=None, rank: int = 0, world_size: int = 1,
                 static_storage: bool | None = None):
        """`static_storage` (default: `cfg.cudagraphs`) writes each rollout step into the buffer
        at once and keeps the env state and observations in tensors that never move (what CUDA
        graph replays need); tests set it on the CPU to check that path against the default."""
        self.cfg, self.rank, self.world_size = cfg, rank, world_size
        self.hooks = hooks or NoHooks()
        self.device = torch.device(cfg.device)
        cuda = self.device.type == "cuda"
        self.amp = cfg.amp == "on" or (cfg.amp == "auto" and cuda)
        self.compiled = cfg.compile == "on" or (cfg.compile == "auto" and cuda)
        self.cudagraphs = cfg.cudagraphs
        if self.cudagraphs:
            check_cudagraphs(cuda, self.compiled, world_size)
        self.static = self.cudagraphs if static_storage is None else static_storage
        # Planted anti-patterns (empty for a clean run): looked up here, once, never per step.
        self.inject = zoo.parse(cfg.inject)
        self.reward_log: list[float] = []  # filled by the item_logging pattern only
        self.loss_history: list[torch.Tensor] = []  # filled by the memory_growth pattern only
        torch.manual_seed(cfg.seed + rank)
        if cuda:
            torch.set_float32_matmul_precision("high")
            torch.backends.cudnn.benchmark = True
        obs_dtype = torch.bfloat16 if (self.amp and cuda) else torch.float32
        self.env = GoodhartGridWorld.from_config(cfg, self.device, obs_dtype)
        self.n_envs = cfg.n_envs
        self.max_truncated = self.env.max_truncations_per_step
        self.state, obs = self.env.reset()
        # The next forward's input: this step's observations, then the final observations of the
        # last step's truncated envs (and a few more rows: a fixed shape, env.truncation_rows);
        # at a rollout's start those are already valued. `obs` and `final_obs` are views of it.
        self.policy_obs = torch.cat((obs, obs[:self.max_truncated]))
        self.final_rows = torch.arange(self.max_truncated, device=self.device)
        policy_cls = antipatterns.NanCheckedActorCritic if "nan_checks" in self.inject else ActorCritic
        self.policy = policy_cls(self.env.obs_shape, N_ACTIONS, cfg.channels, cfg.hidden,
                                 cfg.value_head, cfg.popart_beta).to(self.device)
        if "branchy_value_head" in self.inject:
            antipatterns.make_branchy(self.policy.value_head)
        self.model: torch.nn.Module = self.policy
        if world_size > 1:
            # No buffer broadcast: the only buffers are PopArt's statistics, and update_stats
            # already moves them on every rank from the same all-reduced (sum R, sum R^2, n),
            # by the same arithmetic, rescaling the head's weights alike; all ranks start from
            # equal buffers (DDP broadcasts rank 0's parameters and buffers at construction), so
            # they stay equal without a broadcast before every minibatch's forward.
            # torch 2.13 deprecates the flag (FutureWarning, once per rank), keeping its meaning
            # (docs: use it until init_sync_buffers exists); its wording is not the user's concern.
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", "`broadcast_buffers` is deprecated", FutureWarning)
                self.model = torch.nn.parallel.DistributedDataParallel(self.policy,
                                                                       broadcast_buffers=False)
        self.params = list(self.policy.parameters())
        self.optimizer = self._make_optimizer()
        self.buf = RolloutBuffer.allocate(cfg.rollout_steps, cfg.n_envs, self.env.obs_shape,
                                          obs_dtype, self.device)
        self._steps: list[tuple] = []   # the rollout's steps until finish_rollout stores them
        self._final: list[tuple] = []   # (rows, final values) of each step, in step order
        if self.static:
            self.store_step, self.finish_rollout = self._store_step_now, self._finish_rollout_now
            self.state = EnvState(*(x.clone() for x in self.state))  # owned, never replaced
        if self.cudagraphs:
            mark_static(self)
        (self.act_all, self.loss_fn, self.gae_fn, self.env_step,
         self.clip_grads) = build_step_functions(self)
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

    def autocast(self):
        return torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.amp)

    def act_fn(self, obs: torch.Tensor, final_obs: torch.Tensor | None = None
               ) -> tuple[ActOutput, torch.Tensor]:
        """The rollout forward: actions for the n envs, and the raw values of the k final
        observations. `obs` is the (n + k) policy input (StepResult.policy_obs) as it is; callers
        that hold the two parts apart pass them both and pay for joining them."""
        if final_obs is not None:
            obs = torch.cat((obs, final_obs))
        return self.act_all(obs)

    # -- one iteration ---------------------------------------------------------------------------
    def run_iteration(self, it: int, logger: AsyncLogger | None) -> None:
        cfg, buf, phase = self.cfg, self.buf, self.hooks.phase
        with self.hooks.iteration(it):
            with phase("rollout"):
                for t in range(cfg.rollout_steps):
                    with phase("policy_act"):
                        out, final_values = self.act_all(self.policy_obs)
                    with phase("env_step"):
                        res = self.env_step(self.state, out.action)
                    with phase("store"):
                        self.store_step(t, out, res, final_values)
                with phase("policy_act"):
                    out, final_values = self.act_all(self.policy_obs)
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
                episode = self._drain_stats()
                if logger is not None:
                    logger.submit(it, self.steps_per_iteration, self._metrics(episode, update_stats))
        self.iteration = it + 1

    @property
    def steps_per_iteration(self) -> int:
        return self.cfg.n_envs * self.cfg.rollout_steps

    def _metrics(self, episode: torch.Tensor, update_stats: torch.Tensor) -> torch.Tensor:
        n_done = episode[0]
        per_episode = episode[1:] / n_done  # NaN when no episode ended this iteration
        per_step = torch.stack((self.buf.rewards.mean(), self.buf.true_rewards.mean()))
        return torch.cat((n_done.view(1), per_episode, per_step, update_stats.float()))

    # -- warm-up ---------------------------------------------------------------------------------
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
    # the trainer's own metrics.jsonl (logger.py) has the iteration times: the hooks log none
    hooks = make_hooks(dataclasses.replace(settings, metrics=False), rank, device_type)
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
    # Sets over the window's iterations that run (window_iterations): never a loop over a window
    # of 10**12 iterations, nor over every iteration of a long run.
    near = window_iterations(settings, trainer.iteration, cfg.total_iterations, before=1, after=1)
    traced = frozenset(i for i in near if settings.profiler_slows(i))
    logger = AsyncLogger(METRIC_NAMES, out_dir / "metrics.jsonl" if main else None, trainer.device,
                         progress=main and cfg.progress, total=cfg.total_iterations,
                         initial=trainer.iteration, exclude_from_rate=traced)
    start_iteration = trainer.iteration
    recorded = frozenset(window_iterations(settings, start_iteration, cfg.total_iterations))
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


def window_iterations(settings: ProfSettings, start: int, stop: int, before: int = 0,
                      after: int = 0) -> range:
    """The traced iterations among start..stop-1 (widened by `before` and `after` iterations at
    the window's ends), as a range bounded by the iterations that run; empty when profiling is off."""
    if not settings.enabled:
        return range(0)
    return range(max(start, settings.first - before), min(stop, settings.last + 1 + after))
