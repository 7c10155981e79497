"""An agent speaks only for its own node's tasks, and a refused Allocate loses no grant (issue 27,
items 2 and 13), against a real two-node local cluster with mutual TLS on.

Item 2: with node A's own agent certificate, report the task that runs on node B as FAILED and
as SUCCEEDED, by task event and by heartbeat: the RM drops every such report, so the job and the
task are unaffected and the real process runs to its end.  Item 13: an Allocate refused for too
many ``resolve_nodes`` delivers nothing, and the next valid one gets the grant."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from plumbing import tls
from plumbing.rpc import channel
from plumbing.tls import ClientTls
from resource_manager.service import MAX_RESOLVED_NODES
from sluice_pb import common_pb2 as pb
from sluice_pb import resource_manager_pb2 as rm_pb
from sluice_pb import resource_manager_pb2_grpc as rm_grpc
from tests.integration.cluster.harness import (
    Cluster,
    Gate,
    job_spec,
    phase,
    running_cluster,
    wait_until,
)

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    yield from running_cluster(tmp_path_factory, "node-forgery", nodes=2)


def _as_agent(cluster: Cluster, node_id: str) -> tuple[grpc.Channel, rm_grpc.NodeServiceStub]:
    """The RM's NodeService, called with the very certificate `local up` gave ``node_id``'s
    agent."""
    held = tls.load_tls_dir(cluster.directory / "tls" / f"agent-{node_id}")
    ch = channel(str(cluster.info["rm"]), ClientTls.of(held))
    return ch, rm_grpc.NodeServiceStub(ch)


def _forgeries(job_id: str, task: rm_pb.TaskInfo, state: int) -> list[pb.TaskEvent]:
    """The task's end, naming its container, no container, and a container that is not its."""
    return [
        pb.TaskEvent(
            job_id=job_id,
            task_id=task.task_id,
            attempt=task.attempt,
            allocation_id=allocation_id,
            state=state,  # type: ignore[arg-type]
            exit_code=0 if state == pb.TASK_SUCCEEDED else 1,
            message="forged",
        )
        for allocation_id in (task.allocation_id, "", f"{job_id}-a999")
    ]


def test_an_agent_cannot_end_another_nodes_task(cluster: Cluster, tmp_path: Path) -> None:
    gate = Gate()
    done = tmp_path / "done"
    try:
        spec = job_spec("victim", [phase("p", 1, gate.hold(f"touch {done}"), cpu=0.2)])
        job_id = gate.kill_on_close(cluster, cluster.submit(spec))
        task = cluster.wait_task_running(job_id, "p-0", timeout=60)
        victim = task.node_id
        (forger,) = [n["node_id"] for n in cluster.info["nodes"] if n["node_id"] != victim]
        identity = json.loads((cluster.directory / forger / "identity.json").read_text())
        ch, nodes = _as_agent(cluster, forger)
        try:
            for state in (pb.TASK_FAILED, pb.TASK_SUCCEEDED):
                forged = _forgeries(job_id, task, state)
                nodes.ReportTaskEvents(
                    rm_pb.ReportTaskEventsRequest(node_id=forger, events=forged), timeout=20
                )
                # (the forger's own instance: a heartbeat the RM takes as its node's)
                nodes.Heartbeat(
                    rm_pb.HeartbeatRequest(
                        node_id=forger, instance_id=identity["instance_id"], live_tasks=forged
                    ),
                    timeout=20,
                )
                # Each call is applied (or dropped) before it is answered: no waiting needed.
                detail = cluster.job(job_id)
                assert detail.summary.state == pb.JOB_RUNNING, detail.summary.message
                assert [(t.task_id, t.attempt, t.state, t.node_id) for t in detail.tasks] == [
                    ("p-0", task.attempt, pb.TASK_RUNNING, victim)
                ]
        finally:
            ch.close()
        (status,) = [
            t
            for t in cluster.agent_tasks(cluster.node(victim)["address"])
            if t.task.job_id == job_id
        ]
        assert status.state == pb.TASK_RUNNING  # the real process runs on
        gate.open(cluster, job_id, ["p-0"])
        final = cluster.wait_final(job_id, timeout=60)
        assert final.summary.state == pb.JOB_SUCCEEDED, final.summary.message
        assert [(t.attempt, t.state, t.exit_code) for t in final.tasks] == [
            (task.attempt, pb.TASK_SUCCEEDED, 0)
        ]
        assert done.exists()  # it ran to its own end, never stopped
        log = (cluster.directory / "logs" / "rm.log").read_text(errors="replace")
        assert f"report(s) of a node for another node's tasks, the last: node {forger}" in log
    finally:
        gate.close()


def test_a_refused_allocate_delivers_nothing_and_the_next_one_gets_the_grant(
    cluster: Cluster,
) -> None:
    spec = job_spec("driven", [phase("p", 1, "true", cpu=0.2)])
    job_id = cluster.client.jobs.SubmitJob(
        rm_pb.SubmitJobRequest(spec_yaml=spec, client_mode=True), timeout=30
    ).job.job_id
    masters = rm_grpc.MasterServiceStub(cluster.client.channel)
    try:
        masters.RegisterMaster(rm_pb.RegisterMasterRequest(job_id=job_id, attempt=1), timeout=20)
        ask = rm_pb.Ask(phase="p", count=1, resources=pb.Resources(cpu=0.2, memory_mb=64))
        too_many = ["node-1"] * (MAX_RESOLVED_NODES + 1)
        with pytest.raises(grpc.RpcError) as caught:
            masters.Allocate(
                rm_pb.AllocateRequest(
                    job_id=job_id, asks=[ask], master_attempt=1, resolve_nodes=too_many
                ),
                timeout=20,
            )
        assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert caught.value.details() == (
            f"resolve_nodes: at most {MAX_RESOLVED_NODES} nodes per call"
        )
        valid = rm_pb.AllocateRequest(
            job_id=job_id, asks=[ask], master_attempt=1, resolve_nodes=["node-1"]
        )
        granted: list[rm_pb.Allocation] = []

        def grant() -> bool:
            answer = masters.Allocate(valid, timeout=20)
            granted.extend(answer.granted)
            assert dict(answer.node_addresses) == {"node-1": cluster.node("node-1")["address"]}
            return bool(granted)

        wait_until(grant, 30, "the grant delivered")
        assert [(a.job_id, a.phase) for a in granted] == [(job_id, "p")]
    finally:
        cluster.client.jobs.KillJob(rm_pb.GetJobRequest(job_id=job_id), timeout=20)
