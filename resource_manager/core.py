"""The resource manager's bookkeeping: jobs, nodes, allocations and task attempts.

This is the RM without its network.  Every method of :class:`ResourceManagerCore` is one
request or one tick, takes the time as a :class:`Now` and changes the state; the RM's one shell
(:class:`resource_manager.shell.RMShell`) runs each call as a unit of work, applied whole or not
at all, in memory and on disk, and hands its effects to its driver (the gRPC service, the
simulator, the tests).  Not thread-safe: the shell runs one unit at a time.

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
- :mod:`resource_manager.dispatch`: what each node should run against what it reported, as
  the node commands of :mod:`plumbing.node_protocol`.

Scheduling does not run inside every request.  A request that could let something be placed
(an ask, freed capacity, a new node) sets :attr:`ResourceManagerCore.needs_pass`; the shell runs
:meth:`ResourceManagerCore.schedule` after a batch of requests, or a few tens of milliseconds
later, as a unit of its own (``Allocate`` runs a due pass first, so a job master sees what it
can get at once).  A heartbeat that changes nothing costs O(what the node reports), and
time-driven work (lost nodes) is found from timers (:meth:`ResourceManagerCore.next_wakeup`),
never by scanning.

Nodes are driven by reconciliation, not by queued commands: every heartbeat answer is computed
from what the RM wants the node to run and what the node just reported
(:func:`resource_manager.dispatch.commands_for`).
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

from collections.abc import Iterable, Sequence
from dataclasses import replace

from plumbing.node_protocol import NodeCommand, TaskReport
from policies.preemption.queues import QueueConfig
from policies.scheduling.asks import PhaseAsk
from policies.scheduling.framework import (
    Placement,
    Plan,
    Preemption,
    PreemptionAction,
    Profile,
    Resize,
    Resumption,
)
from policies.scheduling.jobspec import JobSpec
from policies.scheduling.lifecycle import JobState
from policies.scheduling.pending_asks import PendingAsks
from policies.scheduling.progress import PhaseProgress
from policies.scheduling.resources import Resources
from resource_manager import (
    dispatch,
    goals,
    jobs,
    liveness,
    masters,
    plans,
    reconcile,
    scheduling,
)
from resource_manager.checks import MAX_SESSION_LENGTH, check_fits_master
from resource_manager.limits import NodeNames
from resource_manager.masters import AllocateResult, MasterRegistration
from resource_manager.queue_book import QueueBook
from resource_manager.queues import QueueStatus, QueueView
from resource_manager.records import (
    AllocationRecord,
    JobRecord,
    KeptSlot,
    MasterReport,
    NodeRecord,
    NodeState,
    Now,
    SpeculativeNote,
    TaskRecord,
)
from resource_manager.reservations import KeptLog
from resource_manager.sprints import SprintBook
from resource_manager.state import MASTER_RESOURCES, CoreSettings, CoreState
from resource_manager.tables import Tables

__all__ = [
    "MASTER_RESOURCES",
    "MAX_SESSION_LENGTH",
    "AllocateResult",
    "CoreSettings",
    "MasterRegistration",
    "PhaseAsk",
    "ResourceManagerCore",
    "check_fits_master",
]


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
        """Admit a node (again): :func:`resource_manager.reconcile.register_node`."""
        reconcile.register_node(
            self.state,
            node_id,
            address,
            runtime,
            capacity,
            live_tasks,
            now=now,
            instance_id=instance_id,
            cluster_id=cluster_id,
            has_swap=has_swap,
            session=session,
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
        known = reconcile.heartbeat(
            self.state,
            node_id,
            used,
            live_tasks,
            now=now,
            instance_id=instance_id,
            has_swap=has_swap,
        )
        if known is None:
            return True, []
        return False, dispatch.commands_for(self.state, node_id, live_tasks, now, known)

    def report_events(
        self, node_id: str, events: Iterable[TaskReport], *, now: Now, session: str = ""
    ) -> None:
        """Apply a node's task events: :func:`resource_manager.reconcile.report_events`."""
        reconcile.report_events(self.state, node_id, events, now=now, session=session)

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

    def node_allocated(self, node_id: str) -> Resources:
        return self.state.tables.allocated_on(node_id)

    def node_address(self, node_id: str) -> str:
        node = self.nodes.get(node_id)
        return node.address if node else ""

    # ---------------------------------------------------------------- time

    def started(self, now: Now) -> None:
        """The RM serves from ``now`` on: :func:`resource_manager.liveness.started`."""
        liveness.started(self.state, now)

    def tick(self, now: Now) -> None:
        """Time-driven housekeeping: :func:`resource_manager.liveness.tick`."""
        liveness.tick(self.state, now)

    def next_wakeup(self) -> float | None:
        """The monotonic time :meth:`tick` has something to do (a node may then be lost, or a
        lost node forgotten), or None when nothing is timed."""
        return liveness.next_wakeup(self.state)

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
        plans.update_sprints(self.state, now)

    def drain_placements(self) -> list[Placement]:
        """The placements applied since the last call, for a shell that wants to tell whom they
        concern (the simulator wakes job masters with them).  Those of a rolled-back unit are
        gone with it."""
        return self.state.drain_placed()

    def drain_applied(self) -> list[Plan]:
        """The plans applied since the last call (every decision a pass or a timer made), in
        order.  Those of a rolled-back unit are gone with it."""
        return self.state.drain_applied()

    def drain_heard(self) -> list[MasterReport]:
        """What job masters decided and said in ``Allocate`` since the last call (kept
        containers, drops, speculative outcomes), in order, for a decision trace."""
        return self.state.drain_heard()

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
        speculative: Sequence[SpeculativeNote] = (),
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
            speculative=speculative,
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
