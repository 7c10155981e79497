"""Whose load a node reports: the whole host's, or its own share of it (``--load-scope``).

A node agent alone on its machine measures the machine: everything that runs there is its
concern (the paper's setting).  Several agents on one host (a local cluster) each see the same
host; judged by it, a host that other work keeps busy makes every node look overloaded, and no
node ever becomes a candidate for speculative work.  Such a node judges its own share instead:

* ``cpu_ut``: the CPU its tasks (job masters included) used over the last monitor interval, as a
  fraction of the cores it offers (``--cpus``);
* ``mem_ut``: its tasks' memory now, as a fraction of the memory it offers (``--memory-mb``);
* ``load_avg_1``: the run queue is the host's and cannot be divided among nodes; its own share
  is taken as the cores its tasks kept busy (a lower bound of what they add to the run queue);
* disk and network figures, and the pressure (PSI), stay the host's: the devices are shared,
  and nothing attributes their use to a node.

The speculative queue's admission thresholds (Sec. 6.1) judge the same share for CPU and
memory.  ``auto`` (the agent's default) is ``own`` when the node offers less CPU or memory than
the host has, else ``host``; ``sluice local up`` gives its agents ``own``, since they share the
host even when each offers all of it.
"""

from __future__ import annotations

import dataclasses
from enum import StrEnum

from node_agent.metrics.host import HostSample
from policies.scheduling.resources import Resources


class LoadScope(StrEnum):
    HOST = "host"
    OWN = "own"
    AUTO = "auto"


def resolve_scope(
    requested: LoadScope, capacity: Resources, host_cpus: int, host_memory_mb: int
) -> LoadScope:
    """``auto`` made definite: ``own`` for a node offering less than the host has."""
    if requested is not LoadScope.AUTO:
        return requested
    if capacity.cpu < host_cpus or capacity.memory_mb < host_memory_mb:
        return LoadScope.OWN
    return LoadScope.HOST


def share_of(used: Resources, capacity: Resources) -> tuple[float, float]:
    """(CPU, memory) utilisation of the node's own tasks, fractions of what it offers, in
    [0, 1]."""
    cpu = used.cpu / capacity.cpu if capacity.cpu > 0 else 0.0
    memory = used.memory_mb / capacity.memory_mb if capacity.memory_mb > 0 else 0.0
    return min(max(cpu, 0.0), 1.0), min(max(memory, 0.0), 1.0)


def own_sample(sample: HostSample, used: Resources, capacity: Resources) -> HostSample:
    """``sample`` with CPU, memory and run-queue figures of the node's own share (see the module
    docstring); the host's disk, network and pressure figures are kept."""
    cpu, memory = share_of(used, capacity)
    return dataclasses.replace(
        sample,
        cpu_utilization=cpu,
        memory_utilization=memory,
        load_average_1m=max(used.cpu, 0.0),
    )
