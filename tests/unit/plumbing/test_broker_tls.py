"""The brokers' TLS on the client side: which files, which kafka-python options, which SSL
context, and how a TLS failure is told apart from a broker that is down."""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aggregator import kafka_reader
from plumbing import kafka_outbox, tls
from plumbing.broker_tls import BrokerTls, probe, tls_problem
from plumbing.tls import Identity, Role, TlsError


@pytest.fixture(scope="module")
def tls_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("broker-tls")
    tls.issue(tls.init_ca(root / "ca", "lab"), Identity(Role.AGENT, "node-1"), root / "agent")
    return root / "agent"


def test_a_tls_directory_gives_its_three_files(tls_dir: Path) -> None:
    assert BrokerTls.of_dir(tls_dir) == BrokerTls(
        tls_dir / "ca.crt", tls_dir / "tls.crt", tls_dir / "tls.key"
    )
    assert BrokerTls.of(tls.load_tls_dir(tls_dir)) == BrokerTls.of_dir(tls_dir)


@pytest.mark.parametrize("missing", ["ca.crt", "tls.crt", "tls.key"])
def test_a_missing_file_is_one_line_naming_it(tmp_path: Path, missing: str) -> None:
    for name in ("ca.crt", "tls.crt", "tls.key"):
        if name != missing:
            (tmp_path / name).write_text("x")
    with pytest.raises(TlsError, match=f"^--tls-dir: {tmp_path / missing} is missing$"):
        BrokerTls.of_dir(tmp_path)


@pytest.mark.parametrize(
    ("client", "expected"),
    [
        (
            BrokerTls(Path("/t/ca.crt"), Path("/t/tls.crt"), Path("/t/tls.key")),
            {
                "security_protocol": "SSL",
                "ssl_cafile": "/t/ca.crt",
                "ssl_certfile": "/t/tls.crt",
                "ssl_keyfile": "/t/tls.key",
                "ssl_check_hostname": True,
            },
        ),
        (
            BrokerTls(Path("/t/ca.crt")),
            {"security_protocol": "SSL", "ssl_cafile": "/t/ca.crt", "ssl_check_hostname": True},
        ),
    ],
    ids=["with a certificate", "without one"],
)
def test_kafka_options(client: BrokerTls, expected: dict[str, Any]) -> None:
    assert client.kafka_options() == expected


def test_a_certificate_goes_with_its_key() -> None:
    with pytest.raises(ValueError, match="go together"):
        BrokerTls(Path("/t/ca.crt"), Path("/t/tls.crt"))


class Recorder:
    """Stands in for KafkaProducer / KafkaConsumer: records the options it was given."""

    def __init__(self) -> None:
        self.options: dict[str, Any] = {}

    def __call__(self, **options: Any) -> Recorder:
        self.options = options
        return self


@pytest.mark.parametrize("with_tls", [True, False])
def test_the_producer_and_the_consumer_get_the_options(
    monkeypatch: pytest.MonkeyPatch, tls_dir: Path, with_tls: bool
) -> None:
    client = BrokerTls.of_dir(tls_dir) if with_tls else None
    producer, consumer = Recorder(), Recorder()
    monkeypatch.setattr("kafka.KafkaProducer", producer)  # (kafka_outbox imports it when used)
    monkeypatch.setattr(kafka_reader, "KafkaConsumer", consumer)
    kafka_outbox.kafka_producer("k:9093", "sluice-agent", client)
    kafka_reader.kafka_consumer("k:9093", client)
    for recorded in (producer.options, consumer.options):
        assert recorded["bootstrap_servers"] == ["k:9093"]
        tls_options = {k: v for k, v in recorded.items() if k.startswith(("ssl_", "security"))}
        assert tls_options == (client.kafka_options() if client is not None else {})


def test_the_ssl_context_trusts_the_ca_checks_the_host_and_presents_the_certificate(
    tls_dir: Path,
) -> None:
    context = BrokerTls.of_dir(tls_dir).ssl_context()
    assert context.verify_mode is ssl.CERT_REQUIRED and context.check_hostname
    assert context.minimum_version >= ssl.TLSVersion.TLSv1_2
    (trusted,) = context.get_ca_certs()  # the cluster's CA and nothing else
    assert ("organizationName", "lab") in [pair for rdn in trusted["subject"] for pair in rdn]


@pytest.mark.parametrize("broken", ["ca.crt", "tls.key"])
def test_an_unusable_file_is_one_line_naming_it(tls_dir: Path, tmp_path: Path, broken: str) -> None:
    files = {name: tls_dir / name for name in ("ca.crt", "tls.crt", "tls.key")}
    (tmp_path / broken).write_text("not PEM")
    files[broken] = tmp_path / broken
    client = BrokerTls(files["ca.crt"], files["tls.crt"], files["tls.key"])
    with pytest.raises(TlsError) as raised:
        client.ssl_context()
    assert str(files[broken]) in str(raised.value) and "\n" not in str(raised.value)


def _chained(outer: BaseException, inner: BaseException) -> BaseException:
    outer.__cause__ = inner
    return outer


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (ConnectionRefusedError(111, "Connection refused"), None),
        (TimeoutError("timed out"), None),
        (RuntimeError("Operation timed out"), None),
        (
            ssl.SSLError(
                1,
                "[SSL: TLSV13_ALERT_CERTIFICATE_REQUIRED] tlsv13 alert certificate "
                "required (_ssl.c:2580)",
            ),
            "TLS: the broker refused this client's certificate (tlsv13 alert certificate required)",
        ),
        (
            # aiomqtt keeps only the text of paho's ssl error
            RuntimeError(
                "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: "
                "self-signed certificate in certificate chain (_ssl.c:1006)"
            ),
            "TLS: the broker's certificate is not trusted here (certificate verify failed: "
            "self-signed certificate in certificate chain)",
        ),
        (
            _chained(
                RuntimeError("no CONNACK"),
                ssl.SSLError(
                    1, "[SSL: TLSV1_ALERT_UNKNOWN_CA] tlsv1 alert unknown ca (_ssl.c:2580)"
                ),
            ),
            "TLS: the broker refused this client's certificate (tlsv1 alert unknown ca)",
        ),
        (
            RuntimeError("[SSL: WRONG_VERSION_NUMBER] wrong version number (_ssl.c:1006)"),
            "TLS: wrong version number",  # a plaintext broker
        ),
        (RuntimeError("TLS: explained already"), "TLS: explained already"),
    ],
)
def test_tls_failures_are_told_apart(error: BaseException, expected: str | None) -> None:
    assert tls_problem(error) == expected


class _WrapperError(Exception):
    """Holds the error as an argument, as urllib3's ``SSLError(ssl_error)`` does."""


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (
            # stunnel hangs up on a client without a certificate; requests' error names the
            # ssl error only inside urllib3's, as an argument
            _chained(
                RuntimeError("Max retries exceeded (Caused by SSLError(SSLEOFError(8, ...)))"),
                _WrapperError(
                    ssl.SSLEOFError(8, "EOF occurred in violation of protocol (_ssl.c:2427)")
                ),
            ),
            "TLS: the server closed the connection during the handshake (it does not accept "
            "this client's certificate?) (EOF occurred in violation of protocol)",
        ),
        (
            _WrapperError(ssl.SSLError(1, "[SSL: TLSV1_ALERT_UNKNOWN_CA] tlsv1 alert unknown ca")),
            "TLS: the server refused this client's certificate (tlsv1 alert unknown ca)",
        ),
        (_WrapperError(ConnectionRefusedError(111, "Connection refused")), None),
    ],
)
def test_wrapped_tls_failures_name_the_peer(error: BaseException, expected: str | None) -> None:
    assert tls_problem(error, peer="server") == expected


@pytest.fixture
def plaintext_server() -> Iterator[str]:
    """A server that speaks no TLS: like Tansu, it reads a TLS ClientHello as a request it
    cannot parse, and hangs up."""
    server = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        with contextlib.suppress(OSError):
            connection, _ = server.accept()
            with connection:
                connection.recv(1024)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.getsockname()[1]}"
    server.close()
    thread.join(2)


def test_probing_a_broker_that_is_down_is_not_tls(tls_dir: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as unused:
        address = f"127.0.0.1:{unused.getsockname()[1]}"
    assert probe(address, BrokerTls.of_dir(tls_dir).ssl_context(), timeout=1) is None


def test_probing_a_broker_that_speaks_no_tls_says_tls(tls_dir: Path, plaintext_server: str) -> None:
    problem = probe(plaintext_server, BrokerTls.of_dir(tls_dir).ssl_context(), timeout=1)
    assert problem is not None and problem.startswith("TLS: "), problem
