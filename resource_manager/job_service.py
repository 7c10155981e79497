"""The RM's client service (``JobService``): submit, list, show, watch and kill jobs, change a
task's container, list nodes, queues and sprints.  Each request that changes anything is one
unit of work on the RM's one shell (:meth:`resource_manager.rm_state.RMState.run`), its answer
built inside it; reads run between units.  A client stream that waits (``WatchJob``) holds no
thread.  Who may call what: :mod:`resource_manager.access`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import TypeVar

import grpc

from plumbing import wire
from plumbing.authz import caller
from plumbing.spec_text import load_job_document
from plumbing.wire import JOB_STATE_FROM_PB, resources_from_pb, resources_to_pb
from policies.scheduling.framework import PreemptionAction
from policies.scheduling.jobspec import JobSpec, SpecError, parse_job_spec
from resource_manager import convert
from resource_manager.answers import answer, answer_async, check_owner
from resource_manager.core import ResourceManagerCore
from resource_manager.errors import (
    InvalidRequestError,
    LimitExceededError,
)
from resource_manager.pending_why import pending_reasons
from resource_manager.records import AllocationRecord, JobRecord
from resource_manager.rm_state import RMState
from sluice_pb import resource_manager_pb2 as rm_pb
from sluice_pb import resource_manager_pb2_grpc as rm_grpc

log = logging.getLogger(__name__)


T = TypeVar("T")
MAX_IDEMPOTENCY_KEY = 64
MAX_REASON = 200

# What a ChangeTask asks for: a preemption action, or None for a resumption.
_TASK_CHANGES: dict[int, PreemptionAction | None] = {
    rm_pb.TASK_SUSPEND: PreemptionAction.SUSPEND,
    rm_pb.TASK_RESUME: None,
    rm_pb.TASK_RESIZE: PreemptionAction.SHRINK,
    rm_pb.TASK_PREEMPT: PreemptionAction.KILL,
}


class JobServicer(rm_grpc.JobServiceServicer):
    def __init__(self, state: RMState) -> None:
        self._state = state

    def _summary(self, job: JobRecord) -> rm_pb.JobSummary:
        core = self._state.core
        sprint = None
        if core.sprints.enabled and job.job_id in core.tables.in_execution:
            sprint = core.sprints.at(self._state.clock().wall).job(job.job_id)
        return convert.job_summary_to_pb(
            job, buffered=core.settings.dispatch.buffered, sprint=sprint
        )

    async def SubmitJob(
        self, request: rm_pb.SubmitJobRequest, context: grpc.aio.ServicerContext
    ) -> rm_pb.SubmitJobResponse:
        def parse() -> JobSpec:
            key = request.idempotency_key
            if len(key) > MAX_IDEMPOTENCY_KEY or not key.isprintable():
                raise InvalidRequestError(
                    "idempotency_key", f"must be at most {MAX_IDEMPOTENCY_KEY} printable characters"
                )
            return parse_job_spec(_document(request))

        identity = caller(context)
        owner = identity.name if identity is not None else ""
        key = request.idempotency_key

        def within_rate() -> None:
            """Before anything costly, so a flood of refusals costs the RM little."""
            if key and self._state.core.tables.job_by_key(key) is not None:
                return  # a retry is free
            problem = self._state.submissions.take(owner, self._state.clock().monotonic)
            if problem is not None:
                raise LimitExceededError(problem)

        await answer(context, "SubmitJob", within_rate)
        # Reading a spec is pure but may take a large fraction of a second (a 1 MiB spec): on a
        # worker thread, so heartbeats on the event loop never wait for it.
        spec = await answer_async(context, "SubmitJob", lambda: asyncio.to_thread(parse))

        def submit() -> rm_pb.SubmitJobResponse:
            return self._state.run(
                lambda core, now: rm_pb.SubmitJobResponse(
                    job=self._summary(
                        core.submit(
                            spec,
                            client_mode=request.client_mode,
                            now=now,
                            idempotency_key=key,
                            owner=owner,
                        )
                    )
                )
            )

        return await answer(context, "SubmitJob", submit)

    async def ListJobs(
        self, request: rm_pb.ListJobsRequest, context: grpc.aio.ServicerContext
    ) -> rm_pb.ListJobsResponse:
        return await answer(
            context,
            "ListJobs",
            lambda: self._state.read(
                lambda core: rm_pb.ListJobsResponse(
                    jobs=[self._summary(j) for j in core.list_jobs()]
                )
            ),
        )

    async def GetJob(
        self, request: rm_pb.GetJobRequest, context: grpc.aio.ServicerContext
    ) -> rm_pb.JobDetail:
        identity = caller(context)

        def detail(core: ResourceManagerCore) -> rm_pb.JobDetail:
            job = core.job(request.job_id)
            tasks = [
                convert.task_to_pb(
                    t, core.node_address(t.node_id), core.allocations.get(t.allocation_id)
                )
                for t in core.job_tasks(job.job_id)
            ]
            self._state.add_log_passes(job, identity, tasks)
            return rm_pb.JobDetail(
                summary=self._summary(job),
                spec=wire.spec_to_pb(job.spec),
                tasks=tasks,
                kept=[
                    rm_pb.ReservedSlot(
                        allocation_id=a.allocation_id,
                        phase=a.kept_for,
                        until=a.kept_until,
                        node_id=a.node_id,
                    )
                    for a in core.kept_slots(job.job_id)
                ],
                speculative=self._state.speculative_log.of(job.job_id),
                kept_ended=[
                    rm_pb.ReservedSlot(
                        allocation_id=e.allocation_id,
                        phase=e.phase,
                        node_id=e.node_id,
                        ended=e.reason,
                        ended_at=e.at,
                    )
                    for e in core.kept_log.of(job.job_id)
                ],
                pending=[
                    convert.pending_to_pb(why)
                    for why in pending_reasons(core, job.job_id, self._state.clock())
                ],
            )

        return await answer(context, "GetJob", lambda: self._state.read(detail))

    async def WatchJob(
        self, request: rm_pb.GetJobRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[rm_pb.JobSummary]:
        job_id = request.job_id
        last: rm_pb.JobSummary | None = None
        watchers = self._state.watchers

        def summary_now() -> rm_pb.JobSummary:
            return self._state.read(lambda core: self._summary(core.job(job_id)))

        while True:
            changed = watchers.subscribe(job_id)
            try:
                summary = await answer(
                    context,
                    "WatchJob",
                    lambda: self._state.read(lambda core: self._summary(core.job(job_id))),
                )
                if summary != last:
                    last = summary
                    yield summary
                    if JOB_STATE_FROM_PB[summary.state].is_final:
                        return
                await changed.wait()
            finally:
                watchers.unsubscribe(job_id)

    async def KillJob(
        self, request: rm_pb.GetJobRequest, context: grpc.aio.ServicerContext
    ) -> rm_pb.JobSummary:
        identity = caller(context)

        def kill() -> rm_pb.JobSummary:
            check_owner(self._state.core.job(request.job_id), identity)
            return self._state.run(
                lambda core, now: self._summary(core.kill(request.job_id, now=now))
            )

        return await answer(context, "KillJob", kill)

    async def ChangeTask(
        self, request: rm_pb.ChangeTaskRequest, context: grpc.aio.ServicerContext
    ) -> rm_pb.ChangeTaskResponse:
        def change() -> rm_pb.ChangeTaskResponse:
            if request.change not in _TASK_CHANGES:
                raise InvalidRequestError("change", "must be suspend, resume, resize or preempt")
            action = _TASK_CHANGES[request.change]
            limits = None
            if request.change == rm_pb.TASK_RESIZE:
                if not request.HasField("limits"):
                    raise InvalidRequestError("limits", "a resize needs limits")
                limits = resources_from_pb(request.limits)
            if len(request.reason) > MAX_REASON:
                raise InvalidRequestError("reason", f"at most {MAX_REASON} characters")
            return self._state.run(
                lambda core, now: _changed_to_pb(
                    core.change_task(
                        request.job_id,
                        request.task_id,
                        action,
                        limits=limits,
                        reason=request.reason,
                        now=now,
                    )
                )
            )

        return await answer(context, "ChangeTask", change)

    async def ListNodes(
        self, request: rm_pb.ListNodesRequest, context: grpc.aio.ServicerContext
    ) -> rm_pb.ListNodesResponse:
        return await answer(
            context,
            "ListNodes",
            lambda: self._state.read(
                lambda core: rm_pb.ListNodesResponse(
                    nodes=[
                        convert.node_to_pb(
                            n,
                            core.node_allocated(n.node_id),
                            core.opportunistic(n.node_id),
                            self._state.speculative_queues.get(n.node_id),
                        )
                        for n in sorted(core.nodes.values(), key=lambda n: n.node_id)
                    ]
                )
            ),
        )

    async def GetSprint(
        self, request: rm_pb.GetSprintRequest, context: grpc.aio.ServicerContext
    ) -> rm_pb.SprintStatus:
        def status(core: ResourceManagerCore) -> rm_pb.SprintStatus:
            book, wall = core.sprints, self._state.clock().wall
            now = book.at(wall)
            sprints = []
            for record in book.history:
                going = now.job(record.job_id) if not record.ended_at else None
                sprints.append(
                    rm_pb.SprintRun(
                        job_id=record.job_id,
                        started_at=record.started_at,
                        ended_at=record.ended_at,
                        sprinted_s=record.sprinted_s if going is None else going.sprinted_time,
                        why=record.why,
                    )
                )
            sprint = book.dias.sprint
            return rm_pb.SprintStatus(
                enabled=book.enabled,
                budget_s=now.budget,
                capacity_s=sprint.budget_s,
                replenish_s_per_hour=sprint.replenish_s_per_hour,
                factor=sprint.factor,
                sprints=sprints,
            )

        return await answer(context, "GetSprint", lambda: self._state.read(status))

    async def ListQueues(
        self, request: rm_pb.ListQueuesRequest, context: grpc.aio.ServicerContext
    ) -> rm_pb.ListQueuesResponse:
        return await answer(
            context,
            "ListQueues",
            lambda: self._state.read(
                lambda core: rm_pb.ListQueuesResponse(
                    queues=[convert.queue_to_pb(q) for q in core.queue_status()],
                    capacity=resources_to_pb(core.tables.capacity.total_capacity),
                    source=core.book.source,
                    loaded_at=core.book.loaded_at,
                )
            ),
        )

    async def GetClusterInfo(
        self, request: rm_pb.GetClusterInfoRequest, context: grpc.aio.ServicerContext
    ) -> rm_pb.ClusterInfo:
        return rm_pb.ClusterInfo(
            data_plane=self._state.data_plane.to_pb(),
            cluster_id=self._state.core.settings.cluster_id,
            oversubscription=self._state.oversubscription,
        )


def _changed_to_pb(changed: AllocationRecord | None) -> rm_pb.ChangeTaskResponse:
    if changed is None:  # a preempted container with nothing running: taken back
        return rm_pb.ChangeTaskResponse(goal="stop")
    return rm_pb.ChangeTaskResponse(
        allocation_id=changed.allocation_id,
        node_id=changed.node_id,
        goal=changed.goal.value,
        limits=resources_to_pb(changed.current_limits),
    )


def _document(request: rm_pb.SubmitJobRequest) -> object:
    if request.WhichOneof("source") == "spec_yaml":
        return load_job_document(request.spec_yaml)
    if request.WhichOneof("source") == "spec":
        return wire.spec_document_from_pb(request.spec)
    raise SpecError("spec", "is required (give spec or spec_yaml)")
