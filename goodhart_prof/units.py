"""Figures as people read them, and the sizes behind them: one home for each, below every layer.

- Durations (trace times are microseconds): `duration` picks the unit that fits (the reports'
  tables, `1.234 ms`; `significant=True`: `1.23 ms`, the HTML page), `duration_sig` is the page's
  spelling of it, `ms_text` writes a time in milliseconds with the caller's number format (the
  findings' sentences: `12.34 ms`, `1,234.5 ms`), `brief_duration` the rules' short form (`12.34
  ms` from a millisecond up, else `850 us`).
- Bytes: `bytes_text` in the binary unit that fits (`1.5 GiB`, `12.0 MiB`, `48 B`).
- Devices: `device_key` is the JSON key of a device (`rank0/gpu1`, `rank0/host`), `device_text`
  the reports' label (`rank 0 / gpu 1`).
- Element sizes: `ELEMENT_BYTES` maps every spelling of a dtype the trace or the analysis uses
  (our short names `fp32`, c10 ScalarType names `Float` that record_param_comms writes, C++ type
  names `float` that `Input type` writes) to its bytes per element.

Imports nothing of the package, so trace/, analysis/ and report/ can all use it.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

MISSING = "-"


def _finite(value: Any) -> bool:
    return value is not None and isinstance(value, (int, float, np.number)) and math.isfinite(float(value))


def duration(us: Any, significant: bool = False) -> str:
    """Microseconds in the unit that fits: `1.234 ms` (three decimals, the terminal's tables), or
    with `significant` three significant digits (`1.23 ms`, the HTML page); `-` when missing."""
    if not _finite(us):
        return MISSING
    us = float(us)
    if significant:
        us = float(f"{us:.3g}")  # rounded first, so 999.7 us is `1 ms`, never `1e+03 us`
        if us >= 1e6:
            return f"{us / 1e6:,.3g} s" if us < 1e7 else f"{us / 1e6:,.1f} s"
        if us >= 1e3:
            return f"{us / 1e3:,.3g} ms"
        return f"{us:,.3g} us"
    if round(us / 1e3, 3) >= 1e3:  # the unit of the rounded figure: 999,999.6 us is `1.000 s`
        return f"{us / 1e6:,.3f} s"
    if round(us, 1) >= 1e3:
        return f"{us / 1e3:,.3f} ms"
    return f"{us:,.1f} us"


def duration_sig(us: Any) -> str:
    """Durations on the HTML page: three significant digits."""
    return duration(us, significant=True)


def ms_text(us: float, spec: str = ".2f") -> str:
    """Microseconds written in milliseconds, the number formatted by `spec` (`.2f`: `12.34 ms`,
    `,.1f`: `1,234.5 ms`, `.3g`: `12.3 ms`, `+.3f`: `+0.012 ms`)."""
    return f"{us / 1e3:{spec}} ms"


def brief_duration(us: float) -> str:
    """The rules' short form: `12.34 ms` from a millisecond up (either sign), else `850 us`."""
    return ms_text(us) if abs(us) >= 1000 else f"{us:.0f} us"


def bytes_text(nbytes: Any, signed: bool = False) -> str:
    """Bytes in the binary unit that fits (`1.5 GiB`, `12.0 MiB`, `48 B`; `+` before a growth with
    `signed`); `-` when missing."""
    if not _finite(nbytes):
        return MISSING
    value = float(nbytes)
    sign = "+" if signed and value > 0 else "-" if value < 0 else ""
    value = abs(value)
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if value >= size:
            return f"{sign}{value / size:,.1f} {unit}"
    return f"{sign}{value:,.0f} B"


def device_key(rank: Any, device: Any, host: bool = False) -> str:
    """A device's key in the JSON documents: `rank0/gpu1`, or `rank0/host` for the host CPU."""
    return f"rank{int(rank)}/host" if host else f"rank{int(rank)}/gpu{int(device)}"


def device_text(rank: Any, device: Any) -> str:
    """A GPU as the reports name it: `rank 0 / gpu 1` (the values as given)."""
    return f"rank {rank} / gpu {device}"


def devices_text(devices: list[tuple[int, int]]) -> str:
    """Several (rank, device) pairs: `rank 0 / gpu 0` for one, `8 devices (rank 0 / gpu 0 .. rank 7
    / gpu 7)` for more, first and last as given."""
    if len(devices) == 1:
        return device_text(*devices[0])
    return f"{len(devices)} devices ({device_text(*devices[0])} .. {device_text(*devices[-1])})"


def _by_spelling(rows: list[tuple]) -> dict[str, int]:
    table: dict[str, int] = {}
    for size, *names in rows:
        for name in names:
            assert name not in table, f"{name} spelt twice"
            table[name] = size
    return table


# Bytes per element; each row: the size, then every spelling of the dtype (our short name, the
# c10 ScalarType name, the C++ type names). Keys never clash, so one table serves every caller.
ELEMENT_BYTES = _by_spelling([
    (8, "fp64", "Double", "double"),
    (4, "fp32", "tf32", "Float", "float"),
    (2, "fp16", "Half", "c10::Half"),
    (2, "bf16", "BFloat16", "c10::BFloat16"),
    (1, "fp8", "Float8_e4m3fn", "c10::Float8_e4m3fn"),
    (1, "Float8_e5m2", "c10::Float8_e5m2"),
    (1, "Float8_e4m3fnuz", "c10::Float8_e4m3fnuz"),
    (1, "Float8_e5m2fnuz", "c10::Float8_e5m2fnuz"),
    (1, "int8", "Char", "signed char"),
    (1, "Byte", "unsigned char"),
    (1, "Bool", "bool"),
    (2, "Short", "short", "short int"),
    (4, "Int", "int"),
    (8, "Long", "long", "long int"),
    (2, "UInt16", "unsigned short"),
    (4, "UInt32", "unsigned int"),
    (8, "UInt64", "unsigned long"),
    (4, "c10::complex<c10::Half>"),
    (8, "ComplexFloat", "c10::complex<float>"),
    (16, "ComplexDouble", "c10::complex<double>"),
])
