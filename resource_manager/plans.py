"""Applying plans: every decision of a scheduling pass or of a timer reaches the records here.

Each decision of the RM's core is made by a pure policy and returned as a
:class:`~policies.scheduling.framework.Plan` (Nomad's plan; the Kubernetes framework's
plugins, named, with reasons): the scheduling pass's placements, preemptions and takeovers of
kept containers (:mod:`resource_manager.scheduling`), DiAS's evictions and sprint changes
(:mod:`resource_manager.dias`), BIG-C's delayed resumptions offered at a node's heartbeat
(:func:`resource_manager.goals.offered_resumptions`), and the kills of containers suspended
past their queue's ``max_suspended_s`` (:mod:`resource_manager.liveness`).  :func:`apply_plan`
is the one place they are applied: each change is checked against the records as they are
now (a stale one is dropped and logged), and the plan is noted as applied, so the shell
reports it (``Effects.plans``: what a decision trace records).

Placements are the exception in one way only: the pass grants them itself, inside its scratch
of the capacity index (:func:`resource_manager.scheduling.schedule`), then hands the plan here
for the rest.  An operator's change (``ChangeTask``) is not a decision of the scheduler: it is
applied directly, refusals and all (:func:`resource_manager.goals.change_task`).
"""

from __future__ import annotations

from policies.scheduling.framework import Plan
from resource_manager.dias import evict, sprint_changes, tell_sprint
from resource_manager.goals import apply_goals, offered_resumptions
from resource_manager.records import Now
from resource_manager.state import CoreState, log


def apply_plan(state: CoreState, plan: Plan, now: Now) -> None:
    """Apply what ``plan`` decided beyond its placements (granted by the pass already):
    container goals (preemptions, resumptions, resizes), evictions and sprint changes; then
    note it as applied.  Changes that no longer hold are dropped and logged, one line each."""
    if not plan.decides:
        return
    apply_goals(state, plan, now)
    for eviction in plan.evictions:
        job = state.jobs.get(eviction.job_id)
        if job is None or job.job_id not in state.tables.in_execution:
            log.warning("dropping a stale eviction of %s: not in execution", eviction.job_id)
            continue
        evict(state, job, eviction.reason, now)
    for change in plan.sprints:
        tell_sprint(state, change.job_id)
    state.add_applied(plan)


def update_sprints(state: CoreState, now: Now) -> None:
    """Bring DiAS's sprint budget to ``now`` and apply the sprint changes it decides (every
    heartbeat asks: most have none, and cost one call)."""
    plan = sprint_changes(state, now)
    if plan.sprints:
        apply_plan(state, plan, now)


def offer_resumptions(state: CoreState, node_id: str, now: Now) -> None:
    """BIG-C's delayed resumption at a node's heartbeat: each resumption decided is applied
    before the next container is offered what is left (the offers see it)."""
    for plan in offered_resumptions(state, node_id, now):
        apply_plan(state, plan, now)
