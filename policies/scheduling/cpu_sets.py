"""Which host CPUs a task may run on: a node-local decision of the node agent."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence


def choose_cpuset(
    node_cpus: Sequence[int], assigned: Mapping[str, Sequence[int]], cpu: float
) -> tuple[int, ...]:
    """Pick ``ceil(cpu)`` CPUs of ``node_cpus`` that the fewest live tasks are pinned to.

    ``assigned`` maps each live task to its cpuset.  Ties go to the lower CPU id, so the choice is
    deterministic.  The CFS quota (not the cpuset) enforces fractional amounts: a 0.5-cpu task
    gets one CPU in its set and half of it in quota.  Never returns more CPUs than the node has.
    """
    if not node_cpus:
        return ()
    wanted = min(len(node_cpus), max(1, math.ceil(cpu - 1e-9)))
    load = dict.fromkeys(node_cpus, 0)
    for cpus in assigned.values():
        for cpu_id in cpus:
            if cpu_id in load:
                load[cpu_id] += 1
    chosen = sorted(node_cpus, key=lambda cpu_id: (load[cpu_id], cpu_id))[:wanted]
    return tuple(sorted(chosen))
