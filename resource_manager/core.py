"""The resource manager's bookkeeping: jobs, nodes, allocations and task attempts.

This is the RM without its network.  Every method of :class:`ResourceManagerCore` is one
request or one tick, takes the time as a :class:`Now` and changes the state; the caller wraps
each call in a unit of work (``tables.begin()`` ... ``commit()`` or ``rollback()``), so a
request is applied whole or not at all, in memory and on disk.  Not thread-safe: the gRPC
layer runs one request at a time.

:class:`ResourceManagerCore` is a facade: it keeps the RM's API in one place and delegates each
call to the module of its concern, all working on one :class:`~resource_manager.state.CoreState`:

- :mod:`resource_manager.state`: the settings, the records (:class:`Tables`) and the soft state
  beside them; every undoable change of soft state is journalled there, undone with the records.
- :mod:`resource_manager.checks`: request checks (attempt, releases, kept, progress, session).
- :mod:`resource_manager.jobs`: submission, a job's lifecycle and job master attempts, its asks,
  the queues.
- :mod:`resource_manager.reconcile`: registrations, heartbeats and task events against what the
  RM believes each node runs; what a node no longer holds is lost.
- :mod:`resource_manager.liveness`: timers: lost and unheard nodes, overdue suspensions.
- :mod:`resource_manager.scheduling`: the scheduling pass and the application of its plan.
- :mod:`resource_manager.goals`: container goals (preempt, resume, resize) and BIG-C's delayed
  resumption.
- :mod:`resource_manager.dias`: DiAS's evictions and sprint budget.
- :mod:`resource_manager.masters`: job masters' registration, ``Allocate`` rounds and ends.
- this module: the node commands and their dispatch (:func:`commands_for`).

Scheduling does not run inside every request.  A request that could let something be placed
(an ask, freed capacity, a new node) sets :attr:`ResourceManagerCore.needs_pass`; the shell runs
:meth:`ResourceManagerCore.schedule` after a batch of requests, or a few tens of milliseconds
later, as a unit of its own (``Allocate`` runs a due pass first, so a job master sees what it
can get at once).  A heartbeat that changes nothing costs O(what the node reports), and
time-driven work (lost nodes) is found from timers (:meth:`ResourceManagerCore.next_wakeup`),
never by scanning.

Nodes are driven by reconciliation, not by queued commands: every heartbeat answer is computed
from what the RM wants the node to run and what the node just reported (:func:`commands_for`).
A job master not yet seen on its node is launched again; a task no job should be running is
stopped again; a container whose goal (:mod:`policies.scheduling.containers`: run at its limits,
suspend, stop) differs from what its node shows is told again; until the node's report shows
it done.  A lost answer costs one interval.

A pass's plan may preempt (kill, suspend or shrink a container), resume and resize: the core
checks each against the current records and sets the container's goal; the nodes carry it out.
A task killed by preemption is marked ``preempted`` (its job master retries it without using up
a retry), and its container is taken back from the job (reported to the job master as lost).

Job masters have attempts, like YARN's application masters: when the node holding a job master
is lost, or its process ends before it reports a final state, a new attempt is placed (up to
``max_master_attempts``); the job's tasks keep running and the new job master adopts them.  An
older attempt that is still alive (a partition healed) is refused from then on.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType

from policies.preemption.queues import QueueConfig
from policies.scheduling.asks import PhaseAsk
from policies.scheduling.containers import ContainerCommand, Goal, Shown
from policies.scheduling.containers import command_needed as container_command
from policies.scheduling.framework import (
    Placement,
    Plan,
    Preemption,
    PreemptionAction,
    Profile,
    Resize,
    Resumption,
)
from policies.scheduling.identifiers import node_id_problem
from policies.scheduling.jobspec import JobSpec
from policies.scheduling.lifecycle import (
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
from resource_manager import dias, goals, jobs, masters, scheduling
from resource_manager.checks import MAX_SESSION_LENGTH, check_fits_master
from resource_manager.errors import (
    AlreadyExistsError,
    ConflictError,
    InvalidRequestError,
    PermissionDeniedError,
)
from resource_manager.limits import NodeNames, capacity_problem
from resource_manager.masters import AllocateResult, MasterRegistration
from resource_manager.queue_book import QueueBook
from resource_manager.queues import QueueStatus, QueueView
from resource_manager.records import (
    AllocationRecord,
    JobRecord,
    KeptSlot,
    NodeRecord,
    NodeState,
    Now,
    PreemptionStep,
    TaskKey,
    TaskRecord,
    TaskReport,
    evolve,
)
from resource_manager.reservations import KeptLog
from resource_manager.sprints import SprintBook
from resource_manager.state import MASTER_RESOURCES, CoreSettings, CoreState
from resource_manager.tables import Tables

log = logging.getLogger(__name__)

_NOTHING_REPORTED: Mapping[TaskKey, str] = MappingProxyType({})

__all__ = [
    "MASTER_RESOURCES",
    "MAX_SESSION_LENGTH",
    "AllocateResult",
    "CoreSettings",
    "LaunchMaster",
    "MasterRegistration",
    "NodeCommand",
    "PhaseAsk",
    "ResizeAllocation",
    "ResourceManagerCore",
    "ResumeAllocation",
    "SprintAllocation",
    "StopAllocation",
    "SuspendAllocation",
    "check_fits_master",
]


@dataclass(frozen=True)
class LaunchMaster:
    job_id: str
    allocation_id: str
    resources: Resources
    attempt: int


@dataclass(frozen=True)
class StopAllocation:
    job_id: str
    allocation_id: str
    reason: str


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


# ==================================================================== the facade


class ResourceManagerCore:
    """All state transitions of the RM, each delegated to the module of its concern (see the
    module docstring).  The API the gRPC service, the simulator and the tests drive."""

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
        settings = settings or CoreSettings()
        self.state = CoreState(
            tables,
            settings,
            profile,
            queues,
            queues_source,
            on_queues=lambda config: jobs.warn_if_never_preempted(settings, config),
        )
        for job in tables.jobs.values():
            jobs.sync_master_ask(self.state, job)  # task asks are soft state: sent again

    # ---------------------------------------------------------------- state

    @property
    def tables(self) -> Tables:
        return self.state.tables

    @property
    def settings(self) -> CoreSettings:
        return self.state.settings

    @property
    def profile(self) -> Profile:
        return self.state.profile

    @property
    def pending(self) -> PendingAsks:
        return self.state.pending

    @property
    def book(self) -> QueueBook:
        return self.state.book

    @property
    def queues(self) -> QueueView:
        return self.state.queues

    @property
    def sprints(self) -> SprintBook:
        return self.state.sprints

    @property
    def kept_log(self) -> KeptLog:
        return self.state.kept_log

    @property
    def node_names(self) -> NodeNames:
        return self.state.node_names

    @property
    def jobs(self) -> dict[str, JobRecord]:
        return self.state.tables.jobs

    @property
    def tasks(self) -> dict[tuple[str, str, int], TaskRecord]:
        return self.state.tables.tasks

    @property
    def allocations(self) -> dict[str, AllocationRecord]:
        return self.state.tables.allocations

    @property
    def nodes(self) -> dict[str, NodeRecord]:
        return self.state.tables.nodes

    # ---------------------------------------------------------------- clients

    def submit(
        self,
        spec: JobSpec,
        *,
        client_mode: bool,
        now: Now,
        idempotency_key: str = "",
        owner: str = "",
    ) -> JobRecord:
        """Accept a validated spec (:func:`resource_manager.jobs.submit`)."""
        return jobs.submit(
            self.state,
            spec,
            client_mode=client_mode,
            now=now,
            idempotency_key=idempotency_key,
            owner=owner,
        )

    def job(self, job_id: str) -> JobRecord:
        """A job, running or finished (a finished one is read from the store)."""
        return self.state.job(job_id)

    def list_jobs(self) -> list[JobRecord]:
        return self.state.tables.all_jobs()

    def job_tasks(self, job_id: str) -> list[TaskRecord]:
        self.job(job_id)
        return sorted(
            self.state.tables.tasks_of_job(job_id), key=lambda t: (t.phase, t.task_id, t.attempt)
        )

    def kill(self, job_id: str, *, now: Now, reason: str = "killed by user") -> JobRecord:
        """Kill a job: final at once; its containers are stopped through the nodes' heartbeats."""
        job = self.job(job_id)
        if job.state.is_final:
            return job
        jobs.finish(self.state, replace(job, kill_requested=True), JobState.KILLED, reason, now)
        self.update_sprints(now)
        return self.jobs[job_id]

    # ---------------------------------------------------------------- node agents

    def node_allocated(self, node_id: str) -> Resources:
        return self.state.tables.allocated_on(node_id)

    def node_address(self, node_id: str) -> str:
        node = self.nodes.get(node_id)
        return node.address if node else ""

    # ---------------------------------------------------------------- time

    def end_locality_waits(self, now: Now) -> None:
        """Asks whose locality wait is over may now take any node: a pass is due.  O(what is
        due).  :meth:`tick` calls it; a shell that runs no tick (the simulator) calls it at
        :meth:`next_locality_end`."""
        scheduling.end_locality_waits(self.state, now)

    def next_locality_end(self) -> float | None:
        """When (monotonic) the earliest held-back ask's locality wait ends, if any."""
        return scheduling.next_locality_end(self.state)

    # ---------------------------------------------------------------- the pass

    @property
    def needs_pass(self) -> bool:
        """Could a pass place something now?  True after an ask appeared or grew, or capacity
        was freed or added, since the last pass; a heartbeat that changes neither leaves it."""
        return scheduling.needs_pass(self.state)

    @property
    def pass_backlog(self) -> bool:
        """The last pass stopped at its placement limit: run the next one without delay."""
        return self.state.cut_short and bool(self.state.pending)

    def schedule(self, now: Now) -> Plan:
        """One scheduling pass, if anything changed since the last: plan it with the framework,
        check the plan and apply it.  Run it as a unit of work of its own."""
        return scheduling.schedule(self.state, now)

    def update_sprints(self, now: Now) -> None:
        """Tell the sprint budget which jobs entered or left execution, bring it to ``now``, and
        have the nodes of the jobs whose sprinting changed told (DiAS Sec. 3.2)."""
        dias.update_sprints(self.state, now)

    def drain_placements(self) -> list[Placement]:
        """The placements applied since the last call, for a shell that wants to tell whom they
        concern (the simulator wakes job masters with them).  Those of a rolled-back unit are
        gone with it."""
        return self.state.drain_placed()

    def drain_nodes_to_tell(self) -> list[str]:
        """The nodes whose containers got a new goal since the last call: their next heartbeat
        answer carries commands (a shell that does not heartbeat idle nodes, the simulator,
        heartbeats these).  Those of a rolled-back unit are gone with it."""
        return self.state.drain_to_tell()

    # ---------------------------------------------------------------- container goals

    def preempt(
        self, preemption: Preemption, *, now: Now, held_by: str | None = None
    ) -> AllocationRecord | None:
        """Kill, suspend or shrink a task container (:func:`resource_manager.goals.preempt`)."""
        return goals.preempt(self.state, preemption, now=now, held_by=held_by)

    def resume(
        self, resumption: Resumption, *, now: Now, by_operator: bool = False
    ) -> AllocationRecord | None:
        """Let a container run whole again (:func:`resource_manager.goals.resume`)."""
        return goals.resume(self.state, resumption, now=now, by_operator=by_operator)

    def resize(self, resize: Resize, *, now: Now) -> AllocationRecord | None:
        """Set a container's limits (:func:`resource_manager.goals.resize`)."""
        return goals.resize(self.state, resize, now=now)

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
        """An operator's change to a task's container (:func:`.goals.change_task`)."""
        return goals.change_task(
            self.state, job_id, task_id, action, limits=limits, reason=reason, now=now
        )

    # ---------------------------------------------------------------- queues

    def set_queues(self, config: QueueConfig, *, source: str, now: Now) -> None:
        """Take new queues (a reload; :func:`resource_manager.jobs.set_queues`)."""
        jobs.set_queues(self.state, config, source=source, now=now)

    def queue_status(self) -> list[QueueStatus]:
        """Each queue's share, usage, pending demand and what is preempted from it now."""
        return self.state.queues.status()

    # ---------------------------------------------------------------- job masters

    def register_master(self, job_id: str, *, attempt: int, now: Now) -> MasterRegistration:
        """A job master announces itself (:func:`resource_manager.masters.register_master`)."""
        return masters.register_master(self.state, job_id, attempt=attempt, now=now)

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
        """One job master round (:func:`resource_manager.masters.allocate`)."""
        return masters.allocate(
            self.state,
            job_id,
            asks,
            releases,
            progress,
            events_after,
            now=now,
            attempt=attempt,
            kept=kept,
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
        """The job master reports its job's end."""
        return masters.finish_job(
            self.state, job_id, state, message, progress, now=now, attempt=attempt
        )

    def kept_slots(self, job_id: str) -> list[AllocationRecord]:
        """The job's task containers kept for a downstream phase now, oldest grant first."""
        return masters.kept_slots(self.state, job_id)

    # ------------------------------------------------ (moved: what reconciliation calls)

    def _master_lost(self, job: JobRecord, reason: str, now: Now) -> None:
        jobs.master_lost(self.state, job, reason, now)

    def _offer_resumptions(self, node_id: str, now: Now) -> None:
        goals.offer_resumptions(self.state, node_id, now)

    def _overdue_suspensions(self, now: Now) -> list[tuple[AllocationRecord, float]]:
        return goals.overdue_suspensions(self.state, now)

    def _next_suspension_deadline(self) -> float | None:
        return goals.next_suspension_deadline(self.state)

    def _decision_due(self, now: Now) -> bool:
        return self.state.decision_due(now)

    def _tell(self, node_id: str) -> None:
        self.state.tell(node_id)

    def _note_lost(self, job_id: str, allocation_id: str) -> None:
        self.state.note_lost(job_id, allocation_id)

    def _note_kept_end(
        self, allocation: AllocationRecord, reason: str, now: Now, phase: str = ""
    ) -> None:
        self.state.note_kept_end(allocation, reason, now, phase)

    # ---------------------------------------------------------------- node agents (to move)

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
        self.state.forget_lost(node_id)
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
        self.state.hear(node_id)
        early = self.state.pop_early(node_id)
        self.state.set_session(node_id, session)
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
        reasons = self._observe_reports(node_id, live_tasks, now)
        if self.tables.preempted_of_node(node_id):
            self._offer_resumptions(node_id, now)
        self.update_sprints(now)  # (a job master ended, or a node was found lost)
        return False, self._commands_for(node_id, live_tasks, now, reasons)

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
            and self.state.sessions.get(node_id) == session
        ):
            return  # registered by this very process: its next registration is a later one
        before = self.state.early.get(node_id)
        noted = dict(before[1]) if before is not None and before[0] == session else {}
        for report in reports:
            key = (report.job_id, report.task_id, report.attempt)
            if report.state.is_final or not self._holds(node_id, report):
                noted.pop(key, None)
            else:
                noted[key] = report.allocation_id
        if noted == (before[1] if before is not None and before[0] == session else {}):
            return
        self.state.set_early(node_id, (session, noted))

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
        if self.state.started is not None:
            return
        self.state.started = now.monotonic
        if self.state.unheard:
            log.info(
                "%d nodes hold work in the recovered state (%s): each is lost unless it "
                "registers within %g s",
                len(self.state.unheard),
                ", ".join(list(self.state.unheard)[:5])
                + (", ..." if len(self.state.unheard) > 5 else ""),
                self.settings.node_timeout,
            )

    def tick(self, now: Now) -> None:
        """Time-driven housekeeping: declare silent nodes lost (by the monotonic clock, so a step
        of the wall clock loses nobody), nodes that held work when this RM started and have not
        registered since (:meth:`started`), and forget nodes lost long ago.  Finds them from
        timers in O(what is due), so it may run as often as :meth:`next_wakeup` asks."""
        self.state.wall_minus_monotonic = now.wall - now.monotonic
        self.started(now)
        timeout = self.settings.node_timeout
        if (
            self.state.unheard
            and self.state.started is not None
            and is_lost(self.state.started, now.monotonic, timeout)
        ):
            # (first: they were last heard of before any node registered since, so the lost
            # nodes' list stays oldest first)
            for node_id in list(self.state.unheard):
                self._lose_unheard(node_id, self.state.started, now)
        silent = self.tables.silent_nodes(before=now.monotonic - timeout)
        for node_id in sorted(silent):
            if is_lost(self.nodes[node_id].last_seen, now.monotonic, timeout):
                self._lose_node(node_id, now)
        retention = self.settings.lost_node_retention
        for node_id, since in list(self.state.lost_since.items()):
            if now.monotonic - since <= retention:
                break  # oldest first: the rest were lost later
            self.state.forget_lost(node_id)
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
            self.state.asks_grew = True  # run the pass that wanted a decision
        self.end_locality_waits(now)
        self.update_sprints(now)

    def next_wakeup(self) -> float | None:
        """The monotonic time :meth:`tick` has something to do (a node may then be lost, or a
        lost node forgotten), or None when nothing is timed."""
        times = []
        oldest = self.tables.oldest_heartbeat()
        if oldest is not None:
            times.append(oldest + self.settings.node_timeout)
        if self.state.unheard and self.state.started is not None:
            times.append(self.state.started + self.settings.node_timeout)
        for since in self.state.lost_since.values():
            times.append(since + self.settings.lost_node_retention)
            break
        if self.book.wanted:
            times.append(self.book.last_decision + self.settings.preemption_interval)
        if self.state.locality_ends:
            times.append(self.state.locality_ends[0][0])
        deadline = self._next_suspension_deadline()
        if deadline is not None:
            # Suspensions are timed by the wall clock (they outlive an RM restart); the shell
            # sleeps by the monotonic one, converted by the offset last seen.
            times.append(deadline - self.state.wall_minus_monotonic)
        sprint = self.sprints.next_change()
        if sprint is not None:  # (wall-clock too)
            times.append(sprint - self.state.wall_minus_monotonic)
        return min(times, default=None)

    def _observe_reports(
        self, node_id: str, reports: Sequence[TaskReport], now: Now
    ) -> tuple[int, dict[str, str | None]]:
        """Apply a node's reports.  A live task no job should be running is not recorded; the
        heartbeat answer tells the node to stop it.  Returns the tables' version after, with
        the stop reason found for each live task (reused by :meth:`_commands_for` while no job
        or allocation changed in between)."""
        reasons: dict[str, str | None] = {}
        for report in reports:
            if report.job_master:
                self._observe_master(report, now)
            elif report.speculative:  # its job master tracks it (ROSE): only its stop is ours
                if not report.state.is_final:
                    reasons[report.allocation_id] = self._stop_reason(report, now)
            elif report.state.is_final:
                self._observe_task(node_id, report, now)
            else:
                reason = reasons[report.allocation_id] = self._stop_reason(report, now)
                if reason is None:
                    self._observe_task(node_id, report, now)
        return self.tables.version, reasons

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

    def _stop_reason(self, report: TaskReport, now: Now) -> str | None:
        """Why the node must stop this live task or job master, or None if it may run.  A
        speculative task has no allocation to check: it runs while its job does."""
        job = self.jobs.get(report.job_id)
        if job is None:  # a finished job has left memory; say how it ended
            stored = self.tables.find_job(report.job_id)
            return "no such job" if stored is None else f"job {stored.state.value}"
        if report.speculative:
            return f"job {job.state.value}" if job.state.is_final else None
        allocation = self.allocations.get(report.allocation_id)
        if allocation is None or allocation.job_id != report.job_id:
            return f"allocation {report.allocation_id} is not {report.job_id}'s"
        if allocation.is_master != report.job_master:
            return f"allocation {report.allocation_id} is not for this process"
        if allocation.goal is Goal.STOP:
            return f"preempted: {allocation.goal_reason}"
        if report.job_master and job.master_allocation != allocation.allocation_id:
            if job.state is JobState.SUBMITTED and job.execution.evictions:
                return f"job {job.message}"
            return "a newer job master attempt replaced it"
        if not job.state.is_final:
            return None
        if report.job_master and job.state is JobState.SUCCEEDED:
            # It exits by itself once its outcomes are flushed; stop it only if it lingers.
            lingering = now.wall - job.finish_time > self.settings.master_exit_grace
            return f"job succeeded {self.settings.master_exit_grace:g} s ago" if lingering else None
        return f"job {job.state.value}"

    def _count_speculative(self, node_id: str, live: Sequence[TaskReport]) -> None:
        """What the node's live speculative tasks hold, as its heartbeat shows them: counted
        as opportunistic, never as allocated (ROSE; docs/oversubscription.md)."""
        held, count = Resources(), 0
        for report in live:
            if report.speculative and not report.state.is_final and report.limits is not None:
                held, count = held + report.limits, count + 1
        if count:
            self.state.opportunistic[node_id] = (held, count)
        else:
            self.state.opportunistic.pop(node_id, None)

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
        return self.state.opportunistic.get(node_id, (Resources(), 0))

    def _commands_for(
        self,
        node_id: str,
        reports: Sequence[TaskReport],
        now: Now,
        known: tuple[int, dict[str, str | None]] = (-1, {}),
    ) -> list[NodeCommand]:
        """Reconcile the node: what it should run against what it just reported.  ``known``:
        stop reasons already found at a version of the tables (see :meth:`_observe_reports`)."""
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
        version, reasons = known
        if version != self.tables.version:
            reasons = {}
        stopping: set[str] = set()
        for report in reports:
            if report.state.is_final or report.allocation_id in stopping:
                continue
            if report.allocation_id in reasons and not report.job_master:
                reason = reasons[report.allocation_id]
            else:
                reason = self._stop_reason(report, now)
            if reason is not None:
                stopping.add(report.allocation_id)
                commands.append(StopAllocation(report.job_id, report.allocation_id, reason))
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
        self.state.hear(node_id)
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
        self.state.opportunistic.pop(node_id, None)  # its speculative tasks are lost with it
        self.state.mark_lost(node_id, node.last_seen)
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
