"""Reconciliation in the RM core: what each node reports (its registration, its heartbeats,
its task events) against what the RM believes it runs.

A report is applied to the records: a task attempt moves through its lifecycle, a container
records what its node shows of it (and the preemption step that shows), a job master's end
frees its container and may lose the job's job master.  A live task or job master no job
should be running is not recorded; :func:`stop_command` says why, and the heartbeat answer
(:func:`resource_manager.dispatch.commands_for`) tells its node to stop it.  What the RM believes
was started on a node and the node no longer holds is lost (:func:`lose`), as when a node is
lost by silence (:mod:`resource_manager.liveness`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType

from plumbing.node_protocol import StopAllocation, TaskReport
from policies.scheduling.containers import Goal, Shown
from policies.scheduling.identifiers import node_id_problem
from policies.scheduling.lifecycle import (
    TASK_TRANSITIONS,
    JobState,
    TaskState,
    TransitionError,
    check_transition,
)
from policies.scheduling.resources import Resources
from resource_manager.checks import check_session
from resource_manager.errors import (
    AlreadyExistsError,
    ConflictError,
    InvalidRequestError,
    PermissionDeniedError,
)
from resource_manager.jobs import master_lost
from resource_manager.limits import capacity_problem
from resource_manager.plans import offer_resumptions, update_sprints
from resource_manager.records import (
    AllocationRecord,
    NodeRecord,
    NodeState,
    Now,
    PreemptionStep,
    TaskKey,
    TaskRecord,
    evolve,
)
from resource_manager.state import CoreState, log

_NOTHING_REPORTED: Mapping[TaskKey, str] = MappingProxyType({})

StopReasons = tuple[int, dict[str, StopAllocation | None]]
"""The tables' version after a node's reports were applied, with the stop reason found for
each live task (reused by the heartbeat answer while no job or allocation changed)."""


def register_node(
    state: CoreState,
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
    node had been, except what the same agent process reported by events ahead of this
    registration (:func:`report_events`, :func:`_reconcile_registration`).  A node that held
    work when this RM started stops waiting to be lost
    (:func:`resource_manager.liveness.started`)."""
    problem = node_id_problem(node_id)
    if problem is not None:
        raise InvalidRequestError("node_id", problem)
    check_session(session)
    refused = state.node_names.problem(node_id)
    if refused is not None:  # (first: a stranger learns nothing else)
        raise PermissionDeniedError(f"node_id: {refused}")
    if not address:
        raise InvalidRequestError("address", "is required")
    bad = capacity_problem(capacity.cpu, capacity.memory_mb)
    if bad is not None:
        raise InvalidRequestError(*bad)
    settings = state.settings
    if cluster_id and cluster_id != settings.cluster_id:
        raise ConflictError(
            f"cluster_id: the agent was started for cluster {cluster_id!r}; this resource "
            f"manager runs cluster {settings.cluster_id!r}"
        )
    previous = state.nodes.get(node_id)
    if (
        previous is not None
        and previous.state is NodeState.READY
        and previous.instance_id != instance_id
        and now.monotonic - previous.last_seen <= settings.node_timeout
    ):
        raise AlreadyExistsError(
            f"node_id: {node_id} is held by another live agent at {previous.address} "
            f"(heard from {now.monotonic - previous.last_seen:.1f} s ago); give this agent "
            "another --node-id"
        )
    state.forget_lost(node_id)
    state.tables.put_node(
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
    state.hear(node_id)
    early = state.pop_early(node_id)
    state.set_session(node_id, session)
    reported = early[1] if early is not None and session and early[0] == session else {}
    observe_reports(state, node_id, live_tasks, now)
    _reconcile_registration(state, node_id, live_tasks, now, reported)


def _reconcile_registration(
    state: CoreState,
    node_id: str,
    live_tasks: Sequence[TaskReport],
    now: Now,
    reported: Mapping[TaskKey, str] = _NOTHING_REPORTED,
) -> None:
    """What the RM believes was started on the node and the (re-)registering agent does
    not hold is lost, through the path of a lost node (:func:`lose`): task attempts it
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
    tables = state.tables
    tasks = [t for t in tables.live_tasks_of_node(node_id) if t.key not in keys]
    gone: dict[str, AllocationRecord] = {}
    for task in tasks:
        allocation = state.allocations.get(task.allocation_id)
        if allocation is not None and allocation.node_id == node_id:
            gone[allocation.allocation_id] = allocation
    for allocation in tables.allocations_of_node(node_id):
        if allocation.is_master:
            job = state.jobs.get(allocation.job_id)
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
    lose(
        state,
        list(gone.values()),
        tasks,
        f"job master's node {node_id} restarted without it",
        f"node {node_id} restarted without it",
        now,
    )


def heartbeat(
    state: CoreState,
    node_id: str,
    used: Resources,
    live_tasks: Sequence[TaskReport],
    *,
    now: Now,
    instance_id: str = "",
    has_swap: bool | None = None,
) -> StopReasons | None:
    """Record a heartbeat; None if the node must register (again), else the stop reasons
    found (for the answer's commands).  ``has_swap`` None: as the node said before."""
    node = state.nodes.get(node_id)
    if node is None or node.state is NodeState.LOST or node.instance_id != instance_id:
        return None
    swap = node.has_swap if has_swap is None else has_swap
    if swap != node.has_swap:
        log.info("node %s: swap %s", node_id, "enabled" if swap else "gone")
    state.tables.put_node(
        evolve(
            node,
            last_heartbeat=now.wall,
            last_seen=now.monotonic,
            used=used,
            running_tasks=sum(1 for t in live_tasks if not t.state.is_final),
            has_swap=swap,
        )
    )
    _count_speculative(state, node_id, live_tasks)
    reasons = observe_reports(state, node_id, live_tasks, now)
    if state.tables.preempted_of_node(node_id):
        offer_resumptions(state, node_id, now)
    update_sprints(state, now)  # (a job master ended, or a node was found lost)
    return reasons


def report_events(
    state: CoreState, node_id: str, events: Iterable[TaskReport], *, now: Now, session: str = ""
) -> None:
    """Apply a node's task events (whether or not the node is registered).  ``session``
    names the agent process that sends them (as in :func:`register_node`).  Events of a
    process that has not registered yet (the node unknown or lost, or registered by
    another process) may reach the RM before its registration, whose snapshot of live
    tasks may then predate them: the live attempts and job masters they report are noted
    for that registration, and forgotten when they end.  O(len(events)); nothing is noted
    once the process is registered."""
    check_session(session)
    reports = list(events)
    observe_reports(state, node_id, reports, now)
    if session:
        _note_early(state, node_id, session, reports)
    update_sprints(state, now)


def _note_early(
    state: CoreState, node_id: str, session: str, reports: Sequence[TaskReport]
) -> None:
    """Note what ``reports`` show live of what the RM holds on the node, if the agent
    process ``session`` has not registered the node (see :func:`report_events`)."""
    node = state.nodes.get(node_id)
    if (
        node is not None
        and node.state is NodeState.READY
        and state.sessions.get(node_id) == session
    ):
        return  # registered by this very process: its next registration is a later one
    before = state.early.get(node_id)
    noted = dict(before[1]) if before is not None and before[0] == session else {}
    for report in reports:
        key = (report.job_id, report.task_id, report.attempt)
        if report.state.is_final or not _holds(state, node_id, report):
            noted.pop(key, None)
        else:
            noted[key] = report.allocation_id
    if noted == (before[1] if before is not None and before[0] == session else {}):
        return
    state.set_early(node_id, (session, noted))


def _holds(state: CoreState, node_id: str, report: TaskReport) -> bool:
    """Does the RM hold the live attempt or job master ``report`` names on ``node_id``?"""
    if report.job_master:
        allocation = state.allocations.get(report.allocation_id)
        return allocation is not None and allocation.is_master and allocation.node_id == node_id
    task = state.tasks.get((report.job_id, report.task_id, report.attempt))
    return task is not None and task.node_id == node_id and not task.state.is_final


def observe_reports(
    state: CoreState, node_id: str, reports: Sequence[TaskReport], now: Now
) -> StopReasons:
    """Apply a node's reports.  A live task no job should be running is not recorded; the
    heartbeat answer tells the node to stop it."""
    reasons: dict[str, StopAllocation | None] = {}
    for report in reports:
        if report.job_master:
            _observe_master(state, report, now)
        elif report.speculative:  # its job master tracks it (ROSE): only its stop is ours
            if not report.state.is_final:
                reasons[report.allocation_id] = stop_command(state, report, now)
        elif report.state.is_final:
            observe_task(state, node_id, report, now)
        else:
            reason = reasons[report.allocation_id] = stop_command(state, report, now)
            if reason is None:
                observe_task(state, node_id, report, now)
    return state.tables.version, reasons


def observe_task(state: CoreState, node_id: str, report: TaskReport, now: Now) -> None:
    """Apply one report of a task attempt (and of its container)."""
    if (
        report.state is TaskState.RUNNING
        and report.sprint_factor == 1.0
        and state.sprints.sprinting(report.job_id)
    ):
        state.tell(node_id)  # a task of a sprinting job started: it sprints too
    key = (report.job_id, report.task_id, report.attempt)
    tables = state.tables
    task = state.tasks.get(key)
    if task is None:
        allocation = state.allocations.get(report.allocation_id)
        if report.job_id not in state.jobs or allocation is None or allocation.is_master:
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
            execution=state.jobs[report.job_id].execution.number,
        )
    step = _observe_container(state, task.allocation_id, report, now)
    if step is not None and task.state == report.state:
        tables.put_task(evolve(task, preemptions=(*task.preemptions, step)))
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
    allocation = state.allocations.get(task.allocation_id)
    preempted = (
        report.state is TaskState.KILLED and allocation is not None and allocation.goal is Goal.STOP
    )
    finish_time = (report.timestamp or now.wall) if report.state.is_final else 0.0
    steps = task.preemptions
    if preempted and allocation is not None:
        lost = max(finish_time - task.start_time, 0.0) if task.start_time else 0.0
        steps = (
            *steps,
            PreemptionStep(finish_time, "killed", None, allocation.goal_reason, lost),
        )
    tables.put_task(
        evolve(
            task,
            state=report.state,
            exit_code=report.exit_code,
            message=f"preempted: {allocation.goal_reason}"
            if preempted and allocation is not None
            else report.message,
            finish_time=finish_time,
            seq=tables.next_counter("event"),
            preempted=preempted,
            preemptions=steps,
        )
    )
    if report.state.is_final and allocation is not None and allocation.goal is Goal.STOP:
        # A preempted container goes back to the cluster once its task is shown stopped.
        tables.remove_allocation(allocation.allocation_id)
        state.note_lost(allocation.job_id, allocation.allocation_id)


def _observe_container(
    state: CoreState, allocation_id: str, report: TaskReport, now: Now
) -> PreemptionStep | None:
    """Record what the node shows of a task container: the state and limits of its task,
    and whether it swaps.  Returns the preemption step the change shows, if it is one."""
    allocation = state.allocations.get(allocation_id)
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
    shown = shown_by(report)
    limits = report.limits if shown is not Shown.IDLE else None
    if limits is not None and limits == allocation.resources:
        limits = None
    if (shown, limits, report.swapping) == (
        allocation.shown,
        allocation.shown_limits,
        allocation.swapping,
    ):
        return None
    state.tables.put_allocation(
        evolve(allocation, shown=shown, shown_limits=limits, swapping=report.swapping)
    )
    # (a live task's report is stamped with its start: the change is seen now)
    when = (report.timestamp or now.wall) if report.state.is_final else now.wall
    return _step_shown(allocation, shown, limits, when)


def _observe_master(state: CoreState, report: TaskReport, now: Now) -> None:
    """A job master's process ended: release its container; if it was the job's current
    job master and the job is not final, the job master is lost."""
    if not report.state.is_final:
        return
    allocation = state.allocations.get(report.allocation_id)
    if allocation is not None and allocation.is_master and allocation.job_id == report.job_id:
        state.tables.remove_allocation(allocation.allocation_id)
    job = state.jobs.get(report.job_id)
    if job is None or job.state.is_final or job.master_allocation != report.allocation_id:
        return
    master_lost(
        state,
        job,
        f"job master attempt {job.master_attempt} exited with code {report.exit_code} "
        "before reporting a final state",
        now,
    )


def stop_command(state: CoreState, report: TaskReport, now: Now) -> StopAllocation | None:
    """What stops this live task or job master on its node, and why; None if it may run.  A
    speculative task has no allocation to check: it runs while its job does.  The one place a
    stop is decided to be a preemption kill (``preempted``: its container's goal is STOP, the
    rule :func:`observe_task` records the kill by), for the agent and the simulator alike.
    Called for every live task of every heartbeat: most answer None, at no allocation."""
    job = state.jobs.get(report.job_id)
    if job is None:  # a finished job has left memory; say how it ended
        stored = state.tables.find_job(report.job_id)
        return _stop(report, "no such job" if stored is None else f"job {stored.state.value}")
    if report.speculative:
        return _stop(report, f"job {job.state.value}") if job.state.is_final else None
    allocation = state.allocations.get(report.allocation_id)
    if allocation is None or allocation.job_id != report.job_id:
        return _stop(report, f"allocation {report.allocation_id} is not {report.job_id}'s")
    if allocation.is_master != report.job_master:
        return _stop(report, f"allocation {report.allocation_id} is not for this process")
    if allocation.goal is Goal.STOP:
        return _stop(report, f"preempted: {allocation.goal_reason}", preempted=True)
    if report.job_master and job.master_allocation != allocation.allocation_id:
        if job.state is JobState.SUBMITTED and job.execution.evictions:
            return _stop(report, f"job {job.message}")
        return _stop(report, "a newer job master attempt replaced it")
    if not job.state.is_final:
        return None
    if report.job_master and job.state is JobState.SUCCEEDED:
        # It exits by itself once its outcomes are flushed; stop it only if it lingers.
        grace = state.settings.master_exit_grace
        lingering = now.wall - job.finish_time > grace
        return _stop(report, f"job succeeded {grace:g} s ago") if lingering else None
    return _stop(report, f"job {job.state.value}")


def _stop(report: TaskReport, reason: str, *, preempted: bool = False) -> StopAllocation:
    return StopAllocation(report.job_id, report.allocation_id, reason, preempted)


def _count_speculative(state: CoreState, node_id: str, live: Sequence[TaskReport]) -> None:
    """What the node's live speculative tasks hold, as its heartbeat shows them: counted
    as opportunistic, never as allocated (ROSE; docs/oversubscription.md)."""
    held, count = Resources(), 0
    for report in live:
        if report.speculative and not report.state.is_final and report.limits is not None:
            held, count = held + report.limits, count + 1
    if count:
        state.opportunistic[node_id] = (held, count)
    else:
        state.opportunistic.pop(node_id, None)


def lose(
    state: CoreState,
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
        state.tables.remove_allocation(allocation.allocation_id)
        if allocation.kept_for:
            state.note_kept_end(allocation, task_reason, now)
        job = state.jobs.get(allocation.job_id)
        if job is None or job.state.is_final:
            continue
        if allocation.is_master:
            if job.master_allocation == allocation.allocation_id:
                master_lost(state, job, master_reason, now)
        else:
            state.note_lost(job.job_id, allocation.allocation_id)
    for task in tasks:
        observe_task(
            state,
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


def shown_by(report: TaskReport) -> Shown:
    """What a task's report shows of its container."""
    if report.state is TaskState.SUSPENDED:
        return Shown.SUSPENDED
    if report.state.is_final:
        return Shown.IDLE
    return Shown.RUNNING  # LAUNCHING counts as running: its process may be starting
