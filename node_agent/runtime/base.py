"""The contract every task runtime of the node agent fulfils.

A *runtime* starts, observes, suspends, resizes and stops the tasks of one node agent.  Two
implementations exist: ``process`` (a subprocess in its own cgroup) and ``docker`` (one Docker
container per task).  The agent only ever talks to this interface, so preemption (suspend, shrink)
and throttling work the same whatever runs the task.

Contracts shared by all runtimes:

* A task is named on its node by its ``task_key``; starting a key that already exists raises
  :class:`TaskExistsError` and changes nothing.  Unknown keys raise :class:`UnknownTaskError`.
* Tasks outlive the agent: a runtime created again with the same ``node_id`` and ``state_dir``
  finds the tasks started before (running or exited) through :meth:`TaskRuntime.observe` and
  manages them as its own.  It never starts a task twice and never loses one.
* :meth:`TaskRuntime.suspend` returns only once the task is frozen (the cgroup freezer is
  asynchronous); :meth:`TaskRuntime.resume` returns once it runs again.
* A task's output (stdout and stderr, interleaved) stays readable through
  :meth:`TaskRuntime.logs` until :meth:`TaskRuntime.forget` is called, also after it exited and
  after :meth:`TaskRuntime.cleanup` released its container or cgroup.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol


def scope_name(cluster_id: str, node_id: str) -> str:
    """The name under which a runtime keeps one node's tasks (cgroup directory, container name
    prefix): ``<cluster_id>_<node_id>``.  Cluster ids have no ``_``, so the split is unique and
    two clusters never share a name, even with the same node ids on one machine."""
    return f"{cluster_id}_{node_id}"


class RuntimeError_(Exception):  # noqa: N801, N818 - the runtime's own RuntimeError
    """Base class of the errors a runtime raises for a request it cannot carry out."""


class TaskExistsError(RuntimeError_):
    """A task with this key is already known to the runtime."""


class UnknownTaskError(RuntimeError_):
    """No task with this key is known to the runtime."""


class RuntimeUnavailableError(RuntimeError_):
    """The runtime's backing service (Docker Engine, cgroup filesystem) cannot be used."""


@dataclass(frozen=True)
class ResourceLimits:
    """What a task may use on its node.

    ``cpu`` is in cores (0.5 = half a core) and becomes a CFS quota of ``cpu * period``;
    ``cpuset`` lists the host CPU ids the task may run on (empty = all of the node's CPUs);
    ``memory_mb`` is a hard memory limit in MiB.
    """

    cpu: float
    memory_mb: int
    cpuset: tuple[int, ...] = ()


class RunState(enum.Enum):
    """What the runtime observes of a task (never what anybody wants of it)."""

    RUNNING = "running"
    SUSPENDED = "suspended"
    EXITED = "exited"


@dataclass(frozen=True)
class TaskLaunch:
    """Everything needed to start one task attempt on this node."""

    task_key: str
    job_id: str
    task_id: str
    attempt: int
    allocation_id: str
    argv: tuple[str, ...]
    limits: ResourceLimits
    image: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    # A speculative task (ROSE): it runs in the runtime's lower-weight class (the process
    # runtime's speculative cgroup subtree, a Docker container's low CPU shares) until promoted.
    speculative: bool = False


@dataclass(frozen=True)
class RunObservation:
    """One task as the runtime sees it now.

    ``exit_code`` is set once ``state`` is EXITED: the process's exit status, or 128+N when it was
    ended by signal N.  ``started_at``/``finished_at`` are wall-clock seconds (``time.time()``).
    """

    task_key: str
    job_id: str
    task_id: str
    attempt: int
    allocation_id: str
    state: RunState
    limits: ResourceLimits
    exit_code: int | None = None
    started_at: float = 0.0
    finished_at: float | None = None
    speculative: bool = False  # launched speculative and not promoted since


@dataclass(frozen=True)
class TaskUsage:
    """Cumulative CPU time and current memory of a task, as its cgroup or container reports them."""

    cpu_seconds: float
    memory_bytes: int


class TaskRuntime(Protocol):
    """Starts and controls the tasks of one node agent.  See the module docstring for contracts."""

    name: str

    def describe(self) -> str:
        """One line for the agent's start-up log: what this runtime can do here and any fallback."""
        ...

    def start(self, launch: TaskLaunch) -> None:
        """Start the task; returns once it runs.  Raises TaskExistsError, RuntimeError_."""
        ...

    def observe(self) -> Sequence[RunObservation]:
        """Every task this runtime knows on this node, including ones adopted after a restart."""
        ...

    def stop(self, task_key: str, grace_seconds: float = 5.0) -> None:
        """End the task: SIGTERM (resuming it first if suspended), SIGKILL after the grace period.

        Returns once the task has exited.  Stopping an exited task does nothing."""
        ...

    def suspend(self, task_key: str) -> None:
        """Freeze every process of the task; returns once the freeze has completed."""
        ...

    def resume(self, task_key: str) -> None:
        """Thaw a suspended task; resuming a running task does nothing."""
        ...

    def resize(self, task_key: str, limits: ResourceLimits) -> None:
        """Change a live task's CPU quota, cpuset and memory limit in place."""
        ...

    def promote(self, task_key: str, allocation_id: str, limits: ResourceLimits) -> None:
        """Make a live speculative task a regular one of ``allocation_id``, at ``limits`` (an
        upgrade, ROSE Alg. 5 line 11), out of the speculative class; it keeps running, and a
        runtime created again observes it so."""
        ...

    def usage(self, task_key: str) -> TaskUsage:
        """Current usage of a live task."""
        ...

    def logs(self, task_key: str) -> bytes:
        """The task's output so far (stdout and stderr interleaved)."""
        ...

    def pressure_dir(self, task_key: str) -> Path | None:
        """The cgroup v2 directory whose ``*.pressure`` files describe this task, or ``None``
        where there is none (cgroup v1, no cgroups, an unknown or exited task)."""
        ...

    def service_host(self, task_key: str) -> str | None:
        """The address a service task listens on, for its probe (``None``: not known now)."""
        ...

    def swap_bytes(self, task_key: str) -> int | None:
        """The task's memory in swap now, or ``None`` where the node cannot tell (no swap
        accounting, no cgroups, an unknown or exited task)."""
        ...

    def cleanup(self, task_key: str) -> None:
        """Release an exited task's cgroup or container; its logs and exit status stay."""
        ...

    def forget(self, task_key: str) -> None:
        """Drop every trace of an exited task, logs included."""
        ...

    def purge(self, grace_seconds: float = 1.0) -> None:
        """Stop every task of this node and remove all its cgroups, containers and state."""
        ...

    def close(self) -> None:
        """Release client connections; running tasks keep running."""
        ...
