"""Dispatch: what each node should run against what it just reported, as node commands.

Reconciliation, in Kubernetes' manner: the RM keeps the desired state (containers and their
goals, job masters to launch), a node reports the observed state with each heartbeat, and the
answer carries the commands that close the gap (:mod:`plumbing.node_protocol`).  A command is
re-sent with every heartbeat until the node's reports show it done, so each is idempotent.
O(what the node runs) per heartbeat.
"""

from __future__ import annotations

from collections.abc import Sequence

from plumbing.node_protocol import (
    LaunchMaster,
    NodeCommand,
    ResizeAllocation,
    ResumeAllocation,
    SprintAllocation,
    SuspendAllocation,
    TaskReport,
)
from policies.scheduling.containers import ContainerCommand, Goal
from policies.scheduling.containers import command_needed as container_command
from policies.scheduling.lifecycle import JobState, TaskState
from resource_manager.reconcile import StopReasons, shown_by, stop_command
from resource_manager.records import Now
from resource_manager.state import CoreState


def commands_for(
    state: CoreState,
    node_id: str,
    reports: Sequence[TaskReport],
    now: Now,
    known: StopReasons = (-1, {}),
) -> list[NodeCommand]:
    """Reconcile the node: what it should run against what it just reported.  ``known``:
    stops already found at a version of the tables (see
    :func:`resource_manager.reconcile.observe_reports`)."""
    reported = {r.allocation_id for r in reports}
    commands: list[NodeCommand] = []
    for allocation in state.tables.masters_of_node(node_id):
        if allocation.allocation_id in reported:
            continue
        job = state.jobs[allocation.job_id]
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
            state.tables.remove_allocation(allocation.allocation_id)
    version, stops = known
    if version != state.tables.version:
        stops = {}
    stopping: set[str] = set()
    for report in reports:
        if report.state.is_final or report.allocation_id in stopping:
            continue
        if report.allocation_id in stops and not report.job_master:
            stop = stops[report.allocation_id]
        else:
            stop = stop_command(state, report, now)
        if stop is not None:
            stopping.add(report.allocation_id)
            commands.append(stop)
        elif not report.job_master:
            command = _container_command(state, report)
            if command is not None:
                stopping.add(report.allocation_id)
                commands.append(command)
    return commands


def _container_command(state: CoreState, report: TaskReport) -> NodeCommand | None:
    """What brings a task's container to its goal, given what the node just showed."""
    allocation = state.allocations.get(report.allocation_id)
    if allocation is None:
        return None
    if state.sprints.enabled and allocation.goal is Goal.RUN and allocation.limits is None:
        factor = (
            state.settings.dias.sprint.factor if state.sprints.sprinting(report.job_id) else 1.0
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
        shown_by(report),
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
            step=state.queues.spec_of(allocation.job_id).graceful_step if graceful else None,
            freeze_on_swap=graceful,
        )
    return None  # STOP is a stop command, answered above
