"""A service's watch in ``sluice job``: its probe's latency and its interference verdict.

The node agent running a service's task watches it (node_agent/service_monitor.py) and answers
what it saw in its ``ListTasks`` (``TaskStatus.service``); the RM does not keep it (it changes
every probe, and the RM's records are the tasks' lifecycles).  So ``sluice job`` asks the agents
of the job's running tasks, once per node, and shows a line per watched task; a node it cannot
reach is said so, in one line.  Only a service job's view asks (a batch job has no watch).
"""

from __future__ import annotations

from collections.abc import Sequence

import grpc

from plumbing.rpc import describe_rpc_error
from plumbing.tls import ClientTls
from sluice.client import agent_stub
from sluice_pb import common_pb2 as pb
from sluice_pb import node_agent_pb2 as agent_pb
from sluice_pb import resource_manager_pb2 as rm_pb

LIST_TIMEOUT_S = 5.0


def health_line(task_id: str, health: agent_pb.ServiceHealth) -> str:
    """One watched task, e.g. ``web-0: probe p50 1.2 ms p95 3.4 ms (40 ok, 1 failed: refused);
    psi 0.5 under its bound 3.5, normal``."""
    probes = f"{health.probes} ok, {health.probes_failed} failed"
    if health.probes_failed and health.last_problem:
        probes += f": {health.last_problem}"
    if health.probes:
        latency = (
            f"probe p50 {health.latency_p50_s * 1000:.1f} ms "
            f"p95 {health.latency_p95_s * 1000:.1f} ms ({probes})"
        )
    else:
        latency = f"probe: no answer yet ({probes})"
    if health.anomalous:
        verdict = (
            f"{health.indicator} {health.value:.3g} over its bound {health.bound:.3g}: ANOMALOUS"
        )
    elif health.judging:
        verdict = (
            f"{health.indicator} {health.value:.3g} under its bound {health.bound:.3g}: normal"
        )
    else:
        verdict = "learning its baseline (30 samples before anomalies can be told)"
    return f"{task_id}: {latency}; {verdict}"


def service_lines(detail: rm_pb.JobDetail, tls: ClientTls | None) -> list[str]:
    """The ``service watch`` section of a service job's view (empty for another job, or one
    with no running task)."""
    if detail.spec.kind != "service":
        return []
    running = [t for t in detail.tasks if t.state == pb.TASK_RUNNING and t.node_address]
    if not running:
        return []
    by_node: dict[str, list[rm_pb.TaskInfo]] = {}
    for task in running:
        by_node.setdefault(task.node_address, []).append(task)
    lines = ["", "service watch (the probe's latency and interference, docs/oversubscription.md)"]
    for address, tasks in sorted(by_node.items()):
        lines.extend(f"  {line}" for line in _node_lines(address, tasks, detail, tls))
    return lines


def _node_lines(
    address: str,
    tasks: Sequence[rm_pb.TaskInfo],
    detail: rm_pb.JobDetail,
    tls: ClientTls | None,
) -> list[str]:
    channel, stub = agent_stub(address, tls)
    try:
        listed = stub.ListTasks(agent_pb.ListTasksRequest(), timeout=LIST_TIMEOUT_S).tasks
    except grpc.RpcError as error:
        node = tasks[0].node_id
        names = ", ".join(t.task_id for t in tasks)
        return [f"{names}: {node} did not answer ({describe_rpc_error(error, node)})"]
    finally:
        channel.close()
    job_id = detail.summary.job_id
    statuses = {(s.task.task_id, s.task.attempt): s for s in listed if s.task.job_id == job_id}
    lines = []
    for task in tasks:
        status = statuses.get((task.task_id, task.attempt))
        if status is None or not status.HasField("service"):
            lines.append(
                f"{task.task_id}: not watched by its node (no probe, not latency-sensitive)"
            )
        else:
            lines.append(health_line(task.task_id, status.service))
    return lines
