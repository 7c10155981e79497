"""Job and task lifecycles as explicit state machines.

Each lifecycle is a table of allowed transitions.  What a user or a component *wants* (a job
killed, a task suspended) is kept apart from what was *observed*; only observations move a state
along these tables.  A transition outside the table is a bug or a stale report, and callers
decide which: :func:`check_transition` tells them.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import TypeVar

from policies.identity_enum import IdentityEnum

S = TypeVar("S", bound=enum.Enum)


class JobState(IdentityEnum):
    SUBMITTED = "submitted"  # accepted; waiting for a container for its job master
    STARTING = "starting"  # job master launched on a node, not registered yet
    RUNNING = "running"  # job master registered and driving the DAG
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    KILLED = "killed"

    @property
    def is_final(self) -> bool:
        return self in _FINAL_JOB_STATES


_FINAL_JOB_STATES = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.KILLED})

JOB_TRANSITIONS: Mapping[JobState, frozenset[JobState]] = {
    JobState.SUBMITTED: frozenset(
        # RUNNING directly: in client mode the submitter's job master registers at once.
        {JobState.STARTING, JobState.RUNNING, JobState.FAILED, JobState.KILLED}
    ),
    JobState.STARTING: frozenset(
        # SUBMITTED again: the job master was lost before it registered (a new attempt).
        {JobState.SUBMITTED, JobState.RUNNING, JobState.FAILED, JobState.KILLED}
    ),
    JobState.RUNNING: frozenset(
        # SUBMITTED again: its job master was lost (its node, or it exited before reporting);
        # a new job master attempt waits for a container and adopts the running tasks.
        {JobState.SUBMITTED, JobState.SUCCEEDED, JobState.FAILED, JobState.KILLED}
    ),
    JobState.SUCCEEDED: frozenset(),
    JobState.FAILED: frozenset(),
    JobState.KILLED: frozenset(),
}


class TaskState(IdentityEnum):
    PENDING = "pending"  # waiting for its phase's barrier or for a container
    LAUNCHING = "launching"  # handed to a node agent, not yet seen running
    RUNNING = "running"
    SUSPENDED = "suspended"  # frozen in place (preemption); keeps its memory
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    KILLED = "killed"
    LOST = "lost"  # its node stopped answering

    @property
    def is_final(self) -> bool:
        return self in _FINAL_TASK_STATES


_FINAL_TASK_STATES = frozenset(
    {TaskState.SUCCEEDED, TaskState.FAILED, TaskState.KILLED, TaskState.LOST}
)
_ENDINGS = frozenset({TaskState.SUCCEEDED, TaskState.FAILED, TaskState.KILLED, TaskState.LOST})

TASK_TRANSITIONS: Mapping[TaskState, frozenset[TaskState]] = {
    TaskState.PENDING: frozenset({TaskState.LAUNCHING, TaskState.KILLED}),
    # A short task may finish before the agent ever reports it running.
    TaskState.LAUNCHING: frozenset({TaskState.RUNNING, TaskState.SUSPENDED}) | _ENDINGS,
    TaskState.RUNNING: frozenset({TaskState.SUSPENDED}) | _ENDINGS,
    TaskState.SUSPENDED: frozenset({TaskState.RUNNING}) | _ENDINGS,
    TaskState.SUCCEEDED: frozenset(),
    TaskState.FAILED: frozenset(),
    TaskState.KILLED: frozenset(),
    TaskState.LOST: frozenset(),
}


class TransitionError(ValueError):
    """A state change the lifecycle table does not allow."""


def check_transition(table: Mapping[S, frozenset[S]], current: S, new: S) -> S:
    """Return ``new`` when ``current -> new`` is allowed (or a no-op); raise TransitionError."""
    if new == current or new in table[current]:
        return new
    raise TransitionError(f"{current.value} -> {new.value} is not an allowed transition")
