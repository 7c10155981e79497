"""The resource manager's node and job master services: translate, run the core as one unit of
work, answer.

No scheduling logic lives here.  All servicers run on one asyncio event loop, so requests are
applied one at a time without a lock, and a client stream that waits (``WatchJob``) holds no
thread: however many users watch their jobs, heartbeats, registrations and task events are
served.  Agents heartbeat over a stream each (``HeartbeatStream``, kept open: a message on it
costs a fraction of a unary call) or with the unary ``Heartbeat``; both answer alike.  Each
request, and each heartbeat on a stream, is one unit of work (:meth:`RMState.run`): if anything
raises, memory and the database are left as they were before it.

Errors the caller made (bad spec, bad ask, unknown id) become INVALID_ARGUMENT / NOT_FOUND /
FAILED_PRECONDITION / ALREADY_EXISTS with a one-line message; nothing is created on refusal.  An
unexpected error answers INTERNAL with a short message and logs one line (the traceback at
debug level), and the RM keeps serving.  On a heartbeat stream, either ends that stream alone.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from typing import TypeVar

import grpc

from plumbing import wire
from plumbing.authz import caller, foreign_job, foreign_node, log_refusal
from plumbing.node_protocol import LaunchMaster, NodeCommand
from plumbing.node_wire import MasterContact, command_to_pb
from plumbing.tls import Identity, Role
from plumbing.wire import JOB_STATE_FROM_PB, resources_from_pb
from policies.scheduling.asks import PhaseAsk
from resource_manager import convert
from resource_manager.answers import answer, check_owner
from resource_manager.core import ResourceManagerCore
from resource_manager.errors import (
    InvalidRequestError,
)
from resource_manager.records import KeptSlot, Now, SpeculativeNote
from resource_manager.rm_state import RMState
from resource_manager.speculative_log import SpeculativeLog
from sluice_pb import resource_manager_pb2 as rm_pb
from sluice_pb import resource_manager_pb2_grpc as rm_grpc

log = logging.getLogger(__name__)


Clock = Callable[[], Now]
T = TypeVar("T")
MAX_RESOLVED_NODES = 1000  # node addresses one Allocate may ask for (speculative placement)


async def _own_node(
    context: grpc.aio.ServicerContext, node_id: str, identity: Identity | None
) -> None:
    """An agent speaks only for the node its certificate names (with TLS; the access table has
    already let only agents through)."""
    problem = foreign_node(identity, node_id)
    if problem is not None:
        log_refusal(log, "NodeService", identity, context.peer(), problem)
        await context.abort(grpc.StatusCode.PERMISSION_DENIED, problem)


async def _own_job(context: grpc.aio.ServicerContext, job_id: str, state: RMState) -> None:
    """A job master acts only for the job its certificate names, and a person's client-mode
    job master only for a job of theirs (with TLS)."""
    identity = caller(context)
    if identity is not None and identity.role is Role.CLIENT:
        job = state.core.tables.find_job(job_id)
        if job is not None:  # (an unknown job is the handler's NOT_FOUND)
            await answer(context, "MasterService", lambda: check_owner(job, identity))
        return
    problem = foreign_job(identity, job_id)
    if problem is not None:
        log_refusal(log, "MasterService", identity, context.peer(), problem)
        await context.abort(grpc.StatusCode.PERMISSION_DENIED, problem)


class NodeServicer(rm_grpc.NodeServiceServicer):
    def __init__(self, state: RMState) -> None:
        self._state = state

    async def RegisterNode(
        self, request: rm_pb.RegisterNodeRequest, context: grpc.aio.ServicerContext
    ) -> rm_pb.RegisterNodeResponse:
        await _own_node(context, request.node_id, caller(context))

        def register() -> None:
            live = self._state.reports(request.node_id, list(request.live_tasks))
            self._state.run(
                lambda core, now: core.register_node(
                    request.node_id,
                    request.address,
                    request.runtime,
                    resources_from_pb(request.capacity),
                    live,
                    now=now,
                    instance_id=request.instance_id,
                    cluster_id=request.cluster_id,
                    has_swap=request.has_swap,
                    session=request.session,
                )
            )

        await answer(context, "RegisterNode", register)
        return rm_pb.RegisterNodeResponse(
            heartbeat_interval_s=0,
            data_plane=self._state.data_plane.to_pb(),
            cluster_id=self._state.core.settings.cluster_id,
            grant_key=self._state.node_grant_key(request.node_id),
            oversubscription=self._state.oversubscription,
            node_timeout_s=self._state.core.settings.node_timeout,  # the agent's lease
        )

    async def Heartbeat(
        self, request: rm_pb.HeartbeatRequest, context: grpc.aio.ServicerContext
    ) -> rm_pb.HeartbeatResponse:
        return await self._beat(request, context, "Heartbeat", caller(context))

    async def HeartbeatStream(
        self,
        request_iterator: AsyncIterator[rm_pb.HeartbeatRequest],
        context: grpc.aio.ServicerContext,
    ) -> None:
        """One agent's heartbeats over one stream: each request answered by one response, in
        order, exactly as :meth:`Heartbeat` answers it.  A request the core refuses ends the
        stream with the status and message the unary call would answer; the stream holds no
        state between requests, so the agent opens another and goes on.  (Read and written with
        ``context.read``/``write``: cheaper per message than an async generator.)"""
        node_id = "?"  # known from the first request
        identity = caller(context)  # one connection, one certificate: read once per stream
        log.debug("a heartbeat stream opened from %s", context.peer())
        try:
            while True:
                request = await context.read()
                if request is grpc.aio.EOF:
                    return
                assert isinstance(request, rm_pb.HeartbeatRequest)
                node_id = request.node_id
                answer = await self._beat(request, context, "HeartbeatStream", identity)
                await context.write(answer)
        finally:
            # Debug only: thousands of agents each hold a stream, and reconnect together.
            log.debug("the heartbeat stream of node %s closed", node_id)

    async def _beat(
        self,
        request: rm_pb.HeartbeatRequest,
        context: grpc.aio.ServicerContext,
        what: str,
        identity: Identity | None,
    ) -> rm_pb.HeartbeatResponse:
        """Apply one heartbeat as one unit of work and answer what the node should do now; a
        refusal aborts the call (``context``) with its status, as :func:`_answer` maps it."""
        await _own_node(context, request.node_id, identity)

        def beat() -> rm_pb.HeartbeatResponse:
            live = self._state.reports(request.node_id, list(request.live_tasks))

            def unit(core: ResourceManagerCore, now: Now) -> rm_pb.HeartbeatResponse:
                reregister, commands = core.heartbeat(
                    request.node_id,
                    resources_from_pb(request.used),
                    live,
                    now=now,
                    instance_id=request.instance_id,
                    has_swap=request.has_swap,
                )
                # (answered inside the unit, as every request: see RMState.run)
                return rm_pb.HeartbeatResponse(
                    reregister=reregister, commands=[self._command_to_pb(c) for c in commands]
                )

            return self._state.run(unit)

        response = await answer(context, what, beat)
        if request.HasField("speculative"):  # shown by ListNodes; nothing decides on it
            self._state.speculative_queues[request.node_id] = request.speculative
        return response

    def _command_to_pb(self, command: NodeCommand) -> rm_pb.NodeCommand:
        """A command on the wire; a ``LaunchMaster`` gets this RM's address and the job
        master's credentials for its attempt."""
        if not isinstance(command, LaunchMaster):
            return command_to_pb(command)
        chain, key = self._state.job_master_credentials(command.job_id, command.attempt)
        return command_to_pb(command, MasterContact(self._state.advertise_address, chain, key))

    async def ReportTaskEvents(
        self, request: rm_pb.ReportTaskEventsRequest, context: grpc.aio.ServicerContext
    ) -> rm_pb.ReportTaskEventsResponse:
        await _own_node(context, request.node_id, caller(context))

        def report() -> None:
            events = self._state.reports(request.node_id, list(request.events))
            self._state.run(
                lambda core, now: core.report_events(
                    request.node_id, events, now=now, session=request.session
                )
            )

        await answer(context, "ReportTaskEvents", report)
        return rm_pb.ReportTaskEventsResponse()


class MasterServicer(rm_grpc.MasterServiceServicer):
    def __init__(self, state: RMState) -> None:
        self._state = state

    async def RegisterMaster(
        self, request: rm_pb.RegisterMasterRequest, context: grpc.aio.ServicerContext
    ) -> rm_pb.RegisterMasterResponse:
        await _own_job(context, request.job_id, self._state)

        def unit(core: ResourceManagerCore, now: Now) -> rm_pb.RegisterMasterResponse:
            registration = core.register_master(
                request.job_id, attempt=request.attempt or 1, now=now
            )
            job = registration.job
            return rm_pb.RegisterMasterResponse(
                spec=wire.spec_to_pb(job.spec),
                kill_requested=job.kill_requested or job.state.is_final,
                allocations=[self._state.allocation_to_pb(a) for a in registration.held],
                data_plane=self._state.data_plane.to_pb(),
                history=[
                    rm_pb.SequencedTaskEvent(
                        seq=t.seq, event=convert.task_event_to_pb(t), execution=t.execution
                    )
                    for t in registration.history
                ],
                execution=job.execution.number,
                drop_ratio=job.approximation.drop_ratio,
            )

        return await answer(context, "RegisterMaster", lambda: self._state.run(unit))

    async def Allocate(
        self, request: rm_pb.AllocateRequest, context: grpc.aio.ServicerContext
    ) -> rm_pb.AllocateResponse:
        await _own_job(context, request.job_id, self._state)

        def allocate() -> rm_pb.AllocateResponse:
            # The whole request is checked before the unit of work: a refusal after its commit
            # would lose what the commit marked delivered (grants, events).
            if len(request.resolve_nodes) > MAX_RESOLVED_NODES:
                raise InvalidRequestError(
                    "resolve_nodes", f"at most {MAX_RESOLVED_NODES} nodes per call"
                )
            asks = [
                PhaseAsk(
                    a.phase,
                    a.count,
                    resources_from_pb(a.resources),
                    tuple(a.preferred_nodes),
                    a.local_only,
                )
                for a in request.asks
            ]
            progress = [wire.progress_from_pb(p) for p in request.progress]
            kept = [KeptSlot(k.allocation_id, k.phase, k.until, k.ended) for k in request.kept]
            SpeculativeLog.check(request.speculative)
            speculative = [
                SpeculativeNote(r.task_id, r.attempt, r.node_id, r.outcome)
                for r in request.speculative
            ]
            wanted = list(request.resolve_nodes)

            def unit(core: ResourceManagerCore, now: Now) -> rm_pb.AllocateResponse:
                # The answer is built inside the unit: if building it raises, the grants and
                # events it carries are not marked delivered (rolled back with the rest).
                result = core.allocate(
                    request.job_id,
                    asks,
                    list(request.releases),
                    progress,
                    request.events_after,
                    now=now,
                    attempt=request.master_attempt or 1,
                    kept=kept,
                    speculative=speculative,
                )
                addresses = core.node_addresses(wanted) if wanted else {}
                return rm_pb.AllocateResponse(
                    granted=[self._state.allocation_to_pb(a) for a in result.granted],
                    events=[
                        rm_pb.SequencedTaskEvent(seq=t.seq, event=convert.task_event_to_pb(t))
                        for t in result.events
                    ],
                    lost_allocations=list(result.lost_allocations),
                    kill_requested=result.kill_requested,
                    node_addresses=addresses,
                    speculative_passes=self._state.speculative_passes(
                        request.job_id, list(addresses)
                    ),
                )

            response = self._state.run(unit)
            # (memory only, checked above: nothing after the commit can refuse the call)
            self._state.speculative_log.record(request.job_id, list(request.speculative))
            return response

        return await answer(context, "Allocate", allocate)

    async def FinishJob(
        self, request: rm_pb.FinishJobRequest, context: grpc.aio.ServicerContext
    ) -> rm_pb.FinishJobResponse:
        await _own_job(context, request.job_id, self._state)

        def finish() -> None:
            state = JOB_STATE_FROM_PB.get(request.state)
            if state is None:
                raise InvalidRequestError("state", "must be a job state")
            progress = [wire.progress_from_pb(p) for p in request.progress]
            SpeculativeLog.check(request.speculative)
            self._state.run(
                lambda core, now: core.finish_job(
                    request.job_id,
                    state,
                    request.message,
                    progress,
                    now=now,
                    attempt=request.master_attempt or 1,
                )
            )
            self._state.speculative_log.record(request.job_id, list(request.speculative))

        await answer(context, "FinishJob", finish)
        return rm_pb.FinishJobResponse()
