"""A static HTTP server with byte ranges, on the loopback interface: remote reads without a network.

Not part of the package: the tests, the package's examples and ``benchmarks/remote_read.py``
import it from here (``from tests.remote_server import serve_directory``, the repository's root
on ``sys.path``). They serve a folder of zarr images with it, the way a web
server or an object store's HTTP endpoint serves them: ``GET`` and ``HEAD`` of files,
``Range: bytes=a-b``, ``bytes=a-`` and ``bytes=-n`` answered with ``206 Partial Content``,
HTTP/1.1 keep-alive, files sent with ``sendfile``. Folders are not listed (zarr reads keys, never
listings). It binds 127.0.0.1 only.

A server in the reading process shares its GIL with the reader: every request it parses stalls
the reader's Python threads, as no real server would. ``serve_directory(root, processes=n)``
serves from ``n`` processes of their own instead, all accepting on one socket, so that a
benchmark measures the readers, not a server starved by them (and many requests at once are
answered by several CPUs).
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Iterator
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

__all__ = ["RangeRequestHandler", "parse_range", "serve_directory"]

_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")


def parse_range(header: str | None, size: int) -> tuple[int, int] | None:
    """The ``(start, stop)`` a ``Range`` header asks of an object of ``size`` bytes.

    None means the whole object (no header, or one this server does not handle: several
    ranges); a range that starts past the end raises :class:`ValueError` (416).

    Examples
    --------
    >>> parse_range("bytes=2-5", 10), parse_range("bytes=-3", 10), parse_range("bytes=8-", 10)
    ((2, 6), (7, 10), (8, 10))
    >>> parse_range(None, 10) is None
    True
    """
    if header is None:
        return None
    match = _RANGE.match(header.strip())
    if match is None:
        return None
    first, last = match.groups()
    if not first and not last:
        return None
    if not first:  # a suffix: the last n bytes
        return max(0, size - int(last)), size
    start = int(first)
    if start >= size:
        raise ValueError(f"range {header} starts past the end of {size} bytes")
    stop = size if not last else min(size, int(last) + 1)
    if stop <= start:
        raise ValueError(f"range {header} is empty")
    return start, stop


class RangeRequestHandler(BaseHTTPRequestHandler):
    """Serves the files under the server's ``root`` (see :func:`serve_directory`).

    Subclasses change what a request gets by overriding :meth:`respond`.

    Examples
    --------
    A server that refuses everything (as a test of 403 handling would):

    >>> class Forbidden(RangeRequestHandler):
    ...     def respond(self, *, head):
    ...         self.send_error(403)
    >>> import tempfile, urllib.error, urllib.request
    >>> with serve_directory(tempfile.mkdtemp(), Forbidden) as url:
    ...     try:
    ...         urllib.request.urlopen(url + "/zarr.json")
    ...     except urllib.error.HTTPError as exc:
    ...         print(exc.code)
    403
    """

    protocol_version = "HTTP/1.1"
    server_version = "linumpy-loopback"
    disable_nagle_algorithm = True  # headers and body leave at once, not after a delayed ACK

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base's name
        pass  # one line per request would drown a test's output

    def file_for(self, url_path: str) -> Path | None:
        """The file a request path names under the root, None when there is none."""
        root: Path = self.server.root  # type: ignore[attr-defined]
        relative = urllib.parse.unquote(urllib.parse.urlsplit(url_path).path).lstrip("/")
        parts = [p for p in relative.split("/") if p]
        if any(p in (".", "..") for p in parts):
            return None
        path = root.joinpath(*parts)
        return path if path.is_file() else None

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.respond(head=False)

    def do_HEAD(self) -> None:  # noqa: N802 - http.server's name
        self.respond(head=True)

    def respond(self, *, head: bool) -> None:
        """Answer the request with the file's bytes, or the part of them its range asks."""
        delay = getattr(self.server, "delay", 0.0)
        if delay:  # a link's round trip, without which every request arrives at once
            time.sleep(delay)
        path = self.file_for(self.path)
        if path is None:  # as web servers answer it: the connection stays open
            self.send_response(HTTPStatus.NOT_FOUND)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        with open(path, "rb") as file:
            size = os.fstat(file.fileno()).st_size
            try:
                wanted = parse_range(self.headers.get("Range"), size)
            except ValueError:
                self.send_response(HTTPStatus.REQUESTED_RANGE_NOT_SATISFIABLE)
                self.send_header("Content-Range", f"bytes */{size}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            start, stop = (0, size) if wanted is None else wanted
            self.send_response(HTTPStatus.OK if wanted is None else HTTPStatus.PARTIAL_CONTENT)
            if wanted is not None:
                self.send_header("Content-Range", f"bytes {start}-{stop - 1}/{size}")
            self.send_header("Accept-Ranges", "bytes")
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(stop - start))
            self.end_headers()
            if not head and stop > start:
                self.wfile.flush()
                self.connection.sendfile(file, start, stop - start)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # Clients open tens of connections at once: socketserver's backlog of 5 would drop their
    # SYNs, each retried a second later.
    request_queue_size = 1024

    def handle_error(self, request: object, client_address: object) -> None:
        import sys

        if not isinstance(sys.exc_info()[1], ConnectionError):  # a client that hung up
            super().handle_error(request, client_address)


class _SmallServer(_Server):
    """A server of ``workers`` threads: a connection is accepted only when one is free (the
    others wait in the listen backlog, whose overflow drops their SYNs), and a connection left
    idle for ``KEEP_ALIVE`` seconds is closed, as small web servers do."""

    KEEP_ALIVE = 5.0

    def __init__(self, address: tuple[str, int], handler: type, workers: int, backlog: int):
        self.request_queue_size = backlog  # read by server_activate, in the base's __init__
        super().__init__(address, handler)
        self.slots = threading.BoundedSemaphore(workers)

    def process_request(self, request: socket.socket, client_address: object) -> None:
        self.slots.acquire()  # no accept until a worker is free
        request.settimeout(self.KEEP_ALIVE)
        super().process_request(request, client_address)

    def process_request_thread(self, request: socket.socket, client_address: object) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()

    def handle_error(self, request: object, client_address: object) -> None:
        if not isinstance(sys.exc_info()[1], TimeoutError):  # an idle connection closed
            super().handle_error(request, client_address)


@contextlib.contextmanager
def serve_directory(
    root: str | os.PathLike[str],
    handler: type[RangeRequestHandler] = RangeRequestHandler,
    *,
    processes: int = 0,
    delay: float = 0.0,
    workers: int = 0,
    backlog: int = _Server.request_queue_size,
) -> Iterator[str]:
    """Serve ``root`` over HTTP on 127.0.0.1 (a free port) while the block runs.

    Parameters
    ----------
    root
        The folder served.
    handler
        The request handler (a subclass changes what requests get); only the default one with
        ``processes``.
    processes
        0: threads of this process answer; n: n processes of their own do (they start before
        the block runs and are stopped after).
    delay
        Seconds each request waits before it is answered, as over a link with that round trip.
    workers
        0: a thread per connection; n: at most n connections served at once, the others
        waiting to be accepted, each closed after 5 s idle (a small web server; threads only).
    backlog
        The listen backlog: connections waiting to be accepted beyond it are dropped and
        retried by the client a second later, then 3, 7, 15 and 31 s later (threads only;
        http.server's default is 5).

    Yields
    ------
    str
        The base URL, ``http://127.0.0.1:PORT``.

    Examples
    --------
    >>> import tempfile, urllib.request
    >>> folder = tempfile.mkdtemp()
    >>> _ = open(folder + "/a.bin", "wb").write(b"0123456789")
    >>> with serve_directory(folder) as url:
    ...     request = urllib.request.Request(url + "/a.bin", headers={"Range": "bytes=2-4"})
    ...     with urllib.request.urlopen(request) as response:
    ...         print(response.status, response.read())
    206 b'234'
    >>> with serve_directory(folder, processes=2) as url:
    ...     with urllib.request.urlopen(url + "/a.bin") as response:
    ...         print(response.status, response.read())
    200 b'0123456789'
    """
    if processes:
        if handler is not RangeRequestHandler or workers:
            raise ValueError("serve_directory(processes=...) serves with the default handler")
        with _serve_processes(Path(root), processes, delay) as url:
            yield url
        return
    if workers:
        server: _Server = _SmallServer(("127.0.0.1", 0), handler, workers, backlog)
    else:
        server = _Server(("127.0.0.1", 0), handler, bind_and_activate=False)
        server.request_queue_size = backlog
        try:
            server.server_bind()
            server.server_activate()
        except BaseException:
            server.server_close()
            raise
    server.root, server.delay = Path(root), delay  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, name="linumpy-http", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@contextlib.contextmanager
def _serve_processes(root: Path, processes: int, delay: float) -> Iterator[str]:
    """Serve from ``processes`` child processes accepting on one listening socket."""
    listener = socket.create_server(("127.0.0.1", 0), backlog=_Server.request_queue_size)
    fd = listener.fileno()
    # The file is run as a script: the children import the standard library only. Each exits
    # when its stdin closes, so that none outlives this process, however it ends.
    command = [sys.executable, os.path.abspath(__file__), str(fd), os.fspath(root), str(delay)]
    children: list[subprocess.Popen] = []
    try:
        for _ in range(processes):
            children.append(subprocess.Popen(command, pass_fds=(fd,), stdin=subprocess.PIPE))
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        _wait_serving(url, children)
        yield url
    finally:
        for child in children:
            child.terminate()
        for child in children:
            child.wait()
            child.stdin.close()  # type: ignore[union-attr]
        listener.close()


def _wait_serving(url: str, children: list[subprocess.Popen]) -> None:
    """Return once a request is answered (the children import before they accept)."""
    import time
    import urllib.error
    import urllib.request

    deadline = time.monotonic() + 60
    while True:
        if any(child.poll() is not None for child in children):
            raise RuntimeError(f"a server process of {url} exited at start")
        try:
            urllib.request.urlopen(url + "/", timeout=5).close()
        except urllib.error.HTTPError:
            return  # answered (404: folders are not listed)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
        else:
            return


def serve_socket(fd: int, root: str, delay: float = 0.0) -> None:
    """Answer requests accepted on the listening socket ``fd`` until stdin closes (the loop of
    a server process of :func:`serve_directory`)."""

    def orphaned() -> None:
        sys.stdin.buffer.read()
        os._exit(0)

    threading.Thread(target=orphaned, daemon=True).start()
    server = _Server(("127.0.0.1", 0), RangeRequestHandler, bind_and_activate=False)
    server.socket.close()
    server.socket = socket.socket(fileno=fd)
    server.root, server.delay = Path(root), delay  # type: ignore[attr-defined]
    server.serve_forever()


#: Credentials moto accepts, for the S3 servers of :func:`serve_s3` and the processes using them.
S3_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


@contextlib.contextmanager
def serve_s3(bucket: str) -> Iterator[dict[str, str]]:
    """A moto S3 server on 127.0.0.1 holding the empty ``bucket``, with :data:`S3_CREDENTIALS`
    in the environment while it runs; yields the storage options that reach it."""
    import boto3
    import pytest
    from moto.server import ThreadedMotoServer

    with pytest.MonkeyPatch.context() as patch:
        for name, value in S3_CREDENTIALS.items():
            patch.setenv(name, value)
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        server.start()
        try:
            host, port = server.get_host_and_port()
            endpoint = f"http://{host}:{port}"
            boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket=bucket)
            yield {"endpoint_url": endpoint, "region": "us-east-1"}
        finally:
            server.stop()


def s3_fixture(bucket: str) -> Any:
    """A module-scoped pytest fixture: the storage options of :func:`serve_s3` of ``bucket``, or
    the module's tests skipped where moto or boto3 is not installed."""
    import pytest

    @pytest.fixture(scope="module")
    def s3() -> Iterator[dict[str, str]]:
        pytest.importorskip("moto.server")
        pytest.importorskip("boto3")
        with serve_s3(bucket) as options:
            yield options

    return s3


if __name__ == "__main__":
    serve_socket(int(sys.argv[1]), sys.argv[2], float(sys.argv[3]))
