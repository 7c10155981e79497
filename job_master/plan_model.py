"""The job master plan's vocabulary: a task's steps and their transition table, its attempts,
the containers a job holds, and what a round decides (:mod:`job_master.plan` drives them)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from job_master.reservations import Kept
from policies.identity_enum import IdentityEnum
from policies.scheduling.asks import PhaseAsk
from policies.scheduling.jobspec import PhaseSpec
from policies.scheduling.lifecycle import TaskState
from policies.scheduling.resources import Resources


class Step(IdentityEnum):
    """Where a task is in the job master's view."""

    WAITING = "waiting"  # its phase's barrier has not been passed
    READY = "ready"  # wants a container for its regular attempt
    LAUNCHING = "launching"  # its regular attempt was sent to a node agent
    RUNNING = "running"
    # A speculative attempt past tau runs it, and a container waits in reserve (Alg. 5 l. 13-14).
    COVERED = "covered"
    SUCCEEDED = "succeeded"
    DROPPED = "dropped"  # left out on purpose (approximation): done for its barrier
    GAVE_UP = "gave_up"  # failed more than max_retries times

    @property
    def is_done(self) -> bool:
        """Done for the barrier of the phases after it."""
        return self in (Step.SUCCEEDED, Step.DROPPED)

    @property
    def is_final(self) -> bool:
        return self in (Step.SUCCEEDED, Step.DROPPED, Step.GAVE_UP)


LIVE_STEPS = frozenset({Step.LAUNCHING, Step.RUNNING})
SERVICE_STABLE_S = 30.0
"""A service task that ran this long before it ended was healthy (its restarts count afresh)."""
STEP_TRANSITIONS: Mapping[Step, frozenset[Step]] = {
    Step.WAITING: frozenset({Step.READY, Step.DROPPED}),
    # SUCCEEDED from READY: a copy or speculative attempt succeeded while the regular one waits.
    Step.READY: frozenset(
        {Step.LAUNCHING, Step.COVERED, Step.SUCCEEDED, Step.DROPPED, Step.GAVE_UP}
    ),
    # READY again: its speculative attempt ended badly, and the reserved container serves the
    # phase's next ready task.
    Step.COVERED: frozenset({Step.READY, Step.SUCCEEDED, Step.DROPPED, Step.GAVE_UP}),
    Step.LAUNCHING: frozenset(
        {Step.RUNNING, Step.READY, Step.SUCCEEDED, Step.DROPPED, Step.GAVE_UP}
    ),
    Step.RUNNING: frozenset({Step.READY, Step.SUCCEEDED, Step.DROPPED, Step.GAVE_UP}),
    Step.SUCCEEDED: frozenset(),
    Step.DROPPED: frozenset(),
    Step.GAVE_UP: frozenset(),
}


class AttemptKind(IdentityEnum):
    REGULAR = "regular"  # the task's own attempt, retried on failure
    COPY = "copy"  # a straggler's copy, on a spare container (slot reservation)
    SPECULATIVE = "speculative"  # placed straight on a node's queue (oversubscription)


@dataclass
class Attempt:
    """One attempt of a task: its number (unique within the task), kind and container."""

    task_id: str
    number: int
    kind: AttemptKind
    allocation_id: str
    running: bool = False
    started_at: float | None = None  # the plan's ``now`` when it was first seen running
    # A speculative attempt's node (it has no container) and when its queue took it.
    node_id: str = ""
    node_address: str = ""
    queued_at: float | None = None


@dataclass
class Task:
    task_id: str
    phase: str
    index: int
    step: Step = Step.WAITING
    attempt: int = 0  # the highest attempt number used so far (0 until first launched)
    failures: int = 0
    allocation_id: str | None = None  # the regular attempt's container
    last_problem: str = ""
    attempts: dict[int, Attempt] = field(default_factory=dict)  # live attempts by number
    speculative: int | None = None  # the number of its live speculative attempt, if any


@dataclass
class Container:
    allocation_id: str
    phase: str
    node_id: str
    node_address: str
    resources: Resources
    task_id: str | None = None  # the task an attempt of which runs in it, if any
    grant_token: bytes = b""  # the RM's proof of the grant, for the node's agent (with TLS)
    kept: Kept | None = None  # kept for a downstream phase (slot reservation), until a deadline


@dataclass(frozen=True)
class Launch:
    task_id: str
    attempt: int
    container: Container
    phase: PhaseSpec
    kind: AttemptKind = AttemptKind.REGULAR


@dataclass(frozen=True)
class SpeculativeLaunch:
    """Put an attempt of a ready task into a node agent's speculative queue (Alg. 5 l. 2)."""

    task_id: str
    attempt: int
    node_id: str
    node_address: str
    phase: PhaseSpec


@dataclass(frozen=True)
class Upgrade:
    """Make a running speculative attempt the regular task of ``container``, on its node, in
    place (Alg. 5 line 11)."""

    task_id: str
    attempt: int
    container: Container


@dataclass(frozen=True)
class SpeculativeRecord:
    """A speculative attempt's latest outcome, for the RM's log (``sluice job``): placed,
    queued, refused, running, kept, upgraded, succeeded, failed, evicted, cancelled, killed,
    rescheduled or lost."""

    task_id: str
    attempt: int
    node_id: str
    outcome: str
    message: str = ""


OPEN_OUTCOMES = frozenset({"placed", "queued", "running", "kept"})


@dataclass(frozen=True)
class StopAttempt:
    """Stop (or cancel, if it has not started) one attempt in its container."""

    task_id: str
    attempt: int
    allocation_id: str
    node_address: str
    reason: str
    grant_token: bytes = b""  # the container's, for a client-mode job master (with TLS)


@dataclass(frozen=True)
class AttemptRecord:
    """One task attempt as the RM recorded it (what an earlier job master attempt launched)."""

    task_id: str
    attempt: int
    state: TaskState
    allocation_id: str
    message: str = ""
    execution: int = 1  # the job's execution that launched it (an evicted job runs again)


@dataclass(frozen=True)
class Decisions:
    launches: tuple[Launch, ...] = ()
    releases: tuple[str, ...] = ()
    asks: tuple[PhaseAsk, ...] = ()
    stops: tuple[StopAttempt, ...] = ()
    speculative: tuple[SpeculativeLaunch, ...] = ()
    upgrades: tuple[Upgrade, ...] = ()


@dataclass
class PhaseState:
    """A phase's incremental state: counts per step, ready tasks in index order, barrier."""

    spec: PhaseSpec
    counts: dict[Step, int]
    ready: list[int] = field(default_factory=list)  # a heap of task indexes, lazily cleaned
    failed_attempts: int = 0
    upstream_left: int = 0  # upstream phases not done yet
    downstream: list[str] = field(default_factory=list)
    output_nodes: dict[str, None] = field(default_factory=dict)  # where its tasks succeeded
    live: dict[str, None] = field(default_factory=dict)  # its tasks LAUNCHING or RUNNING
    copied_live: int = 0  # of those, the ones that have had a straggler copy

    @property
    def done(self) -> bool:
        return self.counts[Step.SUCCEEDED] + self.counts[Step.DROPPED] == self.spec.tasks
