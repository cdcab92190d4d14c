"""Open one trace file in the Perfetto UI: `goodhart-prof open FILE` and scripts/open_trace_in_ui.

Like Perfetto's own tools/open_trace_in_ui: a tiny HTTP server on 127.0.0.1 (never another
interface) serves that one file with `Access-Control-Allow-Origin: https://ui.perfetto.dev`, and
the UI is opened at `https://ui.perfetto.dev/#!/?url=http://127.0.0.1:<port>/<name>`, which fetches
it. The UI's content security policy lets it fetch from 127.0.0.1:9001, hence the default port.

Only `GET /<name>` (and `HEAD`, and an `OPTIONS` preflight) of that exact name is answered; every
other path is 404, including `..` traversal, percent-encoded traversal (`%2e%2e`, `%2f`), absolute
paths and absolute URLs: the request path is never joined to a folder, only compared with the one
name.

Deadlines, whatever the clients do: the serving loop stops once the file has been sent completely
once, or at `timeout` seconds on the monotonic clock (it looks every POLL_S), or on Ctrl-C
(KeyboardInterrupt is re-raised after the socket is closed). Each connection is served in a thread
of its own (daemon threads, never waited for), so a silent or slow client never delays another; a
request must arrive whole within REQUEST_S of its connection (one deadline for the whole request,
not a timeout per read that a client sending a byte at a time would restart), else the connection
is dropped. A client that resets or abandons its connection costs nothing on stderr.
"""
from __future__ import annotations

import io
import os
import shutil
import socket
import time
import webbrowser
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Callable
from urllib.parse import quote, unquote

from ..errors import UserError
from ..textsafe import quote_path

HOST = "127.0.0.1"
DEFAULT_PORT = 9001
DEFAULT_TIMEOUT_S = 300.0
UI_ORIGIN = "https://ui.perfetto.dev"
POLL_S = 0.25     # how often the serving loop looks at the clock
REQUEST_S = 10.0  # a connection's request must arrive whole within this (one deadline, not per read)
SEND_S = 30.0     # a client that takes nothing of the file for this long is dropped
QUIET_ERRORS = (ConnectionError, TimeoutError)  # a client went away or stalled: not our error


class ServeError(UserError):
    """The file cannot be served (missing file, port taken)."""


class _DeadlineReader(io.RawIOBase):
    """A socket's bytes until a deadline (monotonic): each read waits only for the time left, and
    none starts after it, so a client cannot stretch its request by sending a byte at a time."""

    def __init__(self, sock: socket.socket, deadline: float):
        self.sock, self.deadline = sock, deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the request did not arrive in time")
        self.sock.settimeout(left)
        return self.sock.recv_into(buffer)


class _Handler(BaseHTTPRequestHandler):
    server: "OneFileServer"

    def setup(self) -> None:
        super().setup()
        deadline = min(time.monotonic() + REQUEST_S, self.server.deadline)
        self.rfile = io.BufferedReader(_DeadlineReader(self.connection, deadline))

    def _cors(self) -> None:
        self.send_header("Access-Control-Allow-Origin", UI_ORIGIN)
        self.send_header("Cache-Control", "no-cache")

    def _wanted(self) -> bool:
        """Whether the request names our file: `/<name>`, percent-decoded once, nothing else.

        The target is read from the request line as sent (http.server folds a leading `//`
        into `/` in self.path)."""
        parts = self.requestline.split()
        target = (parts[1] if len(parts) >= 2 else "").split("?", 1)[0].split("#", 1)[0]
        return target.startswith("/") and unquote(target) == "/" + self.server.name

    def do_OPTIONS(self) -> None:  # CORS preflight (and Chrome's private-network preflight)
        if not self._wanted():
            return self._not_found()
        self.send_response(204)
        self._cors()
        self.send_header("Access-Control-Allow-Methods", "GET, HEAD, OPTIONS")
        self.send_header("Access-Control-Allow-Headers", "*")
        self.send_header("Access-Control-Allow-Private-Network", "true")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_HEAD(self) -> None:
        self._send(body=False)

    def do_GET(self) -> None:
        self._send(body=True)

    def do_POST(self) -> None:
        self._not_found()

    def _send(self, body: bool) -> None:
        if not self._wanted():
            return self._not_found()
        path = self.server.file
        try:
            fh = open(path, "rb")
        except OSError:
            return self._not_found()
        with fh:
            size = os.fstat(fh.fileno()).st_size
            self.connection.settimeout(SEND_S)  # the request is in: now a timeout per write
            self.send_response(200)
            self._cors()
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(size))
            self.end_headers()
            if not body:
                return
            try:
                shutil.copyfileobj(fh, self.wfile, 1 << 20)
                self.wfile.flush()
            except QUIET_ERRORS:
                return  # the client went away: not served
        self.server.served = True

    def _not_found(self) -> None:
        self.connection.settimeout(SEND_S)
        self.send_response(404)
        self._cors()
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", "10")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(b"not found\n")

    def log_message(self, format: str, *args) -> None:  # quiet: the command prints its own lines
        pass


class OneFileServer(ThreadingHTTPServer):
    """An HTTP server on 127.0.0.1 that serves one file under its own name, a thread per
    connection (module docstring: the deadlines)."""

    allow_reuse_address = True
    daemon_threads = True     # a stalled connection never keeps the process alive
    block_on_close = False    # nor delays closing the server

    def __init__(self, path: str | os.PathLike, port: int = DEFAULT_PORT):
        file = Path(path)
        if not file.exists():
            raise ServeError(f"{quote_path(file)}: no such file")
        if not file.is_file():
            raise ServeError(f"{quote_path(file)}: not a file")
        self.file = file.resolve()
        self.name = file.name
        self.served = False
        self.deadline = float("inf")
        try:
            super().__init__((HOST, port), _Handler)
        except OSError as exc:
            raise ServeError(f"cannot listen on {HOST}:{port} ({exc.strerror or exc}); "
                             f"choose another --port") from None
        self.timeout = POLL_S  # handle_request() returns this often without a request

    @property
    def port(self) -> int:
        return self.server_address[1]

    @property
    def file_url(self) -> str:
        return f"http://{HOST}:{self.port}/{quote(self.name)}"

    @property
    def ui_url(self) -> str:
        return f"{UI_ORIGIN}/#!/?url={self.file_url}"

    def serve_until_sent(self, timeout: float = DEFAULT_TIMEOUT_S) -> bool:
        """Answer requests until the file was sent once (True) or `timeout` seconds pass (False)."""
        self.deadline = time.monotonic() + timeout
        while not self.served and time.monotonic() < self.deadline:
            self.handle_request()
        return self.served

    def handle_error(self, request, client_address) -> None:
        """A client that reset, abandoned or stalled its connection: nothing to say (the command
        prints its own lines). Anything else is a bug: the default report, with its traceback."""
        import sys
        if not isinstance(sys.exc_info()[1], QUIET_ERRORS):
            super().handle_error(request, client_address)


def launch_browser(url: str) -> bool:
    """Open url in a browser where one exists; never fails."""
    try:
        return bool(webbrowser.open(url))
    except Exception:  # no browser, no display, a broken BROWSER setting: the URL is printed anyway
        return False


def serve_once(path: str | os.PathLike, port: int = DEFAULT_PORT, timeout: float = DEFAULT_TIMEOUT_S,
               open_browser: bool = True, echo: Callable[[str], None] = print) -> bool:
    """Serve `path` to the Perfetto UI once: print the UI link, open a browser (if asked and one
    exists), and return True once the file was sent, False after `timeout` seconds."""
    with OneFileServer(path, port) as server:
        echo(server.ui_url)
        if open_browser:
            launch_browser(server.ui_url)
        return server.serve_until_sent(timeout)
