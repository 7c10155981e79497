"""The machine's utilisation per admission resource (ROSE Sec. 6.1), read cheaply and often.

The speculative queue asks before every launch whether CPU, memory and disk are under their
thresholds.  CPU and disk are rates, so they are measured between two readings at least
:data:`MIN_INTERVAL_S` apart (a pass that comes sooner reuses the last figures rather than
measure a few milliseconds of noise); memory is read each time.
"""

from __future__ import annotations

from collections.abc import Sequence

from node_agent.metrics.host import (
    CpuTimes,
    DiskCounters,
    cpu_utilization,
    disk_utilizations,
    read_cpu,
    read_disks,
    read_memory,
)
from node_agent.metrics.share import share_of
from policies.scheduling.resources import Resources

MIN_INTERVAL_S = 0.2
DISK_BANDWIDTH_BYTES_PER_S = 200e6  # only the busy share is used; the bandwidth is a formality


class MachineLoad:
    """Utilisation fractions in ``resources``' order (``cpu``, ``memory``, ``disk``; another
    name reads 0).  Not thread-safe: the agent's monitor pass is its one caller."""

    def __init__(self, resources: Sequence[str]) -> None:
        self._resources = tuple(resources)
        self._at = -1.0
        self._cpu: CpuTimes | None = None
        self._disks: dict[str, DiskCounters] = {}
        self._figures = {"cpu": 0.0, "disk": 0.0}

    def read(self, now: float, own: tuple[Resources, Resources] | None = None) -> tuple[float, ...]:
        """The figures at ``now`` (monotonic seconds).  ``own``: (what the node's tasks use,
        what it offers) for a node judging its own share of the host (``--load-scope own``,
        :mod:`node_agent.metrics.share`): CPU and memory are then that share, disk the host's."""
        if self._cpu is None or now - self._at >= MIN_INTERVAL_S:
            cpu, disks = read_cpu(), read_disks()
            if self._cpu is not None:
                self._figures["cpu"] = cpu_utilization(self._cpu, cpu)
                _, busy = disk_utilizations(
                    self._disks, disks, now - self._at, DISK_BANDWIDTH_BYTES_PER_S
                )
                self._figures["disk"] = busy
            self._at, self._cpu, self._disks = now, cpu, disks
        memory = read_memory()
        figures = dict(self._figures, memory=1.0 - memory.available_bytes / memory.total_bytes)
        if own is not None:
            figures["cpu"], figures["memory"] = share_of(*own)
        return tuple(min(max(figures.get(name, 0.0), 0.0), 1.0) for name in self._resources)
