"""The ``broker`` role: a Kafka or MQTT broker's server certificate, issued by ``sluice ca``,
naming the hosts its clients dial, and holding no right on any gRPC service."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import grpc
import pytest
from cryptography import x509

from aggregator.access import ACCESS as AGGREGATOR_ACCESS
from node_agent.access import ACCESS as AGENT_ACCESS
from plumbing import tls
from plumbing.authz import AccessTable, refusal
from plumbing.tls import Identity, Role
from resource_manager.access import ACCESS as RM_ACCESS
from sluice.cli import main

BROKER = Identity(Role.BROKER, "mosquitto")
TABLES: dict[str, AccessTable] = {
    "rm": RM_ACCESS,
    "agent": AGENT_ACCESS,
    "aggregator": AGGREGATOR_ACCESS,
}


def test_sluice_ca_issues_a_broker_certificate_naming_its_hosts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ca = tmp_path / "ca"
    assert main(["ca", "init", "--ca-dir", str(ca)]) == 0
    argv = ["ca", "issue", "--ca-dir", str(ca), "--role", "broker", "--name", "mosquitto"]
    assert main([*argv, "--host", "mqtt.lab", "--host", "10.0.0.9"]) == 0
    loaded = tls.load_tls_dir(ca / "broker-mosquitto")
    assert loaded.identity == BROKER
    certificate = x509.load_pem_x509_certificate(loaded.cert_pem)
    names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert set(names.get_values_for_type(x509.DNSName)) == {"mqtt.lab", "localhost"}
    assert set(names.get_values_for_type(x509.IPAddress)) == {
        ipaddress.ip_address("10.0.0.9"),
        ipaddress.ip_address("127.0.0.1"),
    }
    assert names.get_values_for_type(x509.UniformResourceIdentifier) == [
        "sluice://broker/mosquitto"
    ]
    # A TLS server's certificate: the broker presents it to the daemons.
    usage = certificate.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert x509.oid.ExtendedKeyUsageOID.SERVER_AUTH in usage


@pytest.mark.parametrize("service", sorted(TABLES))
def test_no_rpc_of_any_service_admits_a_broker(service: str) -> None:
    table = TABLES[service]
    assert table, "an empty access table would make this test pass for nothing"
    for method, roles in table.items():
        assert Role.BROKER not in roles, method
        refused = refusal(table, method, BROKER)
        assert refused is not None and refused[0] is grpc.StatusCode.PERMISSION_DENIED, method


def test_a_broker_may_probe_health_like_every_holder() -> None:
    assert refusal(RM_ACCESS, "/grpc.health.v1.Health/Check", BROKER) is None
