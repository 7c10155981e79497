"""Builders for driving a ResourceManagerCore in tests: nodes, running jobs, asks, commands."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from policies.scheduling.jobspec import JobSpec
from policies.scheduling.lifecycle import JobState
from resource_manager.core import NodeCommand, PhaseAsk, ResourceManagerCore
from resource_manager.records import TaskObservation
from resource_manager.store import Store
from tests.builders import job_spec, phase_doc, res


def new_core(path: Path | str = ":memory:", *, node_timeout: float = 10.0) -> ResourceManagerCore:
    return ResourceManagerCore(Store(path), node_timeout=node_timeout)


def add_node(
    core: ResourceManagerCore,
    node_id: str = "n1",
    cpu: float = 4.0,
    memory_mb: int = 4096,
    *,
    live: Sequence[TaskObservation] = (),
    now: float = 0.0,
) -> None:
    core.register_node(node_id, f"{node_id}:7000", "process", res(cpu, memory_mb), live, now=now)


def commands(core: ResourceManagerCore, node_id: str, *, now: float = 0.0) -> list[NodeCommand]:
    """What the node's next heartbeat (reporting nothing live) hands it."""
    reregister, sent = core.heartbeat(node_id, res(0.0, 0), [], now=now)
    assert not reregister
    return sent


def spec_of(
    tasks: int = 4, *, cpu: float = 1.0, memory_mb: int = 256, priority: int = 0
) -> JobSpec:
    """One phase ``p`` of ``tasks`` tasks."""
    return job_spec(phase_doc("p", tasks, cpu=cpu, memory_mb=memory_mb), priority=priority)


def running_job(core: ResourceManagerCore, spec: JobSpec | None = None, *, now: float = 1.0) -> str:
    """Submit in client mode (no master container) and register its master: RUNNING."""
    job = core.submit(spec or spec_of(), client_mode=True, now=now)
    core.register_master(job.job_id, now=now)
    assert job.state is JobState.RUNNING
    return job.job_id


def want(count: int, *, phase: str = "p", cpu: float = 1.0, memory_mb: int = 256) -> PhaseAsk:
    return PhaseAsk(phase, count, res(cpu, memory_mb))
