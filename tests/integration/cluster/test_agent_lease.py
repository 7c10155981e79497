"""A node agent and the RM's node timeout, on real local clusters (issue 27 items 8, 9, 10).

* An agent restarted within the node timeout, with a long task running, adopts it: the same
  attempt, the same process, never a second attempt (it starts fast enough, and a local
  cluster's node timeout leaves room for a loaded machine: plumbing/intervals.py).
* Fencing by lease: while the RM cannot be reached (it is stopped with SIGSTOP, so that nothing
  but the agent can act), the agent stops its tasks itself about when the RM would count the
  node lost, so a retry never runs beside them; a job with ``on_node_lost: run_on`` keeps its
  task running.
* An agent whose heartbeat loop waits out a long backoff while the RM is down is woken when its
  event reporter reaches the restarted RM, and registers at once.

Timing is never asserted: each test waits on a condition and checks what happened, and in
which order (processes alive or gone while the RM was stopped, the agent's log lines)."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml

from sluice import local_cluster
from sluice_pb import common_pb2 as pb
from sluice_pb import node_agent_pb2 as agent_pb
from sluice_pb import resource_manager_pb2 as rm_pb
from tests.integration.cluster.harness import (
    Cluster,
    Gate,
    _alive,
    job_spec,
    phase,
    start_cluster,
    wait_until,
)

pytestmark = pytest.mark.integration


@pytest.fixture
def new_cluster(tmp_path: Path) -> Iterator[Callable[..., Cluster]]:
    """Starts a local cluster (``start_cluster``'s arguments); stopped after the test, and after
    the ``gate`` fixture when the test asks for this one first."""
    started: list[Cluster] = []

    def start(nodes: int, **spec: Any) -> Cluster:
        started.append(start_cluster(tmp_path / "cluster", "process", nodes, **spec))
        return started[-1]

    yield start
    for cluster in started:
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(cluster.info["rm_pid"]), signal.SIGCONT)  # (a test that failed stopped)
        cluster.close()
        local_cluster.down(cluster.directory, lambda _: None)


def _pids_running(marker: str) -> set[int]:
    """The processes whose command line holds ``marker`` (a task's script)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            if marker.encode() in (entry / "cmdline").read_bytes() and _alive(int(entry.name)):
                found.add(int(entry.name))
    return found


def _held_job(gate: Gate, name: str, marker: str, *, retries: int = 0, **fields: str) -> str:
    """A job of one task held by ``gate``; its command line holds ``marker``."""
    document = yaml.safe_load(
        job_spec(name, [phase("long", 1, gate.hold(f"echo {marker}"), cpu=0.2)], retries=retries)
    )
    document.update(fields)
    return str(yaml.safe_dump(document))


def _log(cluster: Cluster, name: str) -> str:
    return (cluster.directory / "logs" / f"{name}.log").read_text(errors="replace")


def _attempts(cluster: Cluster, job_id: str, task_id: str = "long-0") -> list[rm_pb.TaskInfo]:
    return [t for t in cluster.job(job_id).tasks if t.task_id == task_id]


def _stopped(pid: int) -> bool:
    """Is ``pid`` stopped by a signal (state T)?"""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T"


def test_an_agent_restarted_within_the_node_timeout_adopts_its_running_task(
    new_cluster: Callable[..., Cluster], gate: Gate
) -> None:
    cluster = new_cluster(2)
    marker = f"adopted-{uuid.uuid4().hex[:8]}"
    job_id = gate.kill_on_close(cluster, cluster.submit(_held_job(gate, "adopt", marker)))
    task = cluster.wait_task_running(job_id, "long-0")
    pids = wait_until(lambda: _pids_running(marker), 30, "the task's processes")
    registered = _log(cluster, task.node_id).count("registered with the resource manager")
    cluster.restart_agent(task.node_id)
    wait_until(
        lambda: (
            _log(cluster, task.node_id).count("registered with the resource manager") > registered
        ),
        60,
        "the restarted agent registered",
    )
    # The same processes run on: neither the RM nor the agent stopped or restarted them.
    assert all(_alive(pid) for pid in pids)
    assert f"node {task.node_id} lost" not in _log(cluster, "rm")
    agent_pid = int(cluster.node(task.node_id)["pid"])
    maps = Path(f"/proc/{agent_pid}/maps").read_text()
    heavy = set(re.findall(r"site-packages/(numpy|scipy|matplotlib|pandas)/", maps))
    assert heavy == set()  # it started fast: none of them loaded, even once registered
    gate.open(cluster, job_id, ["long-0"])
    detail = cluster.wait_final(job_id)
    assert detail.summary.state == pb.JOB_SUCCEEDED, detail.summary.message
    assert [t.attempt for t in _attempts(cluster, job_id)] == [1]  # adopted, never retried


def test_an_agent_back_after_the_node_timeout_stops_its_old_attempt_beside_the_retry(
    new_cluster: Callable[..., Cluster], gate: Gate
) -> None:
    """An agent down longer than the node timeout: the RM counts its node lost and retries its
    task on the other node; while the agent is down nobody can stop the old attempt (its
    processes outlive the agent), but the agent back stops it first thing, and the job ends
    with the retry's result only."""
    cluster = new_cluster(2, max_master_share=0.5)
    marker = f"late-{uuid.uuid4().hex[:8]}"
    job_id = gate.kill_on_close(cluster, cluster.submit(_held_job(gate, "late", marker, retries=1)))
    task = cluster.wait_task_running(job_id, "long-0")
    old = wait_until(lambda: _pids_running(marker), 30, "the first attempt's processes")
    cluster.kill_process(int(cluster.node(task.node_id)["pid"]))
    wait_until(
        lambda: any(
            t.attempt == 2 and t.state == pb.TASK_RUNNING for t in _attempts(cluster, job_id)
        ),
        120,
        "the task retried on the other node",
    )
    assert all(_alive(pid) for pid in old)  # the agent is down: nothing stopped them
    cluster.start_agent(task.node_id)
    wait_until(lambda: not any(_alive(pid) for pid in old), 60, "the old attempt stopped")
    retry = _pids_running(marker)
    assert retry and not retry & old  # the retry runs on, alone
    gate.open(cluster, job_id, ["long-0"])
    detail = cluster.wait_final(job_id, timeout=120)
    assert detail.summary.state == pb.JOB_SUCCEEDED, detail.summary.message
    states = {t.attempt: t.state for t in _attempts(cluster, job_id)}
    assert states[2] == pb.TASK_SUCCEEDED and states[1] != pb.TASK_SUCCEEDED


def test_an_agent_cut_off_from_the_rm_stops_its_tasks_unless_their_job_runs_on(
    new_cluster: Callable[..., Cluster], gate: Gate
) -> None:
    cluster = new_cluster(2, max_master_share=0.5)  # both jobs' masters at once
    rm_pid = int(cluster.info["rm_pid"])
    fenced_marker, kept_marker = (f"{what}-{uuid.uuid4().hex[:8]}" for what in "fk")
    fenced_job = gate.kill_on_close(
        cluster, cluster.submit(_held_job(gate, "fenced", fenced_marker, retries=1))
    )
    kept_job = gate.kill_on_close(
        cluster,
        cluster.submit(_held_job(gate, "kept", kept_marker, retries=1, on_node_lost="run_on")),
    )
    fenced_task = cluster.wait_task_running(fenced_job, "long-0")
    cluster.wait_task_running(kept_job, "long-0")
    fenced_pids = wait_until(lambda: _pids_running(fenced_marker), 30, "the fenced task")
    kept_pids = wait_until(lambda: _pids_running(kept_marker), 30, "the run_on task")

    os.kill(rm_pid, signal.SIGSTOP)  # the RM can neither answer nor act: only agents can
    try:
        wait_until(
            lambda: not any(_alive(pid) for pid in fenced_pids),
            60,
            "the agent stopped the task of the job that does not run on",
        )
        assert _stopped(rm_pid)  # so the agent did it, not the RM
        assert all(_alive(pid) for pid in kept_pids)  # its job says run_on
        fenced_key = f"{fenced_job}.long-0.1"
        (line,) = [
            line
            for line in _log(cluster, fenced_task.node_id).splitlines()
            if "fenced: the resource manager not reached" in line and fenced_key in line
        ]
        assert re.search(r"node timeout is [\d.]+ s", line)
        assert f"{kept_job}.long-0.1" not in line.split("left running")[0]
        # Fenced, the node starts nothing new beside the retries the RM will place elsewhere.
        with pytest.raises(grpc.RpcError) as refused:
            cluster.agent(fenced_task.node_address).StartTask(
                agent_pb.StartTaskRequest(
                    job_id=fenced_job,
                    task_id="long-1",
                    attempt=1,
                    allocation_id="a-late",
                    command=["true"],
                    resources=pb.Resources(cpu=0.1, memory_mb=16),
                ),
                timeout=10,
            )
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
        assert "fenced its tasks" in str(refused.value.details())
    finally:
        os.kill(rm_pid, signal.SIGCONT)

    # The RM back: the fenced attempt is retried (only now: it was gone before the RM could
    # place the retry), and both jobs finish once let go.
    wait_until(
        lambda: any(t.attempt == 2 for t in _attempts(cluster, fenced_job)),
        60,
        "the fenced task retried",
    )
    gate.open(cluster, fenced_job, ["long-0"])
    for job_id in (fenced_job, kept_job):
        detail = cluster.wait_final(job_id, timeout=120)
        assert detail.summary.state == pb.JOB_SUCCEEDED, detail.summary.message


def test_the_event_reporter_reaching_a_restarted_rm_wakes_the_heartbeat_loop(
    new_cluster: Callable[..., Cluster], gate: Gate
) -> None:
    # A long backoff: without the wake-up the loop would sleep out up to a minute.
    cluster = new_cluster(1, agent_args=("--max-backoff", "60"))
    marker = f"woken-{uuid.uuid4().hex[:8]}"
    job_id = gate.kill_on_close(cluster, cluster.submit(_held_job(gate, "woken", marker)))
    task = cluster.wait_task_running(job_id, "long-0")
    cluster.kill_process(int(cluster.info["rm_pid"]))
    # With the RM gone, the task ends: an event its reporter must deliver.
    for pid in wait_until(lambda: _pids_running(marker), 30, "the task's processes"):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    wait_until(
        lambda: "next attempt to reach the resource manager in 16 s" in _log(cluster, task.node_id),
        90,
        "the heartbeat loop in a long backoff",
    )
    before = len(_log(cluster, task.node_id))
    cluster.start_rm()  # the loop waits 16 s more: the reporter finds the RM first

    def registered_again() -> bool:
        return "registered with the resource manager" in _log(cluster, task.node_id)[before:]

    wait_until(registered_again, 90, "the agent registered with the restarted RM")
    lines = _log(cluster, task.node_id)[before:].splitlines()

    def first(text: str) -> int:
        return next(i for i, line in enumerate(lines) if text in line)

    # Woken, not sleeping out its backoff: by the event reporter reaching the RM, or by the
    # monitor pass that sees an RM listen again where connections were refused (either first).
    woken = first("heartbeat woken: ")
    assert "another link reached" in lines[woken] or "listens again" in lines[woken]
    if "another link reached" in lines[woken]:
        assert first("reachable again") < woken
    assert woken < first("registered with the resource manager")
    nodes = cluster.client.jobs.ListNodes(rm_pb.ListNodesRequest(), timeout=30).nodes
    assert [n.state for n in nodes if n.node_id == task.node_id] == [rm_pb.NODE_READY]


def test_an_rm_that_is_down_fences_nothing_and_its_restart_loses_nothing(
    new_cluster: Callable[..., Cluster], gate: Gate
) -> None:
    """A stopped RM (its port refuses connections) counts no node lost, and a restarted one
    gives every node the whole node timeout to register: the agents keep their tasks however
    long it stays down, and the job goes on with the same attempt."""
    cluster = new_cluster(1)
    marker = f"kept-{uuid.uuid4().hex[:8]}"
    job_id = gate.kill_on_close(cluster, cluster.submit(_held_job(gate, "kept", marker)))
    task = cluster.wait_task_running(job_id, "long-0")
    pids = wait_until(lambda: _pids_running(marker), 30, "the task's processes")
    argv = list(cluster.info["rm_argv"])
    timeout = float(argv[len(argv) - 1 - argv[::-1].index("--node-timeout") + 1])
    cluster.kill_process(int(cluster.info["rm_pid"]))
    killed_at = time.monotonic()
    wait_until(
        lambda: "nothing listens there (connection refused)" in _log(cluster, task.node_id),
        60,
        "the agent saw that no RM runs",
    )
    # The outage must outlast the lease (twice the node timeout): waited for, not asserted.
    wait_until(
        lambda: time.monotonic() - killed_at > 2 * timeout, 120, "two node timeouts of outage"
    )
    assert _log(cluster, task.node_id).count("nothing listens there") == 1  # said once
    assert "fenced" not in _log(cluster, task.node_id)
    assert all(_alive(pid) for pid in pids)
    cluster.start_rm()
    gate.open(cluster, job_id, ["long-0"])
    detail = cluster.wait_final(job_id, timeout=120)
    assert detail.summary.state == pb.JOB_SUCCEEDED, detail.summary.message
    assert [t.attempt for t in _attempts(cluster, job_id)] == [1]
