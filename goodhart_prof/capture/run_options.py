"""The trainer's options that `goodhart-prof run` shares, declared once.

`python -m trainer` and `goodhart-prof run` both take their flags from TRAINER_OPTIONS, and `run`
forwards them to the trainer by walking the same tuple, so the two command lines cannot drift.
Torch-free and trainer-free like settings.py: goodhart_prof never imports trainer, so a default the
trainer's Config decides is None here, and the trainer fills its help text from Config itself.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import click

from ..errors import UserError
from .settings import (DEFAULT_MODE, DEFAULT_OUTPUT_DIR, DEFAULT_WINDOW, KINETO_DEFAULT, QUIET_KINETO,
                       SettingsError, parse_iterations, parse_switch)

DEVICES = ("auto", "cpu", "cuda")
# torch.manual_seed takes 0..2**64-1 (and negatives, folded onto those): seeds up to 2**63-1 leave
# room for the rank added to it. One machine's ranks: also at most RANKS_PER_CORE per CPU core on the
# CPU, and one per GPU (the trainer checks both, it knows the device).
MAX_SEED = 2**63 - 1
MAX_NPROC = 1024
RANKS_PER_CORE = 4


@dataclass(frozen=True)
class TrainerOption:
    """One flag of `python -m trainer` that `goodhart-prof run` takes too and passes on.

    `default` None leaves the value to the trainer's Config (trainer/config.py). A note ends the
    help text on one side only, where the two fill a missing value differently; the trainer's
    note may name Config fields (`{total_iterations}`), filled with the Config's defaults.
    """

    flag: str
    help: str
    type: Any = None
    default: Any = None
    is_flag: bool = False
    metavar: str | None = None
    param: str = ""  # the command function's parameter, where it is not the flag's name
    trainer_note: str = ""
    run_note: str = ""

    @property
    def name(self) -> str:
        return self.param or self.flag.lstrip("-").replace("-", "_")

    def click_option(self, note: str) -> Callable:
        text = f"{self.help} ({note})." if note else f"{self.help}."
        if self.is_flag:
            return click.option(self.flag, self.name, is_flag=True, help=text)
        return click.option(self.flag, self.name, type=self.type, default=self.default,
                            show_default=self.default is not None, metavar=self.metavar, help=text)


# In the order `goodhart-prof run` has always forwarded them (run.json's `command` keeps its order).
TRAINER_OPTIONS = (
    TrainerOption("--total-iterations", "Training iterations to run", click.IntRange(min=1),
                  trainer_note="default: the config's, {total_iterations}",
                  run_note="default: the last traced iteration + 1, + 2 in lite mode: the iteration "
                           "after the window is recorded with stacks for the sites"),
    TrainerOption("--output-dir", "Folder for run.json, metrics.jsonl, checkpoints and traces",
                  click.Path(file_okay=False),
                  trainer_note="default: PROF_OUTPUT_DIR or the config's, {output_dir}; "
                               "traces go to PROF_OUTPUT_DIR whenever it is set",
                  run_note=f"run: the folder that holds one folder per run, OUTPUT_DIR/NAME, and "
                           f"OUTPUT_DIR/latest; default: PROF_OUTPUT_DIR or {DEFAULT_OUTPUT_DIR}"),
    TrainerOption("--nproc", "Ranks to run with torch.distributed (gloo on CPU, NCCL on CUDA); "
                  "each profiled rank writes its own trace, merged afterwards",
                  click.IntRange(1, MAX_NPROC), default=1),
    TrainerOption("--config", "TOML file with Config fields (flat or under [trainer])",
                  click.Path(dir_okay=False), param="config_file"),
    TrainerOption("--device", "auto: CUDA when available", click.Choice(DEVICES)),
    TrainerOption("--seed", "Seed, 0 to 2**63-1 (rank r uses seed + r)", click.IntRange(0, MAX_SEED)),
    TrainerOption("--checkpoint-every", "Write a checkpoint every N iterations (atomically)",
                  click.IntRange(min=0)),
    TrainerOption("--inject", "Plant known slowdowns (the anti-pattern zoo, "
                  "trainer/antipatterns.py; each NAME is the rule id of the finding that detects it)",
                  metavar="NAME[,NAME...]"),
    TrainerOption("--resume", "Continue from the checkpoint in the output folder", is_flag=True,
                  run_note="run: continue the run --name names, else the newest run with a "
                           "checkpoint, in its own folder"),
    TrainerOption("--no-progress", "No progress bar", is_flag=True),
    TrainerOption("--cudagraphs", "CUDA graphs for the rollout step and the minibatch step "
                  "(torch.compile mode reduce-overhead; needs CUDA and compile, one rank)",
                  is_flag=True),
)


def _apply(note: Callable[[TrainerOption], str]) -> Callable:
    def decorate(command: Callable) -> Callable:
        for option in reversed(TRAINER_OPTIONS):  # click lists options in decorator order
            command = option.click_option(note(option))(command)
        return command
    return decorate


def trainer_side(config_defaults: Mapping[str, Any]) -> Callable:
    """The shared options for `python -m trainer`; `config_defaults`: the Config's field defaults."""
    return _apply(lambda option: option.trainer_note.format_map(config_defaults))


def run_side() -> Callable:
    """The shared options for `goodhart-prof run`."""
    return _apply(lambda option: option.run_note)


def trainer_argv(values: Mapping[str, Any]) -> list[str]:
    """The trainer's flags for the shared options' values (by parameter name); None is left out."""
    argv: list[str] = []
    for option in TRAINER_OPTIONS:
        value = values[option.name]
        if option.is_flag:
            argv += [option.flag] if value else []
        elif value is not None:
            argv += [option.flag, str(value)]
    return argv


def run_command(iterations: tuple[int, int] | None, mode: str | None, values: Mapping[str, Any],
                environ: Mapping[str, str], verbose: bool = False) -> tuple[list[str], dict[str, str]]:
    """`goodhart-prof run`'s child: `python -m trainer` with profiling on, and its environment.

    Flags win over the PROF_* variables; the profiler's own log is quiet unless `verbose`. One
    folder, `values["output_dir"]` (the run's own folder: cli.py makes it under the output root),
    takes everything, traces included; unless told otherwise the trainer stops after the window's
    last iteration.
    """
    env = dict(environ)
    # a KINETO_LOG_LEVEL the user set wins; `verbose` sets Kineto's own default level, since the
    # hooks quiet an unset one
    env.setdefault("KINETO_LOG_LEVEL", KINETO_DEFAULT if verbose else QUIET_KINETO)
    first, last = iterations if iterations is not None else env_window(env)
    output_dir = values["output_dir"] or env.get("PROF_OUTPUT_DIR") or DEFAULT_OUTPUT_DIR
    env.update(PROF_ENABLED="1", PROF_ITERATIONS=f"{first}-{last}",
               PROF_MODE=mode or env.get("PROF_MODE", DEFAULT_MODE), PROF_OUTPUT_DIR=output_dir)
    total = values["total_iterations"]
    # after a lite window one more iteration is recorded with stacks for the sites (hooks.py),
    # unless PROF_SITES is off
    extra = 2 if env["PROF_MODE"] == "lite" and parse_switch("PROF_SITES", env.get("PROF_SITES", "1")) else 1
    forwarded = {**values, "output_dir": output_dir,
                 "total_iterations": last + extra if total is None else total}
    return [sys.executable, "-m", "trainer", *trainer_argv(forwarded)], env


def env_window(env: Mapping[str, str]) -> tuple[int, int]:
    """The window PROF_ITERATIONS names (else the default); a malformed value is a UserError."""
    try:
        return parse_iterations(env.get("PROF_ITERATIONS", DEFAULT_WINDOW))
    except SettingsError as exc:
        raise UserError(f"PROF_ITERATIONS: {exc}") from None
