"""Jobs and their asks in the RM core: submission, a job's moves through its lifecycle (with
the job master attempts, like YARN's application masters), the pending asks that follow from
them, and the queues they are asked in.

A job waiting for a job master (SUBMITTED, not client mode) asks for one; a RUNNING job's task
asks are what its job master last sent (:func:`set_asks`).  Asks are soft state: after an RM
restart job masters send them again.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import replace

from policies.approximation.dispatch import DispatchMode
from policies.approximation.dropping import dropped_tasks, effective_drop_ratio
from policies.preemption.queues import QueueConfig, QueueError
from policies.scheduling.asks import PhaseAsk
from policies.scheduling.framework import AllocationKind, PendingAsk
from policies.scheduling.jobspec import JobSpec, SpecError, check_fits_cluster
from policies.scheduling.lifecycle import JOB_TRANSITIONS, JobState, check_transition
from policies.scheduling.progress import PhaseProgress
from resource_manager.checks import check_fits_master
from resource_manager.errors import ConflictError, LimitExceededError
from resource_manager.records import Approximation, JobRecord, Now
from resource_manager.state import MASTER_RESOURCES, CoreSettings, CoreState, log


def submit(
    state: CoreState,
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
    settings, tables = state.settings, state.tables
    if spec.reservation is None and settings.default_reservation is not None:
        spec = replace(spec, reservation=settings.default_reservation)
    if idempotency_key:
        earlier = tables.job_by_key(idempotency_key)
        if earlier is not None:
            if earlier.spec != spec or earlier.client_mode != client_mode or earlier.owner != owner:
                raise ConflictError(
                    f"idempotency_key {idempotency_key!r} was used for {earlier.job_id}, "
                    "with another spec"
                )
            return earlier
    limit = settings.max_open_tasks_per_user
    if limit and owner:
        held = tables.open_tasks_by_owner.get(owner, 0)
        wanted = sum(p.tasks for p in spec.phases)
        if held + wanted > limit:
            raise LimitExceededError(
                f"tasks: {owner} has {held} tasks of unfinished jobs; {wanted} more would "
                f"pass the limit of {limit} per user (--max-open-tasks-per-user)"
            )
    if client_mode and settings.dispatch.buffered:
        raise ConflictError(
            f"client mode: this cluster dispatches jobs from priority buffers (--dispatch "
            f"{settings.dispatch.value}), which a job driven by its submitter would "
            "bypass; submit it with `sluice submit`"
        )
    try:
        state.book.config.queue_of(spec.queue)
    except QueueError as error:
        raise SpecError(error.field, error.problem) from None
    approximation = approximation_of(settings, spec)
    capacities = tables.capacity.capacity_shapes()
    check_fits_cluster(spec, capacities)
    if not client_mode:
        check_fits_master(capacities)
    seq = tables.next_counter("job")
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
    tables.put_job(job)
    sync_master_ask(state, job)
    log.info("job %s (%s, priority %d) submitted", job.job_id, spec.name, spec.priority)
    return state.jobs[job.job_id]


def approximation_of(settings: CoreSettings, spec: JobSpec) -> Approximation:
    """The drop ratio the job runs with (its own within its priority's bound, else its
    priority's; SpecError past the bound) and what it leaves out of its droppable phases."""
    sizes = [phase.tasks for phase in spec.phases if phase.droppable]
    if not sizes:
        return Approximation()
    asked = spec.approximation.drop_ratio if spec.approximation is not None else None
    theta = settings.dias.drop_ratio_for(spec.priority, asked)
    return Approximation(
        drop_ratio=theta,
        dropped_tasks=dropped_tasks(sizes, theta),
        expected_error=settings.dias.expected_error(effective_drop_ratio(sizes, theta)),
    )


def move(state: CoreState, job: JobRecord, new: JobState, **changes: object) -> JobRecord:
    """Move a job to state ``new`` (a checked transition) with ``changes``; its asks follow."""
    check_transition(JOB_TRANSITIONS, job.state, new)
    moved = replace(job, state=new, **changes)  # type: ignore[arg-type]
    tables = state.tables
    left_execution = job.job_id in tables.in_execution
    tables.put_job(moved)
    if left_execution and job.job_id not in tables.in_execution:
        # A place in execution is free: the head of the highest buffer may go.  (Not
        # undone with a rolled-back unit: at worst one pass too many.)
        state.asks_grew = state.asks_grew or state.settings.dispatch.buffered
    if left_execution != (job.job_id in tables.in_execution) and state.sprints.enabled:
        state.note_execution_changed(job.job_id)
    sync_master_ask(state, moved)
    if new is not JobState.RUNNING:
        set_asks(state, moved, 0.0, ())
    return moved


def finish(state: CoreState, job: JobRecord, final: JobState, message: str, now: Now) -> None:
    """Make the job final and give back its task containers.  Its job master's container
    stays until the node reports the process ended; stopping anything still running is
    left to reconciliation (the core's commands for a node)."""
    move(state, job, final, finish_time=now.wall, message=message)
    log.info("job %s %s%s", job.job_id, final.value, f": {message}" if message else "")
    for allocation in state.tables.allocations_of_job(job.job_id):
        if not allocation.is_master:
            state.tables.remove_allocation(allocation.allocation_id)


def master_lost(state: CoreState, job: JobRecord, reason: str, now: Now) -> None:
    """The job's current job master is gone: start another attempt if any is left."""
    attempts = state.settings.max_master_attempts
    # (a job master stopped by an eviction failed no attempt)
    if job.kill_requested or job.master_attempt - job.execution.evictions >= attempts:
        finish(
            state,
            job,
            JobState.FAILED,
            f"{reason} (attempt {job.master_attempt} of {attempts})",
            now,
        )
        return
    log.warning(
        "job %s: %s; starting job master attempt %d", job.job_id, reason, job.master_attempt + 1
    )
    move(
        state,
        job,
        JobState.SUBMITTED,
        master_node="",
        master_allocation="",
        message=f"{reason}; job master attempt {job.master_attempt + 1} pending",
    )


def set_asks(state: CoreState, job: JobRecord, now: float, asks: Iterable[PhaseAsk]) -> bool:
    """Replace a job's task asks, undoably; True if any grew (a pass may place more).  An
    ask's locality wait runs from when its phase first named preferred nodes (``now``,
    monotonic): asking again does not restart it.  A local-only ask (a pre-reservation)
    waits for them with no end, where the cluster has a locality wait at all; once its
    phase opens and asks as usual, the usual wait starts."""
    wanted = {ask.phase: ask for ask in asks}
    grew = False
    held: dict[str, PendingAsk] = {}
    for previous in state.pending.of_job(job.job_id):
        if previous.kind is AllocationKind.TASK:
            if previous.phase in wanted:
                held[previous.phase] = previous
            else:
                state.put_ask(replace(previous, count=0))
    wait = state.settings.locality_wait
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
        grew |= state.put_ask(
            PendingAsk(
                job.job_id,
                job.spec.priority,
                job.seq,
                ask.phase,
                ask.count,
                ask.resources,
                queue=state.queues.queue_of(job),
                preferred_nodes=preferred,
                local_until=local_until,
            )
        )
        if before is not None and (
            before.preferred_nodes != preferred or before.local_until != local_until
        ):
            grew = state.asks_grew = True  # more nodes will do: a pass may place it now
    return grew


def sync_master_ask(state: CoreState, job: JobRecord) -> None:
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
        queue=state.queues.queue_of(job),
    )
    if state.tables.in_unit:
        state.put_ask(ask)
    else:
        state.pending.put(ask)
        state.asks_grew = state.asks_grew or wants


def set_queues(state: CoreState, config: QueueConfig, *, source: str, now: Now) -> None:
    """Take new queues (a reload).  Refused with a QueueError, changing nothing, when an
    unfinished job names a queue the new file does not have.  Jobs that name no queue go
    to the new default queue."""
    tables = state.tables
    for job_id in tables.active_jobs:
        named = state.jobs[job_id].spec.queue
        if named and config.get(named) is None:
            raise QueueError("queues", f"queue {named!r} is gone, but job {job_id} is still in it")
    warn_if_never_preempted(state.settings, config)
    state.book.replace_config(config, source, now.wall)
    tables.regroup()
    tables.journal(tables.regroup)  # undone after the book: the old totals
    for ask in list(state.pending):
        job = state.jobs.get(ask.job_id)
        queue = state.queues.queue_of(job) if job is not None else config.default
        if queue != ask.queue:
            state.put_ask(replace(ask, count=0))
            state.put_ask(replace(ask, queue=queue))
    state.asks_grew = True
    log.info(
        "queues%s: %s",
        f" from {source}" if source else "",
        ", ".join(f"{q.name} (share {q.share:g}, {q.mode_name})" for q in config.queues),
    )


def warn_if_never_preempted(settings: CoreSettings, config: QueueConfig) -> None:
    if config.preempts and settings.dispatch is DispatchMode.DIAS:
        log.warning("the queues preempt, but --dispatch dias never evicts: their preemption is off")
