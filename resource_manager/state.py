"""The resource manager's state layer: its settings, its records (:class:`Tables`) and the soft
state kept beside them, in one object every part of the core works on.

Soft state is what the RM keeps in memory only, next to the records: the pending asks, the
nodes to tell, the containers to report lost, the timers of lost and unheard nodes, the agent
sessions.  :class:`CoreState` owns all of it and is the only code that changes it; every change
that must be undone when a unit of work rolls back is journalled here, on the tables' journal,
so :meth:`Tables.rollback` undoes records and soft state together, in order, as one unit.  The
few fields that are deliberately *not* undone say why next to their declaration (at worst they
cause one pass too many, or they describe the nodes' last reports, which a rollback does not
unsay).  The core's modules read these fields freely and change them only through the methods
below.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import TypeVar

from policies.approximation.dias_config import DiasConfig
from policies.approximation.dispatch import DispatchMode, JobsInExecution
from policies.preemption.queues import QueueConfig, single_queue
from policies.scheduling.framework import (
    PendingAsk,
    Placement,
    Plan,
    Profile,
    baseline_profile,
)
from policies.scheduling.jobspec import ReservationSpec
from policies.scheduling.pending_asks import PendingAsks
from policies.scheduling.resources import Resources
from resource_manager.errors import NotFoundError
from resource_manager.limits import NodeNames
from resource_manager.queue_book import QueueBook
from resource_manager.queues import QueueView
from resource_manager.records import (
    AllocationRecord,
    JobRecord,
    MasterReport,
    NodeRecord,
    Now,
    TaskKey,
    TaskRecord,
)
from resource_manager.reservations import KeptEnded, KeptLog
from resource_manager.sprints import SprintBook
from resource_manager.tables import Tables

log = logging.getLogger("resource_manager.core")

MASTER_RESOURCES = Resources(cpu=0.1, memory_mb=256)

K = TypeVar("K")
V = TypeVar("V")


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


class CoreState:
    """Settings, records, the services the core consults (queues, sprint budget, kept log) and
    the soft state beside the records.  Not thread-safe: one unit of work at a time."""

    def __init__(
        self,
        tables: Tables,
        settings: CoreSettings,
        profile: Profile | None,
        queues: QueueConfig | None,
        queues_source: str,
        on_queues: Callable[[QueueConfig], None],
    ) -> None:
        """``on_queues`` is told the queue configuration before its view is built (a warning)."""
        self.tables = tables
        self.settings = settings
        file = settings.nodes_allowed_file
        # (ValueError, one line, if the file cannot be read)
        self.node_names = NodeNames(tuple(settings.nodes_allowed), Path(file) if file else None)
        self.profile = profile or baseline_profile(
            max_master_share=settings.max_master_share,
            nodes_to_score=settings.nodes_to_score,
        )
        if settings.dispatch.buffered:
            dispatch = JobsInExecution(settings.max_running_jobs)
            self.profile = replace(self.profile, permits=(*self.profile.permits, dispatch))
        self.pending = PendingAsks(self.profile.queue_order)  # what jobs still want, in order
        self.book = QueueBook(queues or single_queue(), tables.journal, source=queues_source)
        on_queues(self.book.config)
        self.queues = QueueView(tables, self.pending, self.book)
        tables.queue_of_job = lambda job_id: self.queues.spec_of(job_id).name
        tables.regroup()
        self.kept_log = KeptLog()  # how kept containers stopped being kept (slot reservation)
        self.sprints = SprintBook(settings.dias, tables)  # DiAS's sprint budget

        # -- not undone with a rolled-back unit
        self.wall_minus_monotonic = 0.0  # from the last tick's Now
        # An ask appeared or grew, or a place in execution freed, since the last pass (set
        # freely: at worst one pass too many; :meth:`start_pass` clears it undoably).
        self.asks_grew = False
        self.cut_short = False  # the last pass stopped at its limit: another is due at once
        self.nowhere: dict[Resources, int] = {}  # sizes that fitted on no node, and when
        # When asks held back for a preferred node may take any (monotonic; a heap): a pass runs
        # then (delay scheduling).
        self.locality_ends: list[tuple[float, str, str]] = []  # (when, job, phase)
        self.locality_armed: set[tuple[float, str, str]] = set()  # what the heap holds
        # node -> what its live speculative tasks hold and how many, at its last heartbeat
        self.opportunistic: dict[str, tuple[Resources, int]] = {}
        self.started: float | None = None  # monotonic, set by the core's started()

        # -- undone with a rolled-back unit (changed only through the methods below)
        self.placed: list[Placement] = []  # applied, not yet drained by the shell
        self.applied: list[Plan] = []  # plans applied (every decision), not yet drained
        self.heard: list[MasterReport] = []  # job masters' decisions heard, not yet drained
        self.to_tell: dict[str, None] = {}  # nodes with a container goal changed, not drained
        self.lost_allocations: dict[str, list[str]] = {}  # job -> lost since its last Allocate
        self.lost_since: dict[str, float] = {}  # lost node -> last seen (monotonic), oldest first
        self.execution_changed: dict[str, None] = {}  # jobs in or out since the sprints heard
        if self.sprints.enabled:  # (the sprint clock starts at a job's first running task)
            tables.running_changed = dict.fromkeys(self.sprints.jobs_in())  # (recheck them)
        # Nodes that hold work in the recovered state and have not registered since this RM
        # started (nodes are kept in memory only): each is lost unless it registers within the
        # node timeout of the core's started() (all share that one deadline).
        self.unheard: dict[str, None] = dict.fromkeys(sorted(tables.nodes_holding_work()))
        # node -> the agent process (session) its registration came from
        self.sessions: dict[str, str] = {}
        # node -> (agent session, {task key: allocation}): live attempts and job masters that
        # session reported by events before its registration (the core's report_events)
        self.early: dict[str, tuple[str, dict[TaskKey, str]]] = {}

    # ---------------------------------------------------------------- the records

    @property
    def jobs(self) -> dict[str, JobRecord]:
        return self.tables.jobs

    @property
    def tasks(self) -> dict[TaskKey, TaskRecord]:
        return self.tables.tasks

    @property
    def allocations(self) -> dict[str, AllocationRecord]:
        return self.tables.allocations

    @property
    def nodes(self) -> dict[str, NodeRecord]:
        return self.tables.nodes

    def job(self, job_id: str) -> JobRecord:
        """A job, running or finished (a finished one is read from the store)."""
        job = self.tables.find_job(job_id)
        if job is None:
            raise NotFoundError(f"job {job_id!r} not found")
        return job

    def decision_due(self, now: Now) -> bool:
        """May a preemption be decided now (``preemption_interval`` since the last)?"""
        return now.monotonic - self.book.last_decision >= self.settings.preemption_interval

    def note_kept_end(
        self, allocation: AllocationRecord, reason: str, now: Now, phase: str = ""
    ) -> None:
        """Record how a kept container stopped being kept (:class:`KeptLog`, memory only)."""
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

    # ---------------------------------------------------------------- undoable changes

    def put_ask(self, ask: PendingAsk) -> bool:
        """Set one pending ask (a count of 0 removes it), undoably; True if it grew."""
        previous = self.pending.put(ask)
        grew = ask.count > (previous.count if previous is not None else 0)
        if grew:
            self.asks_grew = True  # (not undone: at worst one pass too many)
        restore = previous if previous is not None else replace(ask, count=0)

        def undo() -> None:
            self.pending.put(restore)

        self.tables.journal(undo)
        return grew

    def start_pass(self) -> None:
        """A pass looks at what changed: clear its triggers (undone with the unit)."""
        tables = self.tables
        asks_grew, freed, cut_short = self.asks_grew, tables.freed, self.cut_short
        self.asks_grew = tables.freed = self.cut_short = False

        def undo() -> None:
            self.asks_grew, tables.freed, self.cut_short = asks_grew, freed, cut_short

        tables.journal(undo)

    def add_placed(self, placement: Placement) -> None:
        self.placed.append(placement)
        # (late-bound, as the lists and dicts drained below are replaced, not emptied)
        self.tables.journal(lambda: self.placed.remove(placement))

    def drain_placed(self) -> list[Placement]:
        placed, self.placed = self.placed, []
        return placed

    def add_applied(self, plan: Plan) -> None:
        """Note a plan that was applied (what the shell reports as the unit's decisions)."""
        if plan.decides:
            self.applied.append(plan)
            self.tables.journal(lambda: self.applied.remove(plan))

    def drain_applied(self) -> list[Plan]:
        applied, self.applied = self.applied, []
        return applied

    def add_heard(self, report: MasterReport) -> None:
        """Note what a job master decided and said (a decision trace records it)."""
        if report.says:
            self.heard.append(report)
            self.tables.journal(lambda: self.heard.remove(report))

    def drain_heard(self) -> list[MasterReport]:
        heard, self.heard = self.heard, []
        return heard

    def tell(self, node_id: str) -> None:
        """The node's next heartbeat answer carries commands (a container's goal changed)."""
        if node_id not in self.to_tell:
            self.to_tell[node_id] = None
            self.tables.journal(lambda: self.to_tell.pop(node_id, None))

    def drain_to_tell(self) -> list[str]:
        nodes, self.to_tell = list(self.to_tell), {}
        return nodes

    def note_lost(self, job_id: str, allocation_id: str) -> None:
        """Tell the job master at its next Allocate that this container went with its node."""
        lost = self.lost_allocations.setdefault(job_id, [])
        lost.append(allocation_id)
        self.tables.journal(partial(lost.remove, allocation_id))

    def take_lost(self, job_id: str) -> list[str]:
        """The job's containers lost since its last Allocate, forgotten (undoably)."""
        lost = self.lost_allocations.pop(job_id, [])
        if lost:
            self.tables.journal(partial(self.lost_allocations.__setitem__, job_id, lost))
        return lost

    def mark_lost(self, node_id: str, last_seen: float) -> None:
        """The node was lost, last seen at ``last_seen`` (its retention timer starts)."""
        self.lost_since[node_id] = last_seen
        self.tables.journal(partial(self.forget_lost, node_id))

    def forget_lost(self, node_id: str) -> None:
        """The node is no longer lost (registered again, or forgotten)."""
        since = self.lost_since.pop(node_id, None)
        if since is not None and self.tables.in_unit:
            self.tables.journal(partial(self.lost_since.__setitem__, node_id, since))

    def note_execution_changed(self, job_id: str) -> None:
        """The job entered or left execution: the sprint budget is to hear it."""
        self.execution_changed[job_id] = None
        self.tables.journal(lambda: self.execution_changed.pop(job_id, None))

    def take_execution_changed(self) -> dict[str, None]:
        changed, self.execution_changed = self.execution_changed, {}
        self.tables.journal(lambda: self.execution_changed.update(changed))
        return changed

    def take_running_changed(self) -> dict[str, None]:
        """The jobs whose running tasks went from or to none since last taken (DiAS)."""
        flips = self.tables.running_changed
        if not flips:
            return {}
        flipped = dict(flips)
        flips.clear()
        self.tables.journal(partial(flips.update, flipped))
        return flipped

    def hear(self, node_id: str) -> None:
        """A node that held work when this RM started is heard of (registered, or lost)."""
        if node_id in self.unheard:
            del self.unheard[node_id]
            self.tables.journal(partial(self.unheard.__setitem__, node_id, None))

    def set_session(self, node_id: str, session: str) -> None:
        known = self.sessions.get(node_id)
        self.sessions[node_id] = session
        self.tables.journal(partial(_restore, self.sessions, node_id, known))

    def pop_early(self, node_id: str) -> tuple[str, dict[TaskKey, str]] | None:
        early = self.early.pop(node_id, None)
        if early is not None:
            self.tables.journal(partial(self.early.__setitem__, node_id, early))
        return early

    def set_early(self, node_id: str, early: tuple[str, dict[TaskKey, str]]) -> None:
        before = self.early.get(node_id)
        self.early[node_id] = early
        self.tables.journal(partial(_restore, self.early, node_id, before))


def _restore(table: dict[K, V], key: K, value: V | None) -> None:
    """Put ``table[key]`` back as it was (None: absent): a rolled-back unit's undo."""
    if value is None:
        table.pop(key, None)
    else:
        table[key] = value
