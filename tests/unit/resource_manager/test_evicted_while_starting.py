"""A job evicted while its job master is still starting (preemptive dispatch, issue 28): the
node launched the process, the stop reaches the node only at its next heartbeat, and the
process then registers an attempt the core has dropped.  The core refuses the registration
(the service answers FAILED_PRECONDITION, on which a live job master exits), tells the node to
stop the process, takes its container back once the node shows it ended, and charges the job
no job master attempt.  The simulator drives the same race: tests/unit/simulator/test_engine.py
(test_a_job_evicted_while_its_job_master_starts_is_executed_again)."""

from __future__ import annotations

import pytest

from plumbing.node_protocol import LaunchMaster, StopAllocation, TaskReport
from policies.approximation.dispatch import DispatchMode
from policies.scheduling.lifecycle import JobState, TaskState
from resource_manager.errors import ConflictError
from tests.builders import observation
from tests.unit.resource_manager.harness import Driver, add_node, commands, new_core, spec_of


def started_and_evicted(core: Driver) -> tuple[str, str, str]:
    """A low-priority job whose job master the node launched; a high-priority job evicts it
    before that process registers.  (low, high, the launched master's allocation)."""
    low = str(core.submit(spec_of(2, priority=0), client_mode=False, now=0.0).job_id)
    launches = [c for c in commands(core, "n1", now=0.5) if isinstance(c, LaunchMaster)]
    assert [c.job_id for c in launches] == [low]
    high = str(core.submit(spec_of(2, priority=1), client_mode=False, now=1.2).job_id)
    assert core.job(low).state is JobState.SUBMITTED
    assert core.job(low).execution.evictions == 1
    return low, high, launches[0].allocation_id


def master_report(job_id: str, allocation_id: str, state: TaskState) -> TaskReport:
    return observation(
        job_id, "job-master", state, allocation_id=allocation_id, job_master=True, exit_code=4
    )


@pytest.mark.parametrize(
    ("reported_first", "reason"),
    [
        ("monitor", "evicted"),  # the agent's monitor pass shows the process running first
        ("heartbeat", "evicted"),  # its first sign is the heartbeat below
        # a heartbeat before the process shows at all: its container is taken back then
        ("nothing", "is not job-"),
    ],
)
def test_a_master_starting_after_its_job_was_evicted_is_stopped_and_costs_no_attempt(
    reported_first: str, reason: str
) -> None:
    core = new_core(dispatch=DispatchMode.PREEMPTIVE, max_running_jobs=1, max_master_share=1.0)
    add_node(core, "n1", cpu=2.0, memory_mb=4096)
    low, high, allocation = started_and_evicted(core)
    running = master_report(low, allocation, TaskState.RUNNING)
    if reported_first == "monitor":
        core.report_events("n1", [running], now=1.3)
    elif reported_first == "nothing":
        assert not any(isinstance(c, StopAllocation) for c in commands(core, "n1", now=1.3))

    # The process starts and registers its dropped attempt: refused, nothing changes.
    with pytest.raises(ConflictError, match=r"attempt 1 of .* is gone"):
        core.register_master(low, attempt=1, now=1.4)
    assert core.job(low).state is JobState.SUBMITTED

    # The node's next heartbeat shows it running: the answer stops it.
    sent = commands(core, "n1", now=1.5, live=[running])
    stops = [c for c in sent if isinstance(c, StopAllocation)]
    assert [(c.job_id, c.allocation_id) for c in stops] == [(low, allocation)]
    assert reason in stops[0].reason

    # Its end (the exit of a refused job master) frees the container and fails nothing.
    core.report_events("n1", [master_report(low, allocation, TaskState.KILLED)], now=1.7)
    assert allocation not in core.allocations
    assert core.job(low).state is JobState.SUBMITTED
    assert core.job(low).master_attempt - core.job(low).execution.evictions < 2
    assert core.job(high).state in (JobState.STARTING, JobState.RUNNING)
