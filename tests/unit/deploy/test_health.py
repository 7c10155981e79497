"""deploy/entrypoints/sluice-health, the containers' health check, run as a program with this
checkout's Python: ``listening`` against sockets of this test, ``http`` against a small HTTP
server, ``grpc`` against a real Sluice gRPC server over mutual TLS.  Exit status 0 when every
check passes, 1 with one line saying which failed and why, 2 for a usage error."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from grpc_health.v1 import health_pb2

from plumbing import tls
from plumbing.rpc import start_server
from plumbing.tls import Identity, Role
from sluice.brokers import free_port
from tests.unit.deploy.deployment import ENTRYPOINTS, ROOT, clean_env

HEALTH = ENTRYPOINTS / "sluice-health"


def run_health(*args: str, tls_dir: Path | None = None, name: str = "rm") -> tuple[int, str]:
    """(exit status, stderr) of ``sluice-health ARGS``, as the container named ``name``."""
    env = clean_env(PYTHONPATH=str(ROOT), SLUICE_HEALTH_NAME=name)
    if tls_dir is not None:
        env["SLUICE_TLS_DIR"] = str(tls_dir)
    result = subprocess.run(
        [sys.executable, str(HEALTH), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.stdout == ""
    assert "Traceback" not in result.stderr, result.stderr
    return result.returncode, result.stderr


def assert_says(status: int, stderr: str, expected_status: int, says: str) -> None:
    assert status == expected_status, stderr
    if expected_status == 0:
        assert stderr == ""
    elif expected_status == 1:
        assert len(stderr.splitlines()) == 1, stderr  # one line
        assert stderr.startswith("sluice-health: ")
    assert says in stderr


# (case, arguments, exit status, what it says)
USAGE = [
    ("nothing", [], 2, "sluice-health CHECK TARGET"),
    ("a check without its target", ["grpc"], 2, "sluice-health CHECK TARGET"),
    ("an unknown check", ["ping", "x"], 2, "ping: unknown check (listening, http, grpc)"),
]


@pytest.mark.parametrize(
    ("args", "status", "says"), [c[1:] for c in USAGE], ids=[c[0] for c in USAGE]
)
def test_usage(args: list[str], status: int, says: str):
    assert_says(*run_health(*args), status, says)


# ---------------------------------------------------------------------------- listening


@pytest.fixture(scope="module")
def listened() -> Iterator[int]:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        yield server.getsockname()[1]


def test_listening(listened: int):
    free = free_port()
    cases = [
        ([str(listened)], 0, ""),
        ([str(free)], 1, f"sluice-health: listening {free}: nothing listens on port {free}"),
        ([f"{listened},{free}"], 1, f": nothing listens on port {free}\n"),
    ]
    for args, status, says in cases:
        assert_says(*run_health("listening", *args), status, says)


# ---------------------------------------------------------------------------- http


class _Answer(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(204 if self.path == "/ping" else 500)
        self.end_headers()

    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture(scope="module")
def http_port() -> Iterator[int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Answer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def test_http(http_port: int, listened: int):
    gone = free_port()
    cases = [
        (f"http://127.0.0.1:{http_port}/ping", 0, ""),
        (f"http://127.0.0.1:{http_port}/broken", 1, "HTTP Error 500"),
        (f"http://127.0.0.1:{gone}/ping", 1, "Connection refused"),
    ]
    for url, status, says in cases:
        assert_says(*run_health("http", url), status, says)
    # Several checks: the first that fails is named.
    status, stderr = run_health(
        "listening", str(listened), "http", f"http://127.0.0.1:{http_port}/broken"
    )
    assert_says(status, stderr, 1, f"sluice-health: http http://127.0.0.1:{http_port}/broken:")


# ---------------------------------------------------------------------------- grpc


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cluster CA with an RM's TLS directory (``rm``), as certs.sh issues it (naming ``rm``),
    and an RM of another CA (``stranger``)."""
    root = tmp_path_factory.mktemp("health-pki")
    tls.init_ca(root / "ca", "sluice")
    rm = Identity(Role.RM, "rm")
    tls.issue(tls.load_ca(root / "ca"), rm, root / "rm", hosts=["rm"])
    tls.init_ca(root / "other-ca", "other")
    tls.issue(tls.load_ca(root / "other-ca"), rm, root / "stranger", hosts=["rm"])
    return root


SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
# (case, the server's TLS directory or "gone", its status, the container's name, exit status,
# what the check says)
GRPC = [
    ("serving", "rm", SERVING, "rm", 0, ""),
    ("not serving", "rm", NOT_SERVING, "rm", 1, ": NOT_SERVING"),
    ("nothing listens", "gone", SERVING, "rm", 1, ": UNAVAILABLE"),
    ("a server of another CA", "stranger", SERVING, "rm", 1, ": UNAVAILABLE"),
    ("a certificate not naming the container", "rm", SERVING, "aggregator", 1, ": UNAVAILABLE"),
]


@pytest.mark.parametrize(
    ("server_tls", "serving", "name", "status", "says"),
    [c[1:] for c in GRPC],
    ids=[c[0] for c in GRPC],
)
def test_grpc_reads_a_sluice_servers_status_over_mutual_tls(
    pki: Path, server_tls: str, serving: int, name: str, status: int, says: str
):
    loaded = tls.load_tls_dir(pki / ("rm" if server_tls == "gone" else server_tls))
    server, port, health = start_server([], "127.0.0.1:0", tls=loaded, access={})
    try:
        if server_tls == "gone":
            server.stop(grace=None).wait()
        health.set("", serving)
        result = run_health("grpc", f"127.0.0.1:{port}", tls_dir=pki / "rm", name=name)
    finally:
        server.stop(grace=None)
    assert_says(*result, status, f"sluice-health: grpc 127.0.0.1:{port}{says}" if status else "")
