"""A profiler's trace file: written off the training loop, checked, and read back for its labels.

Closing a window costs the loop three things (docs/benchmarks.md, "Closing the window"): stopping
the profiler (Kineto gathers its activity), exporting the JSON (torch writes it from C++, holding
the GIL, so a thread would not take it off the loop) and compressing it. The first two need the
profiler, which lives in the training process; the third is the largest (gzip at level 9 took
longer than the stop and the export together) and needs only the JSON file. So `start_write`
exports the JSON beside the final name and hands it to a child process, which compresses it,
checks it and renames it into place while the loop goes on; `PendingWrite.wait` (the hooks call
it when training ends, or when it is interrupted) reports the child's outcome as the write's.

The child is this module run as a program: `python -m goodhart_prof.capture.trace_files JSON
FINAL`. It starts a session of its own, so a Ctrl-C at the terminal does not cut a finished
window's trace short; its temporaries follow fileio's naming, so a dead writer's are cleaned.
Torch-free: the launcher reads trace labels (`traced_iterations`) without torch.
"""
from __future__ import annotations

import errno
import gzip
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..fileio import WriteError, write_error, writing

# The iteration after a lite window, recorded with Python stacks for the sites of the window's
# events (hooks.py), goes to <trace folder>/attribution/<same name>: no reader of the folder's own
# rank files takes it for a rank.
ATTRIBUTION_DIR = "attribution"
GZIP_LEVEL = 6  # zlib's default: within 2% of level 9's size on traces, about half its time


def trace_name(rank: int) -> str:
    return f"rank-{rank}.pt.trace.json.gz"


@dataclass
class PendingWrite:
    """A trace whose JSON is exported and being compressed into `path` by a child process."""

    path: Path
    json_tmp: Path
    child: subprocess.Popen | None

    def done(self) -> bool:
        return self.child is None or self.child.poll() is not None

    def wait(self) -> None:
        """Wait for the child; WriteError (`PATH: cannot write: ...`, exit 2) when it failed."""
        child, self.child = self.child, None
        if child is None:
            return
        _, err = child.communicate()
        _remove_json(self.json_tmp)  # the child removes it; a killed child may not have
        if child.returncode != 0:
            reason = err.decode("utf-8", "replace").strip().splitlines()
            raise WriteError(self.path, reason[-1] if reason else
                             f"the trace writer ended with exit code {child.returncode}")


def start_write(prof: Any, path: Path) -> PendingWrite:
    """Export `prof`'s trace as JSON beside `path` and start compressing it into `path` in a
    child process (module docstring); WriteError when the export itself fails."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        json_tmp = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp.json")
    except OSError as exc:
        raise write_error(path, exc) from None
    try:
        prof.export_chrome_trace(str(json_tmp))  # not .gz: torch would write to TMPDIR first
        check_json_written(json_tmp)
    except OSError as exc:
        _remove_json(json_tmp)
        raise write_error(path, exc) from None
    except BaseException:
        _remove_json(json_tmp)
        raise
    child = subprocess.Popen([sys.executable, "-m", __name__, str(json_tmp), str(path)],
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             env=_child_env(), start_new_session=True)
    return PendingWrite(path, json_tmp, child)


def write_profiler_trace(prof: Any, path: Path) -> None:
    """The trace as gzipped JSON at `path` now (export, compress, check, rename), or WriteError."""
    start_write(prof, path).wait()


def _child_env() -> dict[str, str]:
    """This process's environment, with the folder that holds goodhart_prof first on the path, so
    the child imports the same package however this process found it."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    return env


def _remove_json(json_tmp: Path) -> None:
    for stale in (json_tmp, Path(f"{json_tmp}.tmp")):  # Kineto's own, left when it failed
        stale.unlink(missing_ok=True)


def compress(json_tmp: Path, path: Path) -> None:
    """The child's work: the JSON at `json_tmp` gzipped into `path` (temporary + rename), its
    size checked against the gzip's trailer; the JSON removed in every case. WriteError."""
    try:
        size = check_json_written(json_tmp)
        with writing(path, suffix=".gz") as gz_tmp:
            with open(json_tmp, "rb") as fin, gzip.open(gz_tmp, "wb", compresslevel=GZIP_LEVEL) as fout:
                shutil.copyfileobj(fin, fout, 1 << 20)
            check_gzip_written(gz_tmp, size)
    except OSError as exc:
        raise write_error(path, exc) from None
    finally:
        _remove_json(json_tmp)


def check_json_written(path: Path) -> int:
    """The size of the JSON document at `path`; OSError when it is missing (Kineto did not get
    to rename its `.tmp`), empty, or does not end its object (a write that stopped short).
    Kineto writes it from C++ and reports no failed write, so what it wrote is checked."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        partial = Path(f"{path}.tmp")
        raise short_write(path, partial.stat().st_size if partial.exists() else 0) from None
    with open(path, "rb") as fh:
        head = fh.read(64).lstrip()
        fh.seek(max(0, size - 64))
        tail = fh.read().rstrip()
    if not head.startswith(b"{") or not tail.endswith(b"}"):
        raise short_write(path, size)
    return size


def short_write(path: Path, written: int) -> OSError:
    """Why a write stopped at `written` bytes, where that can be established: the file size limit
    (`ulimit -f`) reached, or a full disk (under 64 KiB free while the partial file is still on it);
    else only that it stopped short. The system's own words, as every other write failure says."""
    import resource

    soft = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    if soft != resource.RLIM_INFINITY and written >= soft:
        return OSError(errno.EFBIG, os.strerror(errno.EFBIG))
    try:
        st = os.statvfs(path.parent)
        free = (st.f_bfree if os.geteuid() == 0 else st.f_bavail) * st.f_frsize
    except OSError:
        free = None
    if free is not None and free < 64 * 1024:
        return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    return OSError(errno.EIO, f"the profiler's JSON stops short ({written:,} bytes written)")


def check_gzip_written(path: Path, size: int) -> None:
    """OSError unless the gzip at `path` ends with the trailer of `size` bytes of input."""
    with open(path, "rb") as fh:
        fh.seek(0, os.SEEK_END)
        if fh.tell() < 18:
            raise OSError(errno.EIO, "the gzip stops short")
        fh.seek(-4, os.SEEK_END)
        isize = int.from_bytes(fh.read(4), "little")
    if isize != size % 2**32:
        raise OSError(errno.EIO, f"the gzip holds {isize:,} bytes of the {size:,} written")


_STEP = re.compile(rb'"name"\s*:\s*"ProfilerStep#(\d{1,19})"')


def traced_iterations(path: Path) -> list[int]:
    """The iterations a trace file holds (its `ProfilerStep#N` labels), read in bounded steps
    without a JSON parser (the trainer needs none): what run.json says of a trace it kept."""
    found: set[int] = set()
    opener = gzip.open if str(path).endswith(".gz") else open
    tail = b""
    with opener(path, "rb") as fh:
        while chunk := fh.read(1 << 22):
            block = tail + chunk
            found.update(int(m.group(1)) for m in _STEP.finditer(block))
            tail = block[-64:]  # a label cut between two reads is found in the next block
    return sorted(found)


def yield_to_the_loop() -> None:
    """The lowest priority (nice 19): the compression must not slow the loop's next iterations
    (on 2 cores a torch loop with 2 threads ran its iterations after the window ~70x slower beside
    a child at normal priority: 0.4 -> 28 ms). Not SCHED_IDLE: a process cannot leave it without
    privileges, and on a machine that other work keeps busy it would never finish; at nice 19 it
    still gets a small share, and every idle core (the loop waiting in `close`)."""
    try:
        os.nice(19)
    except OSError:
        pass


def main(argv: list[str]) -> int:
    """The child: `JSON FINAL`; exit 0, or 2 with the reason on stderr (its last line)."""
    yield_to_the_loop()
    try:
        compress(Path(argv[0]), Path(argv[1]))
    except WriteError as exc:
        sys.stderr.write(exc.reason + "\n")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
