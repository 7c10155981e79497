"""Container goals in the RM core: preemption (kill, suspend, shrink), resumption and resize of
task containers, from a pass's plan, an operator or a queue's limit, and BIG-C's delayed
resumption (Sec. 4.3).

A change is checked against the records as they are now and sets the container's goal
(:mod:`policies.scheduling.containers`: run at its limits, suspend, stop); the nodes carry it
out, told by reconciliation until their reports show it done.  What a container holds of its
node follows what the node has shown, so capacity a freeze will free is not promised to anyone
before the freeze is done.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from functools import partial

from policies.preemption.resumption import PreemptedContainer, Verdict, consider_offer
from policies.scheduling.containers import Goal, Shown, check_goal
from policies.scheduling.containers import command_needed as container_command
from policies.scheduling.framework import (
    Plan,
    Preemption,
    PreemptionAction,
    Resize,
    Resumption,
)
from policies.scheduling.lifecycle import TransitionError
from policies.scheduling.resources import Resources
from resource_manager.errors import ConflictError, NotFoundError
from resource_manager.queues import eventual_holds
from resource_manager.records import OPERATOR, AllocationRecord, NodeState, Now
from resource_manager.state import CoreState, log


def apply_goals(state: CoreState, plan: Plan, now: Now) -> None:
    """Carry out a plan's preemptions, resumptions and resizes, each checked against the
    records as they are now; one that no longer holds is dropped and logged.  What a
    preemption frees is held on its node for the queue it was taken for."""
    for preemption in plan.preemptions:
        before = state.allocations.get(preemption.allocation_id)
        if before is not None and before.kept_for:  # (slot reservation: taken back)
            state.note_kept_end(before, f"taken: {preemption.reason}", now)
        try:
            after = preempt(state, preemption, now=now)
        except (ConflictError, NotFoundError) as error:
            log.warning("dropping a stale preemption of the plan: %s", error)
            continue
        if preemption.for_queue and before is not None:
            freed = before.holds - (Resources() if after is None else eventual_holds(after))
            state.book.claim(
                before.node_id,
                preemption.for_queue,
                Resources(max(freed.cpu, 0.0), max(freed.memory_mb, 0)),
                now.monotonic,
            )
    changes: list[Callable[[], AllocationRecord | None]] = [
        *(partial(resume, state, r, now=now) for r in plan.resumptions),
        *(partial(resize, state, r, now=now) for r in plan.resizes),
    ]
    for change in changes:
        try:
            change()
        except (ConflictError, NotFoundError) as error:
            log.warning("dropping a stale change of the plan: %s", error)


def preempt(
    state: CoreState, preemption: Preemption, *, now: Now, held_by: str | None = None
) -> AllocationRecord | None:
    """Kill, suspend or shrink a task container (never a job master's).  Returns the
    container with its new goal (None once a kill took an idle container back).  Raises
    NotFoundError or ConflictError, changing nothing, when the change does not hold.

    A SUSPEND with limits (immediate preemption) freezes and then cuts the task to them; a
    SHRINK with a step (graceful preemption) is stepped down by the node, which may freeze
    the task once it swaps.  ``held_by`` (:data:`OPERATOR`) marks who holds it now; None
    keeps who held it (the scheduler preempting an operator's container leaves it the
    operator's to resume)."""
    allocation = goal_target(state, preemption.allocation_id)
    reason = preemption.reason
    if preemption.action is PreemptionAction.KILL:
        return set_goal(state, allocation, Goal.STOP, allocation.limits, reason, now)
    if preemption.action is PreemptionAction.SUSPEND:
        limits = preemption.limits
        if limits is not None and not limits.fits_in(allocation.resources):
            raise ConflictError(f"{allocation.allocation_id}: a footprint above its grant")
        return set_goal(state, allocation, Goal.SUSPEND, limits, reason, now, held_by)
    if preemption.limits is None:
        raise ConflictError(f"{allocation.allocation_id}: a shrink needs limits")
    if preemption.step is not None:
        check_limits(allocation, preemption.limits)
        return set_goal(state, allocation, Goal.SHRINK, preemption.limits, reason, now, held_by)
    return _resize(state, allocation, preemption.limits, reason, now, held_by)


def resume(
    state: CoreState, resumption: Resumption, *, now: Now, by_operator: bool = False
) -> AllocationRecord | None:
    """Let a suspended or shrunk container run with its whole grant again; refused while
    its node has no room for the grant, and, unless ``by_operator``, while an operator
    holds it (only the operator lifts their own suspension or resize)."""
    allocation = goal_target(state, resumption.allocation_id)
    if allocation.held_by and not by_operator:
        raise ConflictError(f"{allocation.allocation_id}: held by an {allocation.held_by}")
    check_room(state, allocation, Goal.RUN, None)
    return set_goal(state, allocation, Goal.RUN, None, "resumed", now)


def resize(state: CoreState, change: Resize, *, now: Now) -> AllocationRecord | None:
    """Set a container's limits, positive and within its grant; growing is refused while
    its node has no room, and any change while an operator holds it."""
    allocation = goal_target(state, change.allocation_id)
    if allocation.held_by:
        raise ConflictError(f"{allocation.allocation_id}: held by an {allocation.held_by}")
    return _resize(state, allocation, change.limits, "resized", now)


def change_task(
    state: CoreState,
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
    job = state.job(job_id)
    if job.state.is_final:
        raise ConflictError(f"job {job_id} is {job.state.value}")
    attempts = [
        t
        for t in state.tables.tasks_of_job(job_id)
        if t.task_id == task_id and not t.state.is_final
    ]
    if not attempts:
        raise NotFoundError(f"task {task_id!r} of {job_id} has no live attempt")
    allocation_id = max(attempts, key=lambda t: t.attempt).allocation_id
    why = reason or "by an operator"
    if action is None:
        allocation = goal_target(state, allocation_id)
        if allocation.goal is Goal.RUN and allocation.limits is None:
            raise ConflictError(
                f"task {task_id!r} of {job_id} runs with its whole grant: nothing to resume"
            )
        return resume(state, Resumption(allocation_id), now=now, by_operator=True)
    return preempt(state, Preemption(allocation_id, action, why, limits), now=now, held_by=OPERATOR)


def offered_resumptions(state: CoreState, node_id: str, now: Now) -> Iterator[Plan]:
    """Delayed resumption (BIG-C Sec. 4.3): each preempted container on the node whose
    preemption its node has carried out is offered the node's free capacity, less what is
    held there for other queues; it declines D fitting offers (its queue's
    ``resume_after_offers``) and resumes on the next.  Oldest preemption first.

    Yields the plan of each resumption decided; the caller applies it before the next offer
    is computed (:func:`resource_manager.plans.offer_resumptions`), so what one container
    takes back is not offered to the next."""
    node = state.nodes[node_id]
    book = state.book
    book.expire(now.monotonic, set(state.pending.queues()))
    waiting = sorted(
        (
            a
            for a in state.tables.preempted_of_node(node_id)
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
        spec = state.queues.spec_of(allocation.job_id)
        free = (
            node.capacity
            - state.tables.allocated_on(node_id)
            - book.held_on(node_id, except_queue=spec.name)
        )
        decision = consider_offer(
            PreemptedContainer(
                allocation.allocation_id,
                node_id,
                held=allocation.holds,
                original=allocation.resources,
                declined_offers=book.declined(allocation.allocation_id),
            ),
            node_id,
            free,
            spec.resume_after_offers,
        )
        if decision.verdict is Verdict.DECLINE:
            book.set_declined(allocation.allocation_id, decision.container.declined_offers)
        elif decision.verdict is Verdict.RESUME:
            declined = decision.container.declined_offers
            why = f"offered room on {node_id} after declining {declined} offers"
            yield Plan(resumptions=(Resumption(allocation.allocation_id, why),))


def overdue_suspensions(state: CoreState, now: Now) -> list[tuple[AllocationRecord, float]]:
    """Preempted containers past their queue's ``max_suspended_s``, with that limit."""
    overdue = []
    for allocation in state.tables.preempted():
        if allocation.goal is Goal.STOP or allocation.held_by:
            continue
        limit = state.queues.spec_of(allocation.job_id).max_suspended_s
        if limit is not None and now.wall - allocation.preempted_at > limit:
            overdue.append((allocation, limit))
    return overdue


def next_suspension_deadline(state: CoreState) -> float | None:
    """The wall time the next preempted container passes its queue's limit, if any."""
    deadlines = []
    for allocation in state.tables.preempted():
        limit = state.queues.spec_of(allocation.job_id).max_suspended_s
        if limit is not None and allocation.goal is not Goal.STOP and not allocation.held_by:
            deadlines.append(allocation.preempted_at + limit)
    return min(deadlines, default=None)


def _resize(
    state: CoreState,
    allocation: AllocationRecord,
    limits: Resources,
    reason: str,
    now: Now,
    held_by: str | None = None,
) -> AllocationRecord | None:
    check_limits(allocation, limits)
    full = None if limits == allocation.resources else limits
    check_room(state, allocation, Goal.RUN, full)
    return set_goal(state, allocation, Goal.RUN, full, reason, now, held_by)


def check_limits(allocation: AllocationRecord, limits: Resources) -> None:
    if not (limits.cpu > 0 and limits.memory_mb > 0 and limits.fits_in(allocation.resources)):
        grant = allocation.resources
        raise ConflictError(
            f"{allocation.allocation_id}: limits of {limits.cpu:g} cpu, {limits.memory_mb} "
            f"MiB must be positive and within its grant of {grant.cpu:g} cpu, "
            f"{grant.memory_mb} MiB"
        )


def goal_target(state: CoreState, allocation_id: str) -> AllocationRecord:
    allocation = state.allocations.get(allocation_id)
    if allocation is None or allocation.is_master:
        raise NotFoundError(f"no task container {allocation_id!r}")
    return allocation


def check_room(
    state: CoreState, allocation: AllocationRecord, goal: Goal, limits: Resources | None
) -> None:
    """Refuse a change that would make the container hold more than its node has free."""
    node = state.nodes.get(allocation.node_id)
    after = replace(allocation, goal=goal, limits=limits).holds
    others = state.tables.allocated_on(allocation.node_id) - allocation.holds
    if node is None or node.state is not NodeState.READY:
        raise ConflictError(f"{allocation.allocation_id}: node {allocation.node_id} is lost")
    if not (others + after).fits_in(node.capacity):
        raise ConflictError(
            f"{allocation.allocation_id}: node {allocation.node_id} has no room for "
            f"{after.cpu:g} cpu, {after.memory_mb} MiB now"
        )


def set_goal(
    state: CoreState,
    allocation: AllocationRecord,
    goal: Goal,
    limits: Resources | None,
    reason: str,
    now: Now,
    held_by: str | None = None,
) -> AllocationRecord | None:
    """Set a container's goal, checked (:func:`policies.scheduling.containers.check_goal`),
    and have its node told.  ``held_by``: who holds the container after the change (None: as
    before); a container let run with its whole grant is held by nobody."""
    whole = goal is Goal.RUN and limits is None
    holder = "" if whole else allocation.held_by if held_by is None else held_by
    tables = state.tables
    if (goal, limits) == (allocation.goal, allocation.limits):
        if holder != allocation.held_by:  # (an operator takes over a preemption)
            changed = replace(allocation, held_by=holder, goal_reason=reason)
            tables.put_allocation(changed)
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
        state.book.set_declined(allocation.allocation_id, None)
    state.tell(allocation.node_id)
    if goal is Goal.STOP and allocation.shown is Shown.IDLE:
        # Nothing runs in it: take it back now.
        tables.remove_allocation(allocation.allocation_id)
        state.note_lost(allocation.job_id, allocation.allocation_id)
        return None
    tables.put_allocation(changed)
    return changed
