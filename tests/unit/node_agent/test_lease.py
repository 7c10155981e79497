"""The agent's lease on the RM (node_agent/lease.py), the node-timeout rule it rests on
(plumbing/intervals.py), the job spec's ``on_node_lost`` that spares tasks from fencing, and a
real NodeAgent fencing real processes."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from node_agent.agent import AgentConfig, NodeAgent
from node_agent.daemon import rm_refuses_connections
from node_agent.lease import LEASE_FILE, Lease, LeaseView, fence_due, retry_pause
from node_agent.runtime.base import RunState
from node_agent.runtime.process_runtime import ProcessRuntime
from plumbing.intervals import (
    AGENT_START_BUDGET_S,
    NODE_TIMEOUT_S,
    fence_after,
    min_node_timeout,
    node_timeout_for,
    node_timeout_problem,
)
from plumbing.intervals import HEARTBEAT_INTERVAL_S as HEARTBEAT
from plumbing.wire import spec_document_from_pb, spec_to_pb
from policies.scheduling.jobspec import SpecError, job_spec_to_document, parse_job_spec
from policies.scheduling.lifecycle import TaskState
from policies.scheduling.resources import Resources
from tests.builders import job_doc

MONITOR = 0.2

# (view, now, fence due: the seconds without the RM, or None)
DECISIONS: list[tuple[LeaseView, float, float | None]] = [
    (LeaseView(5.5, 100.0, False, True), 104.5, 4.5),  # expired: the lease is 4.3 s
    (LeaseView(5.5, 100.0, False, True), 104.25, None),  # within the lease
    (LeaseView(5.5, 100.0, True, True), 200.0, None),  # fenced already: once per expiry
    (LeaseView(5.5, 100.0, False, False), 200.0, None),  # a restarted agent's first attempt
    (LeaseView(0.0, 100.0, False, True), 200.0, None),  # an older RM: no node timeout told
    (LeaseView(5.5, None, False, True), 200.0, None),  # never registered
]


@pytest.mark.parametrize(("view", "now", "due"), DECISIONS)
def test_fence_due(view: LeaseView, now: float, due: float | None) -> None:
    assert fence_due(view, now, MONITOR) == (None if due is None else pytest.approx(due))


def test_the_agent_fences_before_the_rm_counts_the_node_lost() -> None:
    for timeout in (5.0, 5.5, 10.0, 60.0):
        # stopped (grace included) and seen stopped by a monitor pass before the timeout
        assert fence_after(timeout, MONITOR) + 1.0 + MONITOR <= timeout


# (node timeout, heartbeat interval, refused?)
RULE: list[tuple[float, float, bool]] = [
    (NODE_TIMEOUT_S, HEARTBEAT, False),  # the RM's and the agent's defaults obey it
    (node_timeout_for(0.5), 0.5, False),  # a local cluster's
    (node_timeout_for(2.0), 2.0, False),
    (5.0, 0.5, True),  # the old local cluster's 5 s: no room for a loaded agent's restart
    (10.0, 3.0, True),
    (min_node_timeout(1.0), 1.0, False),
]


# (backoff that failed, interval, max backoff, node timeout, fenced, RM down, next pause)
PAUSES: list[tuple[float, float, float, float, bool, bool, float]] = [
    (0.5, 0.5, 10.0, 0.0, False, False, 1.0),  # doubles; no node timeout known: no cap
    (8.0, 0.5, 10.0, 0.0, False, False, 10.0),  # up to the max backoff
    (4.0, 0.5, 10.0, 5.5, False, False, 5.5 / 3),  # an RM may count: 3 tries per node timeout
    (0.5, 0.5, 10.0, 5.5, False, False, 1.0),  # below the cap: doubles
    (4.0, 0.5, 10.0, 5.5, True, False, 8.0),  # fenced: nothing left to lose, backs off
    (4.0, 0.5, 10.0, 5.5, False, True, 8.0),  # connections refused: no RM counts, backs off
    (1.0, 2.0, 1.0, 3.0, False, False, 2.0),  # never below the heartbeat interval
]


@pytest.mark.parametrize(
    ("backoff", "interval", "most", "timeout", "fenced", "down", "pause"), PAUSES
)
def test_retry_pause(
    backoff: float,
    interval: float,
    most: float,
    timeout: float,
    fenced: bool,
    down: bool,
    pause: float,
) -> None:
    got = retry_pause(backoff, interval, most, timeout, fenced=fenced, rm_down=down)
    assert got == pytest.approx(pause)


def test_an_agent_retries_often_enough_to_register_within_the_node_timeout() -> None:
    """After any run of failures, the attempts of an agent whose lease holds are at most a
    third of the node timeout apart: a restarted RM that fails the first call still hears
    from it twice before it counts the node lost."""
    for timeout in (5.5, 10.0, 30.0):
        backoff = HEARTBEAT
        for _ in range(20):
            backoff = retry_pause(backoff, HEARTBEAT, 10.0, timeout, fenced=False, rm_down=False)
            assert backoff <= timeout / 3 + 1e-9


@pytest.mark.parametrize(("timeout", "interval", "refused"), RULE)
def test_the_node_timeout_rule(timeout: float, interval: float, refused: bool) -> None:
    problem = node_timeout_problem(timeout, interval)
    assert (problem is not None) == refused
    if problem is not None:
        assert "\n" not in problem and f"{AGENT_START_BUDGET_S:g} s" in problem


def test_the_lease_is_kept_across_restarts(tmp_path: Path) -> None:
    lease = Lease(tmp_path, MONITOR)
    now = time.monotonic()
    lease.renewed(now, 5.5)
    lease.run_on("j.p-0.1")
    again = Lease(tmp_path, MONITOR)  # the agent restarted (same boot)
    assert again.node_timeout == 5.5 and again.runs_on("j.p-0.1")
    assert again.due(now + 100) is None  # not before its first attempt to register ended
    again.attempt_failed()
    assert again.due(now + 100) == pytest.approx(100)
    again.keep_only(["other"])
    assert not Lease(tmp_path, MONITOR).runs_on("j.p-0.1")


def test_a_lease_of_another_boot_counts_nothing(tmp_path: Path) -> None:
    lease = Lease(tmp_path, MONITOR)
    lease.renewed(time.monotonic(), 5.5)
    record = json.loads((tmp_path / LEASE_FILE).read_text())
    (tmp_path / LEASE_FILE).write_text(json.dumps({**record, "boot_id": "another"}))
    again = Lease(tmp_path, MONITOR)
    again.attempt_failed()
    assert again.node_timeout == 5.5 and again.due(time.monotonic() + 100) is None


def test_an_unreadable_lease_file_is_ignored(tmp_path: Path) -> None:
    (tmp_path / LEASE_FILE).write_text("{not json")
    assert Lease(tmp_path, MONITOR).node_timeout == 0.0


# ------------------------------------------------------------------ the job spec's field


@pytest.mark.parametrize(
    ("value", "expected"), [(None, "stop"), ("stop", "stop"), ("run_on", "run_on")]
)
def test_on_node_lost_round_trips(value: str | None, expected: str) -> None:
    doc = job_doc() if value is None else job_doc(on_node_lost=value)
    spec = parse_job_spec(doc)
    assert spec.on_node_lost == expected
    assert parse_job_spec(job_spec_to_document(spec)) == spec
    assert parse_job_spec(spec_document_from_pb(spec_to_pb(spec))) == spec


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("forever", "on_node_lost: must be stop or run_on, got 'forever'"),
        (True, "on_node_lost: must be stop or run_on, got a boolean"),
        (None, "on_node_lost: must be stop or run_on, got null"),
    ],
)
def test_a_bad_on_node_lost_is_refused_in_one_line(value: object, message: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_job_spec(job_doc(on_node_lost=value))
    assert str(caught.value) == message


# ------------------------------------------------------------------ a real agent fences


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[NodeAgent]:
    runtime = ProcessRuntime("lease-test", tmp_path / "tasks", cluster_id="unit")
    node = NodeAgent(
        AgentConfig(
            node_id="lease-test", cpu_ids=(0,), capacity=Resources(2.0, 1024), state_dir=tmp_path
        ),
        runtime,
    )
    yield node
    runtime.purge()
    runtime.close()


def test_fencing_stops_all_but_the_tasks_that_run_on(agent: NodeAgent) -> None:
    for task_id in ("stop-0", "runon-0"):
        agent.start_task(
            "j", task_id, 1, f"a-{task_id}", ["sleep", "600"], Resources(0.1, 32), None
        )
    agent.keep_on_node_lost("j.runon-0.1")
    agent.lease.renewed(time.monotonic(), 5.5)
    assert agent.fence(9.0) == ["j.stop-0.1"]
    agent.monitor_once(time.time())
    states = {o.task_key: o.state for o in agent.observations()}
    assert states == {"j.stop-0.1": RunState.EXITED, "j.runon-0.1": RunState.RUNNING}
    (event,) = [e for e in agent.take_outbox() if e.task_id == "stop-0"]
    assert event.state is TaskState.KILLED
    assert event.message.startswith("fenced: the resource manager not reached for 9.0 s")


# ------------------------------------------------------------------ the rule, checked at start


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["rm", "--node-timeout", "2"],
            "--node-timeout: must be at least 4 s, what a restarted agent may take to register "
            "and adopt its tasks, got 2",
        ),
        (
            ["agent", "--rm", "127.0.0.1:1", "--heartbeat-interval", "0"],
            "--heartbeat-interval: must be a positive number of seconds, got 0",
        ),
        (
            ["agent", "--rm", "127.0.0.1:1", "--max-backoff", "nan"],
            "--max-backoff: must be a positive number of seconds, got nan",
        ),
    ],
)
def test_inconsistent_flags_are_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    from sluice.cli import main

    state = ["--state-dir", str(tmp_path / "state"), "--insecure"]
    assert main([*argv, *state]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == f"sluice: error: {message}"


def test_an_agent_whose_heartbeats_the_rms_node_timeout_does_not_allow_stops_at_once() -> None:
    from tests.unit.node_agent.test_heartbeat_loop import DEADLINE, Running, serve

    rm = serve(node_timeout=5.0)
    try:
        running = Running(rm.address, interval=2.0)
        running.thread.join(DEADLINE)  # it stops by itself, at its first registration
        assert not running.thread.is_alive()
        running.daemon.close()
    finally:
        rm.close()
    assert running.daemon.why_refused() == (
        "--heartbeat-interval 2: the resource manager's --node-timeout does not allow it: a node "
        "timeout of 5 s is too short for heartbeats every 2 s: it must be at least 3 heartbeats "
        "+ 4 s for a restarted agent to register, 10 s"
    )


def test_a_fenced_lease_refuses_new_work_until_it_is_renewed() -> None:
    lease = Lease(None, 0.2)
    lease.renewed(100.0, node_timeout=6.0)
    assert lease.fenced_problem() is None
    lease.fenced()
    problem = lease.fenced_problem()
    assert problem is not None and "6 s" in problem and "fenced its tasks" in problem
    lease.renewed(200.0)
    assert lease.fenced_problem() is None


def test_no_rm_running_restarts_the_lease_but_not_after_fencing() -> None:
    lease = Lease(None, 0.2)
    lease.renewed(100.0, node_timeout=6.0)
    assert lease.due(110.0) is not None  # silent for 10 s: due
    lease.not_counting(110.0)  # ...but nothing listens at the RM's address
    assert lease.due(110.5) is None
    assert lease.due(120.0) is not None  # counted again from the last refusal
    lease.fenced()
    lease.not_counting(121.0)
    assert lease.fenced_problem() is not None  # fenced stays fenced until an RM answers


def _refused_port() -> int:
    """A port nothing listens on (bound, then closed)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_a_refused_connection_is_told_from_a_listener_and_from_nonsense() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        assert not rm_refuses_connections(f"127.0.0.1:{port}")
    assert rm_refuses_connections(f"127.0.0.1:{_refused_port()}")
    assert not rm_refuses_connections("no-port-here")
