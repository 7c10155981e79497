"""What a node may register (capacity bounds, approved node names), and what its registration
reconciles: what the RM believes was started on the node and the node no longer holds is lost."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from plumbing.node_protocol import LaunchMaster
from policies.scheduling.lifecycle import JobState, TaskState
from resource_manager.errors import InvalidRequestError, PermissionDeniedError
from resource_manager.limits import MAX_NODE_CPU, MAX_NODE_MEMORY_MB, NodeNames, capacity_problem
from tests.builders import observation, res
from tests.unit.resource_manager.harness import (
    Driver,
    add_node,
    commands,
    new_core,
    running_job,
    spec_of,
    want,
)

# ------------------------------------------------------------------------- capacity bounds


@pytest.mark.parametrize(
    ("cpu", "memory_mb", "problem"),
    [
        (1e9, 4096, "capacity.cpu: 1000000000 is more than a machine can have (at most 4096)"),
        (4096.5, 4096, "capacity.cpu: 4096.5 is more than a machine can have (at most 4096)"),
        (math.inf, 4096, "capacity.cpu: must be a finite number above 0, got inf"),
        (math.nan, 4096, "capacity.cpu: must be a finite number above 0, got nan"),
        (0.0, 4096, "capacity.cpu: must be a finite number above 0, got 0.0"),
        (-2.0, 4096, "capacity.cpu: must be a finite number above 0, got -2.0"),
        (4.0, 0, "capacity.memory_mb: must be a finite number above 0, got 0"),
        (4.0, -1, "capacity.memory_mb: must be a finite number above 0, got -1"),
        (
            4.0,
            MAX_NODE_MEMORY_MB + 1,
            "capacity.memory_mb: 67108865 is more than a machine can have (at most 67108864)",
        ),
        (MAX_NODE_CPU, MAX_NODE_MEMORY_MB, None),  # the largest machine there may be
        (0.5, 1, None),
    ],
)
def test_a_node_registers_only_a_capacity_a_machine_can_have(
    cpu: float, memory_mb: int, problem: str | None
) -> None:
    found = capacity_problem(cpu, memory_mb)
    assert (None if found is None else ": ".join(found)) == problem
    core = new_core()
    if problem is None:
        add_node(core, "n1", cpu, memory_mb)
        assert core.nodes["n1"].capacity == res(cpu, memory_mb)
    else:
        with pytest.raises(InvalidRequestError) as refused:
            add_node(core, "n1", cpu, memory_mb)
        assert str(refused.value) == problem
        assert core.nodes == {}


# ------------------------------------------------------------------------- approved names


@pytest.mark.parametrize(
    ("patterns", "file_lines", "node_id", "allowed"),
    [
        ((), None, "evil-1", True),  # nothing approved: any name (certificates still bind)
        (("node-*",), None, "node-7", True),
        (("node-*",), None, "evil-1", False),
        (("node-*", "gpu-?"), None, "gpu-3", True),
        (("node-*",), None, "NODE-1", False),  # case matters, as in node ids
        ((), ["# the rack", "rack1-*  # its nodes", ""], "rack1-n4", True),
        ((), ["rack1-*"], "rack2-n1", False),
        ((), [], "node-1", False),  # an empty file approves nobody
    ],
)
def test_only_approved_node_names_register(
    tmp_path: Path,
    patterns: tuple[str, ...],
    file_lines: list[str] | None,
    node_id: str,
    allowed: bool,
) -> None:
    file = None
    if file_lines is not None:
        file = tmp_path / "nodes"
        file.write_text("\n".join(file_lines))
    core = new_core(nodes_allowed=patterns, nodes_allowed_file=str(file or ""))
    if allowed:
        add_node(core, node_id)
        assert node_id in core.nodes
        return
    with pytest.raises(PermissionDeniedError) as refused:
        add_node(core, node_id)
    how = f"add it to {file} (re-read at once)" if file else "start the RM with --nodes-allowed"
    assert str(refused.value).startswith(
        f"node_id: {node_id} is not an approved node name; to approve it, {how}"
    )
    assert core.nodes == {}


def test_a_name_added_to_the_file_is_approved_without_a_restart(tmp_path: Path) -> None:
    file = tmp_path / "nodes"
    file.write_text("node-1\n")
    core = new_core(nodes_allowed_file=str(file))
    with pytest.raises(PermissionDeniedError):
        add_node(core, "node-2")
    file.write_text("node-1\nnode-2\n")
    add_node(core, "node-2")
    file.unlink()  # unreadable now: the names read before stay approved
    add_node(core, "node-2", now=1.0)
    assert set(core.nodes) == {"node-2"}


def test_an_unreadable_file_is_refused_at_start(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="No such file"):
        NodeNames((), tmp_path / "missing")


# ------------------------------------------------------------------------- reconciliation


def _job_on_n1(core: Driver) -> tuple[str, str, str]:
    """A client-mode job with two containers on n1: one whose task is running (reported), one
    granted and not yet started.  Returns (job, started allocation, granted allocation)."""
    add_node(core, "n1", 2.0, 4096)
    job_id = running_job(core, spec_of(2, cpu=1.0))
    started, granted = (
        a.allocation_id for a in core.allocate(job_id, [want(2)], [], [], 0, now=1.0).granted
    )
    core.report_events(
        "n1", [observation(job_id, "p-0", TaskState.RUNNING, allocation_id=started)], now=2.0
    )
    return job_id, started, granted


@pytest.mark.parametrize(
    ("case", "reported", "lost"),
    [
        # the agent adopted its task (restarted within the node timeout): nothing is lost
        ("adopted", "running", False),
        # the task ended while the agent was down: its end is recorded, nothing is lost
        ("ended meanwhile", "succeeded", False),
        # the machine came back empty (rebooted, drained): the task and its container are lost
        ("came back empty", None, True),
    ],
)
def test_registration_loses_what_the_node_no_longer_holds(
    case: str, reported: str | None, lost: bool
) -> None:
    core = new_core(node_timeout=60.0)
    job_id, started, granted = _job_on_n1(core)
    live = []
    if reported is not None:
        state = TaskState.RUNNING if reported == "running" else TaskState.SUCCEEDED
        live = [observation(job_id, "p-0", state, allocation_id=started)]
    add_node(core, "n1", 2.0, 4096, live=live, now=3.0)  # the same agent
    task = core.tasks[(job_id, "p-0", 1)]
    if lost:
        assert (task.state, task.message) == (TaskState.LOST, "node n1 restarted without it")
        assert started not in core.allocations  # its CPU is free again
        assert core.allocate(job_id, [], [], [], 0, now=4.0).lost_allocations == (started,)
    else:
        assert task.state is (TaskState.RUNNING if reported == "running" else TaskState.SUCCEEDED)
        assert started in core.allocations
    # granted and not yet started: legitimately not reported, kept
    assert granted in core.allocations


def test_a_restarted_rm_loses_what_a_node_comes_back_without(tmp_path: Path) -> None:
    path = tmp_path / "rm.sqlite3"
    core = new_core(path, node_timeout=60.0)
    job_id, _, granted = _job_on_n1(core)
    core.core.tables._store.close()
    again = new_core(path, node_timeout=60.0)  # the RM restarted: it knows no node
    add_node(again, "n1", 2.0, 4096, now=10.0)
    assert again.tasks[(job_id, "p-0", 1)].state is TaskState.LOST
    assert set(again.allocations) == {granted}


@pytest.mark.parametrize(
    ("registered", "reported", "attempt"),
    [
        # its job master registered (RUNNING) and the node does not hold it: lost, and the
        # next attempt is placed at once (here on the same node, the only one)
        (True, False, 2),
        (True, True, 1),  # adopted: nothing happens
        # not yet registered (STARTING): launched again by the heartbeat, as before
        (False, False, 1),
    ],
)
def test_a_job_master_the_node_no_longer_holds_is_lost(
    registered: bool, reported: bool, attempt: int
) -> None:
    core = new_core(node_timeout=60.0, max_master_attempts=2)
    add_node(core, "n1", 2.0, 4096)
    job = core.submit(spec_of(2), client_mode=False, now=1.0)
    (launch,) = commands(core, "n1", now=1.0)
    assert isinstance(launch, LaunchMaster)
    if registered:
        core.register_master(job.job_id, attempt=1, now=2.0)
    live = []
    if reported:
        live = [
            observation(
                job.job_id,
                "master",
                TaskState.RUNNING,
                allocation_id=launch.allocation_id,
                job_master=True,
            )
        ]
    add_node(core, "n1", 2.0, 4096, live=live, now=3.0)
    after = core.job(job.job_id)
    assert after.master_attempt == attempt
    assert (launch.allocation_id in core.allocations) is (attempt == 1)
    if reported:
        assert after.state is JobState.RUNNING
        assert commands(core, "n1", now=4.0, live=live) == []
    else:
        assert after.state is JobState.STARTING
        (again,) = commands(core, "n1", now=4.0)
        assert isinstance(again, LaunchMaster) and again.attempt == attempt
