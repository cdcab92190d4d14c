"""`ulimit -f 0` (no file can be written at all): torch's import cannot find a temporary folder;
the trainer says so in one line, exit 2, before importing it (issue 32's own round found a
FileNotFoundError traceback)."""
from __future__ import annotations

import resource
import signal
import subprocess
import sys
from tests.support.paths import ROOT



def _no_writes():
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write then fails (EFBIG) instead of killing
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))


def test_no_writable_temp_folder_is_one_line(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "trainer", "--total-iterations", "1",
                           "--output-dir", str(tmp_path / "out")], cwd=ROOT, preexec_fn=_no_writes,
                          capture_output=True, text=True, timeout=120)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr[-800:]
    assert lines[0].startswith("Error: cannot start training: no folder to write a temporary file in")
    assert "ulimit -f" in lines[0] and not (tmp_path / "out").exists()
