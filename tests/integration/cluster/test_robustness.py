"""Faults that once wedged, deadlocked or split a live cluster, reproduced from the outside:
a job master's node lost, many jobs at once, many watchers, two local clusters with the same
node ids, and a second agent claiming a live node's id."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from node_agent.runtime.base import scope_name
from sluice import local_cluster
from sluice_pb import common_pb2 as pb
from sluice_pb import node_agent_pb2 as agent_pb
from sluice_pb import resource_manager_pb2 as rm_pb
from tests.integration.cluster.harness import (
    Cluster,
    Gate,
    job_spec,
    phase,
    start_cluster,
    unavailable,
    wait_until,
)

pytestmark = pytest.mark.integration
CGROUP = Path("/sys/fs/cgroup")


@pytest.fixture
def cluster_dir(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "cluster"
    if (tmp_path / "cluster" / "cluster.json").exists():
        local_cluster.down(tmp_path / "cluster", lambda _: None)


def _node_states(cluster: Cluster) -> dict[str, int]:
    nodes = cluster.client.jobs.ListNodes(rm_pb.ListNodesRequest(), timeout=10).nodes
    return {n.node_id: n.state for n in nodes}


def test_a_lost_job_master_node_costs_an_attempt_not_the_job(cluster_dir: Path) -> None:
    cluster = start_cluster(cluster_dir, "process")
    gate = Gate()  # the tasks run until the new attempt has adopted them, however long that takes
    try:
        spec = job_spec(
            "survive", [phase("work", 4, gate.hold("true"), cpu=0.4, mem=32)], retries=1
        )
        job_id = gate.kill_on_close(cluster, cluster.submit(spec))
        for index in range(4):
            cluster.wait_task_running(job_id, f"work-{index}")
        before = cluster.job(job_id)
        master_node = before.summary.master_node
        survivors = {t.task_id for t in before.tasks if t.node_id != master_node}
        assert survivors, "the tasks spread over both nodes"
        # The master's node goes silent; its processes (the job master among them) live on.
        cluster.kill_process(int(cluster.node(master_node)["pid"]))

        def second_attempt() -> rm_pb.JobSummary | None:
            summary = cluster.job(job_id).summary
            return summary if summary.master_attempt == 2 else None

        summary = wait_until(second_attempt, 30, "a second job master attempt")
        assert summary.master_node != master_node
        wait_until(
            lambda: cluster.job(job_id).summary.state == pb.JOB_RUNNING,
            30,
            "the second attempt registered",
        )
        gate.open(cluster, job_id, [])
        detail = cluster.wait_final(job_id, timeout=90)
        assert detail.summary.state == pb.JOB_SUCCEEDED, detail.summary.message
        for task_id in survivors:  # adopted by the new attempt, not run again
            attempts = [t for t in detail.tasks if t.task_id == task_id]
            assert [(t.attempt, t.state) for t in attempts] == [(1, pb.TASK_SUCCEEDED)], task_id
    finally:
        gate.close()
        cluster.close()


def test_many_jobs_at_once_queue_for_job_masters_and_all_finish(cluster_dir: Path) -> None:
    # 2 nodes of 2048 MiB: 32 job masters of 256 MiB would take every MiB (they once did, and no
    # task could ever be placed).  A quarter of the cluster holds 4 at a time.
    cluster = start_cluster(cluster_dir, "process", max_master_share=0.25)
    try:
        spec = job_spec("tiny", [phase("one", 1, "true", cpu=0.2, mem=32)])
        jobs = [cluster.submit(spec) for _ in range(32)]
        finals = [cluster.wait_final(job_id, timeout=240).summary for job_id in jobs]
        assert {f.state for f in finals} == {pb.JOB_SUCCEEDED}
    finally:
        cluster.close()


def test_64_watchers_do_not_keep_nodes_or_jobs_waiting(cluster_dir: Path) -> None:
    cluster = start_cluster(cluster_dir, "process", max_master_share=0.5)  # two jobs at once
    try:
        long_job = cluster.submit(job_spec("long", [phase("wait", 1, "sleep 600", mem=32)]))
        cluster.wait_task_running(long_job, "wait-0")
        streams = [
            cluster.client.jobs.WatchJob(rm_pb.GetJobRequest(job_id=long_job)) for _ in range(64)
        ]
        seen: list[list[rm_pb.JobSummary]] = [[] for _ in streams]

        def follow(index: int) -> None:
            for summary in streams[index]:
                seen[index].append(summary)

        threads = [threading.Thread(target=follow, args=(i,), daemon=True) for i in range(64)]
        for thread in threads:
            thread.start()
        wait_until(lambda: all(seen), 30, "64 watchers streaming")
        # While all 64 wait, another job runs to its end, and no node is ever declared lost:
        # the long job's one task attempt keeps running (a lost node would have lost it).
        short = cluster.submit(job_spec("short", [phase("quick", 2, "sleep 1", mem=32)]))
        detail = cluster.wait_final(short, timeout=60)
        assert detail.summary.state == pb.JOB_SUCCEEDED, detail.summary.message
        long_tasks = cluster.job(long_job).tasks
        assert [(t.attempt, t.state) for t in long_tasks] == [(1, pb.TASK_RUNNING)]
        assert "lost" not in (cluster_dir / "logs" / "rm.log").read_text()
        cluster.client.jobs.KillJob(rm_pb.GetJobRequest(job_id=long_job), timeout=10)
        for thread in threads:
            thread.join(timeout=30)
        assert {s[-1].state for s in seen} == {pb.JOB_KILLED}
    finally:
        cluster.close()


def test_two_local_clusters_with_the_same_node_ids_never_touch_each_other(
    tmp_path: Path,
) -> None:
    if not os.access(CGROUP / "cpu", os.W_OK):
        unavailable("cgroup v1 is not writable here")
    first_dir, second_dir = tmp_path / "first", tmp_path / "second"
    first = start_cluster(first_dir, "process", nodes=1)
    second = None
    try:
        second = start_cluster(second_dir, "process", nodes=1)
        assert first.info["cluster_id"] != second.info["cluster_id"]
        long_a = first.submit(job_spec("a", [phase("wait", 1, "sleep 600", mem=32)]))
        long_b = second.submit(job_spec("b", [phase("wait", 1, "sleep 600", mem=32)]))
        first.wait_task_running(long_a, "wait-0")
        second.wait_task_running(long_b, "wait-0")
        for one in (first, second):
            scope = scope_name(one.info["cluster_id"], "node-1")
            assert (CGROUP / "cpu" / "sluice" / scope).is_dir()
        # A second agent for node-1 of the first cluster (another state directory) is refused
        # while the first agent heartbeats.
        argv = [*first.node("node-1")["argv"]]
        argv[argv.index("--state-dir") + 1] = str(tmp_path / "intruder")
        argv[argv.index("--address-file") + 1] = str(tmp_path / "intruder.addr")
        intruder = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
        assert intruder.returncode == 2
        assert "node_id: node-1 is held by another live agent" in intruder.stderr
        # Stopping the second cluster leaves the first one's job master and task running.
        second.close()
        local_cluster.down(second_dir, lambda _: None)
        second = None
        agent = first.agent(first.node("node-1")["address"])
        live = agent.ListTasks(agent_pb.ListTasksRequest(), timeout=10).tasks
        states = {(t.task.task_id, t.state) for t in live if t.task.job_id == long_a}
        assert states == {("master", pb.TASK_RUNNING), ("wait-0", pb.TASK_RUNNING)}
        assert first.job(long_a).summary.state == pb.JOB_RUNNING
    finally:
        first.close()
        local_cluster.down(first_dir, lambda _: None)
        if second is not None:
            second.close()
            local_cluster.down(second_dir, lambda _: None)


def test_a_restarted_rm_keeps_its_port_and_cluster(cluster_dir: Path) -> None:
    cluster = start_cluster(cluster_dir, "process", nodes=1)
    try:
        assert "127.0.0.1:0" in " ".join(cluster.info["rm_argv"])  # started on any free port
        cluster.restart_rm()  # the very same command line
        wait_until(
            lambda: _node_states_or_none(cluster) == {"node-1": rm_pb.NODE_READY},
            30,
            "the agent found the restarted RM at the same address",
        )
        info = cluster.client.jobs.GetClusterInfo(rm_pb.GetClusterInfoRequest(), timeout=10)
        assert info.cluster_id == cluster.info["cluster_id"]
        recorded = json.loads((cluster_dir / "cluster.json").read_text())
        assert recorded["rm"] == cluster.info["rm"]
    finally:
        cluster.close()


def _node_states_or_none(cluster: Cluster) -> dict[str, int] | None:
    try:
        return _node_states(cluster)
    except grpc.RpcError:
        return None


def test_the_cli_never_shows_a_traceback_for_a_refused_agent(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "sluice",
            "agent",
            "--rm",
            "127.0.0.1:1",
            "--node-id",
            "a\x07b",
            "--state-dir",
            str(tmp_path),
            "--insecure",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "sluice: error: --node-id: 'a\\x07b' must be letters, digits, '.', '_' or '-', starting "
        "with a letter or digit"
    ]
