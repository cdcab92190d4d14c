"""Kernel names as people read them: the short form tables and titles show (the full name stays
in the trace, the JSON and hover text). Shared by analysis (finding titles) and report (tables)."""
from __future__ import annotations

import re
from typing import Any

_RETURN_TYPE = re.compile(r"^(?:void|std::enable_if<.*?>::type)\s+")
_ANONYMOUS = re.compile(r"\(anonymous namespace\)::")
_CPP_NAME = re.compile(r"^(?:[A-Za-z_~][\w~]*::)*[A-Za-z_~][\w~]*(?=[<(])")  # a qualified name, then `<` or `(`
_WRAPPERS = re.compile(r"^(?:\w+::)*(?:Kernel\d?|device_kernel)$")  # CUTLASS's `cutlass::Kernel2<the_kernel...>`
_GENERIC = {"kernel", "Kernel", "run", "main", "impl"}


def _inside(text: str, start: int) -> str:
    """The text between the `<` at `start` and its matching `>`."""
    depth = 0
    for i in range(start, len(text)):
        if text[i] == "<":
            depth += 1
        elif text[i] == ">":
            depth -= 1
            if depth == 0:
                return text[start + 1:i]
    return text[start + 1:]


def kernel_name(name: Any, width: int | None = None) -> str:
    """A kernel's short name for tables: a C++ kernel loses its return type, namespaces, template
    arguments and parameters (`void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float,
    ...>(...)` -> `cunn_SoftMaxForward<...>`; CUTLASS's `cutlass::Kernel2<X>(X::Params)` -> `X`);
    Triton, cuBLAS, hipBLASLt/Tensile (`Cijk_...`) and other plain names stay as they are. With a
    width, cut to it with an ellipsis. The full name stays in the JSON and in hover text."""
    full = str(name)
    text = _ANONYMOUS.sub("", _RETURN_TYPE.sub("", full.strip()))
    for _ in range(3):  # a wrapper's inner kernel may itself be qualified and templated
        match = _CPP_NAME.match(text)
        if not match:  # Triton, cuBLAS, Tensile, NCCL without arguments, memcpy: as they are
            break
        qualified, end = match.group(0), match.end()
        templated = text[end] == "<"
        if templated and _WRAPPERS.match(qualified):
            inner = _inside(text, end).split(",")[0].strip()
            if inner:
                text = inner
                continue
        parts = qualified.split("::")
        base = parts[-1]
        if base in _GENERIC and len(parts) > 1:
            base = f"{parts[-2]}::{base}"
        text = base + ("<...>" if templated else "")
        break
    return text if width is None or len(text) <= width else text[: width - 1] + "…"
