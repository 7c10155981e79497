"""The resource manager's bookkeeping: jobs, nodes, allocations and task attempts.

This is the RM without its network.  Every method is one request or one tick, takes the time as
a :class:`Now` and changes :class:`Tables`; the caller wraps each call in a unit of work
(``tables.begin()`` ... ``commit()`` or ``rollback()``), so a request is applied whole or not at
all, in memory and on disk.  Not thread-safe: the gRPC layer runs one request at a time.

Scheduling does not run inside every request.  A request that could let something be placed
(an ask, freed capacity, a new node) sets :attr:`ResourceManagerCore.needs_pass`; the shell runs
:meth:`ResourceManagerCore.schedule` after a batch of requests, or a few tens of milliseconds
later, as a unit of its own (``Allocate`` runs a due pass first, so a job master sees what it
can get at once).  A pass is :func:`policies.scheduling.framework.schedule_pass` with the
baseline plugins (strict priority, FIFO within a priority, least-allocated node, the job
master share at the permit point) over the pending asks, kept in serving order, and the ready
nodes, kept in a capacity index; the core checks the plan it returns and applies it.  A
heartbeat that changes nothing costs O(what the node reports), and time-driven work (lost
nodes) is found from timers (:meth:`ResourceManagerCore.next_wakeup`), never by scanning.

Nodes are driven by reconciliation, not by queued commands: every heartbeat answer is computed
from what the RM wants the node to run and what the node just reported (:meth:`_commands_for`).
A job master not yet seen on its node is launched again; a task no job should be running is
stopped again; a container whose goal (:mod:`policies.scheduling.containers`: run at its limits,
suspend, stop) differs from what its node shows is told again; until the node's report shows
it done.  A lost answer costs one interval.

A pass's plan may preempt (kill, suspend or shrink a container), resume and resize: the core
checks each against the current records and sets the container's goal; the nodes carry it out.
What a container holds of its node follows what the node has shown, so capacity a freeze will
free is not promised to anyone before the freeze is done.  A task killed by preemption is marked
``preempted`` (its job master retries it without using up a retry), and its container is taken
back from the job (reported to the job master as lost).

Job masters have attempts, like YARN's application masters: when the node holding a job master
is lost, or its process ends before it reports a final state, a new attempt is placed (up to
``max_master_attempts``); the job's tasks keep running and the new job master adopts them.  An
older attempt that is still alive (a partition healed) is refused from then on.
"""

from __future__ import annotations

import heapq
import logging
import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from types import MappingProxyType
from typing import TypeVar

from plumbing.node_protocol import (
    LaunchMaster,
    NodeCommand,
    ResizeAllocation,
    ResumeAllocation,
    SprintAllocation,
    StopAllocation,
    SuspendAllocation,
    TaskReport,
)
from policies.approximation.dias_config import DiasConfig
from policies.approximation.dispatch import (
    DispatchMode,
    JobsInExecution,
    RunningJob,
    eviction_victim,
)
from policies.approximation.dropping import dropped_tasks, effective_drop_ratio
from policies.preemption.queues import QueueConfig, QueueError, single_queue
from policies.preemption.resumption import PreemptedContainer, Verdict, consider_offer
from policies.scheduling.asks import AskError, PhaseAsk, check_asks
from policies.scheduling.containers import ContainerCommand, Goal, Shown, check_goal
from policies.scheduling.containers import command_needed as container_command
from policies.scheduling.framework import (
    PassContext,
    PendingAsk,
    Placement,
    Plan,
    Preemption,
    PreemptionAction,
    Profile,
    Resize,
    Resumption,
    baseline_profile,
    schedule_pass,
)
from policies.scheduling.identifiers import node_id_problem
from policies.scheduling.jobspec import (
    JobSpec,
    ReservationSpec,
    SpecError,
    check_fits_cluster,
)
from policies.scheduling.lifecycle import (
    JOB_TRANSITIONS,
    TASK_TRANSITIONS,
    JobState,
    TaskState,
    TransitionError,
    check_transition,
)
from policies.scheduling.node_liveness import is_lost
from policies.scheduling.pending_asks import PendingAsks
from policies.scheduling.progress import PhaseProgress
from policies.scheduling.resources import Resources
from resource_manager.errors import (
    AlreadyExistsError,
    ConflictError,
    InvalidRequestError,
    LimitExceededError,
    NotFoundError,
    PermissionDeniedError,
)
from resource_manager.limits import NodeNames, capacity_problem
from resource_manager.queue_book import QueueBook
from resource_manager.queues import QueueStatus, QueueView, eventual_holds
from resource_manager.records import (
    OPERATOR,
    AllocationKind,
    AllocationRecord,
    Approximation,
    Execution,
    JobRecord,
    KeptSlot,
    NodeRecord,
    NodeState,
    Now,
    PreemptionStep,
    TaskKey,
    TaskRecord,
    evolve,
)
from resource_manager.reservations import KeptEnded, KeptLog, override_plugin
from resource_manager.sprints import SprintBook
from resource_manager.tables import Tables

log = logging.getLogger(__name__)

MASTER_RESOURCES = Resources(cpu=0.1, memory_mb=256)

MAX_SESSION_LENGTH = 64
"""An agent's session id (a random id drawn when its process starts) has at most this many
characters."""

_NOTHING_REPORTED: Mapping[TaskKey, str] = MappingProxyType({})

V = TypeVar("V")

__all__ = [
    "MASTER_RESOURCES",
    "AllocateResult",
    "CoreSettings",
    "PhaseAsk",
    "ResourceManagerCore",
]


@dataclass(frozen=True)
class CoreSettings:
    """The RM's knobs.

    ``max_master_share``: the fraction of the cluster's capacity (in each resource) job masters
    may hold together, like YARN's maximum-am-resource-percent; one job master may always run.
    Beyond it jobs wait in SUBMITTED, so masters can never take every node and leave no room
    for the tasks they wait for.  ``max_master_attempts``: job masters launched per job
    (YARN's am.max-attempts).  ``lost_node_retention``: how long a lost node stays listed.
    ``master_exit_grace``: how long the job master of a succeeded job may keep running (to
    flush what it publishes) before its node is told to stop it.  ``nodes_to_score``: on
    clusters of more than 100 nodes, how many feasible nodes (the least allocated first) a
    container's placement compares (:mod:`policies.scheduling.framework`).
    ``max_placements_per_pass``: the containers one pass places at most (0: no limit); a pass
    that reaches it is followed at once by another, after the requests waiting meanwhile, so a
    burst of grants never holds heartbeats up for long.  ``max_open_tasks_per_user``: the tasks
    of one owner's unfinished jobs not yet done, beyond which their submissions are refused (0:
    no limit; jobs without an owner, submitted without TLS, are not counted).
    ``preemption_interval``: the least time between two preemption decisions (BIG-C's
    resource monitor runs every 3 s, Sec. 4.2).  ``default_reservation``: the slot reservation
    a job without one is given at submission (None: none).  ``locality_wait``: how long an ask
    that names preferred nodes (where its input is) waits for one of them before it takes any
    node (delay scheduling; 0: preferred nodes are tried first, never waited for).
    ``dispatch``: how jobs are admitted into execution (DiAS Sec. 3.2,
    :mod:`policies.approximation.dispatch`): ``priority`` as soon as their job master fits;
    ``dias`` from one buffer per priority, at most ``max_running_jobs`` at once, never evicting;
    ``preemptive`` likewise, evicting a lower-priority job for the head of a higher buffer.
    ``dias``: drop ratios and sprinting per priority (``--dias-config``).  ``nodes_allowed``,
    ``nodes_allowed_file``: the node names the operator approved, as globs and a file of globs
    (``--nodes-allowed``, ``--nodes-allowed-file``; :class:`resource_manager.limits.NodeNames`;
    neither: any name)."""

    cluster_id: str = "sluice"
    node_timeout: float = 10.0
    max_master_share: float = 0.1
    max_master_attempts: int = 2
    lost_node_retention: float = 600.0
    master_exit_grace: float = 30.0
    nodes_to_score: int = 8
    max_placements_per_pass: int = 64
    max_open_tasks_per_user: int = 0
    preemption_interval: float = 3.0
    default_reservation: ReservationSpec | None = None
    locality_wait: float = 0.0
    dispatch: DispatchMode = DispatchMode.PRIORITY
    max_running_jobs: int = 1
    dias: DiasConfig = field(default_factory=DiasConfig)
    nodes_allowed: tuple[str, ...] = ()
    nodes_allowed_file: str = ""


@dataclass(frozen=True)
class AllocateResult:
    granted: tuple[AllocationRecord, ...]
    events: tuple[TaskRecord, ...]
    lost_allocations: tuple[str, ...]
    kill_requested: bool


@dataclass(frozen=True)
class MasterRegistration:
    job: JobRecord
    held: tuple[AllocationRecord, ...]  # the job's task containers
    history: tuple[TaskRecord, ...]  # every task attempt so far, in seq order


class ResourceManagerCore:
    """All state transitions of the RM.  See the module docstring."""

    def __init__(
        self,
        tables: Tables,
        settings: CoreSettings | None = None,
        profile: Profile | None = None,
        queues: QueueConfig | None = None,
        queues_source: str = "",
    ) -> None:
        """``profile``: the scheduling plugins (default: the baseline, from ``settings``).
        ``queues``: the queues (default: one queue, no preemption), read from
        ``queues_source``."""
        self.tables = tables
        self.settings = settings or CoreSettings()
        file = self.settings.nodes_allowed_file
        # (ValueError, one line, if the file cannot be read)
        self.node_names = NodeNames(
            tuple(self.settings.nodes_allowed), Path(file) if file else None
        )
        self.profile = profile or baseline_profile(
            max_master_share=self.settings.max_master_share,
            nodes_to_score=self.settings.nodes_to_score,
        )
        if self.settings.dispatch.buffered:
            dispatch = JobsInExecution(self.settings.max_running_jobs)
            self.profile = replace(self.profile, permits=(*self.profile.permits, dispatch))
        self.pending = PendingAsks(self.profile.queue_order)  # what jobs still want, in order
        self.book = QueueBook(queues or single_queue(), tables.journal, source=queues_source)
        self._warn_if_never_preempted(self.book.config)
        self.queues = QueueView(tables, self.pending, self.book)
        tables.queue_of_job = lambda job_id: self.queues.spec_of(job_id).name
        tables.regroup()
        self._wall_minus_monotonic = 0.0  # from the last tick's Now
        self._asks_grew = False  # since the last pass
        self._cut_short = False  # the last pass stopped at its limit: another is due at once
        self._placed: list[Placement] = []  # applied, not yet drained by the shell
        self.kept_log = KeptLog()  # how kept containers stopped being kept (slot reservation)
        self._to_tell: dict[str, None] = {}  # nodes with a container goal changed, not drained
        self._nowhere: dict[Resources, int] = {}  # sizes that fitted on no node, and when
        # When asks held back for a preferred node may take any (monotonic; a heap): a pass runs
        # then (delay scheduling).
        self._locality_ends: list[tuple[float, str, str]] = []  # (when, job, phase)
        # node -> what its live speculative tasks hold and how many, at its last heartbeat
        self._opportunistic: dict[str, tuple[Resources, int]] = {}
        self._locality_armed: set[tuple[float, str, str]] = set()  # what the heap holds
        self._lost_allocations: dict[str, list[str]] = {}  # job -> lost since its last Allocate
        self._lost_since: dict[str, float] = {}  # lost node -> last seen (monotonic), oldest first
        self.sprints = SprintBook(self.settings.dias, tables)  # DiAS's sprint budget
        self._execution_changed: dict[str, None] = {}  # jobs in or out since the sprints heard
        if self.sprints.enabled:  # (the sprint clock starts at a job's first running task)
            tables.running_changed = dict.fromkeys(self.sprints.jobs_in())  # (recheck them)
        # Nodes that hold work in the recovered state and have not registered since this RM
        # started (nodes are kept in memory only): each is lost unless it registers within the
        # node timeout of :meth:`started` (all share that one deadline).
        self._unheard: dict[str, None] = dict.fromkeys(sorted(tables.nodes_holding_work()))
        self._started: float | None = None  # monotonic, set by started()
        # node -> the agent process (session) its registration came from
        self._sessions: dict[str, str] = {}
        # node -> (agent session, {task key: allocation}): live attempts and job masters that
        # session reported by events before its registration (:meth:`report_events`)
        self._early: dict[str, tuple[str, dict[TaskKey, str]]] = {}
        for job in tables.jobs.values():
            self._sync_master_ask(job)  # task asks are soft state: job masters send them again

    @property
    def jobs(self) -> dict[str, JobRecord]:
        return self.tables.jobs

    @property
    def tasks(self) -> dict[tuple[str, str, int], TaskRecord]:
        return self.tables.tasks

    @property
    def allocations(self) -> dict[str, AllocationRecord]:
        return self.tables.allocations

    @property
    def nodes(self) -> dict[str, NodeRecord]:
        return self.tables.nodes

    # ================================================================ clients

    def submit(
        self,
        spec: JobSpec,
        *,
        client_mode: bool,
        now: Now,
        idempotency_key: str = "",
        owner: str = "",
    ) -> JobRecord:
        """Accept a validated spec from ``owner``.  Raises SpecError when a phase fits on no
        node.  A repeated ``idempotency_key`` answers the job it created (ConflictError if the
        spec or the owner differs).  A spec without a reservation gets the cluster's default
        (recorded with the job, so what it ran with stays known)."""
        if spec.reservation is None and self.settings.default_reservation is not None:
            spec = replace(spec, reservation=self.settings.default_reservation)
        if idempotency_key:
            earlier = self.tables.job_by_key(idempotency_key)
            if earlier is not None:
                if (
                    earlier.spec != spec
                    or earlier.client_mode != client_mode
                    or earlier.owner != owner
                ):
                    raise ConflictError(
                        f"idempotency_key {idempotency_key!r} was used for {earlier.job_id}, "
                        "with another spec"
                    )
                return earlier
        limit = self.settings.max_open_tasks_per_user
        if limit and owner:
            held = self.tables.open_tasks_by_owner.get(owner, 0)
            wanted = sum(p.tasks for p in spec.phases)
            if held + wanted > limit:
                raise LimitExceededError(
                    f"tasks: {owner} has {held} tasks of unfinished jobs; {wanted} more would "
                    f"pass the limit of {limit} per user (--max-open-tasks-per-user)"
                )
        if client_mode and self.settings.dispatch.buffered:
            raise ConflictError(
                f"client mode: this cluster dispatches jobs from priority buffers (--dispatch "
                f"{self.settings.dispatch.value}), which a job driven by its submitter would "
                "bypass; submit it with `sluice submit`"
            )
        try:
            self.book.config.queue_of(spec.queue)
        except QueueError as error:
            raise SpecError(error.field, error.problem) from None
        approximation = self._approximation_of(spec)
        capacities = self.tables.capacity.capacity_shapes()
        check_fits_cluster(spec, capacities)
        if not client_mode:
            check_fits_master(capacities)
        seq = self.tables.next_counter("job")
        job = JobRecord(
            job_id=f"job-{seq:06d}",
            seq=seq,
            spec=spec,
            state=JobState.SUBMITTED,
            submit_time=now.wall,
            client_mode=client_mode,
            progress=tuple(PhaseProgress(p.name, p.tasks, pending=p.tasks) for p in spec.phases),
            master_attempt=1 if client_mode else 0,
            idempotency_key=idempotency_key,
            owner=owner,
            approximation=approximation,
        )
        self.tables.put_job(job)
        self._sync_master_ask(job)
        log.info("job %s (%s, priority %d) submitted", job.job_id, spec.name, spec.priority)
        return self.jobs[job.job_id]

    def _approximation_of(self, spec: JobSpec) -> Approximation:
        """The drop ratio the job runs with (its own within its priority's bound, else its
        priority's; SpecError past the bound) and what it leaves out of its droppable phases."""
        sizes = [phase.tasks for phase in spec.phases if phase.droppable]
        if not sizes:
            return Approximation()
        asked = spec.approximation.drop_ratio if spec.approximation is not None else None
        theta = self.settings.dias.drop_ratio_for(spec.priority, asked)
        return Approximation(
            drop_ratio=theta,
            dropped_tasks=dropped_tasks(sizes, theta),
            expected_error=self.settings.dias.expected_error(effective_drop_ratio(sizes, theta)),
        )

    def job(self, job_id: str) -> JobRecord:
        """A job, running or finished (a finished one is read from the store)."""
        job = self.tables.find_job(job_id)
        if job is None:
            raise NotFoundError(f"job {job_id!r} not found")
        return job

    def list_jobs(self) -> list[JobRecord]:
        return self.tables.all_jobs()

    def job_tasks(self, job_id: str) -> list[TaskRecord]:
        self.job(job_id)
        return sorted(
            self.tables.tasks_of_job(job_id), key=lambda t: (t.phase, t.task_id, t.attempt)
        )

    def kill(self, job_id: str, *, now: Now, reason: str = "killed by user") -> JobRecord:
        """Kill a job: final at once; its containers are stopped through the nodes' heartbeats."""
        job = self.job(job_id)
        if job.state.is_final:
            return job
        self._finish(replace(job, kill_requested=True), JobState.KILLED, reason, now)
        self.update_sprints(now)
        return self.jobs[job_id]

    # ================================================================ node agents

    def register_node(
        self,
        node_id: str,
        address: str,
        runtime: str,
        capacity: Resources,
        live_tasks: Sequence[TaskReport],
        *,
        now: Now,
        instance_id: str = "",
        cluster_id: str = "",
        has_swap: bool = False,
        session: str = "",
    ) -> None:
        """Admit a node (again).  Refuses a bad node id, a capacity no machine has
        (:func:`resource_manager.limits.capacity_problem`), a node name the operator did not
        approve, an agent of another cluster, and a second agent for a node id whose agent
        still heartbeats (another state directory).

        ``live_tasks`` is everything the agent holds (what it adopted from a predecessor), as
        a snapshot taken before the request was sent; ``session`` names the agent process that
        sends it (drawn at its start; empty from an older agent).  On every registration, what
        the RM believes was started on the node and the node does not report is lost, as if the
        node had been (:meth:`_reconcile_registration`), except what the same agent process
        reported by events ahead of this registration (:meth:`report_events`).  A node that
        held work when this RM started stops waiting to be lost (:meth:`started`)."""
        problem = node_id_problem(node_id)
        if problem is not None:
            raise InvalidRequestError("node_id", problem)
        _check_session(session)
        refused = self.node_names.problem(node_id)
        if refused is not None:  # (first: a stranger learns nothing else)
            raise PermissionDeniedError(f"node_id: {refused}")
        if not address:
            raise InvalidRequestError("address", "is required")
        bad = capacity_problem(capacity.cpu, capacity.memory_mb)
        if bad is not None:
            raise InvalidRequestError(*bad)
        if cluster_id and cluster_id != self.settings.cluster_id:
            raise ConflictError(
                f"cluster_id: the agent was started for cluster {cluster_id!r}; this resource "
                f"manager runs cluster {self.settings.cluster_id!r}"
            )
        previous = self.nodes.get(node_id)
        if (
            previous is not None
            and previous.state is NodeState.READY
            and previous.instance_id != instance_id
            and now.monotonic - previous.last_seen <= self.settings.node_timeout
        ):
            raise AlreadyExistsError(
                f"node_id: {node_id} is held by another live agent at {previous.address} "
                f"(heard from {now.monotonic - previous.last_seen:.1f} s ago); give this agent "
                "another --node-id"
            )
        self._forget_lost(node_id)
        self.tables.put_node(
            NodeRecord(
                node_id=node_id,
                address=address,
                runtime=runtime,
                capacity=capacity,
                instance_id=instance_id,
                last_heartbeat=now.wall,
                last_seen=now.monotonic,
                has_swap=has_swap,
            )
        )
        log.info(
            "node %s %s at %s (%s, %g cpu, %d MiB%s)",
            node_id,
            "re-registered" if previous else "registered",
            address,
            runtime,
            capacity.cpu,
            capacity.memory_mb,
            "" if has_swap else ", no swap: preemption takes only CPU from its live tasks",
        )
        if node_id in self._unheard:
            del self._unheard[node_id]
            self.tables.journal(lambda: self._unheard.__setitem__(node_id, None))
        early = self._early.pop(node_id, None)
        if early is not None:
            self.tables.journal(lambda: self._early.__setitem__(node_id, early))
        known = self._sessions.get(node_id)
        self._sessions[node_id] = session
        self.tables.journal(partial(_restore, self._sessions, node_id, known))
        reported = early[1] if early is not None and session and early[0] == session else {}
        self._observe_reports(node_id, live_tasks, now)
        self._reconcile_registration(node_id, live_tasks, now, reported)

    def _reconcile_registration(
        self,
        node_id: str,
        live_tasks: Sequence[TaskReport],
        now: Now,
        reported: Mapping[TaskKey, str] = _NOTHING_REPORTED,
    ) -> None:
        """What the RM believes was started on the node and the (re-)registering agent does
        not hold is lost, through the path of a lost node (:meth:`_lose`): task attempts it
        recorded live there (its job master retries or fails them as the job says), task
        containers it showed running or suspended, and the current job master of a job
        whose job master registered (RUNNING).  So a machine that came back empty (rebooted,
        drained by ``sluice local down``) leaves no ghost holding its CPU.

        Left alone, as the heartbeat leaves them: containers granted but never shown started
        (a job master has yet to start its task there; a kept one between two tasks), and the
        job master of a job still STARTING (its heartbeat answer launches it again).  An agent
        restarted within the node timeout adopted its tasks and reports them: nothing is lost.

        ``reported`` (task key -> allocation) is what the registering agent process reported
        live by events that reached the RM before its registration: the snapshot may predate
        them (a task started after it was taken), so they count as held.  The rule: the RM
        loses only what neither the snapshot shows nor the same agent process reported ahead
        of it.  That process still runs such an attempt, or will report its end (its events
        leave in the order they were queued).  O(what the RM holds on the node)."""
        keys = {(r.job_id, r.task_id, r.attempt) for r in live_tasks}
        keys.update(reported)
        held = {r.allocation_id for r in live_tasks}
        held.update(reported.values())
        tasks = [t for t in self.tables.live_tasks_of_node(node_id) if t.key not in keys]
        gone: dict[str, AllocationRecord] = {}
        for task in tasks:
            allocation = self.allocations.get(task.allocation_id)
            if allocation is not None and allocation.node_id == node_id:
                gone[allocation.allocation_id] = allocation
        for allocation in self.tables.allocations_of_node(node_id):
            if allocation.is_master:
                job = self.jobs.get(allocation.job_id)
                started = (
                    job is not None
                    and job.master_allocation == allocation.allocation_id
                    and job.state is JobState.RUNNING
                )
            else:
                started = allocation.shown is not Shown.IDLE
            if started:
                gone[allocation.allocation_id] = allocation
        for allocation_id in held:
            gone.pop(allocation_id, None)
        if not tasks and not gone:
            return
        log.warning(
            "node %s registered without %d task attempts and %d containers the RM had there: lost",
            node_id,
            len(tasks),
            len(gone),
        )
        self._lose(
            list(gone.values()),
            tasks,
            f"job master's node {node_id} restarted without it",
            f"node {node_id} restarted without it",
            now,
        )

    def heartbeat(
        self,
        node_id: str,
        used: Resources,
        live_tasks: Sequence[TaskReport],
        *,
        now: Now,
        instance_id: str = "",
        has_swap: bool | None = None,
    ) -> tuple[bool, list[NodeCommand]]:
        """Record a heartbeat; return (must re-register, what the node should do now).
        ``has_swap`` None: as the node said before."""
        node = self.nodes.get(node_id)
        if node is None or node.state is NodeState.LOST or node.instance_id != instance_id:
            return True, []
        swap = node.has_swap if has_swap is None else has_swap
        if swap != node.has_swap:
            log.info("node %s: swap %s", node_id, "enabled" if swap else "gone")
        self.tables.put_node(
            replace(
                node,
                last_heartbeat=now.wall,
                last_seen=now.monotonic,
                used=used,
                running_tasks=sum(1 for t in live_tasks if not t.state.is_final),
                has_swap=swap,
            )
        )
        self._count_speculative(node_id, live_tasks)
        stops = self._observe_reports(node_id, live_tasks, now)
        if self.tables.preempted_of_node(node_id):
            self._offer_resumptions(node_id, now)
        self.update_sprints(now)  # (a job master ended, or a node was found lost)
        return False, self._commands_for(node_id, live_tasks, now, stops)

    def report_events(
        self, node_id: str, events: Iterable[TaskReport], *, now: Now, session: str = ""
    ) -> None:
        """Apply a node's task events (whether or not the node is registered).  ``session``
        names the agent process that sends them (as in :meth:`register_node`).  Events of a
        process that has not registered yet (the node unknown or lost, or registered by
        another process) may reach the RM before its registration, whose snapshot of live
        tasks may then predate them: the live attempts and job masters they report are noted
        for that registration (:meth:`_reconcile_registration`), and forgotten when they
        end.  O(len(events)); nothing is noted once the process is registered."""
        _check_session(session)
        reports = list(events)
        self._observe_reports(node_id, reports, now)
        if session:
            self._note_early(node_id, session, reports)
        self.update_sprints(now)

    def _note_early(self, node_id: str, session: str, reports: Sequence[TaskReport]) -> None:
        """Note what ``reports`` show live of what the RM holds on the node, if the agent
        process ``session`` has not registered the node (see :meth:`report_events`)."""
        node = self.nodes.get(node_id)
        if (
            node is not None
            and node.state is NodeState.READY
            and self._sessions.get(node_id) == session
        ):
            return  # registered by this very process: its next registration is a later one
        before = self._early.get(node_id)
        noted = dict(before[1]) if before is not None and before[0] == session else {}
        for report in reports:
            key = (report.job_id, report.task_id, report.attempt)
            if report.state.is_final or not self._holds(node_id, report):
                noted.pop(key, None)
            else:
                noted[key] = report.allocation_id
        if noted == (before[1] if before is not None and before[0] == session else {}):
            return
        self._early[node_id] = (session, noted)
        self.tables.journal(partial(_restore, self._early, node_id, before))

    def _holds(self, node_id: str, report: TaskReport) -> bool:
        """Does the RM hold the live attempt or job master ``report`` names on ``node_id``?"""
        if report.job_master:
            allocation = self.allocations.get(report.allocation_id)
            return allocation is not None and allocation.is_master and allocation.node_id == node_id
        task = self.tasks.get((report.job_id, report.task_id, report.attempt))
        return task is not None and task.node_id == node_id and not task.state.is_final

    def started(self, now: Now) -> None:
        """The RM serves from ``now`` on (the shell calls it once, at start; :meth:`tick` calls
        it too, for a shell that does not).  Nodes are kept in memory only, so a restarted RM
        knows none: every node that holds a container or a live task attempt in the recovered
        state counts as silent since ``now``, and is lost after the node timeout, through the
        path of a node lost by silence (its tasks retried or failed as their job says, its
        containers freed), unless it registers before (then its registration reconciles what
        it holds).  Later calls change nothing."""
        if self._started is not None:
            return
        self._started = now.monotonic
        if self._unheard:
            log.info(
                "%d nodes hold work in the recovered state (%s): each is lost unless it "
                "registers within %g s",
                len(self._unheard),
                ", ".join(list(self._unheard)[:5]) + (", ..." if len(self._unheard) > 5 else ""),
                self.settings.node_timeout,
            )

    def tick(self, now: Now) -> None:
        """Time-driven housekeeping: declare silent nodes lost (by the monotonic clock, so a step
        of the wall clock loses nobody), nodes that held work when this RM started and have not
        registered since (:meth:`started`), and forget nodes lost long ago.  Finds them from
        timers in O(what is due), so it may run as often as :meth:`next_wakeup` asks."""
        self._wall_minus_monotonic = now.wall - now.monotonic
        self.started(now)
        timeout = self.settings.node_timeout
        if (
            self._unheard
            and self._started is not None
            and is_lost(self._started, now.monotonic, timeout)
        ):
            # (first: they were last heard of before any node registered since, so the lost
            # nodes' list stays oldest first)
            for node_id in list(self._unheard):
                self._lose_unheard(node_id, self._started, now)
        silent = self.tables.silent_nodes(before=now.monotonic - timeout)
        for node_id in sorted(silent):
            if is_lost(self.nodes[node_id].last_seen, now.monotonic, timeout):
                self._lose_node(node_id, now)
        retention = self.settings.lost_node_retention
        for node_id, since in list(self._lost_since.items()):
            if now.monotonic - since <= retention:
                break  # oldest first: the rest were lost later
            self._forget_lost(node_id)
            lost = self.nodes.get(node_id)
            if lost is not None and lost.state is NodeState.LOST:
                self.tables.remove_node(node_id)
                log.info("node %s forgotten: lost for more than %.0f s", node_id, retention)
        for allocation, limit in self._overdue_suspensions(now):
            self.preempt(
                Preemption(
                    allocation.allocation_id,
                    PreemptionAction.KILL,
                    f"preempted for longer than its queue's max_suspended_s ({limit:g} s)",
                ),
                now=now,
            )
        if self._decision_due(now) and self.book.wanted:
            self._asks_grew = True  # run the pass that wanted a decision
        self.end_locality_waits(now)
        self.update_sprints(now)

    def end_locality_waits(self, now: Now) -> None:
        """Asks whose locality wait is over may now take any node: a pass is due.  O(what is
        due).  :meth:`tick` calls it; a shell that runs no tick (the simulator) calls it at
        :meth:`next_locality_end`."""
        ends = self._locality_ends
        if ends and ends[0][0] <= now.monotonic:
            while ends and ends[0][0] <= now.monotonic:
                self._locality_armed.discard(heapq.heappop(ends))
            self._asks_grew = True

    def next_locality_end(self) -> float | None:
        """When (monotonic) the earliest held-back ask's locality wait ends, if any."""
        return self._locality_ends[0][0] if self._locality_ends else None

    def drain_placements(self) -> list[Placement]:
        """The placements applied since the last call, for a shell that wants to tell whom they
        concern (the simulator wakes job masters with them).  Those of a rolled-back unit are
        gone with it."""
        placed, self._placed = self._placed, []
        return placed

    def drain_nodes_to_tell(self) -> list[str]:
        """The nodes whose containers got a new goal since the last call: their next heartbeat
        answer carries commands (a shell that does not heartbeat idle nodes, the simulator,
        heartbeats these).  Those of a rolled-back unit are gone with it."""
        nodes, self._to_tell = list(self._to_tell), {}
        return nodes

    @property
    def needs_pass(self) -> bool:
        """Could a pass place something now?  True after an ask appeared or grew, or capacity
        was freed or added, since the last pass; a heartbeat that changes neither leaves it."""
        return bool(self.pending) and (self._asks_grew or self.tables.freed or self._cut_short)

    @property
    def pass_backlog(self) -> bool:
        """The last pass stopped at its placement limit: run the next one without delay."""
        return self._cut_short and bool(self.pending)

    def next_wakeup(self) -> float | None:
        """The monotonic time :meth:`tick` has something to do (a node may then be lost, or a
        lost node forgotten), or None when nothing is timed."""
        times = []
        oldest = self.tables.oldest_heartbeat()
        if oldest is not None:
            times.append(oldest + self.settings.node_timeout)
        if self._unheard and self._started is not None:
            times.append(self._started + self.settings.node_timeout)
        for since in self._lost_since.values():
            times.append(since + self.settings.lost_node_retention)
            break
        if self.book.wanted:
            times.append(self.book.last_decision + self.settings.preemption_interval)
        if self._locality_ends:
            times.append(self._locality_ends[0][0])
        deadline = self._next_suspension_deadline()
        if deadline is not None:
            # Suspensions are timed by the wall clock (they outlive an RM restart); the shell
            # sleeps by the monotonic one, converted by the offset last seen.
            times.append(deadline - self._wall_minus_monotonic)
        sprint = self.sprints.next_change()
        if sprint is not None:  # (wall-clock too)
            times.append(sprint - self._wall_minus_monotonic)
        return min(times, default=None)

    def schedule(self, now: Now) -> Plan:
        """One scheduling pass, if anything changed since the last: plan it with the framework,
        check the plan and apply it.  Run it as a unit of work of its own."""
        if not self.needs_pass:
            return Plan()
        asks_grew, freed, cut_short = self._asks_grew, self.tables.freed, self._cut_short
        self._asks_grew = self.tables.freed = self._cut_short = False

        def undo() -> None:
            self._asks_grew, self.tables.freed, self._cut_short = asks_grew, freed, cut_short

        self.tables.journal(undo)
        if not self.pending:
            return Plan()
        context = PassContext(
            now=now.monotonic,
            cluster=self.tables.capacity,
            held=self.tables.held_by_kind(),
            jobs_in_execution=len(self.tables.in_execution),
        )
        profile, asks, preemption = self.profile, iter(self.pending), None
        if self.queues.active:
            self.book.expire(now.monotonic, set(self.pending.queues()))
            profile, order, preemption = self.queues.profile(
                self.profile,
                self.tables.capacity.total_capacity,
                now.wall,
                due=self._decision_due(now),
            )
            asks = self.pending.in_queues(order)
            if self.settings.dispatch is DispatchMode.DIAS:
                # DiAS never evicts (Sec. 3.2): the queues' preemption stays off.
                profile, preemption = replace(profile, post_filters=self.profile.post_filters), None
        override = override_plugin(self.tables, now.wall)
        if override is not None:  # (slot reservation: kept containers yield to a higher priority)
            profile = replace(profile, post_filters=(*profile.post_filters, override))
        granted: Counter[tuple[str, str]] = Counter()
        # The pass places tentatively in the capacity index; applying its plan makes the records
        # say the same, so the index keeps the pass's changes instead of undoing and redoing them.
        scratch = self.tables.capacity.scratch()
        with scratch:
            plan = schedule_pass(
                asks,
                context,
                profile,
                self.pending.shapes(),
                self._nowhere,
                self.settings.max_placements_per_pass,
            )
            self._cut_short = plan.cut_short
            for held_back in plan.waiting:
                if held_back.local_only(now.monotonic) and held_back.local_until < math.inf:
                    entry = (held_back.local_until, held_back.job_id, held_back.phase)
                    if entry not in self._locality_armed:
                        self._locality_armed.add(entry)
                        heapq.heappush(self._locality_ends, entry)
            for placement in plan.placements:
                if self._grant(placement, now) and placement.kind is AllocationKind.TASK:
                    granted[placement.job_id, placement.phase] += 1
            scratch.keep()
        for (job_id, phase), count in granted.items():
            ask = self.pending.get((job_id, AllocationKind.TASK, phase))
            if ask is not None:
                self._put_ask(replace(ask, count=max(0, ask.count - count)))
        if preemption is not None:
            if preemption.decided:
                self.book.decided(now.monotonic)
            elif preemption.wanted:
                self.book.wanted = True  # (soft: at worst a pass runs for nothing)
        self._apply_goals(plan, now)
        if self.settings.dispatch is DispatchMode.PREEMPTIVE:
            self._evict_for_waiting(plan, now)
        self.update_sprints(now)
        return plan

    def update_sprints(self, now: Now) -> None:
        """Tell the sprint budget which jobs entered or left execution, bring it to ``now``, and
        have the nodes of the jobs whose sprinting changed told (DiAS Sec. 3.2)."""
        if not self.sprints.enabled:
            return
        due = self.sprints.next_change()
        flips = self.tables.running_changed
        if not (self._execution_changed or flips) and (due is None or due > now.wall):
            return  # (the common case, every heartbeat)
        changed, self._execution_changed = self._execution_changed, {}
        self.tables.journal(lambda: self._execution_changed.update(changed))
        if flips:  # jobs whose tasks started or stopped running (none: 0 -> some, or back)
            flipped = dict(flips)
            flips.clear()
            self.tables.journal(lambda: flips.update(flipped))
        else:
            flipped = {}
        entered: list[tuple[str, int, float]] = []
        left: list[tuple[str, float]] = []
        for job_id in changed:
            job = self.jobs.get(job_id) or self.tables.find_job(job_id)
            if job is None:
                continue
            if job_id in self.tables.in_execution:
                entered.append((job_id, job.spec.priority, job.execution.dispatched_at or now.wall))
            else:
                left.append((job_id, job.finish_time or now.wall))
                self._keep_sprinted(job, left[-1][1])
        running = [
            (job_id, self.tables.running_of_job.get(job_id, 0) > 0)
            for job_id in {**changed, **flipped}
            if job_id in self.tables.in_execution
        ]
        for job_id in self.sprints.update(now.wall, entered, left, running):
            for allocation in self.tables.allocations_of_job(job_id):
                if not allocation.is_master:
                    self._tell(allocation.node_id)

    def _keep_sprinted(self, job: JobRecord, when: float) -> None:
        """A job leaving execution at ``when`` keeps what it sprinted in it (the sprinter
        forgets it as it leaves), so a finished job still shows it."""
        sprinted = self.sprints.sprinted_until(job.job_id, when)
        if sprinted > 0:
            execution = replace(job.execution, sprinted_s=job.execution.sprinted_s + sprinted)
            self.tables.put_job(replace(job, execution=execution))

    def _tell(self, node_id: str) -> None:
        """The node's next heartbeat answer carries commands (a container's goal changed)."""
        if node_id not in self._to_tell:
            self._to_tell[node_id] = None
            self.tables.journal(lambda: self._to_tell.pop(node_id, None))

    def _evict_for_waiting(self, plan: Plan, now: Now) -> None:
        """Preemptive dispatch (the paper's baseline P): a job waiting at the head of a higher
        buffer than a job in execution evicts it, when execution is full."""
        if len(self.tables.in_execution) < self.settings.max_running_jobs:
            return
        heads = [a for a in plan.waiting if a.kind is AllocationKind.JOB_MASTER]
        if not heads:
            return
        head = max(heads, key=lambda a: (a.priority, -a.submit_seq))
        running = [
            RunningJob(job.job_id, job.spec.priority, job.execution.dispatched_at)
            for job in (self.jobs[j] for j in self.tables.in_execution)
        ]
        victim = eviction_victim(head.priority, running)
        if victim is not None:
            self._evict(self.jobs[victim], f"job {head.job_id} of priority {head.priority}", now)

    def _evict(self, job: JobRecord, by: str, now: Now) -> None:
        """Stop the job's execution and put it back at the head of its buffer (its submission
        order is kept): its tasks and job master are stopped, and it will be executed again
        from the start, by a new job master that counts the earlier execution's attempts only
        to number its own.  The time the execution had run is wasted."""
        ran = max(now.wall - job.execution.dispatched_at, 0.0) if job.execution.dispatched_at else 0
        why = f"evicted for {by}"
        for task in self.tables.tasks_of_job(job.job_id):
            if task.execution == job.execution.number and not task.state.is_final:
                self.tables.put_task(
                    evolve(
                        task,
                        state=TaskState.KILLED,
                        message=why,
                        finish_time=now.wall,
                        seq=self.tables.next_counter("event"),
                        preempted=True,
                    )
                )
        for allocation in self.tables.allocations_of_job(job.job_id):
            self._tell(allocation.node_id)  # its next heartbeat stops what runs there
            if not allocation.is_master:  # (stopped by reconciliation, as a final job's)
                self.tables.remove_allocation(allocation.allocation_id)
        execution = job.execution
        self._move(
            job,
            JobState.SUBMITTED,
            master_node="",
            master_allocation="",
            progress=tuple(
                PhaseProgress(p.name, p.tasks, pending=p.tasks) for p in job.spec.phases
            ),
            execution=Execution(
                number=execution.number + 1,
                evictions=execution.evictions + 1,
                wasted_s=execution.wasted_s + ran,
                sprinted_s=execution.sprinted_s,
            ),
            message=f"{why} after {ran:.1f} s; to be executed again from the start",
        )
        log.warning("job %s %s after %.1f s: back to the head of its buffer", job.job_id, why, ran)

    # ================================================================ container goals

    def _apply_goals(self, plan: Plan, now: Now) -> None:
        """Carry out a plan's preemptions, resumptions and resizes, each checked against the
        records as they are now; one that no longer holds is dropped and logged.  What a
        preemption frees is held on its node for the queue it was taken for."""
        for preemption in plan.preemptions:
            before = self.allocations.get(preemption.allocation_id)
            if before is not None and before.kept_for:  # (slot reservation: taken back)
                self._note_kept_end(before, f"taken: {preemption.reason}", now)
            try:
                after = self.preempt(preemption, now=now)
            except (ConflictError, NotFoundError) as error:
                log.warning("dropping a stale preemption of the plan: %s", error)
                continue
            if preemption.for_queue and before is not None:
                freed = before.holds - (Resources() if after is None else eventual_holds(after))
                self.book.claim(
                    before.node_id,
                    preemption.for_queue,
                    Resources(max(freed.cpu, 0.0), max(freed.memory_mb, 0)),
                    now.monotonic,
                )
        changes: list[Callable[[], AllocationRecord | None]] = [
            *(partial(self.resume, r, now=now) for r in plan.resumptions),
            *(partial(self.resize, r, now=now) for r in plan.resizes),
        ]
        for change in changes:
            try:
                change()
            except (ConflictError, NotFoundError) as error:
                log.warning("dropping a stale change of the plan: %s", error)

    def preempt(
        self, preemption: Preemption, *, now: Now, held_by: str | None = None
    ) -> AllocationRecord | None:
        """Kill, suspend or shrink a task container (never a job master's).  Returns the
        container with its new goal (None once a kill took an idle container back).  Raises
        NotFoundError or ConflictError, changing nothing, when the change does not hold.

        A SUSPEND with limits (immediate preemption) freezes and then cuts the task to them; a
        SHRINK with a step (graceful preemption) is stepped down by the node, which may freeze
        the task once it swaps.  ``held_by`` (:data:`OPERATOR`) marks who holds it now; None
        keeps who held it (the scheduler preempting an operator's container leaves it the
        operator's to resume)."""
        allocation = self._goal_target(preemption.allocation_id)
        reason = preemption.reason
        if preemption.action is PreemptionAction.KILL:
            return self._set_goal(allocation, Goal.STOP, allocation.limits, reason, now)
        if preemption.action is PreemptionAction.SUSPEND:
            limits = preemption.limits
            if limits is not None and not limits.fits_in(allocation.resources):
                raise ConflictError(f"{allocation.allocation_id}: a footprint above its grant")
            return self._set_goal(allocation, Goal.SUSPEND, limits, reason, now, held_by)
        if preemption.limits is None:
            raise ConflictError(f"{allocation.allocation_id}: a shrink needs limits")
        if preemption.step is not None:
            self._check_limits(allocation, preemption.limits)
            return self._set_goal(allocation, Goal.SHRINK, preemption.limits, reason, now, held_by)
        return self._resize(allocation, preemption.limits, reason, now, held_by)

    def resume(
        self, resumption: Resumption, *, now: Now, by_operator: bool = False
    ) -> AllocationRecord | None:
        """Let a suspended or shrunk container run with its whole grant again; refused while
        its node has no room for the grant, and, unless ``by_operator``, while an operator
        holds it (only the operator lifts their own suspension or resize)."""
        allocation = self._goal_target(resumption.allocation_id)
        if allocation.held_by and not by_operator:
            raise ConflictError(f"{allocation.allocation_id}: held by an {allocation.held_by}")
        self._check_room(allocation, Goal.RUN, None)
        return self._set_goal(allocation, Goal.RUN, None, "resumed", now)

    def resize(self, resize: Resize, *, now: Now) -> AllocationRecord | None:
        """Set a container's limits, positive and within its grant; growing is refused while
        its node has no room, and any change while an operator holds it."""
        allocation = self._goal_target(resize.allocation_id)
        if allocation.held_by:
            raise ConflictError(f"{allocation.allocation_id}: held by an {allocation.held_by}")
        return self._resize(allocation, resize.limits, "resized", now)

    def change_task(
        self,
        job_id: str,
        task_id: str,
        action: PreemptionAction | None,
        *,
        limits: Resources | None = None,
        reason: str = "",
        now: Now,
    ) -> AllocationRecord | None:
        """An operator's change to the container of a task's latest live attempt: ``action``
        KILL, SUSPEND or SHRINK (to ``limits``, which may also grow it back), or None to
        resume it.  Raises NotFoundError or ConflictError with a one-line reason (resuming a
        task that runs with its whole grant is a ConflictError: nothing to resume).

        A suspension or a resize below the grant is the operator's hold: it stands (the
        scheduler's automatic resumption and its queue's ``max_suspended_s`` pass it by,
        across RM restarts) until the operator resumes the task or resizes it to its grant."""
        job = self.job(job_id)
        if job.state.is_final:
            raise ConflictError(f"job {job_id} is {job.state.value}")
        attempts = [
            t
            for t in self.tables.tasks_of_job(job_id)
            if t.task_id == task_id and not t.state.is_final
        ]
        if not attempts:
            raise NotFoundError(f"task {task_id!r} of {job_id} has no live attempt")
        allocation_id = max(attempts, key=lambda t: t.attempt).allocation_id
        why = reason or "by an operator"
        if action is None:
            allocation = self._goal_target(allocation_id)
            if allocation.goal is Goal.RUN and allocation.limits is None:
                raise ConflictError(
                    f"task {task_id!r} of {job_id} runs with its whole grant: nothing to resume"
                )
            return self.resume(Resumption(allocation_id), now=now, by_operator=True)
        return self.preempt(
            Preemption(allocation_id, action, why, limits), now=now, held_by=OPERATOR
        )

    # ================================================================ queues

    def set_queues(self, config: QueueConfig, *, source: str, now: Now) -> None:
        """Take new queues (a reload).  Refused with a QueueError, changing nothing, when an
        unfinished job names a queue the new file does not have.  Jobs that name no queue go
        to the new default queue."""
        for job_id in self.tables.active_jobs:
            named = self.jobs[job_id].spec.queue
            if named and config.get(named) is None:
                raise QueueError(
                    "queues", f"queue {named!r} is gone, but job {job_id} is still in it"
                )
        self._warn_if_never_preempted(config)
        self.book.replace_config(config, source, now.wall)
        self.tables.regroup()
        self.tables.journal(self.tables.regroup)  # undone after the book: the old totals
        for ask in list(self.pending):
            job = self.jobs.get(ask.job_id)
            queue = self.queues.queue_of(job) if job is not None else config.default
            if queue != ask.queue:
                self._put_ask(replace(ask, count=0))
                self._put_ask(replace(ask, queue=queue))
        self._asks_grew = True
        log.info(
            "queues%s: %s",
            f" from {source}" if source else "",
            ", ".join(f"{q.name} (share {q.share:g}, {q.mode_name})" for q in config.queues),
        )

    def _warn_if_never_preempted(self, config: QueueConfig) -> None:
        if config.preempts and self.settings.dispatch is DispatchMode.DIAS:
            log.warning(
                "the queues preempt, but --dispatch dias never evicts: their preemption is off"
            )

    def queue_status(self) -> list[QueueStatus]:
        """Each queue's share, usage, pending demand and what is preempted from it now."""
        return self.queues.status()

    def _decision_due(self, now: Now) -> bool:
        return now.monotonic - self.book.last_decision >= self.settings.preemption_interval

    def _offer_resumptions(self, node_id: str, now: Now) -> None:
        """Delayed resumption (BIG-C Sec. 4.3): each preempted container on the node whose
        preemption its node has carried out is offered the node's free capacity, less what is
        held there for other queues; it declines D fitting offers (its queue's
        ``resume_after_offers``) and resumes on the next.  Oldest preemption first."""
        node = self.nodes[node_id]
        self.book.expire(now.monotonic, set(self.pending.queues()))
        waiting = sorted(
            (
                a
                for a in self.tables.preempted_of_node(node_id)
                if a.goal is not Goal.STOP and not a.held_by  # (an operator's: theirs to lift)
            ),
            key=lambda a: (a.preempted_at, a.allocation_id),
        )
        for allocation in waiting:
            if (
                container_command(
                    allocation.resources,
                    allocation.goal,
                    allocation.limits,
                    allocation.shown,
                    allocation.shown_limits,
                )
                is not None
                or allocation.shown is Shown.IDLE
            ):
                continue  # still being preempted: nothing to resume yet
            spec = self.queues.spec_of(allocation.job_id)
            free = (
                node.capacity
                - self.tables.allocated_on(node_id)
                - self.book.held_on(node_id, except_queue=spec.name)
            )
            decision = consider_offer(
                PreemptedContainer(
                    allocation.allocation_id,
                    node_id,
                    held=allocation.holds,
                    original=allocation.resources,
                    declined_offers=self.book.declined(allocation.allocation_id),
                ),
                node_id,
                free,
                spec.resume_after_offers,
            )
            if decision.verdict is Verdict.DECLINE:
                self.book.set_declined(allocation.allocation_id, decision.container.declined_offers)
            elif decision.verdict is Verdict.RESUME:
                try:
                    self.resume(Resumption(allocation.allocation_id), now=now)
                except ConflictError as error:
                    log.debug("not resuming: %s", error)

    def _overdue_suspensions(self, now: Now) -> list[tuple[AllocationRecord, float]]:
        """Preempted containers past their queue's ``max_suspended_s``, with that limit."""
        overdue = []
        for allocation in self.tables.preempted():
            if allocation.goal is Goal.STOP or allocation.held_by:
                continue
            limit = self.queues.spec_of(allocation.job_id).max_suspended_s
            if limit is not None and now.wall - allocation.preempted_at > limit:
                overdue.append((allocation, limit))
        return overdue

    def _next_suspension_deadline(self) -> float | None:
        """The wall time the next preempted container passes its queue's limit, if any."""
        deadlines = []
        for allocation in self.tables.preempted():
            limit = self.queues.spec_of(allocation.job_id).max_suspended_s
            if limit is not None and allocation.goal is not Goal.STOP and not allocation.held_by:
                deadlines.append(allocation.preempted_at + limit)
        return min(deadlines, default=None)

    def _resize(
        self,
        allocation: AllocationRecord,
        limits: Resources,
        reason: str,
        now: Now,
        held_by: str | None = None,
    ) -> AllocationRecord | None:
        self._check_limits(allocation, limits)
        full = None if limits == allocation.resources else limits
        self._check_room(allocation, Goal.RUN, full)
        return self._set_goal(allocation, Goal.RUN, full, reason, now, held_by)

    def _check_limits(self, allocation: AllocationRecord, limits: Resources) -> None:
        if not (limits.cpu > 0 and limits.memory_mb > 0 and limits.fits_in(allocation.resources)):
            grant = allocation.resources
            raise ConflictError(
                f"{allocation.allocation_id}: limits of {limits.cpu:g} cpu, {limits.memory_mb} "
                f"MiB must be positive and within its grant of {grant.cpu:g} cpu, "
                f"{grant.memory_mb} MiB"
            )

    def _goal_target(self, allocation_id: str) -> AllocationRecord:
        allocation = self.allocations.get(allocation_id)
        if allocation is None or allocation.is_master:
            raise NotFoundError(f"no task container {allocation_id!r}")
        return allocation

    def _check_room(
        self, allocation: AllocationRecord, goal: Goal, limits: Resources | None
    ) -> None:
        """Refuse a change that would make the container hold more than its node has free."""
        node = self.nodes.get(allocation.node_id)
        after = replace(allocation, goal=goal, limits=limits).holds
        others = self.tables.allocated_on(allocation.node_id) - allocation.holds
        if node is None or node.state is not NodeState.READY:
            raise ConflictError(f"{allocation.allocation_id}: node {allocation.node_id} is lost")
        if not (others + after).fits_in(node.capacity):
            raise ConflictError(
                f"{allocation.allocation_id}: node {allocation.node_id} has no room for "
                f"{after.cpu:g} cpu, {after.memory_mb} MiB now"
            )

    def _set_goal(
        self,
        allocation: AllocationRecord,
        goal: Goal,
        limits: Resources | None,
        reason: str,
        now: Now,
        held_by: str | None = None,
    ) -> AllocationRecord | None:
        """``held_by``: who holds the container after the change (None: as before); a
        container let run with its whole grant is held by nobody."""
        whole = goal is Goal.RUN and limits is None
        holder = "" if whole else allocation.held_by if held_by is None else held_by
        if (goal, limits) == (allocation.goal, allocation.limits):
            if holder != allocation.held_by:  # (an operator takes over a preemption)
                changed = replace(allocation, held_by=holder, goal_reason=reason)
                self.tables.put_allocation(changed)
                return changed
            return allocation  # asked again (a later pass) while it is being carried out
        try:
            check_goal(allocation.goal, goal)
        except TransitionError as error:
            raise ConflictError(f"{allocation.allocation_id}: {error}") from None
        log.info(
            "container %s of %s on %s: %s%s (%s)",
            allocation.allocation_id,
            allocation.job_id,
            allocation.node_id,
            goal.value,
            "" if limits is None else f" at {limits.cpu:g} cpu, {limits.memory_mb} MiB",
            reason,
        )
        changed = replace(
            allocation,
            goal=goal,
            limits=limits,
            goal_reason=reason,
            preempted_at=0.0 if whole else allocation.preempted_at or now.wall,
            held_by=holder,
        )
        if whole and allocation.preempted_at:
            self.book.set_declined(allocation.allocation_id, None)
        self._tell(allocation.node_id)
        if goal is Goal.STOP and allocation.shown is Shown.IDLE:
            # Nothing runs in it: take it back now.
            self.tables.remove_allocation(allocation.allocation_id)
            self._note_lost(allocation.job_id, allocation.allocation_id)
            return None
        self.tables.put_allocation(changed)
        return changed

    # ================================================================ job masters

    def register_master(self, job_id: str, *, attempt: int, now: Now) -> MasterRegistration:
        """A job master announces itself; it receives what it needs to drive (or resume) the
        job: the job, its task containers and the history of its task attempts."""
        job = self.job(job_id)
        if not job.state.is_final:
            self._check_attempt(job, attempt)
            if job.state is JobState.SUBMITTED and not job.client_mode:
                raise ConflictError(
                    f"job {job_id} has no job master allocation yet (attempt {attempt} was lost)"
                )
        if job.state in (JobState.SUBMITTED, JobState.STARTING):
            self._move(job, JobState.RUNNING, start_time=job.start_time or now.wall)
            log.info("job %s: job master attempt %d registered", job_id, attempt)
        held = tuple(a for a in self.tables.allocations_of_job(job_id) if not a.is_master)
        history = tuple(sorted(self.tables.tasks_of_job(job_id), key=lambda t: t.seq))
        return MasterRegistration(self.jobs[job_id], held, history)

    def allocate(
        self,
        job_id: str,
        asks: Sequence[PhaseAsk],
        releases: Sequence[str],
        progress: Sequence[PhaseProgress],
        events_after: int,
        *,
        now: Now,
        attempt: int = 1,
        kept: Sequence[KeptSlot] = (),
    ) -> AllocateResult:
        """One job master round: give back ``releases``, record ``progress`` and the slot
        reservations that changed (``kept``), replace the job's asks, place what fits, and
        answer new grants and task events after ``events_after``.  Everything is checked
        against the job's spec before anything changes."""
        job = self.job(job_id)
        if not job.state.is_final:
            self._check_attempt(job, attempt)
        self._check_releases(job_id, releases)
        self._check_kept(job, kept)
        progressed = self._check_progress(job, progress)
        delivered: Mapping[str, int] = self.tables.delivered_of_job(job_id)
        if releases:  # (what it gives back no longer counts; copied only then)
            held = Counter(delivered)
            for allocation_id in releases:
                released = self.allocations.get(allocation_id)
                if released is not None and released.delivered:
                    held[released.phase] -= 1
            delivered = held
        try:
            check_asks(job.spec, asks, delivered)
        except AskError as error:
            raise InvalidRequestError(error.field, error.problem) from None

        self._kept_ended(job_id, releases, kept, now)
        for allocation_id in releases:
            self.tables.remove_allocation(allocation_id)
        for slot in kept:
            allocation = self.allocations.get(slot.allocation_id)
            if allocation is not None:  # (gone meanwhile: nothing to keep)
                phase = "" if slot.ended else slot.phase  # (an end: no longer kept)
                until = slot.until if phase else 0.0
                self.tables.put_allocation(evolve(allocation, kept_for=phase, kept_until=until))
        if job.state.is_final:
            return self._allocate_answer(job_id, events_after)
        if progressed:
            job = evolve(job, progress=tuple(progress))
            self.tables.put_job(job)
        if job.state is JobState.RUNNING and not job.kill_requested:
            # The master counts only containers it has been told of; grants made since its last
            # call (not yet delivered) already serve part of its absolute ask.
            waiting = self.tables.undelivered_of_job(job_id)  # (most rounds: none)
            undelivered = Counter(a.phase for a in waiting) if waiting else None
            grew = self._set_asks(
                job,
                now.monotonic,
                [
                    replace(a, count=a.count - undelivered[a.phase])
                    for a in asks
                    if a.count > undelivered[a.phase]
                ]
                if undelivered
                else [a for a in asks if a.count > 0],
            )
            if grew:
                # The job master sees at once what it can have.  Only when its own asks grew:
                # a round that repeats itself changes nothing (the simulator skips such rounds).
                self.schedule(now)
        else:
            self._set_asks(job, now.monotonic, ())
        return self._allocate_answer(job_id, events_after)

    def _allocate_answer(self, job_id: str, events_after: int) -> AllocateResult:
        granted = []
        for allocation in self.tables.undelivered_of_job(job_id):
            granted.append(self.tables.mark_delivered(allocation.allocation_id))
        events = self.tables.tasks_after(job_id, events_after)
        lost = self._lost_allocations.pop(job_id, [])
        if lost:
            self.tables.journal(lambda: self._lost_allocations.__setitem__(job_id, lost))
        job = self.job(job_id)
        return AllocateResult(
            granted=tuple(granted),
            events=tuple(events),
            lost_allocations=tuple(lost),
            kill_requested=job.kill_requested or job.state.is_final,
        )

    def finish_job(
        self,
        job_id: str,
        state: JobState,
        message: str,
        progress: Sequence[PhaseProgress],
        *,
        now: Now,
        attempt: int = 1,
    ) -> JobRecord:
        job = self.job(job_id)
        if not state.is_final:
            raise InvalidRequestError("state", f"{state.value} is not a final job state")
        if job.state.is_final:
            return job
        self._check_attempt(job, attempt)
        self._check_progress(job, progress)
        if progress:
            job = replace(job, progress=tuple(progress))
        self._finish(job, state, message, now)
        self.update_sprints(now)
        return self.jobs[job_id]

    # ================================================================ views

    def node_allocated(self, node_id: str) -> Resources:
        return self.tables.allocated_on(node_id)

    def node_address(self, node_id: str) -> str:
        node = self.nodes.get(node_id)
        return node.address if node else ""

    # ================================================================ checks

    def _check_attempt(self, job: JobRecord, attempt: int) -> None:
        if job.state is JobState.SUBMITTED and not job.client_mode and job.master_attempt:
            raise ConflictError(
                f"job master attempt {attempt} of {job.job_id} is gone: the job waits for a new "
                f"one ({job.message})"
            )
        if attempt == job.master_attempt:
            return
        if 0 < attempt < job.master_attempt:
            raise ConflictError(
                f"job master attempt {attempt} of {job.job_id} was superseded by attempt "
                f"{job.master_attempt}"
            )
        raise ConflictError(
            f"attempt: job {job.job_id} has no job master attempt {attempt} "
            f"(its current attempt is {job.master_attempt})"
        )

    def _check_releases(self, job_id: str, releases: Sequence[str]) -> None:
        """Only the job's own task containers can be given back; unknown ids are ignored (a
        release repeated after a lost answer is no error)."""
        for index, allocation_id in enumerate(releases):
            allocation = self.allocations.get(allocation_id)
            if allocation is not None and (allocation.job_id != job_id or allocation.is_master):
                raise InvalidRequestError(
                    f"releases[{index}]",
                    f"{allocation_id} is not a task container of {job_id}",
                )

    def _check_kept(self, job: JobRecord, kept: Sequence[KeptSlot]) -> None:
        """Only the job's own task containers can be kept, for one of its phases, until a
        finite time; unknown ids are ignored (released or lost meanwhile)."""
        phases = {phase.name for phase in job.spec.phases}
        for index, slot in enumerate(kept):
            allocation = self.allocations.get(slot.allocation_id)
            if allocation is not None and (allocation.job_id != job.job_id or allocation.is_master):
                raise InvalidRequestError(
                    f"kept[{index}].allocation_id",
                    f"{slot.allocation_id} is not a task container of {job.job_id}",
                )
            if slot.phase and slot.phase not in phases:
                raise InvalidRequestError(
                    f"kept[{index}].phase", f"the job has no phase {slot.phase!r}"
                )
            if not (0 <= slot.until < float("inf")):
                raise InvalidRequestError(
                    f"kept[{index}].until", f"must be a time >= 0, got {slot.until}"
                )

    def _kept_ended(
        self, job_id: str, releases: Sequence[str], kept: Sequence[KeptSlot], now: Now
    ) -> None:
        """Record each end of a kept container the job reports (``ended``: the phase it was
        kept for, or the one the RM knew, and the job master's reason), and of each kept one
        it gives back with no report ("released") (:class:`KeptLog`)."""
        reported = set()
        for slot in kept:
            allocation = self.allocations.get(slot.allocation_id)
            if allocation is None:
                continue
            if slot.ended or (not slot.phase and allocation.kept_for):
                reported.add(slot.allocation_id)
                phase = (slot.phase if slot.ended else "") or allocation.kept_for
                reason = (slot.ended or "released")[:200]  # (bounded: from the wire)
                self._note_kept_end(allocation, reason, now, phase)
        for allocation_id in releases:
            allocation = self.allocations.get(allocation_id)
            if allocation is not None and allocation.kept_for and allocation_id not in reported:
                self._note_kept_end(allocation, "released", now)

    def _note_kept_end(
        self, allocation: AllocationRecord, reason: str, now: Now, phase: str = ""
    ) -> None:
        self.kept_log.record(
            KeptEnded(
                allocation.job_id,
                allocation.allocation_id,
                allocation.node_id,
                phase or allocation.kept_for,
                reason,
                now.wall,
            )
        )

    def kept_slots(self, job_id: str) -> list[AllocationRecord]:
        """The job's task containers kept for a downstream phase now, oldest grant first."""
        return sorted(
            (a for a in self.tables.allocations_of_job(job_id) if a.kept_for),
            key=lambda a: a.granted_time,
        )

    def _check_progress(self, job: JobRecord, progress: Sequence[PhaseProgress]) -> bool:
        """Progress must describe the job's phases, in order, with counts within each phase.
        True if it differs from what the job records."""
        if not progress or tuple(progress) == job.progress:
            return False  # nothing, or what was checked and recorded already (most rounds)
        if len(progress) != len(job.spec.phases):
            raise InvalidRequestError(
                "progress",
                f"must list the job's {len(job.spec.phases)} phases, got {len(progress)}",
            )
        for index, (reported, phase) in enumerate(zip(progress, job.spec.phases, strict=True)):
            if reported.name != phase.name or reported.tasks != phase.tasks:
                raise InvalidRequestError(
                    f"progress[{index}]", f"must be phase {phase.name!r} of {phase.tasks} tasks"
                )
            counts = (reported.pending, reported.running, reported.succeeded, reported.dropped)
            if min(*counts, reported.failed) < 0 or sum(counts) > phase.tasks:
                raise InvalidRequestError(
                    f"progress[{index}]", "task counts must be >= 0 and add up to tasks"
                )
        return True

    # ================================================================ internals

    def _forget_lost(self, node_id: str) -> None:
        since = self._lost_since.pop(node_id, None)
        if since is not None and self.tables.in_unit:
            self.tables.journal(lambda: self._lost_since.__setitem__(node_id, since))

    def _move(self, job: JobRecord, state: JobState, **changes: object) -> JobRecord:
        check_transition(JOB_TRANSITIONS, job.state, state)
        moved = replace(job, state=state, **changes)  # type: ignore[arg-type]
        left_execution = job.job_id in self.tables.in_execution
        self.tables.put_job(moved)
        if left_execution and job.job_id not in self.tables.in_execution:
            # A place in execution is free: the head of the highest buffer may go.  (Not
            # undone with a rolled-back unit: at worst one pass too many.)
            self._asks_grew = self._asks_grew or self.settings.dispatch.buffered
        if left_execution != (job.job_id in self.tables.in_execution) and self.sprints.enabled:
            job_id = job.job_id
            self._execution_changed[job_id] = None
            self.tables.journal(lambda: self._execution_changed.pop(job_id, None))
        self._sync_master_ask(moved)
        if state is not JobState.RUNNING:
            self._set_asks(moved, 0.0, ())
        return moved

    def _finish(self, job: JobRecord, state: JobState, message: str, now: Now) -> None:
        """Make the job final and give back its task containers.  Its job master's container
        stays until the node reports the process ended; stopping anything still running is
        left to reconciliation (:meth:`_commands_for`)."""
        self._move(job, state, finish_time=now.wall, message=message)
        log.info("job %s %s%s", job.job_id, state.value, f": {message}" if message else "")
        for allocation in self.tables.allocations_of_job(job.job_id):
            if not allocation.is_master:
                self.tables.remove_allocation(allocation.allocation_id)

    def _master_lost(self, job: JobRecord, reason: str, now: Now) -> None:
        """The job's current job master is gone: start another attempt if any is left."""
        attempts = self.settings.max_master_attempts
        # (a job master stopped by an eviction failed no attempt)
        if job.kill_requested or job.master_attempt - job.execution.evictions >= attempts:
            self._finish(
                job, JobState.FAILED, f"{reason} (attempt {job.master_attempt} of {attempts})", now
            )
            return
        log.warning(
            "job %s: %s; starting job master attempt %d", job.job_id, reason, job.master_attempt + 1
        )
        self._move(
            job,
            JobState.SUBMITTED,
            master_node="",
            master_allocation="",
            message=f"{reason}; job master attempt {job.master_attempt + 1} pending",
        )

    def _grant(self, placement: Placement, now: Now) -> bool:
        """Apply one placement of a plan, after checking it still holds.  The caller lowers the
        job's pending ask (once per plan, not per container)."""
        job = self.jobs.get(placement.job_id)
        node = self.nodes.get(placement.node_id)
        # Checked against the records, not the capacity index (which holds the pass's
        # tentative placements already).
        fits = (
            node is not None
            and node.state is NodeState.READY
            and (placement.resources + self.tables.allocated_on(node.node_id)).fits_in(
                node.capacity
            )
        )
        if job is None or not fits:
            if node is not None:
                self.tables.refresh_capacity(node.node_id)  # undo the tentative placement
            log.warning(
                "dropping a stale placement for %s on %s", placement.job_id, placement.node_id
            )
            return False
        master = placement.kind is AllocationKind.JOB_MASTER
        number = self.tables.next_counter("allocation")
        allocation = AllocationRecord(
            allocation_id=f"{placement.job_id}-a{number}",
            job_id=placement.job_id,
            kind=placement.kind,
            phase=placement.phase,
            node_id=placement.node_id,
            resources=placement.resources,
            granted_time=now.wall,
        )
        self.tables.put_allocation(allocation)
        if placement.queue:
            self.book.consume(placement.node_id, placement.queue, placement.resources)
        self._placed.append(placement)
        self.tables.journal(lambda: self._placed.remove(placement))
        if master:
            self._move(
                job,
                JobState.STARTING,
                master_node=placement.node_id,
                master_allocation=allocation.allocation_id,
                master_attempt=job.master_attempt + 1,
                execution=job.execution
                if job.execution.dispatched_at
                else replace(job.execution, dispatched_at=now.wall),
            )
            log.info(
                "job %s: job master attempt %d placed on %s",
                job.job_id,
                job.master_attempt + 1,
                placement.node_id,
            )
        return True

    def _note_lost(self, job_id: str, allocation_id: str) -> None:
        """Tell the job master at its next Allocate that this container went with its node."""
        lost = self._lost_allocations.setdefault(job_id, [])
        lost.append(allocation_id)

        def undo() -> None:
            lost.remove(allocation_id)

        self.tables.journal(undo)

    def _set_asks(self, job: JobRecord, now: float, asks: Iterable[PhaseAsk]) -> bool:
        """Replace a job's task asks, undoably; True if any grew (a pass may place more).  An
        ask's locality wait runs from when its phase first named preferred nodes (``now``,
        monotonic): asking again does not restart it.  A local-only ask (a pre-reservation)
        waits for them with no end, where the cluster has a locality wait at all; once its
        phase opens and asks as usual, the usual wait starts."""
        wanted = {ask.phase: ask for ask in asks}
        grew = False
        held: dict[str, PendingAsk] = {}
        for previous in self.pending.of_job(job.job_id):
            if previous.kind is AllocationKind.TASK:
                if previous.phase in wanted:
                    held[previous.phase] = previous
                else:
                    self._put_ask(replace(previous, count=0))
        wait = self.settings.locality_wait
        for ask in wanted.values():
            before = held.get(ask.phase)
            preferred = frozenset(ask.preferred_nodes)
            strict = bool(preferred) and wait > 0 and ask.local_only
            if (
                before is not None
                and before.count == ask.count
                and before.resources == ask.resources
                and before.priority == job.spec.priority
                and before.preferred_nodes == preferred
                and (before.local_until == math.inf) == strict
            ):
                continue  # unchanged (most rounds repeat the asks before): nothing to do
            local_until = 0.0
            if strict:
                local_until = math.inf  # (a pre-reservation: near its input or not at all)
            elif preferred:
                if before is not None and before.preferred_nodes and before.local_until < math.inf:
                    local_until = before.local_until  # the wait goes on
                else:
                    local_until = now + wait
            grew |= self._put_ask(
                PendingAsk(
                    job.job_id,
                    job.spec.priority,
                    job.seq,
                    ask.phase,
                    ask.count,
                    ask.resources,
                    queue=self.queues.queue_of(job),
                    preferred_nodes=preferred,
                    local_until=local_until,
                )
            )
            if before is not None and (
                before.preferred_nodes != preferred or before.local_until != local_until
            ):
                grew = self._asks_grew = True  # more nodes will do: a pass may place it now
        return grew

    def _put_ask(self, ask: PendingAsk) -> bool:
        """Set one pending ask (a count of 0 removes it), undoably; True if it grew."""
        previous = self.pending.put(ask)
        grew = ask.count > (previous.count if previous is not None else 0)
        if grew:
            self._asks_grew = True  # (not undone: at worst one pass too many)
        key_ask = replace(ask, count=0)

        def undo() -> None:
            self.pending.put(previous if previous is not None else key_ask)

        self.tables.journal(undo)
        return grew

    def _sync_master_ask(self, job: JobRecord) -> None:
        """A job waiting for a job master container (SUBMITTED, not client mode, not being
        killed) asks for one; any other job does not."""
        wants = job.state is JobState.SUBMITTED and not job.client_mode and not job.kill_requested
        ask = PendingAsk(
            job.job_id,
            job.spec.priority,
            job.seq,
            "",
            1 if wants else 0,
            MASTER_RESOURCES,
            AllocationKind.JOB_MASTER,
            queue=self.queues.queue_of(job),
        )
        if self.tables.in_unit:
            self._put_ask(ask)
        else:
            self.pending.put(ask)
            self._asks_grew = self._asks_grew or wants

    # ---------------------------------------------------------------- what nodes report

    def _observe_reports(
        self, node_id: str, reports: Sequence[TaskReport], now: Now
    ) -> tuple[int, dict[str, StopAllocation | None]]:
        """Apply a node's reports.  A live task no job should be running is not recorded; the
        heartbeat answer tells the node to stop it.  Returns the tables' version after, with
        the stop found for each live task (reused by :meth:`_commands_for` while no job or
        allocation changed in between)."""
        stops: dict[str, StopAllocation | None] = {}
        for report in reports:
            if report.job_master:
                self._observe_master(report, now)
            elif report.speculative:  # its job master tracks it (ROSE): only its stop is ours
                if not report.state.is_final:
                    stops[report.allocation_id] = self._stop_command(report, now)
            elif report.state.is_final:
                self._observe_task(node_id, report, now)
            else:
                stop = stops[report.allocation_id] = self._stop_command(report, now)
                if stop is None:
                    self._observe_task(node_id, report, now)
        return self.tables.version, stops

    def _observe_task(self, node_id: str, report: TaskReport, now: Now) -> None:
        if (
            report.state is TaskState.RUNNING
            and report.sprint_factor == 1.0
            and self.sprints.sprinting(report.job_id)
        ):
            self._tell(node_id)  # a task of a sprinting job started: it sprints too
        key = (report.job_id, report.task_id, report.attempt)
        task = self.tasks.get(key)
        if task is None:
            allocation = self.allocations.get(report.allocation_id)
            if report.job_id not in self.jobs or allocation is None or allocation.is_master:
                return  # a task in no container of its job: nothing to record
            if allocation.job_id != report.job_id:
                return
            task = TaskRecord(
                job_id=report.job_id,
                task_id=report.task_id,
                attempt=report.attempt,
                # (the task's own phase: a container kept across a barrier runs a task of
                # the phase after the one it was granted for)
                phase=report.task_id.rsplit("-", 1)[0],
                state=TaskState.LAUNCHING,
                node_id=node_id,
                allocation_id=report.allocation_id,
                seq=0,
                start_time=report.start_time or report.timestamp or now.wall,
                execution=self.jobs[report.job_id].execution.number,
            )
        step = self._observe_container(task.allocation_id, report, now)
        if step is not None and task.state == report.state:
            self.tables.put_task(evolve(task, preemptions=(*task.preemptions, step)))
            return
        if task.state == report.state:
            return
        if step is not None:
            task = evolve(task, preemptions=(*task.preemptions, step))
        try:
            check_transition(TASK_TRANSITIONS, task.state, report.state)
        except TransitionError:
            log.debug("ignoring stale report %s for %s", report.state.value, key)
            return
        allocation = self.allocations.get(task.allocation_id)
        preempted = (
            report.state is TaskState.KILLED
            and allocation is not None
            and allocation.goal is Goal.STOP
        )
        finish_time = (report.timestamp or now.wall) if report.state.is_final else 0.0
        steps = task.preemptions
        if preempted and allocation is not None:
            lost = max(finish_time - task.start_time, 0.0) if task.start_time else 0.0
            steps = (
                *steps,
                PreemptionStep(finish_time, "killed", None, allocation.goal_reason, lost),
            )
        self.tables.put_task(
            evolve(
                task,
                state=report.state,
                exit_code=report.exit_code,
                message=f"preempted: {allocation.goal_reason}"
                if preempted and allocation is not None
                else report.message,
                finish_time=finish_time,
                seq=self.tables.next_counter("event"),
                preempted=preempted,
                preemptions=steps,
            )
        )
        if report.state.is_final and allocation is not None and allocation.goal is Goal.STOP:
            # A preempted container goes back to the cluster once its task is shown stopped.
            self.tables.remove_allocation(allocation.allocation_id)
            self._note_lost(allocation.job_id, allocation.allocation_id)

    def _observe_container(
        self, allocation_id: str, report: TaskReport, now: Now
    ) -> PreemptionStep | None:
        """Record what the node shows of a task container: the state and limits of its task,
        and whether it swaps.  Returns the preemption step the change shows, if it is one."""
        allocation = self.allocations.get(allocation_id)
        if allocation is None:
            return None
        if (
            report.state is TaskState.RUNNING
            and allocation.shown is Shown.RUNNING
            and allocation.shown_limits is None
            and (report.limits is None or report.limits == allocation.resources)
            and report.swapping == allocation.swapping
        ):
            return None  # the common case, every heartbeat: still running as granted
        shown = _shown_by(report)
        limits = report.limits if shown is not Shown.IDLE else None
        if limits is not None and limits == allocation.resources:
            limits = None
        if (shown, limits, report.swapping) == (
            allocation.shown,
            allocation.shown_limits,
            allocation.swapping,
        ):
            return None
        self.tables.put_allocation(
            evolve(allocation, shown=shown, shown_limits=limits, swapping=report.swapping)
        )
        # (a live task's report is stamped with its start: the change is seen now)
        when = (report.timestamp or now.wall) if report.state.is_final else now.wall
        return _step_shown(allocation, shown, limits, when)

    def _observe_master(self, report: TaskReport, now: Now) -> None:
        """A job master's process ended: release its container; if it was the job's current
        job master and the job is not final, the job master is lost."""
        if not report.state.is_final:
            return
        allocation = self.allocations.get(report.allocation_id)
        if allocation is not None and allocation.is_master and allocation.job_id == report.job_id:
            self.tables.remove_allocation(allocation.allocation_id)
        job = self.jobs.get(report.job_id)
        if job is None or job.state.is_final or job.master_allocation != report.allocation_id:
            return
        self._master_lost(
            job,
            f"job master attempt {job.master_attempt} exited with code {report.exit_code} "
            "before reporting a final state",
            now,
        )

    def _stop_command(self, report: TaskReport, now: Now) -> StopAllocation | None:
        """What stops this live task or job master on its node, and why; None if it may run.
        A speculative task has no allocation to check: it runs while its job does.  The one
        place a stop is decided to be a preemption kill (``preempted``: its container's goal is
        STOP, the rule :meth:`_observe_task` records the kill by)."""

        def stop(reason: str, *, preempted: bool = False) -> StopAllocation:
            return StopAllocation(report.job_id, report.allocation_id, reason, preempted)

        job = self.jobs.get(report.job_id)
        if job is None:  # a finished job has left memory; say how it ended
            stored = self.tables.find_job(report.job_id)
            return stop("no such job" if stored is None else f"job {stored.state.value}")
        if report.speculative:
            return stop(f"job {job.state.value}") if job.state.is_final else None
        allocation = self.allocations.get(report.allocation_id)
        if allocation is None or allocation.job_id != report.job_id:
            return stop(f"allocation {report.allocation_id} is not {report.job_id}'s")
        if allocation.is_master != report.job_master:
            return stop(f"allocation {report.allocation_id} is not for this process")
        if allocation.goal is Goal.STOP:
            return stop(f"preempted: {allocation.goal_reason}", preempted=True)
        if report.job_master and job.master_allocation != allocation.allocation_id:
            if job.state is JobState.SUBMITTED and job.execution.evictions:
                return stop(f"job {job.message}")
            return stop("a newer job master attempt replaced it")
        if not job.state.is_final:
            return None
        if report.job_master and job.state is JobState.SUCCEEDED:
            # It exits by itself once its outcomes are flushed; stop it only if it lingers.
            lingering = now.wall - job.finish_time > self.settings.master_exit_grace
            grace = self.settings.master_exit_grace
            return stop(f"job succeeded {grace:g} s ago") if lingering else None
        return stop(f"job {job.state.value}")

    def _count_speculative(self, node_id: str, live: Sequence[TaskReport]) -> None:
        """What the node's live speculative tasks hold, as its heartbeat shows them: counted
        as opportunistic, never as allocated (ROSE; docs/oversubscription.md)."""
        held, count = Resources(), 0
        for report in live:
            if report.speculative and not report.state.is_final and report.limits is not None:
                held, count = held + report.limits, count + 1
        if count:
            self._opportunistic[node_id] = (held, count)
        else:
            self._opportunistic.pop(node_id, None)

    def node_addresses(self, node_ids: Sequence[str]) -> dict[str, str]:
        """The agent addresses of those of ``node_ids`` that are live: where a job master may
        place speculative tasks (ROSE).  O(len(node_ids))."""
        found = {}
        for node_id in node_ids:
            node = self.nodes.get(node_id)
            if node is not None and node.state is NodeState.READY:
                found[node_id] = node.address
        return found

    def opportunistic(self, node_id: str) -> tuple[Resources, int]:
        """What a node's live speculative tasks hold, and how many, at its last heartbeat."""
        return self._opportunistic.get(node_id, (Resources(), 0))

    def _commands_for(
        self,
        node_id: str,
        reports: Sequence[TaskReport],
        now: Now,
        known: tuple[int, dict[str, StopAllocation | None]] = (-1, {}),
    ) -> list[NodeCommand]:
        """Reconcile the node: what it should run against what it just reported.  ``known``:
        stops already found at a version of the tables (see :meth:`_observe_reports`)."""
        reported = {r.allocation_id for r in reports}
        commands: list[NodeCommand] = []
        for allocation in self.tables.masters_of_node(node_id):
            if allocation.allocation_id in reported:
                continue
            job = self.jobs[allocation.job_id]
            if job.master_allocation == allocation.allocation_id and job.state is JobState.STARTING:
                commands.append(
                    LaunchMaster(
                        job.job_id,
                        allocation.allocation_id,
                        allocation.resources,
                        job.master_attempt,
                    )
                )
            elif job.state.is_final or job.master_allocation != allocation.allocation_id:
                # Its process is not running here (never launched, or ended and reported):
                # nothing more will be heard of this container.
                self.tables.remove_allocation(allocation.allocation_id)
        version, stops = known
        if version != self.tables.version:
            stops = {}
        stopping: set[str] = set()
        for report in reports:
            if report.state.is_final or report.allocation_id in stopping:
                continue
            if report.allocation_id in stops and not report.job_master:
                stop = stops[report.allocation_id]
            else:
                stop = self._stop_command(report, now)
            if stop is not None:
                stopping.add(report.allocation_id)
                commands.append(stop)
            elif not report.job_master:
                command = self._container_command(report)
                if command is not None:
                    stopping.add(report.allocation_id)
                    commands.append(command)
        return commands

    def _container_command(self, report: TaskReport) -> NodeCommand | None:
        """What brings a task's container to its goal, given what the node just showed."""
        allocation = self.allocations.get(report.allocation_id)
        if allocation is None:
            return None
        if self.sprints.enabled and allocation.goal is Goal.RUN and allocation.limits is None:
            factor = (
                self.settings.dias.sprint.factor if self.sprints.sprinting(report.job_id) else 1.0
            )
            if report.sprint_factor != factor and report.state is TaskState.RUNNING:
                return SprintAllocation(allocation.job_id, allocation.allocation_id, factor)
        if (
            allocation.goal is Goal.RUN
            and allocation.limits is None
            and report.state is not TaskState.SUSPENDED
            and (report.limits is None or report.limits == allocation.resources)
        ):
            return None  # the common case, every heartbeat: to run as granted, and it does
        needed = container_command(
            allocation.resources,
            allocation.goal,
            allocation.limits,
            _shown_by(report),
            report.limits,
        )
        if needed is ContainerCommand.SUSPEND:
            return SuspendAllocation(
                allocation.job_id,
                allocation.allocation_id,
                allocation.goal_reason,
                allocation.limits,
            )
        if needed is ContainerCommand.RESUME:
            # The limits to restore are always spelled out (the grant, or what it is shrunk
            # to): the node restores them before it thaws the task.
            return ResumeAllocation(
                allocation.job_id, allocation.allocation_id, allocation.current_limits
            )
        if needed is ContainerCommand.RESIZE:
            graceful = allocation.goal is Goal.SHRINK
            return ResizeAllocation(
                allocation.job_id,
                allocation.allocation_id,
                allocation.current_limits,
                step=self.queues.spec_of(allocation.job_id).graceful_step if graceful else None,
                freeze_on_swap=graceful,
            )
        return None  # STOP is a stop reason, answered above

    def _lose_unheard(self, node_id: str, since: float, now: Now) -> None:
        """A node that held work when this RM started (at ``since``, monotonic) and has not
        registered since is lost: listed as lost (its address and capacity unknown to this
        RM), and what it held is lost as a silent node's is."""
        del self._unheard[node_id]
        self.tables.journal(lambda: self._unheard.__setitem__(node_id, None))
        log.warning(
            "node %s held work when this resource manager started and has not registered since",
            node_id,
        )
        self.tables.put_node(
            NodeRecord(
                node_id=node_id,
                address="",
                runtime="",
                capacity=Resources(),
                instance_id="",
                last_heartbeat=since + (now.wall - now.monotonic),
                last_seen=since,
                state=NodeState.LOST,
            )
        )
        self._lose_node(node_id, now)

    def _lose_node(self, node_id: str, now: Now) -> None:
        node = self.nodes[node_id]
        self.tables.put_node(replace(node, state=NodeState.LOST))
        self._opportunistic.pop(node_id, None)  # its speculative tasks are lost with it
        self._lost_since[node_id] = node.last_seen
        self.tables.journal(lambda: self._forget_lost(node_id))
        log.warning(
            "node %s lost: no heartbeat for %.1f s", node_id, now.monotonic - node.last_seen
        )
        self._lose(
            self.tables.allocations_of_node(node_id),
            self.tables.live_tasks_of_node(node_id),
            f"job master's node {node_id} was lost",
            f"node {node_id} lost",
            now,
        )

    def _lose(
        self,
        allocations: Sequence[AllocationRecord],
        tasks: Sequence[TaskRecord],
        master_reason: str,
        task_reason: str,
        now: Now,
    ) -> None:
        """These containers and task attempts of one node are gone (the node was lost, or came
        back without them): each container is freed, a task container is reported to its job
        master as lost, the job's current job master is lost (``master_reason``; another
        attempt, if any is left), and each task attempt becomes LOST (``task_reason``; its job
        master retries or fails it as the job says)."""
        for allocation in allocations:
            self.tables.remove_allocation(allocation.allocation_id)
            if allocation.kept_for:
                self._note_kept_end(allocation, task_reason, now)
            job = self.jobs.get(allocation.job_id)
            if job is None or job.state.is_final:
                continue
            if allocation.is_master:
                if job.master_allocation == allocation.allocation_id:
                    self._master_lost(job, master_reason, now)
            else:
                self._note_lost(job.job_id, allocation.allocation_id)
        for task in tasks:
            self._observe_task(
                task.node_id,
                TaskReport(
                    task.job_id,
                    task.task_id,
                    task.attempt,
                    task.allocation_id,
                    TaskState.LOST,
                    message=task_reason,
                    timestamp=now.wall,
                ),
                now,
            )


def _check_session(session: str) -> None:
    if len(session) > MAX_SESSION_LENGTH:
        raise InvalidRequestError(
            "session", f"must be at most {MAX_SESSION_LENGTH} characters, got {len(session)}"
        )


def _restore(table: dict[str, V], key: str, value: V | None) -> None:
    """Put ``table[key]`` back as it was (None: absent): a rolled-back unit's undo."""
    if value is None:
        table.pop(key, None)
    else:
        table[key] = value


def _step_shown(
    before: AllocationRecord, shown: Shown, limits: Resources | None, time: float
) -> PreemptionStep | None:
    """The preemption step a container's new report shows, or None (a task starting or
    ending, a swap flag changing)."""
    reason = before.goal_reason
    if shown is Shown.SUSPENDED and before.shown is Shown.RUNNING:
        action = "frozen" if before.goal is Goal.SHRINK else "suspended"
        return PreemptionStep(time, action, limits or before.shown_limits, reason)
    if shown is Shown.RUNNING and before.shown is Shown.SUSPENDED:
        return PreemptionStep(time, "resumed", limits, "")
    if shown is before.shown and limits != before.shown_limits and shown is not Shown.IDLE:
        if limits is None:
            return PreemptionStep(time, "resumed", None, "")
        old = before.shown_limits or before.resources
        lower = limits.cpu < old.cpu - 1e-3 or limits.memory_mb < old.memory_mb
        if shown is Shown.SUSPENDED:
            return PreemptionStep(time, "swapped out", limits, reason) if lower else None
        return PreemptionStep(time, "shrunk" if lower else "grown", limits, reason)
    return None


def _shown_by(report: TaskReport) -> Shown:
    """What a task's report shows of its container."""
    if report.state is TaskState.SUSPENDED:
        return Shown.SUSPENDED
    if report.state.is_final:
        return Shown.IDLE
    return Shown.RUNNING  # LAUNCHING counts as running: its process may be starting


def check_fits_master(capacities: Sequence[Resources]) -> None:
    """Refuse a job whose job master could run on no node (only when nodes are known)."""
    if capacities and not any(MASTER_RESOURCES.fits_in(c) for c in capacities):
        raise SpecError(
            "cluster",
            f"no node can host a job master ({MASTER_RESOURCES.cpu:g} cpu, "
            f"{MASTER_RESOURCES.memory_mb} MiB)",
        )
