"""Translation between protobuf messages and the RM's domain types — the service's edge."""

from __future__ import annotations

from plumbing.wire import (
    JOB_STATE_TO_PB,
    TASK_STATE_TO_PB,
    progress_to_pb,
    resources_to_pb,
)
from policies.approximation.sprinting import SprintingJob
from policies.scheduling.diagnosis import PendingWhy
from policies.scheduling.framework import AllocationKind
from policies.scheduling.resources import Resources
from resource_manager.queues import QueueStatus
from resource_manager.records import (
    AllocationRecord,
    Goal,
    JobRecord,
    NodeRecord,
    NodeState,
    TaskRecord,
)
from sluice_pb import common_pb2 as pb
from sluice_pb import resource_manager_pb2 as rm_pb


def job_summary_to_pb(
    job: JobRecord,
    *,
    buffered: bool = False,
    sprint: SprintingJob | None = None,
) -> rm_pb.JobSummary:
    """``buffered``: the cluster dispatches from priority buffers (``--dispatch``); ``sprint``:
    the job in the sprinter, as of now."""
    return rm_pb.JobSummary(
        job_id=job.job_id,
        name=job.spec.name,
        priority=job.spec.priority,
        state=JOB_STATE_TO_PB[job.state],
        kill_requested=job.kill_requested,
        submit_time=job.submit_time,
        start_time=job.start_time,
        finish_time=job.finish_time,
        message=job.message,
        phases=[progress_to_pb(p) for p in job.progress],
        master_node=job.master_node,
        client_mode=job.client_mode,
        master_attempt=job.master_attempt,
        owner=job.owner,
        dias=rm_pb.DiasInfo(
            buffered=buffered,
            drop_ratio=job.approximation.drop_ratio,
            dropped_tasks=job.approximation.dropped_tasks,
            expected_error=job.approximation.expected_error,
            execution=job.execution.number,
            evictions=job.execution.evictions,
            wasted_s=job.execution.wasted_s,
            sprinting=sprint is not None and sprint.sprinting,
            sprinted_s=job.execution.sprinted_s
            + (sprint.sprinted_time if sprint is not None else 0.0),
        ),
    )


def task_to_pb(
    task: TaskRecord, node_address: str, allocation: AllocationRecord | None = None
) -> rm_pb.TaskInfo:
    """``allocation``: the task's container, if it is live (says who holds it preempted)."""
    return rm_pb.TaskInfo(
        task_id=task.task_id,
        phase=task.phase,
        attempt=task.attempt,
        state=TASK_STATE_TO_PB[task.state],
        node_id=task.node_id,
        allocation_id=task.allocation_id,
        exit_code=task.exit_code,
        start_time=task.start_time,
        finish_time=task.finish_time,
        message=task.message,
        node_address=node_address,
        preemptions=[
            rm_pb.PreemptionEvent(
                time=step.time,
                action=step.action,
                limits=None if step.limits is None else resources_to_pb(step.limits),
                reason=step.reason,
                work_lost_s=step.work_lost_s,
            )
            for step in task.preemptions
        ],
        held_by=held_by(allocation) if allocation is not None and not task.state.is_final else "",
    )


def held_by(allocation: AllocationRecord) -> str:
    """Who holds a container preempted: its ``held_by`` (an operator), "scheduler" for a
    preemption of the scheduler's, or empty while it runs with its whole grant."""
    if allocation.held_by:
        return allocation.held_by
    whole = allocation.goal is Goal.RUN and allocation.limits is None
    return "" if whole and not allocation.preempted_at else "scheduler"


def task_event_to_pb(task: TaskRecord) -> pb.TaskEvent:
    return pb.TaskEvent(
        job_id=task.job_id,
        task_id=task.task_id,
        attempt=task.attempt,
        allocation_id=task.allocation_id,
        state=TASK_STATE_TO_PB[task.state],
        exit_code=task.exit_code,
        message=task.message,
        timestamp=task.finish_time or task.start_time,
        node_id=task.node_id,
        start_time=task.start_time,
        preempted=task.preempted,
    )


def allocation_to_pb(allocation: AllocationRecord, node_address: str) -> rm_pb.Allocation:
    return rm_pb.Allocation(
        allocation_id=allocation.allocation_id,
        job_id=allocation.job_id,
        phase=allocation.phase,
        node_id=allocation.node_id,
        node_address=node_address,
        resources=resources_to_pb(allocation.resources),
    )


def node_to_pb(
    node: NodeRecord,
    allocated: Resources,
    opportunistic: tuple[Resources, int] = (Resources(), 0),
    queue: pb.SpeculativeQueueState | None = None,
) -> rm_pb.NodeInfo:
    """``opportunistic``: what its live speculative tasks hold, and how many they are;
    ``queue``: its speculative queue, as its last heartbeat showed it."""
    return rm_pb.NodeInfo(
        node_id=node.node_id,
        address=node.address,
        runtime=node.runtime,
        capacity=resources_to_pb(node.capacity),
        allocated=resources_to_pb(allocated),
        used=resources_to_pb(node.used),
        state=rm_pb.NODE_READY if node.state is NodeState.READY else rm_pb.NODE_LOST,
        last_heartbeat=node.last_heartbeat,
        running_tasks=node.running_tasks,
        has_swap=node.has_swap,
        opportunistic=resources_to_pb(opportunistic[0]),
        speculative_tasks=opportunistic[1],
        speculative=queue,
    )


def queue_to_pb(status: QueueStatus) -> rm_pb.QueueInfo:
    spec = status.spec
    return rm_pb.QueueInfo(
        name=spec.name,
        share=spec.share,
        max_share=spec.max_share,
        mode=spec.mode_name,
        usage=resources_to_pb(status.usage),
        pending=resources_to_pb(status.pending),
        preempted=resources_to_pb(status.preempted),
        suspended=status.suspended,
        shrunk=status.shrunk,
        running_jobs=status.running_jobs,
        graceful_step=resources_to_pb(spec.graceful_step),
        minimal_footprint=resources_to_pb(spec.minimal_footprint),
        resume_after_offers=spec.resume_after_offers,
        max_suspended_s=spec.max_suspended_s or 0.0,
        is_default=status.is_default,
    )


def pending_to_pb(why: PendingWhy) -> rm_pb.PendingReason:
    """Why an ask is pending (``GetJob``), structured and as one line."""
    ask = why.ask
    return rm_pb.PendingReason(
        phase=ask.phase,
        job_master=ask.kind is AllocationKind.JOB_MASTER,
        count=ask.count,
        resources=resources_to_pb(ask.resources),
        held_back=str(why.held_back) if why.held_back is not None else "",
        nodes=why.nodes,
        available=why.available,
        reasons=[rm_pb.NodeReason(reason=r, nodes=n) for r, n in why.reasons],
        text=why.text(),
    )
