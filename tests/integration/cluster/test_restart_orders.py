"""No ghost jobs after a restart, in every order (issue 27, item 7).

A job runs with one task on each of two nodes; then the machines lose everything they ran (each
agent drained: its tasks and job masters stopped, as `sluice local down` does, or a reboot) and
the cluster comes back: the agents alone (the RM kept running), the RM first then the agents,
the agents first then the RM, or all at once (`sluice local down` + `sluice local up` on the same
directory).  Each time the RM must lose what the nodes no longer hold when they register again:
the job's tasks are retried (or fail it, as ``max_retries`` says), its job master gets another
attempt, nothing stays shown on a node that reports nothing, and a later job gets the CPU.
Before the fix the job stayed ``running`` forever, its CPU held.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from sluice import local_cluster
from sluice_pb import common_pb2 as pb
from sluice_pb import node_agent_pb2 as agent_pb
from sluice_pb import resource_manager_pb2 as rm_pb
from tests.integration.cluster.harness import (
    FINAL,
    Cluster,
    Gate,
    _alive,
    job_spec,
    phase,
    start_cluster,
    unavailable,
    wait_until,
)

pytestmark = pytest.mark.integration

# Long enough that no node is ever lost by silence here: only registration can clear a ghost.
RM_ARGS = ("--node-timeout", "600")
TASKS = ["work-0", "work-1"]


@pytest.fixture
def cluster_dir(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "cluster"
    if (tmp_path / "cluster" / "cluster.json").exists():
        local_cluster.down(tmp_path / "cluster", lambda _: None)


def _require(runtime: str) -> None:
    if runtime == "docker":
        import docker

        try:
            docker.from_env().ping()
        except Exception as error:  # any failure to reach the engine means: no docker here
            unavailable(f"the Docker Engine is not reachable ({error})")
    elif not os.access("/sys/fs/cgroup/cpu", os.W_OK) and not os.access(
        "/sys/fs/cgroup/cgroup.procs", os.W_OK
    ):
        unavailable("cgroups are not writable here")


def _gone(pid: int) -> Callable[[], bool]:
    return lambda: not _alive(pid)


def _drain_agents(cluster: Cluster) -> None:
    """Every machine loses what it ran: each agent stops its tasks and job masters, removes
    their cgroups and containers, and exits (what `sluice local down` does to it)."""
    for node in cluster.info["nodes"]:
        cluster.agent(node["address"]).Drain(agent_pb.DrainRequest(exit_after=True), timeout=60)
        wait_until(_gone(int(node["pid"])), 30, f"agent {node['node_id']} exited")


def _start_agents(cluster: Cluster) -> None:
    """Each agent again, with its command line, state directory and address."""
    for node in cluster.info["nodes"]:
        cluster.start_agent(node["node_id"])


def _stop_rm(cluster: Cluster) -> None:
    cluster.kill_process(int(cluster.info["rm_pid"]))


def _agents_only(cluster: Cluster) -> Cluster:
    _drain_agents(cluster)
    _start_agents(cluster)  # within the node timeout: the RM still holds the nodes as ready
    return cluster


def _rm_first(cluster: Cluster) -> Cluster:
    _drain_agents(cluster)
    _stop_rm(cluster)
    cluster.start_rm()
    wait_until(lambda: _listed(cluster) is not None, 60, "the restarted RM answers")
    _start_agents(cluster)
    return cluster


def _agents_first(cluster: Cluster) -> Cluster:
    _drain_agents(cluster)
    _stop_rm(cluster)
    _start_agents(cluster)  # they find no RM and retry
    cluster.start_rm()
    return cluster


def _both(cluster: Cluster) -> Cluster:
    """`sluice local down`, then `sluice local up` on the same directory and settings."""
    cluster.close()
    local_cluster.down(cluster.directory, lambda _: None)
    return start_cluster(cluster.directory, cluster.runtime, rm_args=RM_ARGS)


RESTARTS: dict[str, Callable[[Cluster], Cluster]] = {
    "agents only": _agents_only,
    "rm first": _rm_first,
    "agents first": _agents_first,
    "both (local down + up)": _both,
}


def _listed(cluster: Cluster) -> list[rm_pb.NodeInfo] | None:
    try:
        return list(cluster.client.jobs.ListNodes(rm_pb.ListNodesRequest(), timeout=5).nodes)
    except Exception:  # (restarting)
        return None


def _ready(cluster: Cluster) -> bool:
    nodes = _listed(cluster)
    return nodes is not None and sum(n.state == rm_pb.NODE_READY for n in nodes) == 2


def _running_attempt(cluster: Cluster, job_id: str, attempt: int) -> bool:
    tasks = {(t.task_id, t.attempt): t.state for t in cluster.job(job_id).tasks}
    return all(tasks.get((task_id, attempt)) == pb.TASK_RUNNING for task_id in TASKS)


@pytest.mark.parametrize(
    ("runtime", "order", "retries"),
    [
        ("process", "agents only", 1),
        ("process", "agents only", 0),  # no retry left: the job fails, it is no ghost either
        ("process", "rm first", 1),
        ("process", "agents first", 1),
        ("process", "both (local down + up)", 1),
        ("docker", "agents only", 1),
        ("docker", "rm first", 1),
        ("docker", "agents first", 1),
        ("docker", "both (local down + up)", 1),
    ],
)
def test_a_job_running_through_a_restart_is_no_ghost(
    cluster_dir: Path, runtime: str, order: str, retries: int
) -> None:
    _require(runtime)
    cluster = start_cluster(cluster_dir, runtime, rm_args=RM_ARGS)
    gate = Gate()  # the tasks run until the test lets them end, however long the restart takes
    try:
        # One task of 1 cpu on each node of 2 cpus (the least allocated node first), held.
        spec = job_spec(
            "through-restart",
            [phase("work", 2, gate.hold("true"), cpu=1.0, mem=32)],
            retries=retries,
        )
        job_id = cluster.submit(spec)
        wait_until(lambda: _running_attempt(cluster, job_id, 1), 60, "both tasks running")
        assert {t.node_id for t in cluster.job(job_id).tasks} == {"node-1", "node-2"}

        cluster = RESTARTS[order](cluster)
        gate.kill_on_close(cluster, job_id)
        wait_until(lambda: _ready(cluster), 90, "both nodes registered again")

        if retries == 0:
            detail = cluster.wait_final(job_id, timeout=120)
            assert detail.summary.state == pb.JOB_FAILED, detail.summary.message
        else:
            # Retried (attempt 2 of each task runs), under a new job master attempt.
            wait_until(lambda: _running_attempt(cluster, job_id, 2), 120, "both tasks retried")
            gate.open(cluster, job_id, TASKS)
            detail = cluster.wait_final(job_id, timeout=120)
            assert detail.summary.state == pb.JOB_SUCCEEDED, detail.summary.message
            assert detail.summary.master_attempt == 2
            lost = {(t.task_id, t.attempt): t.state for t in detail.tasks if t.attempt == 1}
            assert lost == {(task_id, 1): pb.TASK_LOST for task_id in TASKS}

        # Nothing stays shown where nothing runs: every container is given back...
        def nothing_allocated() -> bool:
            nodes = _listed(cluster)
            return nodes is not None and all(n.allocated.cpu == 0 for n in nodes)

        wait_until(nothing_allocated, 60, "no CPU held on any node")
        # ...and a later job gets the CPU: 1.5 of each node's 2 cpus.
        later = cluster.submit(job_spec("later", [phase("all", 2, "true", cpu=1.5, mem=32)]))
        detail = cluster.wait_final(later, timeout=120)
        assert detail.summary.state == pb.JOB_SUCCEEDED, detail.summary.message
        assert cluster.job(job_id).summary.state in FINAL
    finally:
        gate.close()
        cluster.close()
