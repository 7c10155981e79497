"""The node agent without gRPC: its identity, one monitor pass at a time, what StartTask
accepts, one task per allocation, and commands the RM repeats carried out once."""

from __future__ import annotations

import argparse
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, cast

import pytest

from node_agent.agent import AgentConfig, AllocationBusyError, NodeAgent
from node_agent.daemon import AgentDaemon, AgentIdentity, add_arguments, load_identity
from node_agent.lease import Lease
from node_agent.runtime.base import (
    ResourceLimits,
    RunObservation,
    RunState,
    TaskLaunch,
    TaskRuntime,
    TaskUsage,
)
from node_agent.service import start_request_problem
from node_agent.speculative import QueueState
from plumbing.errors import UserError
from policies.scheduling.lifecycle import TaskState
from policies.scheduling.resources import Resources
from sluice_pb import common_pb2 as pb
from sluice_pb import node_agent_pb2 as agent_pb
from sluice_pb import resource_manager_pb2 as rm_pb


@dataclass
class RecordingRuntime:
    """Starts tasks in memory and observes them running."""

    name: str = "fake"
    started: dict[str, TaskLaunch] = field(default_factory=dict)
    exited: set[str] = field(default_factory=set)  # observed exited (status 0) from now on

    def start(self, launch: TaskLaunch) -> None:
        self.started[launch.task_key] = launch

    def observe(self) -> Sequence[RunObservation]:
        return [
            RunObservation(
                task_key=key,
                job_id=launch.job_id,
                task_id=launch.task_id,
                attempt=launch.attempt,
                allocation_id=launch.allocation_id,
                state=RunState.EXITED if key in self.exited else RunState.RUNNING,
                limits=launch.limits,
                exit_code=0 if key in self.exited else None,
            )
            for key, launch in self.started.items()
        ]

    def usage(self, key: str) -> TaskUsage:
        return TaskUsage(cpu_seconds=1.0, memory_bytes=1024)


def new_agent(runtime: RecordingRuntime | None = None) -> tuple[NodeAgent, RecordingRuntime]:
    runtime = runtime or RecordingRuntime()
    config = AgentConfig(node_id="n1", cpu_ids=(0, 1), capacity=Resources(2.0, 2048))
    return NodeAgent(config, cast(TaskRuntime, runtime)), runtime


# --------------------------------------------------------------------------- identity


def test_identity_is_made_once_and_kept_across_restarts(tmp_path: Path) -> None:
    first = load_identity(tmp_path, "node-1", "lab")
    again = load_identity(tmp_path, "node-1", "lab")
    assert first == again
    assert len(first.instance_id) == 32
    other = load_identity(tmp_path / "other", "node-1", "lab")
    assert other.instance_id != first.instance_id  # another state directory: another agent


@pytest.mark.parametrize(
    ("node_id", "cluster_id", "error"),
    [
        ("node-2", "lab", "belongs to node 'node-1' of cluster 'lab', not 'node-2' of 'lab'"),
        ("node-1", "prod", "belongs to node 'node-1' of cluster 'lab', not 'node-1' of 'prod'"),
        ("9uzz-o\bde", "lab", "--node-id: '9uzz-o\\x08de' must be letters"),
        ("node-1", "Lab_1", "--cluster-id: 'Lab_1' must be lower-case letters"),
    ],
)
def test_identity_refuses_another_node_or_cluster_and_bad_names(
    tmp_path: Path, node_id: str, cluster_id: str, error: str
) -> None:
    load_identity(tmp_path, "node-1", "lab")
    with pytest.raises(UserError) as caught:
        load_identity(tmp_path, node_id, cluster_id)
    assert error in str(caught.value)


# --------------------------------------------------------------------------- the monitor


def test_monitor_passes_never_overlap() -> None:
    """A handler's pass (after StopTask, say) waits for the monitor thread's pass."""
    agent, runtime = new_agent()
    agent.start_task("j", "p-0", 1, "a1", ["true"], Resources(0.5, 64), None)
    entered = threading.Semaphore(0)
    release = threading.Event()
    original = runtime.observe

    def gated_observe() -> Sequence[RunObservation]:
        entered.release()
        release.wait(10)  # the first pass holds here until the test lets it go
        return original()

    runtime.observe = gated_observe  # type: ignore[method-assign]
    first = threading.Thread(target=agent.monitor_once, args=(1.0,))
    first.start()
    assert entered.acquire(timeout=10)  # the first pass is inside observe()
    second = threading.Thread(target=agent.monitor_once, args=(2.0,))
    second.start()
    # A second pass may not enter while the first is inside; with passes running concurrently
    # it would enter at once (the window only bounds how long we look for a wrong entry).
    overlapped = entered.acquire(timeout=0.5)
    release.set()
    first.join(10)
    second.join(10)
    assert not overlapped
    assert entered.acquire(timeout=10)  # ...and it did run once the first had finished


# --------------------------------------------------------------------------- StartTask


def start_request(**fields: Any) -> agent_pb.StartTaskRequest:
    values: dict[str, Any] = {
        "job_id": "job-000001",
        "task_id": "map-3",
        "attempt": 1,
        "allocation_id": "job-000001-a7",
        "command": ["true"],
        "resources": pb.Resources(cpu=0.5, memory_mb=64),
    }
    values.update(fields)
    return agent_pb.StartTaskRequest(**values)


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({}, None),
        ({"task_id": "phase.with-dots_9-12"}, None),
        ({"task_id": "master"}, "task_id: 'master' is not a task of a phase"),
        ({"task_id": "map"}, "task_id: 'map' is not a task of a phase"),
        ({"task_id": "../x-1"}, "task_id: '../x-1' is not a task of a phase"),
        ({"job_id": ""}, "job_id: must be 1-128 printable characters without '/'"),
        ({"job_id": "a/b"}, "job_id: must be 1-128 printable characters without '/'"),
        ({"allocation_id": "x\x00y"}, "allocation_id: must be 1-128 printable"),
        ({"command": []}, "command: must not be empty"),
    ],
)
def test_start_task_requests_are_checked(fields: dict[str, Any], problem: str | None) -> None:
    found = start_request_problem(start_request(**fields))
    assert found == problem if problem is None else found and found.startswith(problem)


def test_one_live_task_per_allocation() -> None:
    agent, runtime = new_agent()
    agent.start_task("j", "p-0", 1, "a1", ["true"], Resources(0.5, 64), None)
    with pytest.raises(AllocationBusyError, match=r"allocation a1 already runs j\.p-0\.1"):
        agent.start_task("j", "p-1", 1, "a1", ["true"], Resources(0.5, 64), None)
    assert list(runtime.started) == ["j.p-0.1"]


def test_job_master_attempts_have_names_of_their_own_and_are_flagged() -> None:
    agent, runtime = new_agent()
    agent.launch_master("j", "a1", Resources(0.1, 256), "rm:1", attempt=1)
    agent.launch_master("j", "a1", Resources(0.1, 256), "rm:1", attempt=1)  # repeated: once
    agent.launch_master("j", "a2", Resources(0.1, 256), "rm:1", attempt=2)
    assert list(runtime.started) == ["j.master.1", "j.master.2"]
    assert runtime.started["j.master.2"].argv[-3:-1] == ("--attempt", "2")
    agent.monitor_once(1.0)
    assert {e.task_id: e.job_master for e in agent.live_events()} == {"master": True}


def test_a_registration_carries_the_end_of_a_task_not_yet_reported() -> None:
    """A task that ended since the last report: its final event waits in the outbox, and the
    live snapshot no longer shows it, so the registration carries the outbox (else the RM
    would count it lost for missing from the snapshot and ignore its late success)."""
    agent, runtime = new_agent()
    agent.start_task("j", "p-0", 1, "a1", ["true"], Resources(0.5, 64), None)
    agent.start_task("j", "p-1", 1, "a2", ["true"], Resources(0.5, 64), None)
    agent.monitor_once(1.0)
    agent.take_outbox()  # both RUNNING, reported
    runtime.exited.add("j.p-1.1")
    agent.monitor_once(2.0)
    assert {e.task_id for e in agent.live_events()} == {"p-0"}
    told = {(e.task_id, e.state) for e in agent.registration_events()}
    assert told == {("p-0", TaskState.RUNNING), ("p-1", TaskState.SUCCEEDED)}


# (case, the agent runs with TLS, the RM sent a certificate, the job master's TLS flags or None:
# not started)
MASTER_TLS = [
    ("insecure agent", False, False, ("--insecure",)),
    ("TLS agent, certificate sent", True, True, ("--tls-dir", "TLS_ROOT/j-1")),
    ("TLS agent, no certificate", True, False, None),
]


@pytest.mark.parametrize(
    ("with_tls", "sent", "flags"), [c[1:] for c in MASTER_TLS], ids=[c[0] for c in MASTER_TLS]
)
def test_a_job_master_is_launched_with_an_explicit_tls_decision(
    tmp_path: Path, with_tls: bool, sent: bool, flags: tuple[str, ...] | None
) -> None:
    runtime = RecordingRuntime()
    config = AgentConfig(node_id="n1", cpu_ids=(0,), capacity=Resources(1.0, 1024))
    if with_tls:
        config = replace(config, ca_pem=b"CA", masters_tls_root=tmp_path)
    agent = NodeAgent(config, cast(TaskRuntime, runtime))
    credentials = (b"CHAIN", b"KEY") if sent else (b"", b"")
    agent.launch_master("j", "a1", Resources(0.1, 256), "rm:1", 1, *credentials)
    if flags is None:
        assert not runtime.started
        return
    (started,) = runtime.started.values()
    argv = started.argv
    assert argv[argv.index("--attempt") + 2 :] == tuple(
        f.replace("TLS_ROOT", str(tmp_path)) for f in flags
    )


# --------------------------------------------------------------------------- repeated commands


class SlowAgent:
    """Records launches; each takes until ``release`` is set (a job master still starting)."""

    def __init__(self) -> None:
        self.launched: list[str] = []
        self.release = threading.Event()
        self.config = AgentConfig(node_id="n1", cpu_ids=(0,), capacity=Resources(1.0, 1024))
        self.used = Resources()
        self.has_swap = False
        self.lease = Lease(None, 0.2)  # renewed by each heartbeat answered

    def launch_master(self, job_id: str, allocation_id: str, *_: object) -> None:
        self.launched.append(allocation_id)
        self.release.wait(5)

    def live_events(self) -> list[object]:
        return []

    def registration_events(self) -> list[object]:
        return []

    def queue_state(self) -> QueueState:
        return QueueState()


class RepeatingRM:
    """Answers every heartbeat with the same LaunchMaster, as the RM does until it is done."""

    def Heartbeat(self, request: rm_pb.HeartbeatRequest, timeout: float) -> rm_pb.HeartbeatResponse:
        response = rm_pb.HeartbeatResponse()
        response.commands.add().launch_master.CopyFrom(
            rm_pb.LaunchMaster(job_id="j", allocation_id="a1", attempt=1)
        )
        return response


def test_a_command_the_rm_repeats_runs_once_while_it_is_being_carried_out() -> None:
    agent = SlowAgent()
    daemon = AgentDaemon(
        cast(NodeAgent, agent),
        "rm:1",
        "n1:7",
        "process",
        threading.Event(),
        identity=AgentIdentity("n1", "lab", "i"),
    )
    daemon._rm = cast(Any, RepeatingRM())
    daemon._registered = True
    for _ in range(5):
        daemon._heartbeat()
    agent.release.set()
    daemon.close()
    daemon._commands.shutdown(wait=True)
    assert agent.launched == ["a1"]


def test_limits_of_an_observation_are_what_the_runtime_reports() -> None:
    # a guard for the renamed runtime types: RunObservation carries the granted limits
    observation = RunObservation("k", "j", "p-0", 1, "a", RunState.RUNNING, ResourceLimits(1, 64))
    assert replace(observation, state=RunState.EXITED).limits == ResourceLimits(1, 64)


@pytest.mark.parametrize(
    ("flags", "problem"),
    [
        (["--speculative-quota", "0.5,0.5"], "--speculative-quota: expected three fractions"),
        (["--speculative-quota", "a,b,c"], "--speculative-quota: expected CPU,MEMORY,DISK"),
        (["--admission-thresholds", "1,1,1.5"], "--admission-thresholds: expected three"),
        (["--speculative-queue-length", "-1"], "--speculative-queue-length: must be 0 or more"),
        (["--throttle-hold", "-1"], "--throttle-hold: must be 0 or more seconds"),
        (["--throttle-hold", "nan"], "--throttle-hold: must be 0 or more seconds"),
    ],
)
def test_bad_speculative_queue_flags_are_refused_in_one_line(
    flags: list[str], problem: str
) -> None:
    from node_agent.daemon import oversubscription_of

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--rm", "127.0.0.1:1", *flags])
    with pytest.raises(UserError) as caught:
        oversubscription_of(args)
    assert str(caught.value).startswith(problem)


def test_the_speculative_queue_flags_reach_its_settings() -> None:
    from node_agent.daemon import oversubscription_of

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(
        [
            "--rm",
            "127.0.0.1:1",
            "--speculative-queue-length",
            "5",
            "--speculative-quota",
            "0.2,0.3,0.4",
            "--throttle-hold",
            "2.5",
        ]
    )
    config = oversubscription_of(args)
    assert (config.max_queue_length, config.oversubscription_quota) == (5, (0.2, 0.3, 0.4))
    assert config.throttle_hold_s == 2.5
