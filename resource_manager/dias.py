"""DiAS in the RM core (Sec. 3.2): the sprint budget told which jobs enter and leave execution,
and preemptive dispatch's eviction of a running job for the head of a higher buffer.

Which job to evict is :func:`policies.approximation.dispatch.eviction_victim`; how long jobs
sprint is :class:`resource_manager.sprints.SprintBook`.  This module turns their decisions into
plans (:class:`~policies.scheduling.framework.Eviction`,
:class:`~policies.scheduling.framework.SprintChange`), which :mod:`resource_manager.plans`
applies with :func:`evict` and :func:`tell_sprint`.
"""

from __future__ import annotations

from dataclasses import replace

from policies.approximation.dispatch import RunningJob, eviction_victim
from policies.scheduling.framework import AllocationKind, Eviction, Plan, SprintChange
from policies.scheduling.lifecycle import JobState, TaskState
from policies.scheduling.progress import PhaseProgress
from resource_manager.jobs import move
from resource_manager.records import Execution, JobRecord, Now, evolve
from resource_manager.state import CoreState, log

NO_PLAN = Plan()


def sprint_changes(state: CoreState, now: Now) -> Plan:
    """Tell the sprint budget which jobs entered or left execution and bring it to ``now``:
    the plan of the jobs whose sprinting changed (DiAS Sec. 3.2).  The sprinter decides
    (:mod:`policies.approximation.sprinting`); applying the plan tells their nodes."""
    sprints = state.sprints
    if not sprints.enabled:
        return NO_PLAN
    due = sprints.next_change()
    if not (state.execution_changed or state.tables.running_changed) and (
        due is None or due > now.wall
    ):
        return NO_PLAN  # (the common case, every heartbeat)
    changed = state.take_execution_changed()
    # jobs whose tasks started or stopped running (none: 0 -> some, or back)
    flipped = state.take_running_changed()
    tables = state.tables
    entered: list[tuple[str, int, float]] = []
    left: list[tuple[str, float]] = []
    for job_id in changed:
        job = state.jobs.get(job_id) or tables.find_job(job_id)
        if job is None:
            continue
        if job_id in tables.in_execution:
            entered.append((job_id, job.spec.priority, job.execution.dispatched_at or now.wall))
        else:
            left.append((job_id, job.finish_time or now.wall))
            _keep_sprinted(state, job, left[-1][1])
    running = [
        (job_id, tables.running_of_job.get(job_id, 0) > 0)
        for job_id in {**changed, **flipped}
        if job_id in tables.in_execution
    ]
    changes = []
    for job_id in sprints.update(now.wall, entered, left, running):
        if sprints.sprinting(job_id):
            why = "in execution past its priority's sprint timeout, with budget left"
            changes.append(SprintChange(job_id, True, why))
        else:
            ended = [r.why for r in sprints.history if r.job_id == job_id and r.ended_at]
            changes.append(SprintChange(job_id, False, ended[-1] if ended else "stopped"))
    return Plan(sprints=tuple(changes)) if changes else NO_PLAN


def tell_sprint(state: CoreState, job_id: str) -> None:
    """Have the nodes of a job's task containers told its sprint factor (reconciliation)."""
    for allocation in state.tables.allocations_of_job(job_id):
        if not allocation.is_master:
            state.tell(allocation.node_id)


def _keep_sprinted(state: CoreState, job: JobRecord, when: float) -> None:
    """A job leaving execution at ``when`` keeps what it sprinted in it (the sprinter
    forgets it as it leaves), so a finished job still shows it."""
    sprinted = state.sprints.sprinted_until(job.job_id, when)
    if sprinted > 0:
        execution = replace(job.execution, sprinted_s=job.execution.sprinted_s + sprinted)
        state.tables.put_job(replace(job, execution=execution))


def evictions_for_waiting(state: CoreState, plan: Plan) -> Plan:
    """Preemptive dispatch (the paper's baseline P): a job waiting at the head of a higher
    buffer than a job in execution evicts it, when execution is full: the plan of that
    eviction, after the pass's ``plan``."""
    in_execution = state.tables.in_execution
    if len(in_execution) < state.settings.max_running_jobs:
        return NO_PLAN
    heads = [w.ask for w in plan.waiting if w.ask.kind is AllocationKind.JOB_MASTER]
    if not heads:
        return NO_PLAN
    head = max(heads, key=lambda a: (a.priority, -a.submit_seq))
    running = [
        RunningJob(job.job_id, job.spec.priority, job.execution.dispatched_at)
        for job in (state.jobs[j] for j in in_execution)
    ]
    victim = eviction_victim(head.priority, running)
    if victim is None:
        return NO_PLAN
    why = f"evicted for job {head.job_id} of priority {head.priority}"
    return Plan(evictions=(Eviction(victim, why),))


def evict(state: CoreState, job: JobRecord, why: str, now: Now) -> None:
    """Stop the job's execution and put it back at the head of its buffer (its submission
    order is kept): its tasks and job master are stopped, and it will be executed again
    from the start, by a new job master that counts the earlier execution's attempts only
    to number its own.  The time the execution had run is wasted."""
    ran = max(now.wall - job.execution.dispatched_at, 0.0) if job.execution.dispatched_at else 0
    tables = state.tables
    for task in tables.tasks_of_job(job.job_id):
        if task.execution == job.execution.number and not task.state.is_final:
            tables.put_task(
                evolve(
                    task,
                    state=TaskState.KILLED,
                    message=why,
                    finish_time=now.wall,
                    seq=tables.next_counter("event"),
                    preempted=True,
                )
            )
    for allocation in tables.allocations_of_job(job.job_id):
        state.tell(allocation.node_id)  # its next heartbeat stops what runs there
        if not allocation.is_master:  # (stopped by reconciliation, as a final job's)
            tables.remove_allocation(allocation.allocation_id)
    execution = job.execution
    move(
        state,
        job,
        JobState.SUBMITTED,
        master_node="",
        master_allocation="",
        progress=tuple(PhaseProgress(p.name, p.tasks, pending=p.tasks) for p in job.spec.phases),
        execution=Execution(
            number=execution.number + 1,
            evictions=execution.evictions + 1,
            wasted_s=execution.wasted_s + ran,
            sprinted_s=execution.sprinted_s,
        ),
        message=f"{why} after {ran:.1f} s; to be executed again from the start",
    )
    log.warning("job %s %s after %.1f s: back to the head of its buffer", job.job_id, why, ran)
