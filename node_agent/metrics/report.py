"""Assemble one ``NodeMetrics`` message (proto/sluice_pb/metrics.proto, docs/metrics.md) from
what the agent measured.  Pure: every figure comes in as an argument.

Task counts: suspended tasks are not running.  Every task is regular (job masters included)
until speculative placement marks launches as speculative, and the agent has no queue of its
own yet, so the waiting counts stay 0 until then.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from node_agent.metrics.energy import EnergyReading
from node_agent.metrics.host import HostSample
from node_agent.metrics.pressure import PressureStall
from sluice_pb import metrics_pb2 as mpb

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class TaskFigures:
    """One live task as the agent sees it this interval."""

    task_key: str
    job_id: str
    task_id: str
    speculative: bool
    suspended: bool
    cpu_cores: float
    memory_bytes: int
    cpu_limit_cores: float
    memory_limit_bytes: int
    pressure: Mapping[str, PressureStall] | None = None  # cgroup v2 only
    cpi: float | None = None  # None: no PMU, or the task's cgroup is not countable
    mpki: float | None = None


@dataclass(frozen=True)
class Counters:
    """Machine-wide hardware counters over the interval; ``None`` when unavailable (``reason``
    then says why)."""

    cpi: float | None = None
    mpki: float | None = None
    reason: str = ""


def pressure_to_pb(pressure: Mapping[str, PressureStall]) -> mpb.Pressure:
    """The PSI figures as a ``Pressure`` message; resources the kernel lacks stay unset."""
    message = mpb.Pressure()
    for resource in ("cpu", "memory", "io"):
        stall = pressure.get(resource)
        if stall is None:
            continue
        target = getattr(message, resource)
        target.some_avg10 = stall.some_avg10
        target.some_avg60 = stall.some_avg60
        target.some_avg300 = stall.some_avg300
        target.some_total_us = stall.some_total_us
        if stall.full_avg10 is not None:
            target.full_avg10 = stall.full_avg10
        if stall.full_avg60 is not None:
            target.full_avg60 = stall.full_avg60
        if stall.full_avg300 is not None:
            target.full_avg300 = stall.full_avg300
        if stall.full_total_us is not None:
            target.full_total_us = stall.full_total_us
    return message


def build_node_metrics(
    *,
    node_id: str,
    timestamp: float,
    sequence: int,
    interval_s: float,
    cpu_capacity: float,
    memory_capacity_bytes: int,
    machine: HostSample,
    counters: Counters,
    tasks: Sequence[TaskFigures],
    dropped_samples: int,
    energy: EnergyReading | None = None,
) -> mpb.NodeMetrics:
    """One sample of this machine, ready to serialise."""
    message = mpb.NodeMetrics(
        schema_version=SCHEMA_VERSION,
        node_id=node_id,
        timestamp=timestamp,
        sequence=sequence,
        interval_s=interval_s,
        cpu_capacity=cpu_capacity,
        memory_capacity_bytes=memory_capacity_bytes,
        cpu_utilization=machine.cpu_utilization,
        memory_utilization=machine.memory_utilization,
        load_average_1m=machine.load_average_1m,
        disk_throughput_utilization=machine.disk_throughput_utilization,
        disk_busy_utilization=machine.disk_busy_utilization,
        disk_usage=machine.disk_usage,
        net_receive_utilization=machine.net_receive_utilization,
        net_transmit_utilization=machine.net_transmit_utilization,
        regular_running=sum(1 for t in tasks if not t.speculative and not t.suspended),
        speculative_running=sum(1 for t in tasks if t.speculative and not t.suspended),
        pressure=pressure_to_pb(machine.pressure),
        counters_unavailable=counters.reason,
        dropped_samples=dropped_samples,
    )
    if energy is not None:
        message.energy_j = energy.energy_j
        message.power_w = energy.power_w
        message.energy_source = energy.source
    if counters.cpi is not None:
        message.cpi = counters.cpi
    if counters.mpki is not None:
        message.mpki = counters.mpki
    for task in tasks:
        entry = message.tasks.add(
            task_key=task.task_key,
            job_id=task.job_id,
            task_id=task.task_id,
            speculative=task.speculative,
            suspended=task.suspended,
            cpu_cores=task.cpu_cores,
            memory_bytes=task.memory_bytes,
            cpu_limit_cores=task.cpu_limit_cores,
            memory_limit_bytes=task.memory_limit_bytes,
        )
        if task.pressure:
            entry.pressure.CopyFrom(pressure_to_pb(task.pressure))
        if task.cpi is not None:
            entry.cpi = task.cpi
        if task.mpki is not None:
            entry.mpki = task.mpki
    return message
