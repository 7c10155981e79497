"""What the resource manager remembers about jobs, tasks, allocations and nodes.

Immutable dataclasses, free of protobuf: the gRPC layer converts at the edge (convert.py), and
every change is a new record put into :class:`resource_manager.tables.Tables`, which can undo it.
Desired state (``kill_requested``, an allocation's ``goal``) is kept apart from observed state
(``state``, an allocation's ``shown``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TypeVar

from policies.identity_enum import IdentityEnum
from policies.scheduling.containers import Goal, Shown, holds, settled_holds
from policies.scheduling.framework import AllocationKind
from policies.scheduling.jobspec import JobSpec
from policies.scheduling.lifecycle import JobState, TaskState
from policies.scheduling.progress import PhaseProgress
from policies.scheduling.resources import Resources

__all__ = [
    "OPERATOR",
    "AllocationKind",
    "AllocationRecord",
    "Goal",
    "JobRecord",
    "NodeRecord",
    "NodeState",
    "Now",
    "PhaseProgress",
    "Shown",
    "TaskKey",
    "TaskRecord",
    "evolve",
]

R = TypeVar("R")

OPERATOR = "operator"
"""``AllocationRecord.held_by`` of a container an operator suspended or resized."""

TaskKey = tuple[str, str, int]
"""(job id, task id, attempt): one task attempt."""


@dataclass(frozen=True)
class Now:
    """The time of one request: ``wall`` (epoch seconds) is what records show people;
    ``monotonic`` measures intervals (node liveness), so a wall-clock step never loses a node."""

    wall: float
    monotonic: float


@dataclass(frozen=True)
class Execution:
    """Which execution of a job this is, and what earlier ones cost.  Under ``--dispatch
    preemptive`` an evicted job is executed again from the start (DiAS Sec. 3.2-3.3, the
    paper's baseline kills it): ``number`` counts executions (1 the first), ``dispatched_at``
    is when the current one entered execution (wall; 0 while it waits in its buffer),
    ``evictions`` how many were evicted, and ``wasted_s`` the time they had run, lost.
    ``sprinted_s`` is what it sprinted while in execution, added each time it left execution
    (evicted, its job master lost, or ended), so a finished job keeps it."""

    number: int = 1
    dispatched_at: float = 0.0
    evictions: int = 0
    wasted_s: float = 0.0
    sprinted_s: float = 0.0  # how long the executions that left execution sprinted (DiAS)


@dataclass(frozen=True)
class Approximation:
    """How a job is approximated (DiAS Sec. 3.1): its droppable phases run at ``drop_ratio``,
    leaving ``dropped_tasks`` out, and its result is expected ``expected_error`` off (the
    cluster's accuracy curve at the share actually dropped)."""

    drop_ratio: float = 0.0
    dropped_tasks: int = 0
    expected_error: float = 0.0

    @property
    def approximate(self) -> bool:
        return self.dropped_tasks > 0


@dataclass(frozen=True)
class JobRecord:
    """A job.  ``master_attempt`` counts the job masters launched for it (0 before the first;
    client-mode jobs have 1, the submitter's).  ``master_allocation`` is the current one's.
    ``owner`` may kill it and drive it in client mode (an admin may too)."""

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
    master_attempt: int = 0
    idempotency_key: str = ""
    owner: str = ""  # who submitted it (the name in their certificate); empty without TLS
    execution: Execution = Execution()
    approximation: Approximation = Approximation()


@dataclass(frozen=True)
class PreemptionStep:
    """One step of a preemption as a task's node showed it (``sluice job ID``): ``action`` is
    suspended, shrunk, frozen (graceful, on swapping), resumed or killed; ``limits`` what the
    task runs at after it; ``work_lost_s`` how long a killed attempt had run."""

    time: float
    action: str
    limits: Resources | None = None
    reason: str = ""
    work_lost_s: float = 0.0


@dataclass(frozen=True)
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
    preempted: bool = False  # ended by a kill the scheduler chose (it uses up no retry)
    preemptions: tuple[PreemptionStep, ...] = ()  # what preemption did to it, oldest first
    execution: int = 1  # the job's execution that launched it (Execution.number)

    @property
    def key(self) -> TaskKey:
        return (self.job_id, self.task_id, self.attempt)


@dataclass(frozen=True)
class AllocationRecord:
    """A container: ``resources`` of ``node_id`` granted to ``job_id``; ``phase`` names the
    phase of a TASK container and is empty for a JOB_MASTER one.

    ``delivered`` turns true once the job master has been told of it, so a grant made just
    before an RM restart is still handed out after it.

    ``resources`` is the grant.  ``goal`` and ``limits`` are what the RM wants of it (run at
    ``limits``, None meaning the grant; suspend; stop), ``goal_reason`` why; ``shown`` and
    ``shown_limits`` what its node last reported.  ``held_by`` is :data:`OPERATOR` while an
    operator's suspension or resize holds it (``sluice task``): the scheduler's automatic
    resumption and its queue's ``max_suspended_s`` leave it alone until the operator resumes
    it; empty while it runs whole or the scheduler's preemption holds it.  See
    :mod:`policies.scheduling.containers` for the lifecycle and for what it :attr:`holds` of
    its node meanwhile."""

    allocation_id: str
    job_id: str
    kind: AllocationKind
    phase: str
    node_id: str
    resources: Resources
    granted_time: float
    delivered: bool = False
    goal: Goal = Goal.RUN
    limits: Resources | None = None
    goal_reason: str = ""
    shown: Shown = Shown.IDLE
    shown_limits: Resources | None = None
    preempted_at: float = 0.0  # wall time its goal left RUN at its grant; 0 while whole
    swapping: bool = False  # its node last showed its task swapping (memory only)
    kept_for: str = ""  # the downstream phase its job keeps it for (slot reservation)
    kept_until: float = 0.0  # wall time that reservation lapses; 0: no deadline yet
    held_by: str = ""  # OPERATOR: an operator suspended or resized it; only they resume it

    @property
    def is_master(self) -> bool:
        return self.kind is AllocationKind.JOB_MASTER

    @property
    def current_limits(self) -> Resources:
        """The limits its task should run at: the grant unless shrunk."""
        return self.resources if self.limits is None else self.limits

    @property
    def holds(self) -> Resources:
        """What it holds of its node now: no other container may be given this."""
        return holds(self.resources, self.goal, self.limits, self.shown, self.shown_limits)

    @property
    def settles_at(self) -> Resources:
        """What it will hold once its node has carried out its goal (a shrink its node froze on
        swapping goes no lower: what it holds)."""
        if self.goal is Goal.SHRINK and self.shown is Shown.SUSPENDED:
            return self.holds
        return settled_holds(self.resources, self.goal, self.limits)

    @property
    def free_for_others(self) -> Resources:
        """What of its grant it does not hold now (a suspended task's CPU, a shrunk task's
        difference), once its node has shown the change."""
        return self.resources - self.holds


class NodeState(IdentityEnum):
    READY = "ready"
    LOST = "lost"


@dataclass(frozen=True)
class NodeRecord:
    """A node agent as last heard from; kept in memory only (nodes re-register after a restart).

    ``instance_id`` is the agent's identity (kept in its state directory), so a second agent
    claiming the same node id is told apart from the same agent restarted.  ``last_heartbeat``
    is wall time, for people; ``last_seen`` is monotonic, for liveness."""

    node_id: str
    address: str
    runtime: str
    capacity: Resources
    instance_id: str
    last_heartbeat: float
    last_seen: float
    state: NodeState = NodeState.READY
    used: Resources = field(default_factory=Resources)
    running_tasks: int = 0
    has_swap: bool = False  # memory can be taken from a live task there


def evolve(record: R, **changes: Any) -> R:
    """``dataclasses.replace`` for these records, several times cheaper: they are frozen
    dataclasses without ``__post_init__`` or slots, so a copy of the instance's fields with some
    replaced is a valid record.  Used where every heartbeat or task event builds one.  Raises
    TypeError for a name that is not a field, as ``replace`` does."""
    fields: dict[str, Any] = record.__dataclass_fields__  # type: ignore[attr-defined]
    for name in changes:  # (a loop over one to three names beats building a set difference)
        if name not in fields:
            raise TypeError(f"{type(record).__name__} has no field {name!r}")
    new: R = object.__new__(type(record))
    values = new.__dict__
    values.update(record.__dict__)
    values.update(changes)
    return new


@dataclass(frozen=True)
class KeptSlot:
    """A job master's report that one of its task containers is kept for ``phase`` (its slot
    reservation) until ``until`` (wall time; 0: no deadline yet), or no longer kept (empty
    ``phase``, and why: ``ended``, see ``job_master.reservations.KeptEnd``)."""

    allocation_id: str
    phase: str
    until: float = 0.0
    ended: str = ""


@dataclass(frozen=True)
class SpeculativeNote:
    """One speculative attempt's outcome as a job master reported it in ``Allocate`` (ROSE:
    placed, queued, running, evicted, ...): an entry of the RM's speculative log."""

    task_id: str
    attempt: int
    node_id: str
    outcome: str


@dataclass(frozen=True)
class MasterReport:
    """What a job master decided and said in one ``Allocate`` that a decision trace records
    (:mod:`resource_manager.decision_trace`): its kept containers' changes, the tasks it gave
    up on since its last call (``dropped``: phase, how many more; DiAS) and its speculative
    attempts' outcomes.  The core notes one per call that says any of these."""

    job_id: str
    kept: tuple[KeptSlot, ...] = ()
    dropped: tuple[tuple[str, int], ...] = ()
    speculative: tuple[SpeculativeNote, ...] = ()

    @property
    def says(self) -> bool:
        return bool(self.kept or self.dropped or self.speculative)
