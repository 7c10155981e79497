"""The aggregator's InfluxDB link over mutual TLS: a real influxd behind a real stunnel4 front.

InfluxDB 1.x serves HTTPS but cannot require client certificates, so a deployment puts
Debian's stunnel4 before it (``verify = 2``: a client certificate of the cluster CA required;
:func:`sluice.brokers.start_tls_front`).  The aggregator's store (``--influx-url https://...``
with its TLS directory) trusts only the cluster CA, checks the server's name and presents its
own certificate.  A refusal either way is one log line saying TLS, and the writer keeps trying
with the sample kept."""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from aggregator.influx_store import (
    InfluxSampleStore,
    InfluxUnavailableError,
    parse_influx_url,
)
from aggregator.samples import MachineSample
from plumbing import tls
from plumbing.broker_tls import BrokerTls
from plumbing.tls import Identity, Role
from policies.oversubscription.config import LOAD_METRICS, QUEUE_METRICS
from sluice import brokers
from sluice.brokers import BrokerUnavailableError, ServiceProcess
from tests.integration.cluster.harness import unavailable, wait_until

pytestmark = pytest.mark.integration

WAIT = 30.0
NOW = time.time()


@dataclass(frozen=True)
class Certificates:
    front: Path  # role broker, the cluster CA's: names localhost and 127.0.0.1 only
    aggregator: Path
    stranger: Path  # an aggregator's certificate of another CA, with that CA as its ca.crt
    stranger_front: Path  # a broker certificate of that other CA


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    root = tmp_path_factory.mktemp("influx-tls")
    authority = tls.init_ca(root / "ca", "lab")
    tls.issue(authority, Identity(Role.BROKER, "influxdb"), root / "front")
    tls.issue(authority, Identity(Role.AGGREGATOR, "aggregator"), root / "aggregator")
    other = tls.init_ca(root / "other-ca", "elsewhere")
    tls.issue(other, Identity(Role.AGGREGATOR, "aggregator"), root / "stranger")
    tls.issue(other, Identity(Role.BROKER, "influxdb"), root / "stranger-front")
    return Certificates(
        root / "front", root / "aggregator", root / "stranger", root / "stranger-front"
    )


def start_front(
    backend: ServiceProcess, tls_dir: Path, workdir: Path, host: str = "127.0.0.1"
) -> ServiceProcess:
    try:
        return brokers.start_tls_front(
            brokers.free_port(host),
            backend.address,
            tls_dir,
            workdir,
            workdir / "stunnel.log",
            host,
        )
    except BrokerUnavailableError as error:
        unavailable(str(error))
        raise AssertionError from None  # unreachable


@pytest.fixture(scope="module")
def fronts(
    influxdb_server: ServiceProcess,
    certs: Certificates,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[dict[str, ServiceProcess]]:
    """stunnel4 fronts of the one influxd: the cluster's; one whose certificate another CA
    signed; and the cluster's on 127.0.0.2, a name its certificate does not hold."""
    root = tmp_path_factory.mktemp("fronts")
    started: dict[str, ServiceProcess] = {}
    try:
        for name, tls_dir, host in (
            ("cluster", certs.front, "127.0.0.1"),
            ("another CA's", certs.stranger_front, "127.0.0.1"),
            ("misnamed", certs.front, "127.0.0.2"),
        ):
            started[name] = start_front(influxdb_server, tls_dir, root / name.split()[0], host)
        yield started
    finally:
        for front in started.values():
            front.stop()


def sessions(front: ServiceProcess) -> int:
    """Connections the front has accepted (TCP), whatever became of them."""
    return front.log_path.read_text(errors="replace").count("accepted connection from")


def sample(node: str, t: float) -> MachineSample:
    return MachineSample(
        node_id=node,
        timestamp=t,
        load=tuple(0.01 * (j + 1) for j in range(len(LOAD_METRICS))),
        load_capacity=tuple(1.0 for _ in LOAD_METRICS),
        queue=tuple(float(j) for j in range(len(QUEUE_METRICS))),
        cpi=None,
        mpki=None,
        interval_s=1.0,
    )


def refused(alert: str) -> str:
    """The line of a front that turned our certificate down: with TLS 1.3 its alert comes after
    the client's side of the handshake, and the client may read it, or find the connection
    closed first (stunnel hangs up at once)."""
    return (
        rf"\(TLS\): TLS: the server (refused this client's certificate \({alert}\)|closed "
        r"the connection during the handshake \(it does not accept this client's certificate\?\))"
    )


def store_for(
    front: ServiceProcess, client: BrokerTls, log: logging.Logger
) -> Callable[[], InfluxSampleStore]:
    # A database per test: the session's influxd is shared.
    target = parse_influx_url(f"https://{front.address}/tls_{uuid.uuid4().hex[:10]}")
    return lambda: InfluxSampleStore(
        target, flush_interval=0.05, max_backoff=0.5, tls=client, log=log
    )


def test_the_aggregators_certificate_writes_and_reads_back_through_the_front(
    fronts: dict[str, ServiceProcess], certs: Certificates, caplog: pytest.LogCaptureFixture
) -> None:
    log = logging.getLogger(f"sluice.test.influx.{uuid.uuid4().hex[:6]}")
    caplog.set_level(logging.WARNING, logger=log.name)
    store = store_for(fronts["cluster"], BrokerTls.of_dir(certs.aggregator), log)()
    store.start()
    try:
        store.write(sample("node-1", NOW - 1))
        wait_until(lambda: store.written == 1, WAIT, "the sample written")
        (back,) = store.load_recent(window=5, since_s=60.0, now=NOW)
        assert back.node_id == "node-1" and back.timestamp == pytest.approx(NOW - 1, abs=1e-3)
        assert back.load == sample("node-1", NOW - 1).load
        assert [r.getMessage() for r in caplog.records if r.name == log.name] == []
    finally:
        store.close(1.0)


@pytest.mark.parametrize(
    ("front", "client", "expected"),
    [
        ("cluster", "another CA's certificate", refused("tlsv1 alert unknown ca")),
        ("cluster", "no certificate", refused("tlsv13 alert certificate required")),
        (
            "another CA's",
            "the aggregator's certificate",
            r"\(TLS\): TLS: the server's certificate is not trusted here \(certificate verify "
            r"failed: self-signed certificate in certificate chain\)",
        ),
        (
            "misnamed",
            "the aggregator's certificate",
            r"\(TLS\): TLS: the server's certificate is not trusted here \(certificate verify "
            r"failed: IP address mismatch",
        ),
    ],
)
def test_a_tls_refusal_is_one_line_saying_tls_and_the_writer_keeps_trying(
    fronts: dict[str, ServiceProcess],
    certs: Certificates,
    caplog: pytest.LogCaptureFixture,
    front: str,
    client: str,
    expected: str,
) -> None:
    ca_file = certs.aggregator / tls.CA_CERT
    client_tls = {
        "the aggregator's certificate": BrokerTls.of_dir(certs.aggregator),
        "another CA's certificate": BrokerTls(
            ca_file, certs.stranger / tls.CERT, certs.stranger / tls.KEY
        ),
        "no certificate": BrokerTls(ca_file),
    }[client]
    server = fronts[front]
    log = logging.getLogger(f"sluice.test.influx.{uuid.uuid4().hex[:6]}")
    caplog.set_level(logging.WARNING, logger=log.name)
    store = store_for(server, client_tls, log)()
    store.start()  # refused at once: start-up goes on, as with a server that is down
    try:
        store.write(sample("node-1", NOW - 1))

        def lines() -> list[str]:
            return [r.getMessage() for r in caplog.records if r.name == log.name]

        wait_until(lines, WAIT, "the refusal logged")
        said_at = sessions(server)
        wait_until(lambda: sessions(server) > said_at, WAIT, "another attempt after the log")
        (line,) = lines()  # once per outage, however many attempts
        assert line.startswith(f"InfluxDB at {store.target.url} (TLS): "), line
        assert re.search(expected, line) and "\n" not in line, line
        assert store.written == 0 and store.pending == 1
        with pytest.raises(InfluxUnavailableError) as refused:  # the start-up refill's view
            store.load_recent(window=5, since_s=60.0, now=NOW)
        assert re.search(expected, str(refused.value)) and "\n" not in str(refused.value)
    finally:
        store.close(0.1)
