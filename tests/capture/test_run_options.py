"""One source for each setting: `python -m trainer` and `goodhart-prof run` cannot drift apart.

The shared options are declared once (goodhart_prof/capture/run_options.py) and the PROF_* defaults once
(goodhart_prof/capture/settings.py); these tests fail when either command line grows, loses or changes a
shared option on its own, or when `run` stops forwarding one.
"""
from __future__ import annotations

import sys

import click
import pytest
from click.testing import CliRunner

from goodhart_prof.cli import cli as goodhart_prof
from goodhart_prof.errors import UserError
from goodhart_prof.capture.run_options import TRAINER_OPTIONS, run_command
from goodhart_prof.capture.settings import (DEFAULT_ITERATIONS, DEFAULT_MODE, DEFAULT_OUTPUT_DIR,
                                    DEFAULT_WINDOW, ProfSettings)
from tests.support.helpers import run_cmd
from trainer.__main__ import cli as trainer
from trainer.config import Config

RUN = goodhart_prof.commands["run"]
RUN_ONLY = {"--iterations", "--mode", "--verbose", "--name"}
SHARED = {option.flag for option in TRAINER_OPTIONS}


def _options(command: click.Command) -> dict[str, click.Option]:
    return {p.opts[0]: p for p in command.params if isinstance(p, click.Option)}


def _spec(param: click.Option) -> dict:
    """What a user can pass and what it means; the help text may differ between the two sides."""
    info = param.to_info_dict()
    info.pop("help")
    return info


def _run_params(args: list[str]) -> dict:
    """`goodhart-prof run ARGS` parsed, not run (under its group, whose settings click caches)."""
    group = goodhart_prof.make_context("goodhart-prof", ["run"])
    return RUN.make_context("run", list(args), parent=group).params


def _sample_args(param: click.Option) -> list[str]:
    """A value for the flag that differs from its default (a flag: just the flag)."""
    kind = param.type
    if param.is_flag:
        return [param.opts[0]]
    if isinstance(kind, click.Choice):
        value = kind.choices[-1]
    elif isinstance(kind, click.IntRange):
        value = (kind.min or 0) + 2
    elif kind is click.INT:
        value = 7
    else:
        value = "given"
    return [param.opts[0], str(value)]


def test_both_command_lines_declare_the_shared_options_alike():
    trainer_opts, run_opts = _options(trainer), _options(RUN)
    assert set(trainer_opts) == SHARED  # every trainer flag is shared: `run` can set all of them
    assert set(run_opts) == SHARED | RUN_ONLY
    for flag in SHARED:
        assert _spec(trainer_opts[flag]) == _spec(run_opts[flag]), flag


def test_defaults_come_from_the_one_definition():
    unset = {"trainer": trainer.make_context("trainer", []).params,
             "run": _run_params([])}
    for option in TRAINER_OPTIONS:
        expected = False if option.is_flag else option.default
        assert unset["trainer"][option.name] == unset["run"][option.name] == expected, option.flag
    assert Config().output_dir == DEFAULT_OUTPUT_DIR
    off = ProfSettings.from_env({})
    assert (off.first, off.last, off.mode, str(off.output_dir)) == (*DEFAULT_ITERATIONS, DEFAULT_MODE,
                                                                    DEFAULT_OUTPUT_DIR)
    assert ProfSettings() == off


@pytest.mark.parametrize("flag", sorted(SHARED))
def test_run_forwards_each_shared_option_as_given(flag):
    args = _sample_args(_options(RUN)[flag])
    given = _run_params(args)
    argv, _ = run_command(given.pop("iterations"), given.pop("mode"), given, {})
    assert argv[:3] == [sys.executable, "-m", "trainer"]
    assert args[0] in argv
    forwarded = trainer.make_context("trainer", argv[3:]).params
    assert forwarded[_options(trainer)[flag].name] == given[_options(RUN)[flag].name]


def test_run_fills_the_window_and_folder_from_the_prof_defaults():
    given = _run_params([])
    argv, env = run_command(given.pop("iterations"), given.pop("mode"), given, {})
    # lite: one more iteration after the window, recorded with stacks for the sites (hooks.py)
    assert argv[3:] == ["--total-iterations", str(DEFAULT_ITERATIONS[1] + 2),
                        "--output-dir", DEFAULT_OUTPUT_DIR, "--nproc", "1"]
    assert (env["PROF_ENABLED"], env["PROF_ITERATIONS"], env["PROF_MODE"], env["PROF_OUTPUT_DIR"]) == (
        "1", DEFAULT_WINDOW, DEFAULT_MODE, DEFAULT_OUTPUT_DIR)


def test_run_flags_win_over_prof_variables():
    environ = {"PROF_ITERATIONS": "4-9", "PROF_MODE": "full", "PROF_OUTPUT_DIR": "env-dir"}
    given = _run_params([])
    argv, env = run_command(given.pop("iterations"), given.pop("mode"), given, environ)
    assert argv[3:7] == ["--total-iterations", "10", "--output-dir", "env-dir"]
    given = _run_params(["--iterations", "1-2", "--mode", "lite", "--output-dir", "o"])
    argv, env = run_command(given.pop("iterations"), given.pop("mode"), given, environ)
    assert argv[3:7] == ["--total-iterations", "4", "--output-dir", "o"]  # 1-2, and 3 with stacks
    assert (env["PROF_ITERATIONS"], env["PROF_MODE"], env["PROF_OUTPUT_DIR"]) == ("1-2", "lite", "o")
    argv, _ = run_command((1, 2), "lite", given, {"PROF_SITES": "off"})
    assert argv[3:5] == ["--total-iterations", "3"]  # no attribution iteration asked for
    with pytest.raises(UserError, match="^PROF_ITERATIONS: iterations must look like"):
        run_command(None, None, given, {"PROF_ITERATIONS": "nine"})


def test_help_of_both_lists_the_shared_options():
    trainer_help = CliRunner().invoke(trainer, ["--help"]).output
    run_help = CliRunner().invoke(goodhart_prof, ["run", "--help"]).output
    for text, extra in ((trainer_help, set()), (run_help, RUN_ONLY)):
        listed = {line.split()[0] for line in text.splitlines() if line.startswith("  --")}
        assert listed == SHARED | extra
    assert f"config's, {Config().total_iterations})" in " ".join(trainer_help.split())
    run_help = " ".join(run_help.split())
    assert f"PROF_ITERATIONS or {DEFAULT_WINDOW})" in run_help and f"PROF_MODE or {DEFAULT_MODE})" in run_help


def test_cli_stays_torch_free_and_never_imports_trainer():
    code = "import sys, goodhart_prof.cli; print(sorted({'torch', 'trainer'} & set(sys.modules)))"
    res = run_cmd(["-c", code])
    assert res.returncode == 0 and res.stdout.strip() == "[]", res.stderr


def test_run_keeps_the_profilers_own_log_quiet_unless_verbose():
    """Kineto's lines (`ERROR ... gpuGetDeviceCount failed with code 35` on a CPU-only machine
    with a CUDA torch, `profiler_start`) are off unless --verbose; a level the user set wins."""
    from goodhart_prof.capture.settings import QUIET_KINETO
    given = _run_params([])
    given.pop("verbose", None)
    _, env = run_command(given.pop("iterations"), given.pop("mode"), dict(given), {})
    assert env["KINETO_LOG_LEVEL"] == QUIET_KINETO == "6"
    _, env = run_command(None, None, dict(given), {}, verbose=True)
    assert env["KINETO_LOG_LEVEL"] == "4"  # Kineto's own default: the hooks quiet an unset level
    _, env = run_command(None, None, dict(given), {"KINETO_LOG_LEVEL": "0"}, verbose=True)
    assert env["KINETO_LOG_LEVEL"] == "0"
    _, env = run_command(None, None, dict(given), {"KINETO_LOG_LEVEL": "2"})
    assert env["KINETO_LOG_LEVEL"] == "2"
