"""A service (``kind: service``) on a real cluster: it runs until killed, a task of it that ends
is started again, and its node agent probes it and reports its latency; the cluster's UP/RP
switch reaches the agents."""

from __future__ import annotations

import socket
import sys
from collections.abc import Iterator

import pytest
import yaml

from sluice_pb import common_pb2 as pb
from sluice_pb import node_agent_pb2 as agent_pb
from sluice_pb import resource_manager_pb2 as rm_pb
from tests.integration.cluster.harness import Cluster, phase, running_cluster, wait_until

QUIET_PSI = (
    "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
    "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    # The agent judges services by the machine's CPU pressure (cgroup v1 keeps none per task):
    # here a machine where nothing ever stalls, whatever else keeps the test host busy, so that
    # "nothing interferes with it" holds by construction.
    pressure = tmp_path_factory.mktemp("quiet-pressure")
    (pressure / "cpu").write_text(QUIET_PSI)
    # RP: services share the machines (ROSE's switch, handed by the RM to the agents)
    yield from running_cluster(
        tmp_path_factory,
        "service",
        nodes=1,
        oversubscription="rp",
        agent_args=("--machine-pressure", str(pressure)),
    )


def test_a_service_whose_task_ends_is_restarted_and_runs_until_killed(cluster: Cluster) -> None:
    document = {
        "name": "svc",
        "kind": "service",
        "priority": 5,
        "max_retries": 100,
        "service": {"latency_sensitive": True},
        "phases": [phase("server", 1, "sleep 0.5")],  # it ends every half second
    }
    job_id = cluster.submit(yaml.safe_dump(document))
    try:
        wait_until(
            lambda: sum(t.state == pb.TASK_SUCCEEDED for t in cluster.job(job_id).tasks) >= 2,
            60,
            "two ends of the service's task",
        )
        detail = cluster.job(job_id)
        assert detail.summary.state == pb.JOB_RUNNING  # ended tasks did not end the service
        assert detail.spec.kind == "service" and detail.spec.service.latency_sensitive
        assert max(t.attempt for t in detail.tasks) >= 2
    finally:
        cluster.client.jobs.KillJob(rm_pb.GetJobRequest(job_id=job_id), timeout=10)
    assert cluster.wait_final(job_id, timeout=60).summary.state == pb.JOB_KILLED


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_the_agent_probes_a_latency_sensitive_service_and_reports_its_latency(
    cluster: Cluster,
) -> None:
    port = free_port()
    document = {
        "name": "web",
        "kind": "service",
        "priority": 5,
        "service": {
            "latency_sensitive": True,
            # A timeout a busy host's Python server still answers within: the latency itself
            # is the host's, not asserted.
            "probe": {"http": "/", "port": port, "period_s": 1.0, "timeout_s": 1.0},
        },
        "phases": [
            phase("server", 1, f"exec {sys.executable} -m http.server {port} --bind 127.0.0.1")
        ],
    }
    job_id = cluster.submit(yaml.safe_dump(document))
    try:
        task = cluster.wait_task_running(job_id, "server-0", timeout=60)

        def probed() -> agent_pb.ServiceHealth | None:
            for status in cluster.agent_tasks(task.node_address):
                if status.task.job_id == job_id and status.service.probes >= 3:
                    return status.service
            return None

        health = wait_until(probed, 60, "three successful probes of the service")
        assert 0 < health.latency_p50_s <= health.latency_p95_s
        assert not health.anomalous  # nothing interferes with it
    finally:
        cluster.client.jobs.KillJob(rm_pb.GetJobRequest(job_id=job_id), timeout=10)
    assert cluster.wait_final(job_id, timeout=60).summary.state == pb.JOB_KILLED


def test_the_cluster_says_it_runs_rp_and_its_agents_heard_so(cluster: Cluster) -> None:
    info = cluster.client.jobs.GetClusterInfo(rm_pb.GetClusterInfoRequest(), timeout=10)
    assert info.oversubscription == "rp"
    log = cluster.directory / "logs" / "node-1.log"
    wait_until(lambda: "oversubscription: rp (the cluster's)" in log.read_text(), 30, "the log")
