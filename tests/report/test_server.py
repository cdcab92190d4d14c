"""`goodhart-prof open` / scripts/open_trace_in_ui: one file, once, to the Perfetto UI, on 127.0.0.1
only; real HTTP requests against a server on a free port."""
from __future__ import annotations

import http.client
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from goodhart_prof.report import server as server_module
from goodhart_prof.report.server import HOST, UI_ORIGIN, OneFileServer, ServeError, serve_once
from tests.support.helpers import clean_env, error_lines, run_cmd
from tests.support.paths import ROOT

NAME = "run 1.pftrace"  # a space: the URL quotes it


@pytest.fixture
def trace_file(tmp_path) -> Path:
    path = tmp_path / NAME
    path.write_bytes(os.urandom(3 * 1024 * 1024 + 17))
    return path


class Running:
    """A OneFileServer answering in a thread until the file was sent (or 10 s)."""

    def __init__(self, path: Path):
        self.path = path
        self.server = OneFileServer(path, port=0)
        self.result: list[bool] = []
        self.thread = threading.Thread(target=lambda: self.result.append(
            self.server.serve_until_sent(10)), daemon=True)
        self.thread.start()

    def request(self, method: str, target: str) -> tuple[int, dict, bytes]:
        conn = http.client.HTTPConnection(HOST, self.server.port, timeout=10)
        try:
            conn.putrequest(method, target, skip_host=False, skip_accept_encoding=True)
            conn.putheader("Origin", UI_ORIGIN)
            conn.endheaders()
            resp = conn.getresponse()
            return resp.status, dict(resp.getheaders()), resp.read()
        finally:
            conn.close()

    def stop(self) -> None:
        if self.thread.is_alive():  # fetch the file: the way a serving loop ends
            self.request("GET", "/" + self.path.name.replace(" ", "%20"))
        self.thread.join(10)
        self.server.server_close()


@pytest.fixture
def running(trace_file):
    run = Running(trace_file)
    yield run
    run.stop()


def test_serves_the_file_once_with_cors(running, trace_file):
    assert running.server.socket.getsockname()[0] == "127.0.0.1"
    assert running.server.ui_url == (f"https://ui.perfetto.dev/#!/?url=http://127.0.0.1:"
                                     f"{running.server.port}/run%201.pftrace")
    status, headers, _ = running.request("OPTIONS", "/run%201.pftrace")
    assert status == 204 and headers["Access-Control-Allow-Origin"] == UI_ORIGIN
    status, headers, body = running.request("HEAD", "/run%201.pftrace")
    assert status == 200 and body == b"" and int(headers["Content-Length"]) == trace_file.stat().st_size
    assert running.thread.is_alive()  # a HEAD or a preflight does not count as served
    status, headers, body = running.request("GET", "/run%201.pftrace")
    assert status == 200 and body == trace_file.read_bytes()
    assert headers["Access-Control-Allow-Origin"] == UI_ORIGIN
    running.thread.join(5)
    assert not running.thread.is_alive() and running.result == [True]


@pytest.mark.parametrize("target", [
    "/", "/other.pftrace", "/run%201.pftrace/", "/run%201.pftrace%00", "//run%201.pftrace",
    "/./run%201.pftrace",
    "/../run%201.pftrace", "/%2e%2e/run%201.pftrace", "/%2E%2E%2Frun%201.pftrace",
    "/..%2frun%201.pftrace", "/%2frun%201.pftrace", "/etc/passwd", "/%2Fetc%2Fpasswd",
    "/..%5crun%201.pftrace", "run%201.pftrace", "http://127.0.0.1/run%201.pftrace",
    # double-encoded: decoded once they are still not the name
    "/%252e%252e%252frun%25201.pftrace", "/%252E%252E/run%201.pftrace", "/run%25201.pftrace",
    "/..%255crun%201.pftrace", "/%25%32%65%25%32%65/run%201.pftrace",
    # backslashes, raw and encoded, and Windows-style roots
    "/..\\run%201.pftrace", "/%5c..%5crun%201.pftrace", "\\run%201.pftrace", "/%5crun%201.pftrace",
    "/C:%5crun%201.pftrace", "/c:/run%201.pftrace",
    # dot segments around the name, overlong UTF-8 dots and slashes
    "/.%2e/run%201.pftrace", "/run%201.pftrace/..", "/run%201.pftrace%2f", "/run%201.pftrace/.",
    "/run%201.pftrace/../run%201.pftrace", "/x/../run%201.pftrace", "/%c0%ae%c0%ae%c0%afrun%201.pftrace",
    "/%2e%2e%2f%2e%2e%2fetc%2fpasswd", "/run%201.pftrace;.html", "/RUN%201.PFTRACE",
])
def test_other_paths_are_404(running, trace_file, target):
    status, headers, body = running.request("GET", target)
    assert status == 404 and trace_file.read_bytes()[:64] not in body
    assert running.thread.is_alive()


@pytest.mark.parametrize("method", ["HEAD", "OPTIONS"])
def test_other_methods_on_other_paths_are_404(running, method):
    for target in ("/", "/../run%201.pftrace", "/%252e%252e%252frun%201.pftrace", "/etc/passwd"):
        assert running.request(method, target)[0] == 404
    assert running.thread.is_alive()


def test_absolute_path_of_the_file_is_404(running, trace_file):
    assert running.request("GET", str(trace_file).replace(" ", "%20"))[0] == 404
    assert running.request("POST", "/run%201.pftrace")[0] == 404
    assert running.thread.is_alive()


def test_missing_file_is_a_one_line_error(tmp_path):
    with pytest.raises(ServeError, match="no such file"):
        OneFileServer(tmp_path / "nope.pftrace", port=0)
    with pytest.raises(ServeError, match="not a file"):
        OneFileServer(tmp_path, port=0)
    res = run_cmd(["-m", "goodhart_prof.cli", "open", str(tmp_path / "nope.pftrace"), "--no-browser"])
    assert res.returncode == 2
    assert error_lines(res.stderr) == [f"Error: {tmp_path / 'nope.pftrace'}: no such file"]


def test_timeout_without_a_fetch(trace_file):
    lines: list[str] = []
    assert serve_once(trace_file, port=0, timeout=0.3, open_browser=False, echo=lines.append) is False
    assert len(lines) == 1 and lines[0].startswith("https://ui.perfetto.dev/#!/?url=http://127.0.0.1:")


def test_port_in_use_is_a_user_error(trace_file):
    with OneFileServer(trace_file, port=0) as first:
        with pytest.raises(ServeError, match="cannot listen"):
            OneFileServer(trace_file, port=first.port)


def _start(command: list[str], path: Path) -> tuple[subprocess.Popen, int]:
    proc = subprocess.Popen([sys.executable, *command, str(path), "--port", "0", "--no-browser",
                             "--timeout", "20"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=clean_env(), cwd=ROOT)
    url = proc.stdout.readline().strip()
    assert url.startswith("https://ui.perfetto.dev/#!/?url=http://127.0.0.1:"), proc.stderr.read()
    port = int(url.split("127.0.0.1:")[1].split("/")[0])
    return proc, port


@pytest.mark.parametrize("command", [["-m", "goodhart_prof.cli", "open"],
                                     [str(ROOT / "scripts" / "open_trace_in_ui")]],
                         ids=["goodhart-prof-open", "open_trace_in_ui"])
def test_command_exits_once_served(command, trace_file):
    proc, port = _start(command, trace_file)
    try:
        conn = http.client.HTTPConnection(HOST, port, timeout=10)
        conn.request("GET", "/..%2f" + NAME.replace(" ", "%20"))
        assert conn.getresponse().status == 404
        conn.close()
        conn = http.client.HTTPConnection(HOST, port, timeout=10)
        conn.request("GET", "/" + NAME.replace(" ", "%20"))
        resp = conn.getresponse()
        assert resp.status == 200 and resp.read() == trace_file.read_bytes()
        assert resp.getheader("Access-Control-Allow-Origin") == UI_ORIGIN
        conn.close()
        assert proc.wait(10) == 0
        assert "served" in proc.stdout.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_ctrl_c_stops_the_command(trace_file):
    proc, _ = _start(["-m", "goodhart_prof.cli", "open"], trace_file)
    proc.send_signal(signal.SIGINT)
    try:
        assert proc.wait(10) == 130
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_transfer_cut_short_does_not_count(tmp_path):
    import socket
    import struct

    big = tmp_path / "big.pftrace"
    big.write_bytes(os.urandom(32 * 1024 * 1024))
    run = Running(big)
    try:
        sock = socket.create_connection((HOST, run.server.port), timeout=10)
        sock.sendall(b"GET /big.pftrace HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert sock.recv(1024).startswith(b"HTTP/1.0 200")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # reset
        sock.close()
        run.thread.join(0.5)
        assert run.thread.is_alive() and not run.server.served
        status, _, body = run.request("GET", "/big.pftrace")
        assert status == 200 and len(body) == big.stat().st_size
        run.thread.join(5)
        assert run.result == [True]
    finally:
        run.stop()


def _listening_addresses(port: int) -> set[str]:
    """Local addresses of the sockets listening on `port` (from /proc/net/tcp and tcp6)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            local, state = row.split()[1], row.split()[3]
            address, hex_port = local.rsplit(":", 1)
            if state == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
                found.add(address)
    return found


def test_command_times_out_even_with_a_stalled_client(trace_file):
    """Nothing fetches the file: the command stops after --timeout with exit code 1, also while
    a client holds a connection open without finishing its request; it listens on 127.0.0.1
    only (checked on the running process, from the kernel's socket table)."""
    import socket
    import time

    proc, port, started = _open_command(trace_file, 2)  # started: its URL printed (imports done)
    try:
        if Path("/proc/net/tcp").exists():
            assert _listening_addresses(port) == {"0100007F"}  # 127.0.0.1, nothing else
        stalled = socket.create_connection((HOST, port), timeout=10)
        stalled.sendall(b"GET /run%201.pftrace HTTP/1.1\r\n")  # and never the rest
        assert proc.wait(30) == 1
        elapsed = time.monotonic() - started
        stalled.close()
        # the command's own deadline (2 s) ends the stalled read: without it the read would hold
        # the server until the request's deadline, REQUEST_S (10 s) after the connection; 6 s of
        # room between the two for a loaded machine
        assert server_module.REQUEST_S == 10.0
        assert elapsed < 2 + 6, elapsed
        assert error_lines(proc.stderr.read()) == [f"{trace_file} was not fetched within 2 s"]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# -- deadlines and hostile clients (trickling, silent, resetting) ----------------------------------
def _open_command(path: Path, timeout: float) -> tuple[subprocess.Popen, int, float]:
    """`goodhart-prof open` on a free port: the process, its port and when its URL was printed."""
    import time

    proc = subprocess.Popen([sys.executable, "-m", "goodhart_prof.cli", "open", str(path), "--port", "0",
                             "--no-browser", "--timeout", str(timeout)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=clean_env(), cwd=ROOT)
    url = proc.stdout.readline().strip()
    assert url.startswith("https://ui.perfetto.dev/#!/?url=http://127.0.0.1:"), proc.stderr.read()
    return proc, int(url.split("127.0.0.1:")[1].split("/")[0]), time.monotonic()


def test_a_trickling_client_does_not_keep_the_server_up(trace_file):
    """One byte every 0.5 s, never a whole request: with --timeout 2 the command still stops at
    its deadline (a per-read timeout would restart with every byte and never fire)."""
    import socket
    import time

    proc, port, started = _open_command(trace_file, 2)
    sock = socket.create_connection((HOST, port), timeout=10)
    request = b"GET /run%201.pftrace HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: " + b"a" * 100
    try:
        for byte in request:
            if proc.poll() is not None:
                break
            try:
                sock.sendall(bytes([byte]))
            except OSError:  # the server dropped the connection: keep waiting for the exit
                pass
            time.sleep(0.5)
        assert proc.wait(30) == 1
        elapsed = time.monotonic() - started
        # at the command's 2 s deadline: a timeout per read would never fire (a byte every 0.5 s
        # for 60 s), and the request's own deadline would come only after REQUEST_S (10 s)
        assert elapsed < 2 + 6, elapsed
        assert error_lines(proc.stderr.read()) == [f"{trace_file} was not fetched within 2 s"]
    finally:
        sock.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_trickling_request_is_dropped_at_its_own_deadline(trace_file, monkeypatch):
    """The request must arrive whole within REQUEST_S of the connection, however the bytes come."""
    import socket
    import time

    monkeypatch.setattr(server_module, "REQUEST_S", 1.0)
    run = Running(trace_file)
    try:
        sock = socket.create_connection((HOST, run.server.port), timeout=10)
        started = time.monotonic()
        closed_after = None
        for byte in b"GET /run%201.pftrace HTTP/1.1\r\nX-Pad: " + b"a" * 40:
            try:
                sock.sendall(bytes([byte]))
            except OSError:
                closed_after = time.monotonic() - started
                break
            sock.settimeout(0.25)
            try:
                if sock.recv(1) == b"":  # the server closed the connection
                    closed_after = time.monotonic() - started
                    break
            except TimeoutError:
                pass
        sock.close()
        # dropped at the request's deadline, 1 s after the connection (the server accepts after the
        # handshake that `started` follows, so not before ~1 s however busy the machine); a timeout
        # per read would never drop it (a byte every 0.25 s for 18 s). 5 s of room after it.
        assert closed_after is not None and 0.9 < closed_after < 1.0 + 5, closed_after
        assert run.thread.is_alive() and not run.server.served
    finally:
        run.stop()


def test_silent_sockets_do_not_delay_a_real_fetch(running, trace_file):
    """Five connections that never send a byte: a real GET beside them is answered at once."""
    import socket
    import time

    silent = [socket.create_connection((HOST, running.server.port), timeout=10) for _ in range(5)]
    try:
        time.sleep(0.3)  # let the server accept them all first
        started = time.monotonic()
        status, _, body = running.request("GET", "/run%201.pftrace")
        elapsed = time.monotonic() - started
        assert status == 200 and body == trace_file.read_bytes()
        # answered beside them: a server that read the silent sockets first would answer only at
        # their REQUEST_S deadline (10 s; its serving deadline is 10 s too)
        assert server_module.REQUEST_S == 10.0
        assert elapsed < 10.0 / 2, elapsed
        running.thread.join(5)
        assert running.result == [True]
    finally:
        for sock in silent:
            sock.close()


def test_connection_resets_print_nothing(trace_file):
    """20 clients that reset the connection (SO_LINGER 0), before or after their request: no
    traceback, no line at all on stderr; the file is still served."""
    import socket
    import struct

    proc, port, _ = _open_command(trace_file, 20)
    try:
        for i in range(20):
            sock = socket.create_connection((HOST, port), timeout=10)
            sock.sendall(b"GET /run%201.pftrace HTTP/1.1\r\n" if i % 2 else b"GE")
            if i % 4 == 1:  # a whole request, reset while the file is being sent
                sock.sendall(b"\r\n")
                sock.recv(100)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sock.close()
        conn = http.client.HTTPConnection(HOST, port, timeout=10)
        conn.request("GET", "/" + NAME.replace(" ", "%20"))
        resp = conn.getresponse()
        assert resp.status == 200 and resp.read() == trace_file.read_bytes()
        conn.close()
        assert proc.wait(10) == 0
        assert proc.stderr.read() == ""
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_file_name_with_a_newline_is_one_error_line(tmp_path):
    res = run_cmd(["-m", "goodhart_prof.cli", "open", str(tmp_path / "a\nb\x1b[2J.pftrace"), "--no-browser"])
    assert res.returncode == 2
    assert res.stderr.splitlines() == [f"Error: '{tmp_path}/a\\nb\\x1b[2J.pftrace': no such file"]
