"""TLS on a real local cluster (on by default): who can reach the RM and the agents at all."""

from __future__ import annotations

import datetime
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from plumbing import tls
from plumbing.rpc import channel
from plumbing.tls import ClientTls, Identity, Role
from tests.integration.cluster.harness import Cluster, running_cluster

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    yield from running_cluster(tmp_path_factory, "cluster-tls")


def _health(address: str, credentials: ClientTls | None) -> None:
    ch = channel(address, credentials)
    try:
        health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=10)
    finally:
        ch.close()


def _sluice(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sluice", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_cluster_runs_with_tls_and_its_own_client_certificate_works(cluster: Cluster):
    assert cluster.client.tls is not None and cluster.client.tls.cert_pem is not None
    for address in (cluster.info["rm"], cluster.info["nodes"][0]["address"]):
        _health(address, cluster.client.tls)


def test_plaintext_and_foreign_callers_cannot_connect(cluster: Cluster, tmp_path: Path):
    tls.init_ca(tmp_path / "ca", "elsewhere")
    foreign = tls.issue(tls.load_ca(tmp_path / "ca"), Identity(Role.ADMIN, "eve"), tmp_path / "eve")
    stranger = tls.load_tls_dir(foreign.directory)
    assert cluster.client.tls is not None
    forged = ClientTls(cluster.client.tls.ca_pem, stranger.cert_pem, stranger.key_pem)
    for address in (cluster.info["rm"], cluster.info["nodes"][0]["address"]):
        for credentials in (None, ClientTls.of(stranger), forged):
            with pytest.raises(grpc.RpcError) as caught:
                _health(address, credentials)
            assert caught.value.code() is grpc.StatusCode.UNAVAILABLE


def test_the_cli_without_the_clusters_certificate_says_what_is_missing(
    cluster: Cluster, tmp_path: Path
):
    result = _sluice("--rm", cluster.info["rm"], "--dir", str(tmp_path), "jobs")
    assert result.returncode == 1
    (line,) = result.stderr.strip().splitlines()
    assert "it closed the connection (if it runs with TLS, give --tls-dir" in line
    with_certificate = _sluice(
        "--rm",
        cluster.info["rm"],
        "--tls-dir",
        cluster.info["client_tls"],
        "--dir",
        str(tmp_path),
        "jobs",
    )
    assert with_certificate.returncode == 0, with_certificate.stderr


def _expired(cluster: Cluster, out: Path) -> Path:
    past = datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=3)
    authority = tls.load_ca(cluster.directory / "tls" / "ca")
    return tls.issue(authority, Identity(Role.CLIENT, "ann"), out, days=1, now=past).directory


def _foreign(cluster: Cluster, out: Path) -> Path:
    tls.init_ca(out.parent / "other-ca", "elsewhere")
    issued = tls.issue(tls.load_ca(out.parent / "other-ca"), Identity(Role.CLIENT, "ann"), out)
    shutil.copy(cluster.directory / "tls" / "ca" / tls.CA_CERT, out / tls.CA_CERT)
    return issued.directory


@pytest.mark.parametrize(
    ("make", "problem"),
    [
        (_expired, r"ann/tls\.crt: expired on \d{4}-\d\d-\d\d \d\d:\d\d UTC$"),
        (_foreign, r"ann/tls\.crt: not issued by .*ann/ca\.crt"),
    ],
    ids=["expired", "foreign"],
)
def test_a_certificate_the_rm_refuses_gets_one_line_naming_the_problem(
    cluster: Cluster, tmp_path: Path, make: Callable[[Cluster, Path], Path], problem: str
):
    # The CLI reads its certificate unchecked; the RM refuses the handshake, and only then does
    # the CLI check the directory, to say why.
    directory = make(cluster, tmp_path / "ann")
    result = _sluice(
        "--rm", cluster.info["rm"], "--tls-dir", str(directory), "--dir", str(tmp_path), "jobs"
    )
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("sluice: error: ") and re.search(problem, line), line


@pytest.mark.parametrize(
    ("holder", "node_id", "message"),
    [
        (Identity(Role.RM, "rm"), "node-1", "is issued to rm 'rm', not to an agent"),
        (Identity(Role.AGENT, "node-1"), "node-9", "is for agent 'node-1', not --node-id 'node-9'"),
    ],
)
def test_an_agent_refuses_a_certificate_of_another_role_or_node(
    tmp_path: Path, holder: Identity, node_id: str, message: str
):
    tls.init_ca(tmp_path / "ca", "lab")
    tls.issue(tls.load_ca(tmp_path / "ca"), holder, tmp_path / "holder")
    result = _sluice(
        "agent",
        "--rm",
        "127.0.0.1:1",
        "--node-id",
        node_id,
        "--state-dir",
        str(tmp_path / "state"),
        "--tls-dir",
        str(tmp_path / "holder"),
    )
    assert result.returncode == 2
    (line,) = [x for x in result.stderr.strip().splitlines() if "error" in x]
    assert line.startswith("sluice: error: --tls-dir: ") and message in line
    assert "Traceback" not in result.stderr


def test_a_person_with_a_token_from_sluice_ca_token_uses_the_cli(cluster: Cluster, tmp_path: Path):
    ca_dir = cluster.directory / "tls" / "ca"
    issued = _sluice(
        "ca", "token", "--ca-dir", str(ca_dir), "--name", "erin", "--out", str(tmp_path / "erin")
    )
    assert issued.returncode == 0, issued.stderr
    assert "issued a bearer token for client 'erin' until" in issued.stdout
    shown = _sluice("ca", "show", str(tmp_path / "erin"))
    assert shown.returncode == 0 and "bearer token" in shown.stdout
    listed = _sluice(
        "--rm",
        str(cluster.info["rm_tokens"]),
        "--tls-dir",
        str(tmp_path / "erin"),
        "--dir",
        str(tmp_path),
        "jobs",
    )
    assert listed.returncode == 0, listed.stderr
