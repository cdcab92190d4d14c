"""goodhart_prof/errors.py: user errors are one printable line with exit code 2, `out_of_memory`
turns a MemoryError into a TraceError naming the input and its size, `warn` writes one line, and
`run_cli` maps click's errors, aborts and MemoryError to one stderr line and an exit code."""
from __future__ import annotations

import click
import pytest

from goodhart_prof.errors import TraceError, UserError, out_of_memory, run_cli, warn


def test_a_user_error_exits_2_and_escapes_control_characters():
    error = UserError("bad file a\nb\x1b[2J.json")
    assert error.exit_code == 2
    assert error.format_message() == "bad file a\\nb\\x1b[2J.json"
    assert isinstance(TraceError("x"), UserError)


def test_out_of_memory_names_the_file_and_its_size(tmp_path):
    path = tmp_path / "t.json"
    path.write_bytes(b"x" * 2_500_000)
    with pytest.raises(TraceError) as info:
        with out_of_memory(path):
            raise MemoryError
    message = info.value.format_message()
    assert message.startswith(f"{path} (2.5 MB): out of memory loading or analysing it: it needed more than ")


def test_out_of_memory_names_two_inputs_a_missing_one_and_a_folder(tmp_path):
    folder = tmp_path / "ranks"
    folder.mkdir()
    (folder / "a.json").write_bytes(b"x" * 1_000_000)
    (folder / "b.json").write_bytes(b"x" * 500_000)
    (folder / "sub").mkdir()  # a subfolder is not counted
    with pytest.raises(TraceError) as info:
        with out_of_memory(folder, tmp_path / "gone.json"):
            raise MemoryError
    assert info.value.format_message().startswith(
        f"{folder} (1.5 MB) and {tmp_path / 'gone.json'} (size unknown): out of memory loading or "
        "analysing them: ")


def test_out_of_memory_lets_other_errors_and_success_through(tmp_path):
    with pytest.raises(ValueError, match="other"):
        with out_of_memory(tmp_path):
            raise ValueError("other")
    with out_of_memory(tmp_path):
        result = 1 + 1
    assert result == 2


def test_warn_writes_one_printable_line_on_stderr(capsys):
    warn("skipped a\nb")
    out = capsys.readouterr()
    assert out.out == "" and out.err == "warning: skipped a\\nb\n"


@click.command()
@click.option("--fail", type=click.Choice(["user", "abort", "memory", "none"]), default="none")
def _command(fail):
    if fail == "user":
        raise TraceError("t.json: not a trace")
    if fail == "abort":
        raise click.Abort
    if fail == "memory":
        raise MemoryError
    click.echo("ok")


@pytest.mark.parametrize("args, code, err", [
    (["--fail", "user"], 2, "Error: t.json: not a trace\n"),
    (["--fail", "abort"], 130, "Aborted.\n"),
    (["--fail", "bogus"], 2, "Error: Invalid value for '--fail': 'bogus' is not one of 'user', 'abort', "
                             "'memory', 'none'.\n"),
    (["--fail", "none"], 0, ""),
])
def test_run_cli_gives_one_error_line_and_the_exit_code(args, code, err, capsys):
    with pytest.raises(SystemExit) as info:
        run_cli(_command, "prog", args)
    out = capsys.readouterr()
    assert info.value.code == code and out.err == err
    assert out.out == ("ok\n" if code == 0 else "")


def test_run_cli_makes_a_memory_error_one_line(capsys):
    with pytest.raises(SystemExit) as info:
        run_cli(_command, "prog", ["--fail", "memory"])
    err = capsys.readouterr().err
    assert info.value.code == 2 and err.startswith("Error: out of memory (it needed more than the ")
    assert err.count("\n") == 1
