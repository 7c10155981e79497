"""A granted container's lifecycle: what the RM wants of it, what its node last showed, and what
it holds of its node meanwhile.

A container (an allocation) keeps two things apart, as every lifecycle here does:

* its **goal**, the desired state the RM's decisions set: run at its current ``limits`` (the
  grant, or less once shrunk), be shrunk gracefully towards ``limits`` (the node steps down and
  may freeze the task once it swaps), be suspended (frozen in place, then cut to ``limits``, the
  minimal footprint, when given), or be stopped (preempted by a kill);
* what its node last **showed**: nothing running in it yet (or any more), a task running at
  some limits, or a task suspended.

The RM sends the node the command that closes the gap with every heartbeat answer until the
node's report shows it closed (:func:`command_needed`); a lost answer costs one interval.

What the container **holds** of its node is what no other container may be given there
(:func:`holds`).  Capacity is handed back only once the node shows it given back, and taken at
once when the container is to grow again; so the same capacity is never promised twice while a
freeze or a shrink is being carried out:

* CPU: the larger of what the goal asks for and what the node shows in use.  A suspended task
  uses no CPU.
* Memory: the same, except that a frozen task keeps its memory (the cgroup freezer stops the
  processes, it does not free their pages).  A suspended container therefore holds its memory
  until its node shows the lower memory limit applied, which it can only do by pushing the pages
  to swap (BIG-C, Section 3.2); the RM never counts that memory free before.

Preemption in the BIG-C paper (Section 4) comes in three kinds, and each is a goal change here:
a kill is STOP, an immediate preemption is SUSPEND (with the footprint as limits), a graceful
preemption is SHRINK (limits reached a step r_GP at a time).  A SHRINK container its node froze
because it swapped (Alg. 2 line 8) stays frozen: it holds no CPU and the memory it was shown at,
and it is not told to run again until it is resumed (goal RUN).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping

from policies.identity_enum import IdentityEnum
from policies.scheduling.lifecycle import TransitionError
from policies.scheduling.resources import Resources

__all__ = [
    "GOAL_TRANSITIONS",
    "ContainerCommand",
    "Goal",
    "Shown",
    "check_goal",
    "command_needed",
    "holds",
    "settled_holds",
]


class Goal(IdentityEnum):
    """What the RM wants of a container (desired state)."""

    RUN = "run"  # run its task at its current limits (the grant, or lower once shrunk)
    SHRINK = "shrink"  # step down towards its limits; its node may freeze it once it swaps
    SUSPEND = "suspend"  # its task frozen in place (and cut to its limits, when given)
    STOP = "stop"  # its task stopped, the container taken back (a kill by preemption)


GOAL_TRANSITIONS: Mapping[Goal, frozenset[Goal]] = {
    # RUN -> RUN is a resize.
    Goal.RUN: frozenset({Goal.RUN, Goal.SHRINK, Goal.SUSPEND, Goal.STOP}),
    # SHRINK -> SHRINK takes more (a later decision); -> RUN resumes it.
    Goal.SHRINK: frozenset({Goal.RUN, Goal.SHRINK, Goal.SUSPEND, Goal.STOP}),
    Goal.SUSPEND: frozenset({Goal.RUN, Goal.STOP}),
    Goal.STOP: frozenset(),  # final: the container is removed once its task is shown stopped
}


def check_goal(current: Goal, new: Goal) -> Goal:
    """Return ``new`` when ``current -> new`` is allowed; raise TransitionError."""
    if new in GOAL_TRANSITIONS[current]:
        return new
    raise TransitionError(f"container goal {current.value} -> {new.value} is not allowed")


class Shown(IdentityEnum):
    """What the container's node last showed of it (observed state)."""

    IDLE = "idle"  # no live task in it: not launched yet, or its task ended
    RUNNING = "running"
    SUSPENDED = "suspended"


class ContainerCommand(enum.Enum):
    """What a node must be told to bring a container to its goal."""

    STOP = "stop"
    SUSPEND = "suspend"
    RESUME = "resume"
    RESIZE = "resize"


def holds(
    granted: Resources,
    goal: Goal,
    limits: Resources | None,
    shown: Shown,
    shown_limits: Resources | None,
) -> Resources:
    """What the container holds of its node now (see the module docstring).

    ``limits`` are the goal's limits (None: the grant); ``shown_limits`` the limits the node
    last showed its task running at (None: the grant).  Never more than the grant, since a
    container's limits never exceed it."""
    if (
        goal is Goal.RUN
        and limits is None
        and shown_limits is None
        and shown is not Shown.SUSPENDED
    ):
        return granted  # the common case, on every grant: running (or to run) as granted
    want = granted if limits is None else limits
    if goal is Goal.STOP:
        wanted = Resources()
    elif goal is Goal.SUSPEND:
        wanted = Resources(0.0, want.memory_mb)
    else:
        wanted = want
    if shown is Shown.IDLE:
        # Nothing runs in it; it holds what its goal says, for its job's next task.
        return wanted if goal is not Goal.STOP else Resources()
    seen = granted if shown_limits is None else shown_limits
    in_use = Resources(0.0, seen.memory_mb) if shown is Shown.SUSPENDED else seen
    if goal is Goal.SHRINK and shown is Shown.SUSPENDED:
        return in_use  # frozen on swapping: it goes no lower, and holds no CPU
    return Resources(max(wanted.cpu, in_use.cpu), max(wanted.memory_mb, in_use.memory_mb))


def settled_holds(granted: Resources, goal: Goal, limits: Resources | None) -> Resources:
    """What the container will hold once its node has carried out its goal: nothing once
    stopped, no CPU and the footprint's memory (or all of it, without limits) once suspended,
    its limits once shrunk or resized."""
    if goal is Goal.STOP:
        return Resources()
    want = granted if limits is None else limits
    if goal is Goal.SUSPEND:
        return Resources(0.0, want.memory_mb)
    return want


def command_needed(
    granted: Resources,
    goal: Goal,
    limits: Resources | None,
    shown: Shown,
    shown_limits: Resources | None,
) -> ContainerCommand | None:
    """The command that brings a container whose node shows a live task (RUNNING or SUSPENDED)
    towards its goal, or None when it is there.  A suspended task that must also be resized is
    resumed first, then resized at the next report."""
    if shown is Shown.IDLE:
        return None
    if goal is Goal.STOP:
        return ContainerCommand.STOP
    want = granted if limits is None else limits
    seen = granted if shown_limits is None else shown_limits
    if goal is Goal.SUSPEND:
        if shown is Shown.RUNNING:
            return ContainerCommand.SUSPEND
        # Frozen: told again until its node shows the footprint's memory applied (swapped out).
        swapped_out = limits is None or seen.memory_mb <= want.memory_mb
        return None if swapped_out else ContainerCommand.SUSPEND
    if shown is Shown.SUSPENDED:
        # A SHRINK its node froze on swapping is where it should be; otherwise thaw it.
        return None if goal is Goal.SHRINK else ContainerCommand.RESUME
    if goal is Goal.SHRINK:
        # Stepping down: the node knows the target and takes a step per round.
        return None if _at_or_below(seen, want) else ContainerCommand.RESIZE
    return None if _same_limits(want, seen) else ContainerCommand.RESIZE


def _at_or_below(seen: Resources, want: Resources) -> bool:
    return seen.cpu <= want.cpu + 1e-3 and seen.memory_mb <= want.memory_mb


def _same_limits(a: Resources, b: Resources) -> bool:
    # CPU limits go through cgroup quotas (microseconds per period): compare to a millicore.
    return abs(a.cpu - b.cpu) < 1e-3 and a.memory_mb == b.memory_mb
