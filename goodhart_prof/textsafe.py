"""Text from a trace or a file name, made safe to print on a terminal: one function for every
text output (reports, warnings, errors), so a kernel named `ESC[2J` cannot clear the screen and a
file name holding a newline cannot split an error line.

`printable` writes each character that a terminal acts on, rather than shows, as Python writes it
in a string literal (`\\x1b`, `\\n`, `\\t`, `\\x9b`, `\\u202e`): C0 controls (tab and newline too: they
break a table's columns and a one-line error), DEL, C1 controls (`\\x9b` is CSI on many terminals),
the line and paragraph separators U+2028/2029, the bidi controls that reorder a line (U+061C,
U+200E/200F, U+202A-202E, U+2066-2069) and lone surrogates (a file name's undecodable bytes,
which would make printing raise). Every other character, non-ASCII letters included, is kept.
The data is never changed: JSON output keeps the real string (JSON escapes controls itself).

`quote_path` names a path in a message: unchanged when it needs no escape (`/data/run 1.json`),
else quoted like a Python string literal (`'/data/a\\nb.json'`), so one error stays one line and
a name that really holds a backslash is told apart from an escaped character.

No imports from the package: errors.py (below everything) uses it.
"""
from __future__ import annotations

import os
import re

_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e"
                     "\u2066-\u2069\ud800-\udfff]")
_NAMED = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def _escape(match: re.Match) -> str:
    char = match.group()
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: object) -> str:
    """`text` (str() of it) with every terminal control character written as its escape."""
    text = text if isinstance(text, str) else str(text)
    return _UNSAFE.sub(_escape, text) if _UNSAFE.search(text) else text


def needs_escape(text: str) -> bool:
    return _UNSAFE.search(text) is not None


def quote_path(path: str | os.PathLike) -> str:
    """A path as messages name it: as is when printable, else quoted with its escapes."""
    try:
        text = os.fspath(path)
    except TypeError:  # not a path (None, a number): as str() writes it
        text = str(path)
    if isinstance(text, bytes):
        text = os.fsdecode(text)
    if not needs_escape(text):
        return text
    return "'" + printable(text.replace("\\", "\\\\").replace("'", "\\'")) + "'"
