"""Builders for driving a ResourceManagerCore in tests: nodes, running jobs, asks, commands.

:class:`Driver` calls the core the way the gRPC layer does: every call is one unit of work
(committed, or rolled back if it raises), followed by a scheduling pass of its own when the call
made one due (as the service's shell does a few milliseconds later), and a plain number given as
``now`` is a time on both clocks (``Now(t, t)``), so tests read like before while the core sees
both.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from plumbing.node_protocol import NodeCommand, TaskReport
from policies.scheduling.asks import PhaseAsk
from policies.scheduling.framework import Plan
from policies.scheduling.jobspec import JobSpec
from policies.scheduling.lifecycle import JobState
from resource_manager.core import CoreSettings, ResourceManagerCore
from resource_manager.records import Now
from resource_manager.shell import PassDue, RMShell
from resource_manager.sqlite_store import SqliteStore as Store
from resource_manager.tables import Tables
from tests.builders import job_spec, phase_doc, res


def at(t: float) -> Now:
    return Now(wall=t, monotonic=t)


class Driver:
    """A ResourceManagerCore whose every method call is one unit of work, run through the RM's
    one shell (:class:`~resource_manager.shell.RMShell`), followed by the passes it makes due."""

    def __init__(self, core: ResourceManagerCore) -> None:
        self.core = core
        self.shell = RMShell(core)
        self.plans: list[Plan] = []  # every plan applied, in order (the units' effects)

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self.core, name)
        if not callable(attribute):
            return attribute
        return self._unit(attribute)

    def _unit(self, method: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            now = kwargs.get("now")
            if isinstance(now, int | float):
                kwargs["now"] = at(float(now))
            if len(args) == 1 and isinstance(args[0], int | float) and method.__name__ == "tick":
                args = (at(float(args[0])),)
            when = kwargs.get("now") or (args[0] if args and isinstance(args[0], Now) else at(0.0))
            outcome = self.shell.run(lambda core, now: method(*args, **kwargs), when)
            effects = outcome.effects
            self.plans.extend(effects.plans)
            while effects.pass_due is not PassDue.NO:  # (one stopped at its limit: at once)
                effects = self.shell.schedule(when).effects
                self.plans.extend(effects.plans)
            return outcome.result

        return call


def new_core(
    path: Path | str = ":memory:", *, node_timeout: float = 10.0, **settings: Any
) -> Driver:
    return Driver(
        ResourceManagerCore(
            Tables(Store(path)), CoreSettings(node_timeout=node_timeout, **settings)
        )
    )


def add_node(
    core: Driver,
    node_id: str = "n1",
    cpu: float = 4.0,
    memory_mb: int = 4096,
    *,
    live: Sequence[TaskReport] = (),
    now: float = 0.0,
    instance_id: str = "",
) -> None:
    core.register_node(
        node_id,
        f"{node_id}:7000",
        "process",
        res(cpu, memory_mb),
        live,
        now=now,
        instance_id=instance_id,
    )


def commands(
    core: Driver, node_id: str, *, now: float = 0.0, live: Sequence[TaskReport] = ()
) -> list[NodeCommand]:
    """What the node's next heartbeat (reporting ``live``) hands it."""
    reregister, sent = core.heartbeat(node_id, res(0.0, 0), list(live), now=now)
    assert not reregister
    return list(sent)


def spec_of(
    tasks: int = 4, *, cpu: float = 1.0, memory_mb: int = 256, priority: int = 0
) -> JobSpec:
    """One phase ``p`` of ``tasks`` tasks."""
    return job_spec(phase_doc("p", tasks, cpu=cpu, memory_mb=memory_mb), priority=priority)


def running_job(core: Driver, spec: JobSpec | None = None, *, now: float = 1.0) -> str:
    """Submit in client mode (no master container) and register its master: RUNNING."""
    job = core.submit(spec or spec_of(), client_mode=True, now=now)
    core.register_master(job.job_id, attempt=1, now=now)
    assert core.job(job.job_id).state is JobState.RUNNING
    return str(job.job_id)


def want(count: int, *, phase: str = "p", cpu: float = 1.0, memory_mb: int = 256) -> PhaseAsk:
    return PhaseAsk(phase, count, res(cpu, memory_mb))
