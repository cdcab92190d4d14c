"""The training loop: rollout on the device, GAE, PPO update, async metrics, hooks, checkpoints."""
from __future__ import annotations

import contextlib
import copy
import os
import time
import warnings
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Callable

import torch
import torch.distributed as dist

from goodhart_prof.fileio import writing
from goodhart_prof.capture.hooks import NoHooks, ProfSettings, make_hooks

from . import antipatterns, zoo
from .config import Config
from .env import N_ACTIONS, EnvState, GoodhartGridWorld, StepResult
from .logger import AsyncLogger
from .policy import ActorCritic, ActOutput, act_and_value
from .ppo import (UPDATE_STAT_NAMES, RolloutBuffer, clip_grad_norm_no_sync, compute_gae, ppo_loss,
                  ppo_update)

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
            _check_cudagraphs(cuda, self.compiled, world_size)
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
            self._mark_static()
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

    def _mark_static(self) -> None:
        """Tensors a CUDA graph reads at a fixed address: the layout bank (tens of MB, else
        copied into a static input at every replay), the env's constants, and the trainer-owned
        state and observations the rollout writes in place."""
        env = self.env
        kept = [env.bank_flat, env.bank_cell, env.interior_flat, env.flat_deltas,
                env.view_flat, env.channel_types, env.ones, *self.state, self.policy_obs]
        for x in kept:
            torch._dynamo.mark_static_address(x)

    def _build_step_functions(self) -> None:
        cfg, n = self.cfg, self.n_envs

        def act_all(policy_obs):
            with self._autocast():
                return act_and_value(self.policy, policy_obs, n)

        def loss_fn(mb):
            with self._autocast():
                return ppo_loss(self.model, self.policy.value_head, mb, cfg.clip_coef,
                                cfg.vf_coef, cfg.ent_coef)

        gae_fn: Callable = partial(compute_gae, gamma=cfg.gamma, lam=cfg.gae_lambda)
        env_step = self.env.step
        if self.compiled:
            # CUDA graph trees for the per-step functions and the minibatch step; GAE runs once
            # per iteration and its outputs live through the whole update, so it stays a plain
            # compiled graph (a replay of another graph must not overwrite them).
            graphs = {"mode": "reduce-overhead"} if self.cudagraphs else {}
            act_all, env_step = torch.compile(act_all, **graphs), torch.compile(env_step, **graphs)
            gae_fn = torch.compile(gae_fn)
            if "eager_update" not in self.inject:
                loss_fn = torch.compile(loss_fn, **graphs)
        if self.cudagraphs:
            act_all, loss_fn = _step_begin(act_all), _step_begin(loss_fn)
        if "memory_growth" in self.inject:
            gae_fn = antipatterns.value_loss_history_gae(gae_fn, self.policy, self.buf.obs,
                                                         self.loss_history, self._autocast)
        self.act_all, self.loss_fn, self.gae_fn = act_all, loss_fn, gae_fn
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
            env_step = _host_obs_to_policy(antipatterns.pageable_htod_step(env_step, self.env))
        return env_step

    def act_fn(self, obs: torch.Tensor, final_obs: torch.Tensor | None = None
               ) -> tuple[ActOutput, torch.Tensor]:
        """The rollout forward: actions for the n envs, and the raw values of the k final
        observations. `obs` is the (n + k) policy input (StepResult.policy_obs) as it is; callers
        that hold the two parts apart pass them both and pay for joining them."""
        if final_obs is not None:
            obs = torch.cat((obs, final_obs))
        return self.act_all(obs)

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
            "final_rows": self.final_rows.clone(),
            "rng_cpu": torch.get_rng_state(),
        }
        if self.device.type == "cuda":
            snap["rng_cuda"] = torch.cuda.get_rng_state(self.device)
        return snap

    def restore(self, snap: dict[str, Any]) -> None:
        self.iteration = snap["iteration"]
        self.policy.load_state_dict(snap["policy"])
        self.optimizer.load_state_dict(snap["optimizer"])
        saved = {k: v.to(self.device) for k, v in snap["env_state"].items()}
        if "pos" in saved:  # a checkpoint from before states held flat agent cells
            pos = saved.pop("pos")
            saved["cell"] = pos[:, 0] * self.env.padded + pos[:, 1]
        state = EnvState(**saved)
        obs = snap["obs"].to(self.device)
        rows = snap.get("final_rows", self.final_rows).to(self.device)
        if self.static:  # the tensors CUDA graphs read keep their addresses
            for mine, new in zip(self.state, state):
                mine.copy_(new)
            self.final_rows.copy_(rows)
        else:
            self.state, self.final_rows = state, rows
        self.obs = obs  # in place with static storage (the setter)
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
            try:
                torch.save(self.snapshot(), tmp)
            except RuntimeError as exc:  # torch's zip writer says a short write so (ulimit -f, disk full)
                raise OSError(f"torch.save stopped short (disk full or a file size limit?): "
                              f"{str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__}") from None

    def load_checkpoint(self, path: Path) -> None:
        snap = torch.load(path, map_location=self.device, weights_only=False)
        self.restore(snap)


def _check_cudagraphs(cuda: bool, compiled: bool, world_size: int) -> None:
    """CUDA graphs need a CUDA device, torch.compile and one rank (ConfigError otherwise)."""
    from .config import ConfigError
    if not cuda:
        raise ConfigError("cudagraphs needs a CUDA device")
    if not compiled:
        raise ConfigError("cudagraphs needs torch.compile (compile is off)")
    if world_size > 1:
        raise ConfigError("cudagraphs runs on one rank only (DDP's all-reduce is not captured)")


def _step_begin(fn: Callable) -> Callable:
    """`fn` after torch.compiler.cudagraph_mark_step_begin(): a new generation of CUDA graph
    trees begins, so the replay may reuse the memory of the previous replays' outputs (the
    trainer has copied out all it keeps by then)."""
    mark = torch.compiler.cudagraph_mark_step_begin

    def begin_then(*args):
        mark()
        return fn(*args)
    return begin_then


def _host_obs_to_policy(step: Callable) -> Callable:
    """The pageable_htod pattern replaces `obs` with its host-built copy: the policy input
    (`policy_obs`) is rebuilt from it, so the policy acts on what the planted code made."""
    def step_with_host_obs(state, actions):
        res = step(state, actions)
        return res._replace(policy_obs=torch.cat((res.obs, res.final_obs)))
    return step_with_host_obs


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
