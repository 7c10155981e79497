"""Job and task lifecycles: the transition tables and check_transition."""

from __future__ import annotations

import enum
import itertools
from collections.abc import Mapping
from typing import TypeVar

import pytest

from policies.scheduling.lifecycle import (
    JOB_TRANSITIONS,
    TASK_TRANSITIONS,
    JobState,
    TaskState,
    TransitionError,
    check_transition,
)

S = TypeVar("S", bound=enum.Enum)
J = JobState
T = TaskState


@pytest.mark.parametrize(
    ("current", "new", "allowed"),
    [
        (J.SUBMITTED, J.STARTING, True),
        (J.SUBMITTED, J.RUNNING, True),  # client mode: the submitter is the job master
        (J.SUBMITTED, J.KILLED, True),
        (J.SUBMITTED, J.SUCCEEDED, False),
        (J.STARTING, J.SUBMITTED, True),  # the job master's node was lost before it registered
        (J.STARTING, J.RUNNING, True),
        (J.STARTING, J.FAILED, True),
        (J.RUNNING, J.SUCCEEDED, True),
        (J.RUNNING, J.STARTING, False),
        (J.RUNNING, J.SUBMITTED, True),  # its job master was lost: a new attempt waits
        (J.SUCCEEDED, J.FAILED, False),
        (J.KILLED, J.RUNNING, False),
        (J.FAILED, J.FAILED, True),  # a no-op is always allowed
    ],
)
def test_job_transitions(current: JobState, new: JobState, allowed: bool):
    _assert_transition(JOB_TRANSITIONS, current, new, allowed)


@pytest.mark.parametrize(
    ("current", "new", "allowed"),
    [
        (T.PENDING, T.LAUNCHING, True),
        (T.PENDING, T.KILLED, True),
        (T.PENDING, T.RUNNING, False),  # only through LAUNCHING
        (T.PENDING, T.LOST, False),
        (T.LAUNCHING, T.SUCCEEDED, True),  # finished before ever reported running
        (T.LAUNCHING, T.LOST, True),
        (T.RUNNING, T.SUSPENDED, True),
        (T.SUSPENDED, T.RUNNING, True),
        (T.SUSPENDED, T.KILLED, True),
        (T.RUNNING, T.LAUNCHING, False),
        (T.RUNNING, T.PENDING, False),
        (T.SUCCEEDED, T.RUNNING, False),  # a stale report after the end
        (T.LOST, T.SUCCEEDED, False),
        (T.RUNNING, T.RUNNING, True),
    ],
)
def test_task_transitions(current: TaskState, new: TaskState, allowed: bool):
    _assert_transition(TASK_TRANSITIONS, current, new, allowed)


def _assert_transition(table: Mapping[S, frozenset[S]], current: S, new: S, allowed: bool) -> None:
    if allowed:
        assert check_transition(table, current, new) is new
        return
    with pytest.raises(TransitionError, match=f"^{current.value} -> {new.value} is not an allowed"):
        check_transition(table, current, new)


@pytest.mark.parametrize(
    ("table", "states"),
    [(JOB_TRANSITIONS, list(JobState)), (TASK_TRANSITIONS, list(TaskState))],
)
def test_tables_cover_every_state_and_final_means_no_way_out(
    table: Mapping[JobState | TaskState, frozenset[JobState | TaskState]],
    states: list[JobState | TaskState],
):
    assert set(table) == set(states)
    for state in states:
        assert state.is_final is (not table[state]), state
        assert state not in table[state]  # no-ops are implicit, not listed


@pytest.mark.parametrize(
    ("table", "states"),
    [(JOB_TRANSITIONS, list(JobState)), (TASK_TRANSITIONS, list(TaskState))],
)
def test_every_state_can_reach_a_final_state(
    table: Mapping[JobState | TaskState, frozenset[JobState | TaskState]],
    states: list[JobState | TaskState],
):
    for start in states:
        seen = {start}
        frontier = [start]
        while frontier:
            frontier = [n for s in frontier for n in table[s] if n not in seen]
            seen.update(frontier)
        assert any(s.is_final for s in seen), start


def test_check_transition_agrees_with_the_table_for_every_pair():
    for current, new in itertools.product(TaskState, TaskState):
        allowed = new is current or new in TASK_TRANSITIONS[current]
        try:
            check_transition(TASK_TRANSITIONS, current, new)
            accepted = True
        except TransitionError:
            accepted = False
        assert accepted is allowed, (current, new)
