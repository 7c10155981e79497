"""What the resource manager remembers about jobs, tasks, allocations and nodes.

Plain dataclasses, free of protobuf: the gRPC layer converts at the edge (convert.py).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from policies.scheduling.jobspec import JobSpec
from policies.scheduling.lifecycle import JobState, TaskState
from policies.scheduling.progress import PhaseProgress
from policies.scheduling.resources import Resources

# The job master runs in an allocation of its own, asked for under this phase name.
MASTER_PHASE = "__master__"
MASTER_TASK_ID = "master"

__all__ = [
    "MASTER_PHASE",
    "MASTER_TASK_ID",
    "AllocationRecord",
    "JobRecord",
    "NodeRecord",
    "NodeState",
    "PhaseProgress",
    "TaskObservation",
    "TaskRecord",
]


@dataclass
class JobRecord:
    """A job: observed ``state`` plus the user's wish (``kill_requested``), kept apart."""

    job_id: str
    seq: int
    spec: JobSpec
    state: JobState
    submit_time: float
    client_mode: bool = False
    kill_requested: bool = False
    start_time: float = 0.0
    finish_time: float = 0.0
    message: str = ""
    progress: tuple[PhaseProgress, ...] = ()
    master_node: str = ""
    master_allocation: str = ""


@dataclass
class TaskRecord:
    """One task attempt as node agents reported it; ``seq`` orders the changes for job masters."""

    job_id: str
    task_id: str
    attempt: int
    phase: str
    state: TaskState
    node_id: str
    allocation_id: str
    seq: int
    exit_code: int = 0
    start_time: float = 0.0
    finish_time: float = 0.0
    message: str = ""

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.job_id, self.task_id, self.attempt)


@dataclass(frozen=True)
class AllocationRecord:
    """A container: ``resources`` of ``node_id`` granted to ``phase`` of ``job_id``.

    ``delivered`` turns true once the job master has been told of it, so a grant made just
    before an RM restart is still handed out after it."""

    allocation_id: str
    job_id: str
    phase: str
    node_id: str
    resources: Resources
    granted_time: float
    delivered: bool = False


class NodeState(enum.Enum):
    READY = "ready"
    LOST = "lost"


@dataclass
class NodeRecord:
    """A node agent as last heard from; kept in memory only (nodes re-register after a restart)."""

    node_id: str
    address: str
    runtime: str
    capacity: Resources
    last_heartbeat: float
    state: NodeState = NodeState.READY
    used: Resources = field(default_factory=Resources)
    running_tasks: int = 0


@dataclass(frozen=True)
class TaskObservation:
    """A task attempt's state as a node agent reports it (event or heartbeat)."""

    job_id: str
    task_id: str
    attempt: int
    allocation_id: str
    state: TaskState
    exit_code: int = 0
    message: str = ""
    timestamp: float = 0.0
    start_time: float = 0.0
