"""Errors shown to users: one line, exit code 2, no traceback."""
from __future__ import annotations

import click


class UserError(click.ClickException):
    """Bad input from the user (a flag, a file, a setting). Printed as `Error: <message>`."""

    exit_code = 2


def run_cli(command: click.Command, prog_name: str, args: list[str] | None = None) -> None:
    """Run a click command so that every user error is one line on stderr and exit code 2.

    Click's own usage errors print a usage block first; we print just the message.
    """
    import sys

    try:
        code = command.main(args=args, prog_name=prog_name, standalone_mode=False)
    except click.UsageError as exc:
        click.echo(f"Error: {exc.format_message()}", err=True)
        sys.exit(2)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except click.Abort:
        click.echo("Aborted.", err=True)
        sys.exit(130)
    sys.exit(code if isinstance(code, int) else 0)
