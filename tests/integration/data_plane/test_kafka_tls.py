"""Kafka over TLS (``--kafka-tls``) with real kafka-python clients: the agents' and job masters'
producer (``KafkaOutbox``) and the aggregator's consumer (``TopicReader``).

Tansu, the Kafka-protocol broker the tests run, has no TLS (docs/security.md), so it runs behind
a TLS front that requires a client certificate of the cluster's CA, as a Kafka listener with
``ssl.client.auth=required`` does, and Tansu advertises the front's address: every connection
the clients make, bootstrap and broker alike, is a real TLS session with hostname checking."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from aggregator.kafka_reader import TopicReader
from plumbing import tls
from plumbing.broker_tls import BrokerTls
from plumbing.data_plane import DEFAULT_METRICS_TOPIC, DEFAULT_OUTCOMES_TOPIC
from plumbing.kafka_outbox import KafkaOutbox, Producer, kafka_producer
from plumbing.rpc import channel as rpc_channel
from plumbing.tls import Identity, Role
from sluice import brokers
from sluice.brokers import BrokerUnavailableError
from sluice_pb import aggregator_pb2 as apb
from sluice_pb import aggregator_pb2_grpc as agg_grpc
from sluice_pb import common_pb2 as pb
from sluice_pb import metrics_pb2 as mpb
from tests.integration.cluster.harness import (
    Cluster,
    job_spec,
    phase,
    start_cluster,
    unavailable,
    wait_until,
)
from tests.integration.data_plane.tls_front import TlsFront

pytestmark = pytest.mark.integration

WAIT = 30.0


@dataclass(frozen=True)
class Certificates:
    broker: Path  # role broker, the front's
    agent: Path
    aggregator: Path
    stranger: Path  # another CA's certificate, with that CA as its ca.crt


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    root = tmp_path_factory.mktemp("kafka-tls")
    authority = tls.init_ca(root / "ca", "lab")
    tls.issue(authority, Identity(Role.BROKER, "kafka"), root / "broker")
    tls.issue(authority, Identity(Role.AGENT, "node-1"), root / "agent")
    tls.issue(authority, Identity(Role.AGGREGATOR, "aggregator"), root / "aggregator")
    tls.init_ca(root / "other-ca", "elsewhere")
    tls.issue(tls.load_ca(root / "other-ca"), Identity(Role.AGENT, "node-1"), root / "stranger")
    return Certificates(root / "broker", root / "agent", root / "aggregator", root / "stranger")


@pytest.fixture(scope="module")
def front(certs: Certificates, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsFront]:
    """Tansu behind a TLS front; clients reach it at ``front.address`` only."""
    front_port = brokers.free_port()
    try:
        kafka = brokers.start_kafka(
            brokers.free_port(),
            tmp_path_factory.mktemp("tansu") / "kafka.log",
            advertise=f"127.0.0.1:{front_port}",
        )
    except BrokerUnavailableError as error:
        unavailable(str(error))
        raise AssertionError from None  # unreachable
    broker = BrokerTls.of_dir(certs.broker)
    assert broker.cert_file is not None and broker.key_file is not None
    front = TlsFront(kafka.address, broker.ca_file, broker.cert_file, broker.key_file)
    try:
        yield front.start(front_port)
    finally:
        front.close()
        kafka.stop()


def outbox(
    address: str, topic: str, client: BrokerTls, log: logging.Logger, attempts: list[float]
) -> KafkaOutbox:
    """An agent's outbox over TLS; ``attempts`` gets the time of each producer it builds."""

    def producer(bootstrap: str) -> Producer:
        attempts.append(time.monotonic())
        return kafka_producer(bootstrap, "sluice-agent", client)

    box = KafkaOutbox(address, topic, producer_factory=producer, log=log, tls=client)
    box.start()
    return box


def test_an_agents_samples_reach_the_aggregator_over_tls(
    front: TlsFront, certs: Certificates
) -> None:
    topic = f"tls.metrics.{uuid.uuid4().hex[:8]}"
    started = time.time()
    box = outbox(front.address, topic, BrokerTls.of_dir(certs.agent), logging.getLogger("t"), [])
    reader = TopicReader(
        front.address, [topic], replay_from=started - 1, tls=BrokerTls.of_dir(certs.aggregator)
    )
    try:
        for i in range(5):
            box.offer("node-1", f"sample-{i}".encode())
        wait_until(lambda: box.sent == 5, WAIT, "the samples acknowledged")
        records: list[bytes] = []

        def all_read() -> bool:
            records.extend(r.value for r in reader.poll(0.5))
            return len(records) >= 5

        wait_until(all_read, WAIT, "the samples read back")
        assert records == [f"sample-{i}".encode() for i in range(5)]
        accepted, refused = front.counts()
        assert accepted >= 2 and refused == 0  # both clients went through TLS, nobody else
    finally:
        reader.close()
        box.close(1)


@pytest.mark.parametrize(
    ("client", "expected"),
    [
        ("no certificate", "TLS: the broker closed the session right after the handshake"),
        ("another CA's certificate", "TLS: the broker closed the session right after"),
        ("another CA trusted", "TLS: the broker's certificate is not trusted here"),
    ],
)
def test_a_tls_failure_is_one_line_saying_tls_and_the_outbox_keeps_retrying(
    front: TlsFront,
    certs: Certificates,
    caplog: pytest.LogCaptureFixture,
    client: str,
    expected: str,
) -> None:
    ca_file = certs.agent / tls.CA_CERT
    client_tls = {
        "no certificate": BrokerTls(ca_file),
        "another CA's certificate": BrokerTls(
            ca_file, certs.stranger / tls.CERT, certs.stranger / tls.KEY
        ),
        "another CA trusted": BrokerTls.of_dir(certs.stranger),
    }[client]
    log = logging.getLogger(f"sluice.test.kafka.{uuid.uuid4().hex[:6]}")
    caplog.set_level(logging.WARNING, logger=log.name)
    attempts: list[float] = []
    accepted_before, _ = front.counts()
    box = outbox(front.address, "tls.refused", client_tls, log, attempts)
    try:
        box.offer("node-1", b"sample")

        def lines() -> list[str]:
            return [r.getMessage() for r in caplog.records if r.name == log.name]

        wait_until(lines, WAIT, "the outage logged")
        # Still trying after it said so, with a new producer, and saying nothing more.
        said_at = time.monotonic()
        wait_until(lambda: attempts[-1] > said_at, WAIT, "another attempt")
        assert front.counts()[0] == accepted_before  # no session got through the front
        (line,) = lines()
        assert expected in line and "\n" not in line, line
        assert box.sent == 0 and box.pending == 1 and box.unreachable
    finally:
        box.close(1)


def test_the_aggregators_reader_says_tls_and_returns_nothing_meanwhile(
    front: TlsFront, certs: Certificates, caplog: pytest.LogCaptureFixture
) -> None:
    log = logging.getLogger(f"sluice.test.reader.{uuid.uuid4().hex[:6]}")
    caplog.set_level(logging.WARNING, logger=log.name)
    reader = TopicReader(
        front.address, ["tls.anything"], tls=BrokerTls.of_dir(certs.stranger), log=log
    )
    try:
        assert reader.poll(0.5) == []  # never raises
        (line,) = [r.getMessage() for r in caplog.records if r.name == log.name]
        assert "TLS: the broker's certificate is not trusted here" in line, line
        assert not reader.connected
    finally:
        reader.close()


def test_a_local_cluster_with_kafka_tls_publishes_and_reads_over_tls(tmp_path: Path) -> None:
    """``sluice local up --kafka HOST:PORT --kafka-tls``, the processes: the RM hands the
    setting to the agent and the job master, which publish with their own certificates (the
    job master's through the RM's job master CA), and the aggregator reads with its own."""
    from sluice import local_cluster
    from sluice.cluster_certs import ensure_certificates

    directory = tmp_path / "cluster"
    certificates = ensure_certificates(
        directory / "tls", local_cluster.cluster_id_for(directory), ["node-1"]
    )
    tls.issue(tls.load_ca(certificates.ca), Identity(Role.BROKER, "kafka"), tmp_path / "kafka")
    front_port = brokers.free_port()
    try:
        kafka = brokers.start_kafka(
            brokers.free_port(), tmp_path / "kafka.log", advertise=f"127.0.0.1:{front_port}"
        )
    except BrokerUnavailableError as error:
        unavailable(str(error))
        raise AssertionError from None  # unreachable
    broker = BrokerTls.of_dir(tmp_path / "kafka")
    assert broker.cert_file is not None and broker.key_file is not None
    front = TlsFront(kafka.address, broker.ca_file, broker.cert_file, broker.key_file)
    front.start(front_port)
    cluster = None
    try:
        cluster = start_cluster(
            directory, "process", nodes=1, kafka=front.address, kafka_tls=True, metrics_interval=0.5
        )
        job_id = cluster.submit(job_spec("over-tls", [phase("a", 1, "true")]))
        assert cluster.wait_final(job_id).summary.state == pb.JOB_SUCCEEDED
        # The aggregator's view of the node comes from samples it read over TLS.
        wait_until(
            lambda: any(m.node_id == "node-1" for m in list_machines(cluster)),
            WAIT,
            "node-1 at the aggregator",
        )
        reader = TopicReader(
            front.address,
            [DEFAULT_METRICS_TOPIC, DEFAULT_OUTCOMES_TOPIC],
            replay_from=0.0,
            tls=BrokerTls.of_dir(certificates.client),
        )
        seen: set[str] = set()

        def both_topics() -> bool:
            for record in reader.poll(0.5):
                if record.topic == DEFAULT_OUTCOMES_TOPIC:
                    event = mpb.OutcomeEvent.FromString(record.value)
                    seen.add(f"outcome {event.job_id}")
                else:
                    seen.add(f"sample {mpb.NodeMetrics.FromString(record.value).node_id}")
            return {f"outcome {job_id}", "sample node-1"} <= seen

        try:
            wait_until(both_topics, WAIT, "samples and outcomes read back over TLS")
        finally:
            reader.close()
        _, refused = front.counts()
        assert refused == 0  # every daemon presented a certificate the front accepted
    finally:
        if cluster is not None:
            cluster.close()
            local_cluster.down(directory, lambda _: None)
        front.close()
        kafka.stop()


def list_machines(cluster: Cluster) -> list[apb.MachineStatus]:
    channel = rpc_channel(str(cluster.info["data_plane"]["aggregator"]), cluster.client.tls)
    try:
        stub = agg_grpc.AggregatorServiceStub(channel)
        return list(stub.ListMachines(apb.ListMachinesRequest(), timeout=5).machines)
    finally:
        channel.close()
