"""Errors shown to users: one line, exit code 2, no traceback.

Every message is made printable (`textsafe.printable`): a control character in it (a file name's
newline, a trace's `ESC[2J`) is written as its escape, so an error is always one line and never
acts on the terminal. Name a path in a message with `textsafe.quote_path` to have it quoted when it
needs escapes."""
from __future__ import annotations

import click

from .textsafe import printable


class UserError(click.ClickException):
    """Bad input from the user (a flag, a file, a setting). Printed as `Error: <message>`."""

    exit_code = 2

    def __init__(self, message: str) -> None:
        super().__init__(printable(message))


class TraceError(UserError):
    """A trace input cannot be used; the message names the file and the problem."""


def warn(message: str) -> None:
    """A warning on stderr, one printable line: `warning: <message>`."""
    click.echo(f"warning: {printable(message)}", err=True)


def run_cli(command: click.Command, prog_name: str, args: list[str] | None = None) -> None:
    """Run a click command so that every user error is one line on stderr and exit code 2.

    Click's own usage errors print a usage block first; we print just the message.
    """
    import sys

    try:
        code = command.main(args=args, prog_name=prog_name, standalone_mode=False)
    except click.ClickException as exc:  # usage errors, UserError and click's own
        click.echo(f"Error: {printable(exc.format_message())}", err=True)
        sys.exit(2 if isinstance(exc, click.UsageError) else exc.exit_code)
    except click.Abort:
        click.echo("Aborted.", err=True)
        sys.exit(130)
    sys.exit(code if isinstance(code, int) else 0)
