"""The anti-pattern zoo's catalogue: each pattern's name (the `--inject` name and the rule id of
the finding that must detect it), what its planted code does, where it can show, `parse` for the
`--inject` list and the config changes a pattern makes. Torch-free: the configuration validates
`--inject` with it; the planted code is antipatterns.py's."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class AntiPattern:
    name: str             # the --inject name and the finding's rule id
    cuda_only: bool       # the planted change does something only on a CUDA device
    cpu_detectable: bool  # a CPU-only trace holds the evidence its rule needs
    what: str             # what the planted code does


TINY_BATCH_ENVS = 8
ZOO: tuple[AntiPattern, ...] = (
    AntiPattern("item_logging", False, True,
                "logs reward.mean().item() into a Python list after every env step"),
    AntiPattern("cpu_alloc", False, True,
                "creates a per-step reward-shaping buffer with torch.zeros(n) (no device=), then "
                "moves it with .to(device) and adds it to the reward"),
    AntiPattern("nan_checks", False, True,
                "validates obs, features and logits in every policy forward: torch.isnan(x).any() "
                "per row, then torch.where(mask) to locate the bad rows"),
    AntiPattern("sync_grad_clip", False, True,
                "clips gradients by a norm read back to the host (total_norm.item()) and branches "
                "on it, every minibatch"),
    AntiPattern("branchy_value_head", False, True,
                "the value head's prepare_targets branches on a tensor (`if returns.std() > 0:`) "
                "in the update"),
    AntiPattern("pageable_htod", False, True,
                "builds each step's observations on the host with numpy and copies them with "
                "torch.from_numpy(...).to(device)"),
    AntiPattern("unfused_adam", True, False, "Adam without fused=True (CUDA only)"),
    AntiPattern("no_amp", True, False, "bf16 autocast off (CUDA only)"),
    AntiPattern("eager_update", True, False, "the PPO loss/update is not torch.compile'd (CUDA only)"),
    AntiPattern("memory_growth", False, True,
                "values a slice of the rollout with grad on for a logged value loss and appends "
                "that loss (not .item(), not detached) to a list every iteration: each kept loss "
                "holds its graph and the forward's activations (the last 64 are kept)"),
    AntiPattern("graph_break", False, True,
                "breaks the compiled env step's graph before the step (torch._dynamo.graph_break(), "
                "as an untraceable call does), every env step; turns torch.compile on"),
    AntiPattern("tiny_batch", False, False,
                f"only {TINY_BATCH_ENVS} envs, so every kernel is tiny (the GPU is launch-bound)"),
)
NAMES: tuple[str, ...] = tuple(p.name for p in ZOO)
BY_NAME: dict[str, AntiPattern] = {p.name: p for p in ZOO}
CUDA_ONLY: frozenset[str] = frozenset(p.name for p in ZOO if p.cuda_only)
CPU_DETECTABLE: frozenset[str] = frozenset(p.name for p in ZOO if p.cpu_detectable)


def parse(text: str | None) -> tuple[str, ...]:
    """`a,b` -> the names in zoo order, each once; ValueError (one line) on an unknown name."""
    given = [n.strip() for n in (text or "").split(",") if n.strip()]
    unknown = [n for n in given if n not in BY_NAME]
    if unknown:
        raise ValueError(f"unknown anti-pattern {unknown[0]!r}; valid: {', '.join(NAMES)}")
    return tuple(n for n in NAMES if n in given)


def config_overrides(names: tuple[str, ...]) -> dict[str, Any]:
    """Config changes that plant a pattern (they win over the file and the flags, and run.json
    records the config the run really used)."""
    out: dict[str, Any] = {}
    if "tiny_batch" in names:
        out["n_envs"] = TINY_BATCH_ENVS
    if "no_amp" in names:
        out["amp"] = "off"
    if "graph_break" in names:
        out["compile"] = "on"  # the break is in compiled code (CPU too: inductor's C++ backend)
    return out
