"""PROF_* settings: parsing and validation, without importing torch (the CLI needs them fast)."""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

PHASES = ("rollout", "env_step", "policy_act", "bootstrap_value", "store", "gae", "ppo_update",
          "minibatch", "optimizer_step", "logging")
MODES = ("lite", "full")
# The PROF_* defaults, here only: ProfSettings, `goodhart-prof run` and both help texts use these.
DEFAULT_ITERATIONS = (50, 55)
DEFAULT_WINDOW = f"{DEFAULT_ITERATIONS[0]}-{DEFAULT_ITERATIONS[1]}"  # as PROF_ITERATIONS spells it
DEFAULT_MODE = MODES[0]  # lite
DEFAULT_OUTPUT_DIR = "traces"


class SettingsError(ValueError):
    """A PROF_* value or the matching CLI flag is malformed (message is one line)."""


def parse_iterations(text: str) -> tuple[int, int]:
    """`50-55` -> (50, 55); `7` -> (7, 7). 0-based, inclusive."""
    match = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", str(text))
    if not match:
        raise SettingsError(f"iterations must look like 50-55 or 7 (0-based, inclusive), not {text!r}")
    first = int(match.group(1))
    last = int(match.group(2)) if match.group(2) is not None else first
    if last < first:
        raise SettingsError(f"iterations {text!r}: the first iteration is after the last")
    return first, last


@dataclass(frozen=True)
class ProfSettings:
    enabled: bool = False
    first: int = DEFAULT_ITERATIONS[0]
    last: int = DEFAULT_ITERATIONS[1]
    mode: str = DEFAULT_MODE
    output_dir: Path = Path(DEFAULT_OUTPUT_DIR)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> "ProfSettings":
        env = os.environ if environ is None else environ
        first, last = parse_iterations(env.get("PROF_ITERATIONS", DEFAULT_WINDOW))
        mode = env.get("PROF_MODE", DEFAULT_MODE).strip().lower()
        if mode not in MODES:
            raise SettingsError(f"PROF_MODE must be lite or full, not {mode!r}")
        return cls(enabled=env.get("PROF_ENABLED", "").strip() == "1", first=first, last=last,
                   mode=mode, output_dir=Path(env.get("PROF_OUTPUT_DIR", DEFAULT_OUTPUT_DIR)))

    def traced(self, iteration: int) -> bool:
        return self.enabled and self.first <= iteration <= self.last
