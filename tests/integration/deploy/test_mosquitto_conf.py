"""deploy/mosquitto.conf with a real Mosquitto 2 (Debian's): it serves only clients holding a
certificate of the cluster's CA, a job master's chain included, over TLS.

The file is run as it is, with the paths the compose file mounts (/etc/sluice/tls,
/etc/sluice/mosquitto/mosquitto.acl, the volume /var/lib/mosquitto) moved to a temporary directory
and the port to a free one.  As root Mosquitto drops to its user before it reads its
key, so the broker's directory is handed to that user, as deploy/certs.sh does for the image.
"""

from __future__ import annotations

import os
import pwd
import shutil
import ssl
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.enums import CallbackAPIVersion, MQTTErrorCode

from plumbing import tls
from plumbing.tls import Identity, Role
from sluice.brokers import free_port, port_open

CONF = Path(__file__).resolve().parents[3] / "deploy" / "mosquitto.conf"


def _mosquitto() -> str:
    found = shutil.which("mosquitto") or shutil.which("mosquitto", path="/usr/sbin:/usr/bin")
    if found is None:
        reason = "`mosquitto` is not installed (apt-get install mosquitto)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true but {reason}")
        pytest.skip(reason)
    return found


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("mqtt-pki")
    tls.init_ca(root / "ca", "sluice")
    authority = tls.load_ca(root / "ca")
    tls.issue(authority, Identity(Role.BROKER, "mosquitto"), root / "broker", hosts=["mosquitto"])
    tls.issue(authority, Identity(Role.AGENT, "node-1"), root / "agent")
    tls.issue(authority, Identity(Role.RM, "rm"), root / "rm")
    tls.issue(authority, Identity(Role.AGGREGATOR, "aggregator"), root / "aggregator")
    tls.issue(authority, Identity(Role.CLIENT, "aggregator"), root / "impostor")
    chain, key = tls.issue_job_master(tls.load_job_master_ca(root / "rm"), "job-000001")
    tls.write_tls_dir(root / "jobmaster", (root / "ca" / tls.CA_CERT).read_bytes(), chain, key)
    tls.init_ca(root / "other-ca", "other")
    tls.issue(tls.load_ca(root / "other-ca"), Identity(Role.AGENT, "node-1"), root / "stranger")
    return root


@pytest.fixture(scope="module")
def broker(pki: Path) -> Iterator[int]:
    binary = _mosquitto()
    port = free_port()
    # Outside pytest's directories, which Mosquitto's user could not enter.
    mount = Path(tempfile.mkdtemp(prefix="sluice-mosquitto-"))
    shutil.copytree(pki / "broker", mount / "tls")
    (mount / "data").mkdir()
    shutil.copy(CONF.with_name("mosquitto.acl"), mount / "mosquitto.acl")
    if os.geteuid() == 0:
        user = pwd.getpwnam("mosquitto")
        owned = (mount, mount / "tls", *(mount / "tls").iterdir(), mount / "data")
        for path in (*owned, mount / "mosquitto.acl"):
            os.chown(path, user.pw_uid, user.pw_gid)
    text = CONF.read_text()
    assert "listener 8883\n" in text
    text = text.replace("listener 8883\n", f"listener {port} 127.0.0.1\n")
    for target, moved in (
        ("/etc/sluice/mosquitto/mosquitto.acl", mount / "mosquitto.acl"),
        ("/etc/sluice/tls/", mount / "tls"),
        ("/var/lib/mosquitto/", mount / "data"),
    ):
        assert target in text, target
        text = text.replace(target, f"{moved}/" if target.endswith("/") else str(moved))
    settings = [line for line in text.splitlines() if not line.startswith("#")]
    assert not [line for line in settings if "/etc/" in line or "/var/" in line], settings
    (pki / "mosquitto.conf").write_text(text)
    log = (pki / "mosquitto.log").open("wb")
    process = subprocess.Popen(
        [binary, "-c", str(pki / "mosquitto.conf")], stdout=log, stderr=subprocess.STDOUT
    )
    try:
        deadline = time.monotonic() + 30
        while not port_open("127.0.0.1", port):  # each try waits up to 0.5 s
            assert process.poll() is None, (pki / "mosquitto.log").read_text()
            assert time.monotonic() < deadline, "mosquitto did not listen"
        yield port
    finally:
        process.terminate()
        process.wait(10)
        log.close()
        shutil.rmtree(mount)


def _connect(port: int, ca: Path, client: Path | None) -> bool:
    """Whether a client presenting ``client``'s certificate (or none) gets a successful CONNACK
    from the broker at localhost, which it verifies against ``ca``."""
    context = ssl.create_default_context(cafile=str(ca))
    if client is not None:
        context.load_cert_chain(str(client / tls.CERT), str(client / tls.KEY))
    connack: list[bool] = []
    session = mqtt.Client(CallbackAPIVersion.VERSION2)
    session.tls_set_context(context)
    session.on_connect = lambda _c, _u, _f, reason, _p: connack.append(not reason.is_failure)
    try:
        session.connect("127.0.0.1", port, keepalive=5)
    except (OSError, ssl.SSLError):
        return False
    deadline = time.monotonic() + 10
    while not connack and time.monotonic() < deadline:
        if session.loop(timeout=0.5) != MQTTErrorCode.MQTT_ERR_SUCCESS:
            break
    session.disconnect()
    return connack == [True]


# (case, the client's TLS directory or None, whether the broker takes it)
CLIENTS = [
    ("an agent", "agent", True),
    ("a job master (its chain through the RM's job master CA)", "jobmaster", True),
    ("no certificate", None, False),
    ("a certificate of another CA", "stranger", False),
]


@pytest.mark.parametrize(
    ("client", "admitted"), [c[1:] for c in CLIENTS], ids=[c[0] for c in CLIENTS]
)
def test_mosquitto_admits_only_the_clusters_certificates(
    pki: Path, broker: int, client: str | None, admitted: bool
):
    directory = None if client is None else pki / client
    assert _connect(broker, pki / "ca" / tls.CA_CERT, directory) is admitted


def _session(port: int, pki: Path, client: str) -> mqtt.Client:
    context = ssl.create_default_context(cafile=str(pki / "ca" / tls.CA_CERT))
    context.load_cert_chain(str(pki / client / tls.CERT), str(pki / client / tls.KEY))
    session = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=f"test-{client}")
    session.tls_set_context(context)
    session.connect("127.0.0.1", port, keepalive=5)
    session.loop_start()
    return session


def test_only_the_aggregator_publishes_the_lists(pki: Path, broker: int):
    """Every other holder's publication is dropped by the broker: the subscriber (a job master)
    receives the aggregator's, published after them, and nothing else."""
    received: list[bytes] = []
    subscribed = threading.Event()
    reader = _session(broker, pki, "jobmaster")
    reader.on_message = lambda _c, _u, message: received.append(bytes(message.payload))
    reader.on_subscribe = lambda *_: subscribed.set()
    reader.subscribe("sluice/v1/candidates", qos=1)
    assert subscribed.wait(10)
    writers = {name: _session(broker, pki, name) for name in ("agent", "impostor", "aggregator")}
    try:
        for name in ("agent", "impostor", "aggregator"):  # the forgeries first, each acked
            writers[name].publish("sluice/v1/candidates", name.encode(), qos=1).wait_for_publish(10)
        deadline = time.monotonic() + 10
        while b"aggregator" not in received and time.monotonic() < deadline:
            time.sleep(0.05)
        assert received == [b"aggregator"]
    finally:
        for session in (reader, *writers.values()):
            session.loop_stop()
            session.disconnect()
