"""The `goodhart-prof` console script: the CLI imported inside a guard, so a Ctrl-C while click,
the CLI's modules (and, for `run`, nothing yet created) are being imported ends as every other
interrupt does, `Aborted.` and exit 130, not a KeyboardInterrupt traceback (issue 32's own round
saw one in the first 0.1-0.3 s of a command). Python's own start-up (`site`) comes before this and
stays Python's."""
from __future__ import annotations

import sys


def main(args: "list[str] | None" = None) -> None:
    try:
        from .cli import main as cli_main
    except KeyboardInterrupt:
        sys.stderr.write("Aborted.\n")
        raise SystemExit(130) from None
    cli_main(args)
