"""The resource manager's gRPC servicers: translate, call the core under one lock, answer.

No scheduling logic lives here.  Errors the caller made (bad spec, unknown id) become
INVALID_ARGUMENT / NOT_FOUND with a one-line message; nothing is created on refusal.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import NoReturn, TypeVar

import grpc
import yaml

from plumbing import wire
from plumbing.data_plane import DataPlane
from plumbing.wire import JOB_STATE_FROM_PB, resources_from_pb, resources_to_pb
from policies.scheduling.jobspec import SpecError, parse_job_spec
from resource_manager import convert
from resource_manager.core import (
    ConflictError,
    LaunchMaster,
    NotFoundError,
    PhaseAsk,
    ResourceManagerCore,
    StopAllocation,
)
from sluice_pb import resource_manager_pb2 as rm_pb
from sluice_pb import resource_manager_pb2_grpc as rm_grpc

log = logging.getLogger(__name__)

Clock = Callable[[], float]
T = TypeVar("T")


class RMState:
    """The core, its lock, and a condition that wakes watchers whenever the core changed."""

    def __init__(
        self,
        core: ResourceManagerCore,
        clock: Clock,
        advertise_address: str,
        data_plane: DataPlane | None = None,
    ) -> None:
        self.core = core
        self.clock = clock
        self.advertise_address = advertise_address
        self.data_plane = data_plane or DataPlane()
        self.changed = threading.Condition(threading.Lock())

    def run(self, action: Callable[[ResourceManagerCore, float], T]) -> T:
        """Run ``action(core, now)`` under the lock; wake watchers if the core changed."""
        with self.changed:
            before = self.core.version
            result = action(self.core, self.clock())
            if self.core.version != before:
                self.changed.notify_all()
            return result


def _abort(context: grpc.ServicerContext, code: grpc.StatusCode, message: str) -> NoReturn:
    context.abort(code, message)
    raise AssertionError("unreachable")  # context.abort raises


def _guard(context: grpc.ServicerContext, action: Callable[[], T]) -> T:
    """Map the core's refusals to gRPC status codes."""
    try:
        return action()
    except SpecError as error:
        _abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(error))
    except NotFoundError as error:
        _abort(context, grpc.StatusCode.NOT_FOUND, str(error))
    except ConflictError as error:
        _abort(context, grpc.StatusCode.FAILED_PRECONDITION, str(error))


class JobServicer(rm_grpc.JobServiceServicer):
    def __init__(self, state: RMState) -> None:
        self._state = state

    def SubmitJob(
        self, request: rm_pb.SubmitJobRequest, context: grpc.ServicerContext
    ) -> rm_pb.SubmitJobResponse:
        def submit() -> rm_pb.SubmitJobResponse:
            spec = parse_job_spec(_document(request))
            job = self._state.run(
                lambda core, now: core.submit(spec, client_mode=request.client_mode, now=now)
            )
            return rm_pb.SubmitJobResponse(job=convert.job_summary_to_pb(job))

        return _guard(context, submit)

    def ListJobs(
        self, request: rm_pb.ListJobsRequest, context: grpc.ServicerContext
    ) -> rm_pb.ListJobsResponse:
        return self._state.run(
            lambda core, _: rm_pb.ListJobsResponse(
                jobs=[convert.job_summary_to_pb(j) for j in core.jobs.values()]
            )
        )

    def GetJob(
        self, request: rm_pb.GetJobRequest, context: grpc.ServicerContext
    ) -> rm_pb.JobDetail:
        def detail(core: ResourceManagerCore, _: float) -> rm_pb.JobDetail:
            job = core.job(request.job_id)
            return rm_pb.JobDetail(
                summary=convert.job_summary_to_pb(job),
                spec=wire.spec_to_pb(job.spec),
                tasks=[
                    convert.task_to_pb(t, core.node_address(t.node_id))
                    for t in core.job_tasks(job.job_id)
                ],
            )

        return _guard(context, lambda: self._state.run(detail))

    def WatchJob(
        self, request: rm_pb.GetJobRequest, context: grpc.ServicerContext
    ) -> Iterator[rm_pb.JobSummary]:
        last: rm_pb.JobSummary | None = None
        while context.is_active():
            with self._state.changed:
                summary = _guard(
                    context,
                    lambda: convert.job_summary_to_pb(self._state.core.job(request.job_id)),
                )
                if summary == last:
                    self._state.changed.wait(timeout=1.0)
                    continue
            last = summary
            yield summary
            if JOB_STATE_FROM_PB[summary.state].is_final:
                return

    def KillJob(
        self, request: rm_pb.GetJobRequest, context: grpc.ServicerContext
    ) -> rm_pb.JobSummary:
        job = _guard(
            context,
            lambda: self._state.run(lambda core, now: core.kill(request.job_id, now=now)),
        )
        return convert.job_summary_to_pb(job)

    def ListNodes(
        self, request: rm_pb.ListNodesRequest, context: grpc.ServicerContext
    ) -> rm_pb.ListNodesResponse:
        return self._state.run(
            lambda core, _: rm_pb.ListNodesResponse(
                nodes=[
                    convert.node_to_pb(n, core.node_allocated(n.node_id))
                    for n in sorted(core.nodes.values(), key=lambda n: n.node_id)
                ]
            )
        )

    def GetClusterInfo(
        self, request: rm_pb.GetClusterInfoRequest, context: grpc.ServicerContext
    ) -> rm_pb.ClusterInfo:
        return rm_pb.ClusterInfo(data_plane=self._state.data_plane.to_pb())


def _document(request: rm_pb.SubmitJobRequest) -> object:
    if request.WhichOneof("source") == "spec_yaml":
        try:
            return yaml.safe_load(request.spec_yaml)
        except yaml.YAMLError as error:
            mark = getattr(error, "problem_mark", None)
            where = f" at line {mark.line + 1}" if mark is not None else ""
            raise SpecError("job", f"not valid YAML{where}") from None
    if request.WhichOneof("source") == "spec":
        return wire.spec_document_from_pb(request.spec)
    raise SpecError("spec", "is required (give spec or spec_yaml)")


class NodeServicer(rm_grpc.NodeServiceServicer):
    def __init__(self, state: RMState) -> None:
        self._state = state

    def RegisterNode(
        self, request: rm_pb.RegisterNodeRequest, context: grpc.ServicerContext
    ) -> rm_pb.RegisterNodeResponse:
        if not request.node_id or not request.address:
            _abort(context, grpc.StatusCode.INVALID_ARGUMENT, "node_id and address are required")
        live = [convert.observation_from_pb(e) for e in request.live_tasks]
        self._state.run(
            lambda core, now: core.register_node(
                request.node_id,
                request.address,
                request.runtime,
                resources_from_pb(request.capacity),
                live,
                now=now,
            )
        )
        return rm_pb.RegisterNodeResponse(
            heartbeat_interval_s=0, data_plane=self._state.data_plane.to_pb()
        )

    def Heartbeat(
        self, request: rm_pb.HeartbeatRequest, context: grpc.ServicerContext
    ) -> rm_pb.HeartbeatResponse:
        live = [convert.observation_from_pb(e) for e in request.live_tasks]
        reregister, commands = self._state.run(
            lambda core, now: core.heartbeat(
                request.node_id, resources_from_pb(request.used), live, now=now
            )
        )
        response = rm_pb.HeartbeatResponse(reregister=reregister)
        for command in commands:
            if isinstance(command, LaunchMaster):
                response.commands.add().launch_master.CopyFrom(
                    rm_pb.LaunchMaster(
                        job_id=command.job_id,
                        allocation_id=command.allocation_id,
                        resources=resources_to_pb(command.resources),
                        rm_address=self._state.advertise_address,
                    )
                )
            elif isinstance(command, StopAllocation):
                response.commands.add().stop_allocation.CopyFrom(
                    rm_pb.StopAllocation(
                        job_id=command.job_id,
                        allocation_id=command.allocation_id,
                        reason=command.reason,
                    )
                )
        return response

    def ReportTaskEvents(
        self, request: rm_pb.ReportTaskEventsRequest, context: grpc.ServicerContext
    ) -> rm_pb.ReportTaskEventsResponse:
        events = [convert.observation_from_pb(e) for e in request.events]
        self._state.run(lambda core, now: core.report_events(request.node_id, events, now=now))
        return rm_pb.ReportTaskEventsResponse()


class MasterServicer(rm_grpc.MasterServiceServicer):
    def __init__(self, state: RMState) -> None:
        self._state = state

    def RegisterMaster(
        self, request: rm_pb.RegisterMasterRequest, context: grpc.ServicerContext
    ) -> rm_pb.RegisterMasterResponse:
        def register(core: ResourceManagerCore, now: float) -> rm_pb.RegisterMasterResponse:
            job, held = core.register_master(request.job_id, now=now)
            return rm_pb.RegisterMasterResponse(
                spec=wire.spec_to_pb(job.spec),
                kill_requested=job.kill_requested or job.state.is_final,
                allocations=[
                    convert.allocation_to_pb(a, core.node_address(a.node_id)) for a in held
                ],
                data_plane=self._state.data_plane.to_pb(),
            )

        return _guard(context, lambda: self._state.run(register))

    def Allocate(
        self, request: rm_pb.AllocateRequest, context: grpc.ServicerContext
    ) -> rm_pb.AllocateResponse:
        asks = [PhaseAsk(a.phase, a.count, resources_from_pb(a.resources)) for a in request.asks]
        progress = [wire.progress_from_pb(p) for p in request.progress]

        def allocate(core: ResourceManagerCore, now: float) -> rm_pb.AllocateResponse:
            result = core.allocate(
                request.job_id,
                asks,
                list(request.releases),
                progress,
                request.events_after,
                now=now,
            )
            return rm_pb.AllocateResponse(
                granted=[
                    convert.allocation_to_pb(a, core.node_address(a.node_id))
                    for a in result.granted
                ],
                events=[
                    rm_pb.SequencedTaskEvent(seq=t.seq, event=convert.task_event_to_pb(t))
                    for t in result.events
                ],
                lost_allocations=list(result.lost_allocations),
                kill_requested=result.kill_requested,
            )

        return _guard(context, lambda: self._state.run(allocate))

    def FinishJob(
        self, request: rm_pb.FinishJobRequest, context: grpc.ServicerContext
    ) -> rm_pb.FinishJobResponse:
        state = JOB_STATE_FROM_PB.get(request.state)
        if state is None:
            _abort(context, grpc.StatusCode.INVALID_ARGUMENT, "state: must be a job state")
        progress = [wire.progress_from_pb(p) for p in request.progress]
        _guard(
            context,
            lambda: self._state.run(
                lambda core, now: core.finish_job(
                    request.job_id, state, request.message, progress, now=now
                )
            ),
        )
        return rm_pb.FinishJobResponse()


def housekeeping_loop(state: RMState, stop: threading.Event, period: float = 1.0) -> None:
    """Declare silent nodes lost, every ``period`` seconds, until ``stop`` is set."""
    while not stop.wait(period):
        try:
            state.run(lambda core, now: core.tick(now))
        except Exception:  # a bug in one tick must not stop liveness checks for good
            log.exception("housekeeping tick failed")


def wall_clock() -> float:
    return time.time()
