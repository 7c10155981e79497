"""A container's goal, what its node shows, and what it holds of its node meanwhile."""

from __future__ import annotations

import pytest

from policies.scheduling.containers import (
    ContainerCommand,
    Goal,
    Shown,
    check_goal,
    command_needed,
    holds,
)
from policies.scheduling.lifecycle import TransitionError
from policies.scheduling.resources import Resources

GRANT = Resources(4.0, 4096)
HALF = Resources(2.0, 2048)
CPU_FREED = Resources(0.0, 4096)


@pytest.mark.parametrize(
    ("goal", "limits", "shown", "shown_limits", "expected"),
    [
        # running as granted, or not started yet: the whole grant
        (Goal.RUN, None, Shown.IDLE, None, GRANT),
        (Goal.RUN, None, Shown.RUNNING, None, GRANT),
        # a freeze is asked for but not shown yet: still the whole grant
        (Goal.SUSPEND, None, Shown.RUNNING, None, GRANT),
        # shown frozen: its CPU is free, its memory stays put
        (Goal.SUSPEND, None, Shown.SUSPENDED, None, CPU_FREED),
        # to be resumed: the CPU is taken back at once, before the thaw is shown
        (Goal.RUN, None, Shown.SUSPENDED, None, GRANT),
        # shrinking: the grant until the node shows the lower limits
        (Goal.RUN, HALF, Shown.RUNNING, None, GRANT),
        (Goal.RUN, HALF, Shown.RUNNING, HALF, HALF),
        # growing back: at once
        (Goal.RUN, None, Shown.RUNNING, HALF, GRANT),
        # frozen while shrunk: the shrunk memory
        (Goal.SUSPEND, HALF, Shown.SUSPENDED, HALF, Resources(0.0, 2048)),
        # stopping: what the node shows until it shows the task gone
        (Goal.STOP, None, Shown.RUNNING, None, GRANT),
        (Goal.STOP, None, Shown.SUSPENDED, None, CPU_FREED),
        (Goal.STOP, None, Shown.IDLE, None, Resources()),
        # idle but suspended or shrunk: what its goal keeps for the job's next task
        (Goal.SUSPEND, None, Shown.IDLE, None, CPU_FREED),
        (Goal.RUN, HALF, Shown.IDLE, None, HALF),
    ],
)
def test_what_a_container_holds(goal, limits, shown, shown_limits, expected):
    assert holds(GRANT, goal, limits, shown, shown_limits) == expected


@pytest.mark.parametrize(
    ("goal", "limits", "shown", "shown_limits", "expected"),
    [
        (Goal.RUN, None, Shown.RUNNING, None, None),
        (Goal.RUN, None, Shown.IDLE, None, None),  # nothing runs: nothing to tell
        (Goal.STOP, None, Shown.IDLE, None, None),
        (Goal.SUSPEND, None, Shown.RUNNING, None, ContainerCommand.SUSPEND),
        (Goal.SUSPEND, None, Shown.SUSPENDED, None, None),
        (Goal.RUN, None, Shown.SUSPENDED, None, ContainerCommand.RESUME),
        (Goal.RUN, HALF, Shown.SUSPENDED, None, ContainerCommand.RESUME),  # thaw, then resize
        (Goal.RUN, HALF, Shown.RUNNING, None, ContainerCommand.RESIZE),
        (Goal.RUN, HALF, Shown.RUNNING, HALF, None),
        (Goal.RUN, None, Shown.RUNNING, HALF, ContainerCommand.RESIZE),
        (Goal.RUN, None, Shown.RUNNING, Resources(4.0004, 4096), None),  # quota rounding
        (Goal.STOP, None, Shown.RUNNING, None, ContainerCommand.STOP),
        (Goal.STOP, None, Shown.SUSPENDED, None, ContainerCommand.STOP),
    ],
)
def test_the_command_that_closes_the_gap(goal, limits, shown, shown_limits, expected):
    assert command_needed(GRANT, goal, limits, shown, shown_limits) is expected


@pytest.mark.parametrize(
    ("current", "new", "allowed"),
    [
        (Goal.RUN, Goal.RUN, True),  # a resize
        (Goal.RUN, Goal.SUSPEND, True),
        (Goal.RUN, Goal.STOP, True),
        (Goal.SUSPEND, Goal.RUN, True),
        (Goal.SUSPEND, Goal.STOP, True),
        (Goal.SUSPEND, Goal.SUSPEND, False),
        (Goal.STOP, Goal.RUN, False),
        (Goal.STOP, Goal.SUSPEND, False),
    ],
)
def test_goal_transitions(current, new, allowed):
    if allowed:
        assert check_goal(current, new) is new
    else:
        with pytest.raises(TransitionError, match=f"{current.value} -> {new.value}"):
            check_goal(current, new)
