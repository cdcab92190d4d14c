"""The trace's event phases, one list for both readers of a trace file.

A Chrome/Kineto trace is a list of events, each tagged by its phase `ph`. decode.py (the tables
the analyses use) and extra_events.py (what the tables leave out, read again for the Perfetto
export) each type the phases they read with structs of their own fields, and recognise every
other phase of `PHASES` with `skipped_phases`: a struct per phase that skips its fields, which is
what keeps a typed decode cheaper than decoding everything. An event of a phase not listed here
makes the decoders fall back to event-by-event decoding (decode.py `odd_phase`).
"""
from __future__ import annotations

import msgspec

# Every phase of the Trace Event Format: complete X, duration B/E, async b/e/n, flow s/t/f,
# instant i (and the deprecated I), counter C, sample P, object O/N/D, metadata M, mark R,
# clock sync c, memory dump v (and T, a legacy step).
PHASES = "XBEbenstfiICPONDRTMcv"


def skipped_phases(read: str) -> tuple[type, ...]:
    """A struct for each phase of PHASES not in `read`: it matches the event's tag and decodes
    none of its fields."""
    return tuple(msgspec.defstruct(f"Skipped_{tag}", [], tag_field="ph", tag=tag, frozen=True, gc=False)
                 for tag in PHASES if tag not in read)
