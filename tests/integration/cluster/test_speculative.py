"""Speculative oversubscription on a real two-node cluster (ROSE, issue 13), checked from the
outside: through the RM's job and node views and the agents' own answers.

The cluster runs RP with a one-second aggregator period, so job masters get candidate lists
quickly.  Its agents admit speculative tasks up to half of their 2 cpu (``--speculative-quota``)
and queue at most two; the machine-wide thresholds are set to 1 so that what is checked never
depends on how busy the host is.  A blocker job holds every container: whatever of the
speculative job runs, runs without one.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest
import yaml

from sluice_pb import common_pb2 as pb
from sluice_pb import node_agent_pb2 as agent_pb
from sluice_pb import resource_manager_pb2 as rm_pb
from tests.integration.cluster.harness import Cluster, phase, running_cluster, wait_until

pytestmark = pytest.mark.integration

AGENT_ARGS = (
    "--admission-thresholds",
    "1,1,1",
    "--speculative-quota",
    "0.5,0.5,0.5",
    "--speculative-queue-length",
    "2",
    # The throttle's hold is checked on the agent (tests/integration/node_agent); here the
    # host's own load may cross a service's bound now and then, which must not keep the
    # queue blocked for long.
    "--throttle-hold",
    "1",
)

AGGREGATOR_ARGS = tuple(
    flag
    for metric in ("cpu_ut", "mem_ut", "load_avg_1")
    for flag in ("--load-threshold", f"{metric}=off")
)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    yield from running_cluster(
        tmp_path_factory,
        "speculative",
        nodes=2,
        oversubscription="rp",
        aggregator_period=1.0,
        agent_args=AGENT_ARGS,
        # The test host may be saturated by other work (CI's two cores): its load is not what
        # these tests are about, so the aggregator's load filter lets every machine through.
        aggregator_args=AGGREGATOR_ARGS,
        max_master_share=0.5,  # three job masters at once (256 MiB each of 4 GiB)
    )


def submit(cluster: Cluster, document: dict[str, object]) -> str:
    return cluster.submit(yaml.safe_dump(document))


def kill(cluster: Cluster, job_id: str) -> None:
    cluster.client.jobs.KillJob(rm_pb.GetJobRequest(job_id=job_id), timeout=10)
    cluster.wait_final(job_id, timeout=60)


def blocker(cluster: Cluster) -> str:
    """A job holding every container of the cluster that is free: once it runs, no node has
    0.5 cpu left.  Its further tasks wait behind the speculative job's (a lower priority), so
    the latter's job master is placed in what is left, and the containers freed later go to
    the speculative job first."""
    job_id = submit(
        cluster,
        {"name": "blocker", "priority": 1, "phases": [phase("hold", 8, "sleep 600", cpu=0.5)]},
    )
    wait_until(
        lambda: all(n.capacity.cpu - n.allocated.cpu < 0.5 for n in nodes(cluster)),
        60,
        "the blocker holding every container",
    )
    return job_id


def speculative_job(tasks: int, script: str, **block: object) -> dict[str, object]:
    return {
        "name": "spec",
        "priority": 10,
        "speculative": {"after_s": 0.5, **block},
        "phases": [phase("map", tasks, script, cpu=0.5, mem=64)],
    }


def nodes(cluster: Cluster) -> list[rm_pb.NodeInfo]:
    return list(cluster.client.jobs.ListNodes(rm_pb.ListNodesRequest(), timeout=10).nodes)


def outcomes(detail: rm_pb.JobDetail) -> dict[str, int]:
    counts: dict[str, int] = {}
    for attempt in detail.speculative:
        counts[attempt.outcome] = counts.get(attempt.outcome, 0) + 1
    return counts


def test_speculative_tasks_run_without_containers_within_the_quota(cluster: Cluster) -> None:
    hold = blocker(cluster)
    job_id = submit(cluster, speculative_job(12, "sleep 4"))
    try:
        # Past the quota (two 0.5-cpu tasks per node), the head of a queue waits, and says why.
        waiting = wait_until(
            lambda: [
                n.speculative
                for n in nodes(cluster)
                if n.speculative.blocked.startswith("cpu oversubscription")
            ],
            60,
            "a queue waiting on the quota",
        )
        assert "would exceed quota 0.5" in waiting[0].blocked
        busy = wait_until(
            lambda: [n for n in nodes(cluster) if n.speculative_tasks], 30, "speculative tasks"
        )
        assert all(n.opportunistic.cpu <= 1.0 for n in busy)  # never past the quota
        assert all(n.speculative.running <= 2 for n in nodes(cluster))
        detail = cluster.wait_final(job_id, timeout=120)
        assert detail.summary.state == pb.JOB_SUCCEEDED
        # Every task ran speculatively: the RM granted the job nothing and recorded no task.
        assert not detail.tasks
        assert outcomes(detail)["succeeded"] == 12
        refused = sum(n.speculative.refused for n in nodes(cluster))
        admitted = sum(n.speculative.admitted for n in nodes(cluster))
        assert admitted >= 12
        assert outcomes(detail).get("refused", 0) == refused  # a full queue answered so
    finally:
        kill(cluster, hold)


def test_a_granted_container_upgrades_the_speculative_task_on_its_node(cluster: Cluster) -> None:
    hold = blocker(cluster)
    job_id = submit(cluster, speculative_job(2, "sleep 6"))
    try:
        wait_until(
            lambda: outcomes(cluster.job(job_id)).get("running", 0) == 2,
            60,
            "both tasks running speculatively",
        )
        kill(cluster, hold)  # containers come: on the nodes the speculative tasks run on
        detail = cluster.wait_final(job_id, timeout=120)
        assert detail.summary.state == pb.JOB_SUCCEEDED
        shown = outcomes(detail)
        assert shown.get("upgraded", 0) >= 1, detail.speculative
        upgraded = {(a.task_id, a.attempt) for a in detail.speculative if a.outcome == "upgraded"}
        # An upgraded attempt is the task's regular one from then on: the RM recorded it,
        # under the same attempt number, in a container.
        recorded = {(t.task_id, t.attempt): t for t in detail.tasks}
        for key in upgraded:
            assert recorded[key].state == pb.TASK_SUCCEEDED
            assert not recorded[key].allocation_id.startswith("speculative-")
    finally:
        if cluster.job(hold).summary.state not in (pb.JOB_KILLED, pb.JOB_SUCCEEDED):
            kill(cluster, hold)


def test_an_agent_restart_loses_and_duplicates_no_speculative_task(cluster: Cluster) -> None:
    hold = blocker(cluster)
    job_id = submit(cluster, speculative_job(8, "sleep 5", queue_timeout_s=600))
    try:
        node_id = wait_until(
            lambda: next(
                (
                    n.node_id
                    for n in nodes(cluster)
                    if n.speculative.running >= 1 and n.speculative.queued >= 1
                ),
                None,
            ),
            60,
            "a node with speculative tasks running and queued",
        )
        cluster.restart_agent(node_id)
        detail = cluster.wait_final(job_id, timeout=180)
        assert detail.summary.state == pb.JOB_SUCCEEDED
        shown = outcomes(detail)
        assert shown["succeeded"] == 8 and "lost" not in shown, detail.speculative
        node = cluster.node(node_id)
        keys = [
            (s.task.task_id, s.task.attempt)
            for s in cluster.agent_tasks(node["address"])
            if s.task.job_id == job_id
        ]
        assert len(keys) == len(set(keys))  # nothing ran twice under one name
    finally:
        kill(cluster, hold)


def service_healths(cluster: Cluster, job_id: str) -> list[agent_pb.ServiceHealth]:
    """The agents' watch of the job's running service tasks."""
    return [
        status.service
        for n in cluster.info["nodes"]
        for status in cluster.agent_tasks(n["address"])
        if status.task.job_id == job_id
        and status.task.task_id != "master"
        and status.state == pb.TASK_RUNNING
    ]


def test_interference_throttles_the_queue_and_evicts_speculative_tasks(cluster: Cluster) -> None:
    """A latency-sensitive service's PSI history is learnt (30 samples, one a second); then
    CPU burners beside it make it anomalous: its node's queue blocks and its speculative
    tasks are evicted, reported as such.  The machine's PSI is what is judged (cgroup v1 keeps
    none per group): the test waits until the learnt bound is one the burners can cross, so
    that a busy host delays it rather than fails it."""
    service = submit(
        cluster,
        {
            "name": "web",
            "kind": "service",
            "priority": 20,
            "service": {"latency_sensitive": True},
            "phases": [phase("server", 2, "sleep 600", cpu=0.5)],
        },
    )
    job_id = hold = ""
    burners: list[subprocess.Popen[bytes]] = []
    try:
        wait_until(
            lambda: (
                (found := service_healths(cluster, service))
                and len(found) == 2
                and all(h.judging and h.indicator == "psi_cpu" and h.bound < 90 for h in found)
            ),
            300,
            "the service's baselines fitted, with bounds under 90 % stalled",
        )
        hold = blocker(cluster)  # what the service leaves
        job_id = submit(cluster, speculative_job(4, "sleep 600", queue_timeout_s=600))
        wait_until(
            lambda: outcomes(cluster.job(job_id)).get("running", 0) >= 2,
            60,
            "speculative tasks running beside the service",
        )
        burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(8)]
        throttled = wait_until(
            lambda: [n.speculative for n in nodes(cluster) if n.speculative.throttled],
            60,
            "a node throttled",
        )
        assert throttled[0].blocked.startswith("throttled: psi_cpu of service")
        wait_until(
            lambda: outcomes(cluster.job(job_id)).get("evicted", 0) >= 1,
            30,
            "an eviction reported",
        )
        evicted = [a for a in cluster.job(job_id).speculative if a.outcome == "evicted"]
        assert evicted[0].message.startswith("evicted: psi_cpu")
        assert sum(n.speculative.evicted for n in nodes(cluster)) >= 1
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()
        for started in (job_id, hold):
            if started:
                kill(cluster, started)
        kill(cluster, service)
