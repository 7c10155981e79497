"""A graceful preemption's rounds on a node (BIG-C Alg. 2 line 7, carried out by the node).

The resource manager sends a container's target limits and the queue's step r_GP; the node
lowers the limits by at most the step per round, CPU first, until the target (or until the task
swaps, and is frozen).  The node agent and the simulator's nodes both take their rounds with
:func:`next_step`.
"""

from __future__ import annotations

from policies.scheduling.resources import Resources

__all__ = ["next_step"]


def next_step(current: Resources, target: Resources, step: Resources) -> Resources:
    """The limits after one round: each resource lowered towards ``target`` by at most
    ``step``; a resource at or below its target is set to it at once (growing back is not a
    preemption)."""

    def one(now: float, goal: float, by: float) -> float:
        if now <= goal:
            return goal
        return max(goal, now - by) if by > 0 else now

    cpu = one(current.cpu, target.cpu, step.cpu)
    memory = int(one(current.memory_mb, target.memory_mb, step.memory_mb))
    return Resources(round(cpu, 9), memory)
