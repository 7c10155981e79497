"""Candidate lists over MQTT with TLS (``mqtts://``), against real brokers: Mosquitto (what
operators deploy, ``require_certificate true``) and the embedded amqtt broker of ``sluice local
up``.  Every client trusts only the cluster CA, checks the broker's certificate against the host
it dialled, and presents its own; the brokers admit only clients of the cluster's CA."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import aiomqtt
import pytest

from aggregator.mqtt_publisher import CandidatePublisher
from job_master.candidate_feed import CandidateFeed
from plumbing import tls
from plumbing.broker_tls import BrokerTls
from plumbing.mqtt import describe, make_client
from plumbing.tls import Identity, Role
from policies.oversubscription.candidate_sync import MachineList, encode_machine_list
from sluice import brokers
from sluice.brokers import BrokerUnavailableError, ServiceProcess
from tests.integration.cluster.harness import unavailable, wait_until
from tests.integration.data_plane.mqtt_tap import MqttTap

pytestmark = pytest.mark.integration

WAIT = 15.0


@dataclass(frozen=True)
class Certificates:
    """TLS directories of one cluster's CA, and one of another CA."""

    broker: Path  # role broker: the brokers' server certificate
    aggregator: Path
    job_master: Path  # as an agent writes it: the RM's job master CA in the chain
    stranger: Path  # an aggregator certificate of another CA, with that CA as its ca.crt


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    root = tmp_path_factory.mktemp("mqtt-tls")
    authority = tls.init_ca(root / "ca", "lab")
    tls.issue(authority, Identity(Role.BROKER, "mqtt"), root / "broker")
    tls.issue(authority, Identity(Role.AGGREGATOR, "aggregator"), root / "aggregator")
    tls.issue(authority, Identity(Role.RM, "rm"), root / "rm")
    chain, key = tls.issue_job_master(tls.load_job_master_ca(root / "rm"), "job-000001")
    tls.write_tls_dir(root / "job-master", (root / "ca" / tls.CA_CERT).read_bytes(), chain, key)
    tls.init_ca(root / "other-ca", "elsewhere")
    tls.issue(tls.load_ca(root / "other-ca"), Identity(Role.AGGREGATOR, "x"), root / "stranger")
    return Certificates(
        root / "broker", root / "aggregator", root / "job-master", root / "stranger"
    )


@contextlib.contextmanager
def serving(start: Callable[[], ServiceProcess]) -> Iterator[ServiceProcess]:
    """A broker for the tests; with CI=true one that cannot start fails them, never skips."""
    try:
        service = start()
    except BrokerUnavailableError as error:
        unavailable(str(error))
        raise AssertionError from None  # unreachable
    try:
        yield service
    finally:
        service.stop()


@pytest.fixture(scope="module", params=["mosquitto", "amqtt"])
def broker(
    request: pytest.FixtureRequest, certs: Certificates, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServiceProcess]:
    """A TLS-only MQTT broker presenting the cluster's broker certificate."""
    work = tmp_path_factory.mktemp(request.param)
    port = brokers.free_port()

    def start() -> ServiceProcess:
        if request.param == "mosquitto":
            return brokers.start_mosquitto(port, work, work / "log", tls_dir=certs.broker)
        return brokers.start_embedded_mqtt(port, work / "log", tls_dir=certs.broker)

    with serving(start) as service:
        yield service


@pytest.fixture
def prefix() -> str:
    return f"test/{uuid.uuid4().hex[:12]}"


@pytest.fixture
def closing() -> Iterator[contextlib.ExitStack]:
    with contextlib.ExitStack() as stack:
        yield stack


def connect_once(address: str, client_tls: BrokerTls) -> str:
    """Connect and publish once: "ok", or how the attempt failed, as the daemons log it."""

    async def attempt() -> str:
        host, port = address.rsplit(":", 1)
        try:
            async with make_client(host, int(port), tls=client_tls.ssl_context()) as client:
                await client.publish("sluice/test", b"x", qos=1)
        except aiomqtt.MqttError as error:
            return describe(error)
        return "ok"

    return asyncio.run(attempt())


def test_the_aggregators_lists_reach_a_job_masters_feed_over_tls(
    broker: ServiceProcess, certs: Certificates, prefix: str, closing: contextlib.ExitStack
) -> None:
    url = f"mqtts://{broker.address}"
    publisher = CandidatePublisher(url, prefix, tls=BrokerTls.of_dir(certs.aggregator))
    publisher.start()
    closing.callback(publisher.close)
    feed = CandidateFeed(url, prefix, tls=BrokerTls.of_dir(certs.job_master))
    feed.start()
    closing.callback(feed.close)

    machines = MachineList(version=7, names=("node-1", "node-2"))
    publisher.publish_machine_list(encode_machine_list(machines))
    wait_until(lambda: feed.versions == (7, 0), WAIT, "the machine list at the job master")
    assert feed.replica.machines.names == ("node-1", "node-2")
    assert publisher.connected and feed.connected


@pytest.mark.parametrize("client", ["no certificate", "another CA's certificate"])
def test_the_broker_refuses_a_client_without_a_certificate_of_the_cluster(
    broker: ServiceProcess, certs: Certificates, client: str
) -> None:
    ca_file = certs.aggregator / tls.CA_CERT  # the client trusts the broker: only its own fails
    refused = (
        BrokerTls(ca_file)
        if client == "no certificate"
        else BrokerTls(ca_file, certs.stranger / tls.CERT, certs.stranger / tls.KEY)
    )
    assert connect_once(broker.address, BrokerTls.of_dir(certs.aggregator)) == "ok"  # control
    outcome = connect_once(broker.address, refused)
    assert outcome.startswith("TLS: "), outcome
    assert "certificate" in outcome and "\n" not in outcome


def test_a_feed_that_does_not_trust_the_broker_says_tls_once_and_keeps_retrying(
    broker: ServiceProcess,
    certs: Certificates,
    prefix: str,
    closing: contextlib.ExitStack,
    caplog: pytest.LogCaptureFixture,
) -> None:
    log = logging.getLogger(f"sluice.test.feed.{uuid.uuid4().hex[:6]}")
    caplog.set_level(logging.DEBUG, logger=log.name)
    # Its ca.crt is another CA's: the broker's certificate does not check out.
    feed = CandidateFeed(
        f"mqtts://{broker.address}", prefix, tls=BrokerTls.of_dir(certs.stranger), log=log
    )
    feed.start()
    closing.callback(feed.close)

    def retries() -> int:
        return sum("still unreachable" in r.getMessage() for r in caplog.records)

    wait_until(lambda: retries() >= 2, WAIT, "the feed retrying")
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, warnings
    assert "TLS: the broker's certificate is not trusted here" in warnings[0]
    assert "\n" not in warnings[0]
    assert not feed.connected


def test_the_brokers_certificate_must_name_the_host_dialled(
    certs: Certificates, tmp_path: Path
) -> None:
    # 127.0.0.2 is this machine too, but the broker's certificate names only localhost and
    # 127.0.0.1: a client dialling 127.0.0.2 must not accept it.
    port = brokers.free_port("127.0.0.2")
    with serving(
        lambda: brokers.start_mosquitto(
            port, tmp_path, tmp_path / "log", host="127.0.0.2", tls_dir=certs.broker
        )
    ) as service:
        outcome = connect_once(service.address, BrokerTls.of_dir(certs.aggregator))
        assert outcome.startswith("TLS: the broker's certificate is not trusted here"), outcome
        assert "127.0.0.2" in outcome


def test_the_aggregator_daemon_publishes_over_mqtts(
    certs: Certificates,
    kafka_server: ServiceProcess,
    tmp_path: Path,
    closing: contextlib.ExitStack,
    prefix: str,
) -> None:
    """``sluice aggregator --tls-dir ... --mqtt mqtts://...``, the process: its machine list
    reaches a job master's feed through Mosquitto requiring certificates."""
    port = brokers.free_port()
    mosquitto = closing.enter_context(
        serving(
            lambda: brokers.start_mosquitto(port, tmp_path, tmp_path / "log", tls_dir=certs.broker)
        )
    )
    address_file = tmp_path / "aggregator.addr"
    log_path = tmp_path / "aggregator.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "sluice",
                "aggregator",
                "--listen",
                "127.0.0.1:0",
                "--address-file",
                str(address_file),
                "--kafka",
                kafka_server.address,
                "--metrics-topic",
                f"tls.metrics.{prefix[-12:]}",
                "--outcomes-topic",
                f"tls.outcomes.{prefix[-12:]}",
                "--mqtt",
                f"mqtts://{mosquitto.address}",
                "--mqtt-topic-prefix",
                prefix,
                "--period",
                "1",
                "--tls-dir",
                str(certs.aggregator),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    closing.callback(process.wait, 10)
    closing.callback(process.terminate)
    feed = CandidateFeed(
        f"mqtts://{mosquitto.address}", prefix, tls=BrokerTls.of_dir(certs.job_master)
    )
    feed.start()
    closing.callback(feed.close)
    # The aggregator publishes its (empty) machine list at start, retained, and a candidate
    # message every round: the feed holds a list version, then candidate versions.
    wait_until(lambda: feed.versions[1] > 0, 30, f"rounds at the job master (see {log_path})")
    assert feed.connected
    # A tap with a certificate of the cluster, as a person debugging the broker would connect.
    with MqttTap(
        mosquitto.address, f"{prefix}/machines", tls=BrokerTls.of_dir(certs.aggregator)
    ) as tap:
        retained = tap.wait_for(lambda m: m.retain, 10)
    assert retained.payload[:1] == b"L"
    assert "TLS" not in "".join(
        line for line in log_path.read_text().splitlines() if "WARNING" in line
    )
