"""The node protocol: what a node agent tells the resource manager, and what the RM tells it.

One set of types for the three parties that speak it: the live node agent, the RM's core, and
the simulator (which drives the same RM core and plays the nodes).  Pure dataclasses, free of
protobuf, so the simulator can import them; their wire form is :mod:`plumbing.node_wire`.

**Reports, node -> RM.**  A :class:`TaskReport` is one task attempt's (or job master's) state
as the node sees it.  A node sends them two ways:

* as task events (``ReportTaskEvents``), as soon as its monitor sees a state change; an event
  the RM did not acknowledge is sent again with the next batch;
* as the live tasks of every heartbeat (``HeartbeatRequest.live_tasks``), made afresh each time:
  what runs there now, and at which limits.  The RM reconciles each heartbeat against them.

**Commands, RM -> node.**  A :data:`NodeCommand` answers a heartbeat
(``HeartbeatResponse.commands``): what the node must do so that what runs there matches what
the RM wants.  The RM derives commands from the node's reports each heartbeat, so a command is
re-sent with every heartbeat until the node's reports show it done (the task stopped, the
limits at the goal, the master running).  A node must therefore treat a command as idempotent:
one already being carried out is not started twice, and one already done has no effect.
"""

from __future__ import annotations

from dataclasses import dataclass

from policies.scheduling.lifecycle import TaskState
from policies.scheduling.resources import Resources

__all__ = [
    "LaunchMaster",
    "NodeCommand",
    "ResizeAllocation",
    "ResumeAllocation",
    "SprintAllocation",
    "StopAllocation",
    "SuspendAllocation",
    "TaskReport",
]


@dataclass(frozen=True)
class TaskReport:
    """A task attempt's state as a node agent reports it (event or heartbeat).  ``job_master``
    marks the job master's own process, launched by the RM, which is no task of any phase."""

    job_id: str
    task_id: str
    attempt: int
    allocation_id: str
    state: TaskState
    exit_code: int = 0  # meaningful once final; 128+N when ended by signal N
    message: str = ""
    timestamp: float = 0.0  # when this state was observed (the finish time once final)
    start_time: float = 0.0  # when the attempt started on its node
    job_master: bool = False
    limits: Resources | None = None  # the limits its task runs at, when the node says
    swapping: bool = False  # its memory is going to swap now
    swap_bytes: int = 0  # its memory in swap now, where the node can tell
    speculative: bool = False  # placed by its job master without an allocation (ROSE)
    sprint_factor: float = 1.0  # DiAS: its CPU is this times its limits now (1: no sprint)


@dataclass(frozen=True)
class LaunchMaster:
    """Start the job's master process (attempt ``attempt``) in its container.  Re-sent while
    the job is starting and the node shows no process in that container.  On the wire the RM
    adds where it listens and, with TLS, the master's certificate and key
    (:class:`plumbing.node_wire.MasterContact`)."""

    job_id: str
    allocation_id: str
    resources: Resources
    attempt: int


@dataclass(frozen=True)
class StopAllocation:
    """Stop the task (or job master) running in the container.  ``preempted``: the scheduler
    chose this kill (the container's goal is STOP, BIG-C's kill step), so the attempt is lost
    work retried without using up a retry; otherwise the task should not run at all (its job
    ended, its container is not its own, a newer master replaced it).  Set by the RM's core, the
    one place that decides; the node and the simulator read it, never ``reason``."""

    job_id: str
    allocation_id: str
    reason: str
    preempted: bool = False


@dataclass(frozen=True)
class SuspendAllocation:
    """Freeze the task running in the container; then, with ``limits`` (an immediate
    preemption's minimal footprint), cut its CPU and memory to them so its pages go to swap."""

    job_id: str
    allocation_id: str
    reason: str
    limits: Resources | None = None


@dataclass(frozen=True)
class ResumeAllocation:
    """Restore the container's limits (``limits``; None: its grant), then thaw its task."""

    job_id: str
    allocation_id: str
    limits: Resources | None = None


@dataclass(frozen=True)
class ResizeAllocation:
    """Set the limits the container's task runs at (never above its grant).  With ``step`` (a
    graceful preemption) the node lowers them by at most ``step`` per round; with
    ``freeze_on_swap`` it freezes the task once it swaps and goes no lower."""

    job_id: str
    allocation_id: str
    limits: Resources
    step: Resources | None = None
    freeze_on_swap: bool = False


@dataclass(frozen=True)
class SprintAllocation:
    """DiAS sprinting: run the container's task at ``factor`` times its CPU (1: end the
    sprint), on idle cores only (the node caps it; docs/approximation.md)."""

    job_id: str
    allocation_id: str
    factor: float


NodeCommand = (
    LaunchMaster
    | StopAllocation
    | SuspendAllocation
    | ResumeAllocation
    | ResizeAllocation
    | SprintAllocation
)
"""Every command the RM sends a node, answering a heartbeat."""
