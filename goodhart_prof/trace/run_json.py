"""Reading a run folder's `run.json`, checked: the file is small, JSON, an object, and the fields
we use have their types (docs/DESIGN.md, `run.json`).

A run.json is a few KB (the trainer's config, versions, per-iteration memory): one over
`MAX_BYTES` is refused before it is read, and so is a nesting past the decoder's recursion limit.
The fields read by `log add`, `diff` and the run folders are checked with msgspec (a `true` is
not a number, a world size is 1 or more); every other field is kept as it is. Torch- and
pandas-free: the run folders (goodhart_prof/capture/runs.py) read it too.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

import msgspec

from ..errors import UserError
from ..textsafe import quote_path

MAX_BYTES = 16 << 20  # 16 MiB: the trainer's run.json is 3-10 KB


class RunJsonError(UserError):
    """A run.json that cannot be used: `PATH: problem`, exit 2."""


Iteration = Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)]  # int64, as the tables hold them


class _Profiling(msgspec.Struct):
    enabled: bool = False
    mode: str | None = None
    iterations: tuple[Iteration, Iteration] | None = None


class _Checked(msgspec.Struct):
    """The fields read anywhere, with their types; other fields are not looked at."""

    schema: str | None = None
    created: str | None = None
    world_size: Annotated[int, msgspec.Meta(ge=1, le=2**31 - 1)] | None = None  # a rank is an int32
    env_steps_per_s: Annotated[float, msgspec.Meta(ge=0)] | None = None
    profiling: _Profiling | None = None
    interrupted: dict[str, Any] | None = None


def read_run_json(path: str | os.PathLike) -> dict[str, Any]:
    """The record in run.json at path, checked (module docstring); RunJsonError naming the file
    when it is too big, unreadable, not JSON, too deeply nested, or a field has the wrong type."""
    path = Path(path)
    try:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if size > MAX_BYTES:
                raise RunJsonError(f"{quote_path(path)}: not a run.json ({size:,} bytes; a run.json is at "
                                   f"most {MAX_BYTES >> 20} MiB)")
            data = fh.read(MAX_BYTES + 1)
    except OSError as exc:
        raise RunJsonError(f"{quote_path(path)}: cannot read run.json ({exc.strerror or exc})") from None
    if len(data) > MAX_BYTES:
        raise RunJsonError(f"{quote_path(path)}: not a run.json (over {MAX_BYTES >> 20} MiB)")
    try:
        record = msgspec.json.decode(data)
        if not isinstance(record, dict):
            raise RunJsonError(f"{quote_path(path)}: not a run.json (the top level is not an object)")
        msgspec.convert(record, _Checked)
    except RecursionError:
        raise RunJsonError(f"{quote_path(path)}: not a run.json (nested too deeply)") from None
    except msgspec.ValidationError as exc:
        raise RunJsonError(f"{quote_path(path)}: not a run.json ({exc})") from None
    except msgspec.DecodeError as exc:
        raise RunJsonError(f"{quote_path(path)}: not a readable run.json (not JSON: {exc})") from None
    return record
