"""Every output a command writes fails the same way when it cannot be written: one line,
`Error: <path>: cannot write: <reason>`, exit 2, no traceback, the user's existing file untouched
and no temporary file left. Made for real where mount(2) is allowed (tests/support/mounts.py): a full
disk (a 64 KiB tmpfs), a read-only folder (a read-only bind mount: root ignores chmod), a parent
that is a file, a path under /proc; a missing folder is created."""
from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path

import pytest

from goodhart_prof.analysis import analyze
from goodhart_prof.perflog.log_file import append
from goodhart_prof.perflog.measure import measure
from goodhart_prof.trace.load import load
from tests.support.helpers import TINY_CONFIG, clean_env, error_lines
from tests.support.mounts import fill, read_only, small_disk
from tests.support.paths import DATA

MI250 = DATA / "hta" / "mi250_minitoy_rocm.json.gz"
OLD = b"the user's previous file"
# command -> (output file name, arguments given that output)
COMMANDS = {
    "export_pftrace": ("out.pftrace", lambda o: ["export", str(MI250), "-o", o, "--force"]),
    "export_json": ("out.json.gz", lambda o: ["export", str(MI250), "-o", o, "--force"]),
    "diff_html": ("diff.html", lambda o: ["diff", str(MI250), str(MI250), "--html", o, "--force"]),
    "analyze_html": ("report.html", lambda o: ["analyze", str(MI250), "--html", o, "--force"]),
    "log_add": ("PERFLOG.md", lambda o: ["log", "add", str(MI250), "--change", "next", "--log", o]),
}
CONDITIONS = ("parent_is_file", "read_only", "disk_full", "proc", "missing_folder")
REASONS = {"read_only": "Read-only file system", "disk_full": "No space left on device",
           "proc": "No such file or directory"}


def _cli(args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "goodhart_prof.cli", *args], capture_output=True,
                          text=True, timeout=300, env=clean_env())


def _existing(command: str, target: Path, measured: dict) -> None:
    """What the user had before: a file to keep, or for the log a row in both twins."""
    if command == "log_add":
        append(measured, "the first row", target)
    else:
        target.write_bytes(OLD)


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    """Every command under every condition, run as the user runs it (a subprocess)."""
    root = tmp_path_factory.mktemp("writes")
    measured = measure(analyze(load(MI250)), MI250)
    with ExitStack() as stack:
        plan, before, skipped = {}, {}, {}
        (root / "afile").write_text("a file where a folder should be\n")
        for command, (name, args) in COMMANDS.items():
            plan[command, "parent_is_file"] = root / "afile" / name
            plan[command, "proc"] = Path("/proc") / f"goodhart-prof-test-{name}"
            plan[command, "missing_folder"] = root / "new" / command / "deeper" / name
            (root / "read_only" / command).mkdir(parents=True)
            plan[command, "read_only"] = root / "read_only" / command / name
            _existing(command, plan[command, "read_only"], measured)
            plan[command, "disk_full"] = root / "disk_full" / command / name
        ro = stack.enter_context(read_only(root / "read_only"))
        disk = stack.enter_context(small_disk(root / "disk_full"))
        if disk is not None:  # the user's files on the small disk, then the disk filled
            for command in COMMANDS:
                (disk / command).mkdir()
                _existing(command, plan[command, "disk_full"], measured)
            fill(disk)
        for cond, mounted in (("read_only", ro), ("disk_full", disk)):
            if mounted is None:
                skipped[cond] = "mount(2) is not allowed here (not root?): cannot make this failure"
        for (command, cond), target in plan.items():
            if cond in ("read_only", "disk_full"):
                before[command, cond] = _snapshot(target.parent)
        jobs = {key: COMMANDS[key[0]][1](str(target)) for key, target in plan.items()
                if key[1] not in skipped}
        with ThreadPoolExecutor(2) as pool:
            futures = {key: pool.submit(_cli, args) for key, args in jobs.items()}
            results = {key: f.result() for key, f in futures.items()}
        after = {key: _snapshot(plan[key].parent) for key in before if key[1] not in skipped}
        yield plan, results, before, after, skipped


@pytest.mark.parametrize("condition", CONDITIONS)
@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_failed_write_is_one_line_and_keeps_the_old_file(outcomes, command, condition):
    plan, results, before, after, skipped = outcomes
    if condition in skipped:
        pytest.skip(skipped[condition])
    target, res = plan[command, condition], results[command, condition]
    assert "Traceback" not in res.stderr, res.stderr
    if condition == "missing_folder":  # made, as before
        assert res.returncode == 0, res.stderr
        assert target.is_file() and target.stat().st_size > 0
        return
    assert res.returncode == 2, (res.returncode, res.stderr)
    lines = error_lines(res.stderr)
    if command == "export_json" or command == "export_pftrace":
        lines = [line for line in lines if not line.startswith("warning: ")]
    assert len(lines) == 1, res.stderr
    reason = REASONS.get(condition) or f"{target.parent} is a file, not a folder"
    assert lines[0] == f"Error: {target}: cannot write: {reason}", lines[0]
    assert not target.exists() or condition in ("read_only", "disk_full")
    if condition in ("read_only", "disk_full"):
        assert after[command, condition] == before[command, condition]  # untouched, no temporary


def test_writing_names_the_file_and_keeps_it(tmp_path, monkeypatch):
    """In-process, where no mount is needed: the write itself is refused half-way."""
    from goodhart_prof.fileio import WriteError, writing

    target = tmp_path / "report.html"
    target.write_bytes(OLD)

    def refuse(self, data, *args, **kwargs):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(Path, "write_text", refuse)
    with pytest.raises(WriteError) as err:
        with writing(target) as tmp:
            tmp.write_text("<html>")
    assert str(err.value.message) == f"{target}: cannot write: No space left on device"
    assert _snapshot(tmp_path) == {"report.html": OLD}


# -- `run` -----------------------------------------------------------------------------------------
def _run(root: Path, tmp_path: Path, *extra: str) -> subprocess.CompletedProcess:
    cfg = tmp_path / "tiny.toml"
    cfg.write_text(TINY_CONFIG + "warmup = false\n")
    return subprocess.run([sys.executable, "-m", "goodhart_prof.cli", "run", "--iterations", "1",
                           "--config", str(cfg), "--output-dir", str(root), "--no-progress",
                           "--name", "r", *extra], capture_output=True, text=True, timeout=300,
                          env=clean_env(OMP_NUM_THREADS="1"))


def test_run_into_an_unwritable_root_is_one_line(tmp_path):
    (tmp_path / "afile").write_text("x")
    cases = {tmp_path / "afile" / "traces": f"{tmp_path / 'afile'} is a file, not a folder",
             Path("/proc/goodhart-prof-test-traces"): "No such file or directory"}
    with read_only(tmp_path / "ro") as ro:
        if ro is not None:
            cases[ro / "traces"] = "Read-only file system"
        for root, reason in cases.items():
            res = _run(root, tmp_path)
            assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
            assert error_lines(res.stderr) == [f"Error: {root}: cannot write: {reason}"]


def test_run_on_a_full_disk_is_one_line(tmp_path):
    """The trainer starts, and its first write that does not fit stops it with one line (its
    own), which `run` passes on with the trainer's exit code 2."""
    with small_disk(tmp_path / "disk", "64k") as disk:
        if disk is None:
            pytest.skip("mount(2) is not allowed here (not root?): cannot make a full disk")
        fill(disk, leave=8192)
        res = _run(disk / "traces", tmp_path)
        assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
        lines = [line for line in error_lines(res.stderr) if line.startswith("Error: ")]
        assert len(lines) == 1 and lines[0].startswith(f"Error: {disk / 'traces' / 'r'}/"), res.stderr
        assert lines[0].endswith(": cannot write: No space left on device"), lines[0]
        left = [p.name for p in (disk / "traces" / "r").iterdir()]
        assert not [n for n in left if ".tmp" in n], left
        assert not (disk / "traces" / "latest").exists()
