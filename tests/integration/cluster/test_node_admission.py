"""Which nodes may join, against a real local cluster with mutual TLS: a node registers only a
capacity a machine can have, and only under a name the operator approved (``--nodes-allowed``),
whatever agent certificate the CA issued for it (issue 27, item 5)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from plumbing import tls
from plumbing.rpc import channel
from plumbing.tls import ClientTls, Identity, Role
from sluice_pb import common_pb2 as pb
from sluice_pb import resource_manager_pb2 as rm_pb
from sluice_pb import resource_manager_pb2_grpc as rm_grpc
from tests.integration.cluster.harness import Cluster, running_cluster

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    # The local cluster's own agents (node-1) match the pattern: they registered.
    yield from running_cluster(
        tmp_path_factory, "cluster-admission", rm_args=("--nodes-allowed", "node-*")
    )


def _agent(cluster: Cluster, node_id: str, out: Path) -> ClientTls:
    """A certificate the cluster's CA issued to an agent for ``node_id``."""
    authority = tls.load_ca(cluster.directory / "tls" / "ca")
    tls.issue(authority, Identity(Role.AGENT, node_id), out / node_id)
    return ClientTls.of(tls.load_tls_dir(out / node_id))


def _register(cluster: Cluster, caller: ClientTls, node_id: str, cpu: float) -> None:
    ch = channel(str(cluster.info["rm"]), caller)
    try:
        rm_grpc.NodeServiceStub(ch).RegisterNode(
            rm_pb.RegisterNodeRequest(
                node_id=node_id,
                address="127.0.0.1:9",
                capacity=pb.Resources(cpu=cpu, memory_mb=4096),
                runtime="process",
                instance_id=f"{node_id}-probe",
                cluster_id=str(cluster.info["cluster_id"]),
            ),
            timeout=20,
        )
    finally:
        ch.close()


def _nodes(cluster: Cluster) -> dict[str, float]:
    listed = cluster.client.jobs.ListNodes(rm_pb.ListNodesRequest(), timeout=10).nodes
    return {n.node_id: n.capacity.cpu for n in listed}


@pytest.mark.parametrize(
    ("node_id", "cpu", "code", "details"),
    [
        # the probe's agent certificate for evil-1, with 1e9 CPUs: refused for its name first
        (
            "evil-1",
            1e9,
            grpc.StatusCode.PERMISSION_DENIED,
            "node_id: evil-1 is not an approved node name; to approve it, start the RM with "
            "--nodes-allowed for it",
        ),
        (
            "node-7",
            1e9,
            grpc.StatusCode.INVALID_ARGUMENT,
            "capacity.cpu: 1000000000 is more than a machine can have (at most 4096)",
        ),
        (
            "node-7",
            float("inf"),
            grpc.StatusCode.INVALID_ARGUMENT,
            "capacity.cpu: must be a finite number above 0, got inf",
        ),
    ],
)
def test_a_registration_is_refused_in_one_line_naming_the_field(
    cluster: Cluster, tmp_path: Path, node_id: str, cpu: float, code: grpc.StatusCode, details: str
) -> None:
    caller = _agent(cluster, node_id, tmp_path)
    with pytest.raises(grpc.RpcError) as refused:
        _register(cluster, caller, node_id, cpu)
    assert (refused.value.code(), refused.value.details()) == (code, details)
    assert node_id not in _nodes(cluster)


def test_an_approved_name_with_a_real_capacity_registers(cluster: Cluster, tmp_path: Path) -> None:
    _register(cluster, _agent(cluster, "node-8", tmp_path), "node-8", 8.0)
    assert _nodes(cluster)["node-8"] == 8.0  # (lost after the node timeout: it never beats)
