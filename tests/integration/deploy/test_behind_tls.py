"""deploy/entrypoints/sluice-behind-tls with a real stunnel4 (Debian's) in front of a small TCP
echo server on the loopback, as Kafka's and InfluxDB's containers run it: only a client holding
a certificate of the cluster's CA gets through (with CHECK_HOST, only one naming that host);
the pair lives and dies together: when the server exits the script exits with its status, and
SIGTERM stops both.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from plumbing import tls
from plumbing.tls import Identity, Role
from sluice.brokers import free_port, port_open

SCRIPT = Path(__file__).resolve().parents[3] / "deploy" / "entrypoints" / "sluice-behind-tls"

# Echoes one message per connection; "exit" ends it with status 3.
ECHO = """
import socket, sys
server = socket.create_server(("127.0.0.1", int(sys.argv[1])))
while True:
    connection, _ = server.accept()
    with connection:
        data = connection.recv(1024)
        if data.strip() == b"exit":
            sys.exit(3)
        connection.sendall(data)
"""


def _stunnel() -> None:
    if shutil.which("stunnel4") is None:
        reason = "`stunnel4` is not installed (apt-get install stunnel4)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true but {reason}")
        pytest.skip(reason)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The front's certificate (a broker's, as certs.sh issues Kafka's), clients of the
    cluster (an agent, the aggregator) and an agent of another CA (``stranger``)."""
    root = tmp_path_factory.mktemp("front-pki")
    tls.init_ca(root / "ca", "sluice")
    authority = tls.load_ca(root / "ca")
    tls.issue(authority, Identity(Role.BROKER, "kafka"), root / "front", hosts=["kafka"])
    tls.issue(authority, Identity(Role.AGENT, "node-1"), root / "agent", hosts=["node-1"])
    aggregator = Identity(Role.AGGREGATOR, "aggregator")
    tls.issue(authority, aggregator, root / "aggregator", hosts=["aggregator"])
    tls.init_ca(root / "other-ca", "other")
    tls.issue(tls.load_ca(root / "other-ca"), Identity(Role.AGENT, "node-1"), root / "stranger")
    return root


@dataclass
class Front:
    process: subprocess.Popen[str]
    port: int
    backend: int

    def stderr(self) -> str:
        self.process.wait(30)
        assert self.process.stderr is not None
        return self.process.stderr.read()


def start_front(pki: Path, *args: str, server: list[str] | None = None) -> Front:
    """sluice-behind-tls PORT BACKEND [ARGS] -- the echo server (or ``server``), started; waits
    until the front listens, or the script has exited."""
    _stunnel()
    port, backend = free_port(), free_port()
    command = server or [sys.executable, "-c", ECHO, str(backend)]
    process = subprocess.Popen(
        ["bash", str(SCRIPT), str(port), str(backend), *args, "--", *command],
        env=os.environ | {"SLUICE_TLS_DIR": str(pki / "front")},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    front = Front(process, port, backend)
    for _ in range(600):  # each round waits up to 0.1 s for the script to exit
        if port_open("127.0.0.1", port):
            break
        try:
            process.wait(0.1)
            break
        except subprocess.TimeoutExpired:
            continue
    return front


def stop(front: Front) -> None:
    if front.process.poll() is None:
        front.process.send_signal(signal.SIGTERM)
        front.process.wait(30)
    if front.process.stderr is not None:
        front.process.stderr.close()


@pytest.fixture(scope="module")
def front(pki: Path) -> Iterator[Front]:
    started = start_front(pki)
    assert started.process.poll() is None, started.stderr()
    yield started
    stop(started)


@pytest.fixture(scope="module")
def checking_front(pki: Path) -> Iterator[Front]:
    started = start_front(pki, "aggregator")
    assert started.process.poll() is None, started.stderr()
    yield started
    stop(started)


def echo(port: int, pki: Path, client: str | None, message: bytes = b"ping\n") -> bytes | None:
    """What comes back through the front for ``client``'s certificate (or none), checking the
    front's against the cluster's CA; None when the front refuses."""
    context = ssl.create_default_context(cafile=str(pki / "ca" / tls.CA_CERT))
    if client is not None:
        context.load_cert_chain(str(pki / client / tls.CERT), str(pki / client / tls.KEY))
    try:
        with (
            socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
            context.wrap_socket(raw, server_hostname="kafka") as channel,
        ):
            channel.sendall(message)
            return channel.recv(1024) or None
    except (OSError, ssl.SSLError):
        return None


# (case, the client's TLS directory or None, whether it gets through the front, and through
# the one with CHECK_HOST aggregator)
CLIENTS = [
    ("a client of the cluster", "agent", True, False),
    ("the aggregator", "aggregator", True, True),
    ("no certificate", None, False, False),
    ("a certificate of another CA", "stranger", False, False),
]


@pytest.mark.parametrize(
    ("client", "through", "through_checking"),
    [c[1:] for c in CLIENTS],
    ids=[c[0] for c in CLIENTS],
)
def test_only_the_clusters_certificates_get_through(
    pki: Path,
    front: Front,
    checking_front: Front,
    client: str | None,
    through: bool,
    through_checking: bool,
):
    assert (echo(front.port, pki, client) == b"ping\n") is through
    assert (echo(checking_front.port, pki, client) == b"ping\n") is through_checking


def test_the_server_listens_on_the_loopback_only_and_the_front_on_every_address(front: Front):
    """The front accepts on 0.0.0.0 (the compose network); the echo server (like Tansu and
    influxd behind their fronts) on 127.0.0.1 alone."""
    table = Path("/proc/net/tcp").read_text().splitlines()[1:]
    listening = {line.split()[1] for line in table if line.split()[3] == "0A"}
    assert f"00000000:{front.port:04X}" in listening
    assert f"0100007F:{front.backend:04X}" in listening


def test_when_the_server_exits_the_script_exits_with_its_status(pki: Path):
    started = start_front(pki)
    try:
        assert started.process.poll() is None, started.stderr()
        assert echo(started.port, pki, "agent", b"exit\n") is None
        assert started.process.wait(30) == 3
        says = started.stderr()
        assert "the server exited (3); stopping the other" in says
        assert not port_open("127.0.0.1", started.port)  # stunnel stopped too
    finally:
        stop(started)


def test_sigterm_stops_both(pki: Path):
    started = start_front(pki)
    assert started.process.poll() is None, started.stderr()
    stop(started)
    assert started.process.returncode == 0
    assert not port_open("127.0.0.1", started.port)
    assert not port_open("127.0.0.1", started.backend)


# (case, the script's arguments before "--", the server, exit status, what it says)
FAILURES = [
    ("a server that exits before it listens", [], [sys.executable, "-c", "exit(4)"], 2,
     "the server exited before it listened"),
    ("no -- before the server", ["aggregator", "extra"], ["true"], 2,
     "expected -- before the server's command"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("args", "server", "status", "says"), [c[1:] for c in FAILURES], ids=[c[0] for c in FAILURES]
)
def test_the_script_fails_early_and_says_why(
    pki: Path, args: list[str], server: list[str], status: int, says: str
):
    started = start_front(pki, *args, server=server)
    try:
        assert started.process.wait(60) == status
        assert says in started.stderr()
    finally:
        stop(started)


def test_missing_certificates_are_named(tmp_path: Path):
    _stunnel()
    result = subprocess.run(
        ["bash", str(SCRIPT), "9093", "9092", "--", "true"],
        env=os.environ | {"SLUICE_TLS_DIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 2
    assert f"{tmp_path}/ca.crt: missing or unreadable" in result.stderr
