"""A node that never comes back after an RM restart leaves no ghost (issue 27, item 7).

The RM keeps nodes in memory only.  A job runs a long task on node X; the RM stops; X's machine
goes for good (its agent SIGKILLed, its task processes killed); the RM starts again.  X never
registers, so only the restarted RM's own timer can find it: X is lost a node timeout after the
RM's start, the task is retried on the other node and the job finishes, X is listed lost, and no
CPU stays held.  Before the fix the task stayed ``running`` on a node the RM did not even list.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from sluice import local_cluster
from sluice_pb import common_pb2 as pb
from sluice_pb import resource_manager_pb2 as rm_pb
from tests.integration.cluster.harness import (
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

# Longer than the RM's restart on a loaded machine, so the surviving agent never fences (its
# lease is the RM's node timeout) and only X is lost.
RM_ARGS = ("--node-timeout", "15")


@pytest.fixture
def cluster_dir(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "cluster"
    if (tmp_path / "cluster" / "cluster.json").exists():
        local_cluster.down(tmp_path / "cluster", lambda _: None)


def _pids_with(argument: str) -> set[int]:
    """The live processes one of whose command-line arguments holds ``argument``."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            arguments = (entry / "cmdline").read_bytes().split(b"\0")
            if any(argument.encode() in a for a in arguments) and _alive(int(entry.name)):
                found.add(int(entry.name))
    return found


def _kill(pids: set[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not any(_alive(pid) for pid in pids), 30, "the processes gone")


def _nodes(cluster: Cluster) -> dict[str, rm_pb.NodeInfo] | None:
    try:
        nodes = cluster.client.jobs.ListNodes(rm_pb.ListNodesRequest(), timeout=5).nodes
    except Exception:  # (restarting)
        return None
    return {n.node_id: n for n in nodes}


def test_a_node_that_never_returns_after_an_rm_restart_is_lost_and_its_task_retried(
    cluster_dir: Path,
) -> None:
    if not os.access("/sys/fs/cgroup/cpu", os.W_OK) and not os.access(
        "/sys/fs/cgroup/cgroup.procs", os.W_OK
    ):
        unavailable("cgroups are not writable here")
    cluster = start_cluster(cluster_dir, "process", rm_args=RM_ARGS)
    gate = Gate()  # the task runs until the test lets it end, however long the restart takes
    rm_pid = int(cluster.info["rm_pid"])
    try:
        spec = job_spec("never-back", [phase("long", 1, gate.hold("true"), cpu=1.0)], retries=1)
        job_id = gate.kill_on_close(cluster, cluster.submit(spec))
        task = cluster.wait_task_running(job_id, "long-0", timeout=60)
        gone, other = task.node_id, ({"node-1", "node-2"} - {task.node_id}).pop()
        doomed = wait_until(lambda: _pids_with(gate.path), 30, "the task's processes")
        if cluster.job(job_id).summary.master_node == gone:  # (its job master goes with it)
            doomed |= _pids_with(job_id)

        # The RM stops first, so that it cannot see X go: only its restarted self can.
        os.kill(rm_pid, signal.SIGSTOP)
        try:
            _kill({int(cluster.node(gone)["pid"])})  # the agent, for good
            _kill(doomed)  # and what ran there
        finally:
            os.kill(rm_pid, signal.SIGCONT)
        cluster.restart_rm()

        def retried() -> bool:
            try:
                attempts = {t.attempt: t for t in cluster.job(job_id).tasks}
            except grpc.RpcError:  # (the RM is starting)
                return False
            second = attempts.get(2)
            return second is not None and second.state == pb.TASK_RUNNING

        wait_until(retried, 120, "the task retried")
        attempts = {t.attempt: t for t in cluster.job(job_id).tasks}
        assert attempts[1].state == pb.TASK_LOST, attempts[1]
        assert attempts[1].message == f"node {gone} lost"
        assert attempts[2].node_id == other
        nodes = _nodes(cluster)
        assert nodes is not None and nodes[gone].state == rm_pb.NODE_LOST  # sluice nodes
        assert nodes[other].state == rm_pb.NODE_READY

        gate.open(cluster, job_id, ["long-0"])
        detail = cluster.wait_final(job_id, timeout=120)
        assert detail.summary.state == pb.JOB_SUCCEEDED, detail.summary.message

        # Nothing stays held: not on the node that is gone, not on the other.
        def nothing_held() -> bool:
            nodes = _nodes(cluster)
            return nodes is not None and all(n.allocated.cpu == 0 for n in nodes.values())

        wait_until(nothing_held, 60, "no CPU held on any node")
    finally:
        gate.close()
        cluster.close()
