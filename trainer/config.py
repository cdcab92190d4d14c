"""Training configuration: one dataclass, two presets, TOML loading and flag overrides."""
from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from goodhart_prof.capture.run_options import MAX_SEED
from goodhart_prof.capture.settings import DEFAULT_OUTPUT_DIR

from .zoo import config_overrides, parse

MAX_SIZE = 2**31 - 1  # a size of the world or the model: torch's int32 index limit
POPART_BETA = 0.1  # the default, here only (trainer/policy.py PopArtValueHead gives the reason)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib


class ConfigError(ValueError):
    """A config file or override the user gave is not usable (the message is one line)."""


@dataclass
class Config:
    # --- run ---------------------------------------------------------------------------------
    seed: int = 1
    """Seed for the env, the policy's initial weights, action sampling and minibatch shuffling."""
    device: str = "auto"
    """`auto` (CUDA when available, else CPU), `cpu` or `cuda`."""
    total_iterations: int = 56
    """Training iterations to run; one iteration is one rollout plus one PPO update."""
    output_dir: str = DEFAULT_OUTPUT_DIR
    """Folder for traces, run.json, metrics.jsonl and checkpoints."""
    checkpoint_every: int = 0
    """Write a checkpoint every N iterations (0: never)."""
    progress: bool = True
    """Show a progress bar on stderr while training."""

    # --- environment -------------------------------------------------------------------------
    n_envs: int = 128
    """Number of environments stepped together in one batch."""
    grid_size: int = 11
    """Side of the square playing field, walls on its border included."""
    view_size: int = 7
    """Side of the egocentric observation window (odd)."""
    n_food: int = 4
    """Real food items on each grid; eating one pays proxy and true reward alike."""
    n_decoy: int = 4
    """Decoys on each grid: the reward sensor counts them like food, but they are harmful."""
    wall_density: float = 0.08
    """Chance that an interior cell is a wall at reset."""
    max_episode_steps: int = 64
    """Episodes end (and the env auto-resets) after this many steps."""
    proxy_reward: float = 1.0
    """What the sensor pays for eating either food or a decoy."""
    food_true_reward: float = 1.0
    """True value of eating real food."""
    decoy_true_reward: float = -0.5
    """True value of eating a decoy (the Goodhart gap comes from here)."""

    # --- PPO ---------------------------------------------------------------------------------
    rollout_steps: int = 32
    """Env steps collected per iteration in each env."""
    epochs: int = 2
    """Passes over the rollout in each update."""
    minibatches: int = 4
    """Minibatches per epoch."""
    lr: float = 2.5e-3
    """Adam learning rate (held as a device tensor on CUDA so the step never syncs)."""
    gamma: float = 0.95
    """Discount factor."""
    gae_lambda: float = 0.9
    """GAE lambda."""
    clip_coef: float = 0.2
    """PPO ratio clipping."""
    vf_coef: float = 0.5
    """Weight of the value loss."""
    ent_coef: float = 0.01
    """Weight of the entropy bonus."""
    max_grad_norm: float = 0.5
    """Global gradient-norm clip (applied without reading the norm back to the host)."""
    hidden: int = 128
    """Width of the shared trunk's fully connected layer."""
    channels: int = 16
    """Channels of the first convolution (the second has twice as many)."""
    value_head: str = "plain"
    """`plain` or `popart` (normalised targets); both share one interface, no branch in the update."""
    popart_beta: float = POPART_BETA
    """PopArt statistics step per iteration: after 1/beta iterations, an average over about the
    last 1/beta (trainer/policy.py PopArtValueHead gives the reason for 0.1)."""

    # --- speed -------------------------------------------------------------------------------
    amp: str = "auto"
    """bf16 autocast: `auto` (on for CUDA), `on` or `off`."""
    compile: str = "auto"
    """torch.compile of the policy and the update: `auto` (on for CUDA), `on` or `off`."""
    cudagraphs: bool = False
    """CUDA graphs for the rollout step (policy forward, env step) and the update's minibatch
    step: torch.compile(mode="reduce-overhead"). Needs device cuda and compile on or auto, one
    rank (docs/trainer.md: what is captured and what is not)."""
    warmup: bool = True
    """Run one rollout + update before timing (compiles, autotunes), then restore all state."""

    # --- anti-pattern zoo ----------------------------------------------------------------------
    inject: str = ""
    """Known slowdowns to plant, comma-separated (`trainer/antipatterns.py`; empty: none)."""

    def validate(self) -> "Config":
        try:
            parse(self.inject)
        except ValueError as exc:
            raise ConfigError(f"inject: {exc}") from None
        if self.device not in ("auto", "cpu", "cuda"):
            raise ConfigError(f"device must be auto, cpu or cuda, not {self.device!r}")
        for name in ("amp", "compile"):
            if getattr(self, name) not in ("auto", "on", "off"):
                raise ConfigError(f"{name} must be auto, on or off, not {getattr(self, name)!r}")
        if self.cudagraphs and self.device != "cuda":
            raise ConfigError(f"cudagraphs needs a CUDA device (device is {self.device})")
        if self.cudagraphs and self.compile == "off":
            raise ConfigError("cudagraphs needs torch.compile (compile is off)")
        if self.value_head not in ("plain", "popart"):
            raise ConfigError(f"value_head must be plain or popart, not {self.value_head!r}")
        if not 0.0 < self.popart_beta <= 1.0:
            raise ConfigError(f"popart_beta must be in (0, 1], not {self.popart_beta}")
        if self.view_size % 2 == 0 or self.view_size < 3:
            raise ConfigError(f"view_size must be odd and >= 3, not {self.view_size}")
        if self.grid_size < 4:
            raise ConfigError(f"grid_size must be >= 4, not {self.grid_size}")
        interior = (self.grid_size - 2) ** 2
        if self.n_food + self.n_decoy + 1 > interior // 2:
            raise ConfigError(f"n_food + n_decoy = {self.n_food + self.n_decoy} do not fit a "
                              f"{self.grid_size}x{self.grid_size} grid")
        for name in ("n_envs", "rollout_steps", "epochs", "minibatches", "max_episode_steps",
                     "hidden", "channels"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, not {getattr(self, name)}")
            if getattr(self, name) > MAX_SIZE:
                raise ConfigError(f"{name} must be at most {MAX_SIZE:,}, not {getattr(self, name)}")
        if self.total_iterations < 0 or self.checkpoint_every < 0:
            raise ConfigError("total_iterations and checkpoint_every must be >= 0")
        if not 0 <= self.seed <= MAX_SEED:
            raise ConfigError(f"seed must be 0 to 2**63-1 ({MAX_SEED}), not {self.seed}")
        if (self.n_envs * self.rollout_steps) % self.minibatches:
            raise ConfigError(f"n_envs * rollout_steps = {self.n_envs * self.rollout_steps} is not "
                              f"divisible by minibatches = {self.minibatches}")
        return self


# The CPU preset traces iterations 50-55 and finishes in well under 3 minutes on 2 cores.
CPU_PRESET: dict[str, Any] = {}
# The CUDA preset fills an H100: thousands of envs, large minibatches, compiled and bf16.
CUDA_PRESET: dict[str, Any] = {
    "n_envs": 8192,
    "rollout_steps": 64,
    "epochs": 4,
    "minibatches": 4,
    "lr": 1e-3,
    "hidden": 256,
    "channels": 32,
}


def resolve_device(device: str) -> str:
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device cuda was asked for, but torch sees no CUDA device")
    return device


def load_toml(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such config file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read config: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    # Allow both a flat file and a [trainer] table.
    return data.get("trainer", data)


def build_config(config_file: str | Path | None = None, **overrides: Any) -> Config:
    """Preset for the device, then the TOML file, then explicit overrides (None means unset)."""
    from_file = load_toml(config_file) if config_file else {}
    known = {f.name: f for f in fields(Config)}
    unknown = sorted(set(from_file) - set(known))
    if unknown:
        raise ConfigError(f"{config_file}: unknown config keys: {', '.join(unknown)}")
    explicit = {k: v for k, v in overrides.items() if v is not None}
    device_choice = explicit.get("device", from_file.get("device", "auto"))
    if device_choice not in ("auto", "cpu", "cuda"):
        raise ConfigError(f"device must be auto, cpu or cuda, not {device_choice!r}")
    device = resolve_device(device_choice)
    values: dict[str, Any] = dict(CUDA_PRESET if device == "cuda" else CPU_PRESET)
    values.update(from_file)
    values.update(explicit)
    values["device"] = device
    for name, value in values.items():
        expected = type(getattr(Config, name, None)) if hasattr(Config, name) else None
        if expected is float and isinstance(value, int) and not isinstance(value, bool):
            values[name] = float(value)
        elif expected is not None and (not isinstance(value, expected)
                                       or (isinstance(value, bool) and expected is not bool)):  # bool is an int
            raise ConfigError(f"config key {name} must be {expected.__name__}, "
                              f"not {type(value).__name__} ({value!r})")
    if values.get("inject"):
        try:
            names = parse(values["inject"])
        except ValueError as exc:
            raise ConfigError(f"inject: {exc}") from None
        values["inject"] = ",".join(names)  # canonical: zoo order, each once
        values.update(config_overrides(names))  # the planted pattern wins over file and flags
    return Config(**values).validate()


def to_dict(cfg: Config) -> dict[str, Any]:
    return dataclasses.asdict(cfg)
