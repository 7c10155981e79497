"""The node agent's gRPC servicer: translate requests, call the NodeAgent, map its errors."""

from __future__ import annotations

import logging
import math
import re
import time
from collections.abc import Callable, Iterator
from typing import NoReturn, TypeVar

import grpc

from node_agent.agent import AllocationBusyError, NodeAgent, task_key
from node_agent.grant_gate import GrantGate
from node_agent.runtime.base import (
    ResourceLimits,
    RunObservation,
    RuntimeError_,
    TaskExistsError,
    UnknownTaskError,
)
from node_agent.service_monitor import ServiceHealth
from node_agent.speculative import (
    QueuedLaunch,
    QueueState,
    SpeculativeStatus,
    speculative_allocation_id,
)
from plumbing.authz import caller, foreign_job, log_refusal
from plumbing.errors import UserError
from plumbing.grants import Purpose
from plumbing.wire import TASK_STATE_TO_PB, service_document_from_pb
from policies.scheduling.resources import Resources
from policies.scheduling.service_spec import parse_service
from policies.scheduling.spec_fields import SpecError
from sluice_pb import common_pb2 as pb
from sluice_pb import node_agent_pb2 as agent_pb
from sluice_pb import node_agent_pb2_grpc as agent_grpc

log = logging.getLogger(__name__)
T = TypeVar("T")
LOG_CHUNK = 64 * 1024


def _own_job(context: grpc.ServicerContext, job_id: str) -> None:
    """A job master starts and stops only its own job's tasks (with TLS; people in client mode
    are judged by the access table)."""
    problem = foreign_job(caller(context), job_id)
    if problem is not None:
        _refuse(context, "a task call", problem)


def _refuse(context: grpc.ServicerContext, method: str, problem: str) -> NoReturn:
    """PERMISSION_DENIED for ``problem``, logged with who asked."""
    log_refusal(log, method, caller(context), context.peer(), problem)
    _abort(context, grpc.StatusCode.PERMISSION_DENIED, problem)


def _not_fenced(context: grpc.ServicerContext, agent: NodeAgent) -> None:
    """UNAVAILABLE while the agent has fenced (node_agent/lease.py): the RM counts this node
    lost and retries its work elsewhere, so nothing new may start here beside the retries."""
    problem = agent.lease.fenced_problem()
    if problem is not None:
        _abort(context, grpc.StatusCode.UNAVAILABLE, problem)


def _abort(context: grpc.ServicerContext, code: grpc.StatusCode, message: str) -> NoReturn:
    context.abort(code, message)
    raise AssertionError("unreachable")


def _guard(context: grpc.ServicerContext, action: Callable[[], T]) -> T:
    try:
        return action()
    except TaskExistsError as error:
        _abort(context, grpc.StatusCode.ALREADY_EXISTS, str(error))
    except AllocationBusyError as error:
        _abort(context, grpc.StatusCode.FAILED_PRECONDITION, str(error))
    except UnknownTaskError as error:
        _abort(context, grpc.StatusCode.NOT_FOUND, str(error))
    except UserError as error:
        _abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(error))
    except RuntimeError_ as error:
        _abort(context, grpc.StatusCode.FAILED_PRECONDITION, str(error))


# A task of a phase is "<phase>-<index>" (the job master's plan names them so); anything else,
# "master" above all (the RM's job master launches), is refused.
_TASK_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}-[0-9]{1,9}")
_MAX_ID = 128


def start_request_problem(request: agent_pb.StartTaskRequest) -> str | None:
    """Why a StartTask request is malformed (one line naming the field), or None."""
    if not _TASK_ID.fullmatch(request.task_id):
        return f"task_id: {request.task_id[:80]!r} is not a task of a phase (<phase>-<index>)"
    for name in ("job_id", "allocation_id"):
        value = getattr(request, name)
        if not value or len(value) > _MAX_ID or not value.isprintable() or "/" in value:
            return f"{name}: must be 1-{_MAX_ID} printable characters without '/'"
    if request.attempt < 0:
        return f"attempt: must be positive, got {request.attempt}"
    if not request.command:
        return "command: must not be empty"
    return None


def speculative_request_problem(request: agent_pb.StartTaskRequest) -> str | None:
    """Why an EnqueueSpeculative request is malformed (one line naming the field), or None."""
    if request.allocation_id or request.grant_token:
        return "task.allocation_id: a speculative task has no container; leave it empty"
    if request.HasField("service"):
        return "task.service: a service runs on a container of its own, never speculatively"
    problem = start_request_problem(
        agent_pb.StartTaskRequest(
            job_id=request.job_id,
            task_id=request.task_id,
            attempt=request.attempt,
            allocation_id="speculative",
            command=request.command,
        )
    )
    if problem is None and (request.resources.cpu <= 0 or request.resources.memory_mb <= 0):
        problem = "resources: cpu and memory_mb must be positive"
    return None if problem is None else f"task.{problem}"


def speculative_to_pb(status: SpeculativeStatus) -> agent_pb.SpeculativeTask:
    return agent_pb.SpeculativeTask(
        task=agent_pb.TaskRef(job_id=status.job_id, task_id=status.task_id, attempt=status.attempt),
        state=TASK_STATE_TO_PB[status.state],
        evicted=status.evicted,
        message=status.message,
        queue_position=status.queue_position,
        enqueued_at=status.enqueued_at,
        started_at=status.started_at,
        exit_code=status.exit_code,
        allocation_id=status.allocation_id,
        upgraded=status.upgraded,
    )


def queue_state_to_pb(state: QueueState) -> pb.SpeculativeQueueState:
    return pb.SpeculativeQueueState(
        queued=state.queued,
        running=state.running,
        admitted=state.admitted,
        refused=state.refused,
        evicted=state.evicted,
        throttled=state.throttled,
        blocked=state.blocked,
    )


def _key(ref: agent_pb.TaskRef) -> str:
    return task_key(ref.job_id, ref.task_id, ref.attempt or 1)


def _status(agent: NodeAgent, key: str) -> agent_pb.TaskStatus:
    for observation in agent.observations():
        if observation.task_key == key:
            return status_to_pb(agent, observation)
    raise UnknownTaskError(f"no task {key} on this node")


def status_to_pb(agent: NodeAgent, observation: RunObservation) -> agent_pb.TaskStatus:
    event = agent.event_for(observation)
    usage = agent.usage(observation)
    return agent_pb.TaskStatus(
        task=agent_pb.TaskRef(
            job_id=observation.job_id, task_id=observation.task_id, attempt=observation.attempt
        ),
        allocation_id=observation.allocation_id,
        state=TASK_STATE_TO_PB[event.state],
        exit_code=observation.exit_code or 0,
        limits=pb.Resources(cpu=observation.limits.cpu, memory_mb=observation.limits.memory_mb),
        cpuset=list(observation.limits.cpuset),
        cpu_seconds=usage.cpu_seconds if usage else 0.0,
        memory_bytes=usage.memory_bytes if usage else 0,
        service=_health_to_pb(agent.services.health(observation.task_key)),
    )


def _health_to_pb(health: ServiceHealth | None) -> agent_pb.ServiceHealth | None:
    if health is None:
        return None
    verdict = health.verdict

    def seconds(value: float) -> float:
        return 0.0 if math.isnan(value) else value

    # The anomaly, or else the judged indicator's last sample: how close it is to its bound.
    judged = health.judged
    indicator, value, bound = verdict.indicator, verdict.value, verdict.bound
    if not verdict.anomalous and judged is not None:
        indicator, value, bound = judged.name, judged.value, judged.baseline.upper_bound
    return agent_pb.ServiceHealth(
        latency_p50_s=seconds(health.latency_p50_s),
        latency_p95_s=seconds(health.latency_p95_s),
        probes=health.probes,
        probes_failed=health.probes_failed,
        last_problem=health.last_problem,
        anomalous=verdict.anomalous,
        indicator=indicator,
        value=seconds(value),
        bound=seconds(bound),
        judging=health.judging,
    )


def _limits_to_status(status: agent_pb.TaskStatus, limits: ResourceLimits) -> agent_pb.TaskStatus:
    status.limits.CopyFrom(pb.Resources(cpu=limits.cpu, memory_mb=limits.memory_mb))
    del status.cpuset[:]
    status.cpuset.extend(limits.cpuset)
    return status


class AgentServicer(agent_grpc.AgentServiceServicer):
    def __init__(
        self, agent: NodeAgent, on_drained: Callable[[], None], gate: GrantGate | None = None
    ) -> None:
        """``gate``: the check of grant tokens (with TLS); none without."""
        self._agent = agent
        self._on_drained = on_drained
        self._gate = gate or GrantGate(enforced=False)

    def StartTask(
        self, request: agent_pb.StartTaskRequest, context: grpc.ServicerContext
    ) -> agent_pb.StartTaskResponse:
        _own_job(context, request.job_id)
        _not_fenced(context, self._agent)
        problem = start_request_problem(request)
        if problem is not None:
            _abort(context, grpc.StatusCode.INVALID_ARGUMENT, problem)
        if request.resources.cpu <= 0 or request.resources.memory_mb <= 0:
            _abort(
                context,
                grpc.StatusCode.INVALID_ARGUMENT,
                "resources: cpu and memory_mb must be positive",
            )
        resources = Resources(request.resources.cpu, int(request.resources.memory_mb))
        service = None
        if request.HasField("service"):
            try:
                service = parse_service(service_document_from_pb(request.service), "service")
            except SpecError as error:
                _abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(error))
        refused = self._gate.start_problem(
            request.job_id, request.allocation_id, resources, request.grant_token
        )
        if refused is not None:
            _refuse(context, "StartTask", refused)
        observation = _guard(
            context,
            lambda: self._agent.start_task(
                request.job_id,
                request.task_id,
                request.attempt or 1,
                request.allocation_id,
                list(request.command),
                resources,
                request.image or None,
                dict(request.env),
                service,
            ),
        )
        if request.run_on_node_lost:  # its job's on_node_lost: run_on (fencing spares it)
            self._agent.keep_on_node_lost(observation.task_key)
        return agent_pb.StartTaskResponse(status=status_to_pb(self._agent, observation))

    def StopTask(
        self, request: agent_pb.TaskRef, context: grpc.ServicerContext
    ) -> agent_pb.TaskStatus:
        _own_job(context, request.job_id)
        key = _key(request)
        identity = caller(context)
        if self._agent.speculative.holds(key):  # queued: the pass, before it is cancelled
            refused = self._gate.stop_problem(
                identity, request.job_id, "", b"", request.speculative_pass
            )
            if refused is not None:
                _refuse(context, "StopTask", refused)
            if self._agent.speculative.cancel(key, "stopped while queued"):
                return agent_pb.TaskStatus(task=request, state=pb.TASK_KILLED)
        status = _guard(context, lambda: _status(self._agent, key))
        speculative = status.allocation_id == speculative_allocation_id(key)
        refused = self._gate.stop_problem(
            identity,
            request.job_id,
            status.allocation_id,
            request.grant_token,
            request.speculative_pass if speculative else None,
        )
        if refused is not None:
            _refuse(context, "StopTask", refused)
        _guard(context, lambda: self._agent.stop(key))
        self._agent.monitor_once(time.time())
        return _guard(context, lambda: _status(self._agent, key))

    def SuspendTask(
        self, request: agent_pb.TaskRef, context: grpc.ServicerContext
    ) -> agent_pb.TaskStatus:
        key = _key(request)
        _guard(context, lambda: self._agent.suspend(key))
        self._agent.monitor_once(time.time())
        return _guard(context, lambda: _status(self._agent, key))

    def ResumeTask(
        self, request: agent_pb.TaskRef, context: grpc.ServicerContext
    ) -> agent_pb.TaskStatus:
        key = _key(request)
        _guard(context, lambda: self._agent.resume(key))
        self._agent.monitor_once(time.time())
        return _guard(context, lambda: _status(self._agent, key))

    def ResizeTask(
        self, request: agent_pb.ResizeTaskRequest, context: grpc.ServicerContext
    ) -> agent_pb.TaskStatus:
        key = _key(request.task)
        if request.resources.cpu <= 0 or request.resources.memory_mb <= 0:
            _abort(
                context,
                grpc.StatusCode.INVALID_ARGUMENT,
                "resources: cpu and memory_mb must be positive",
            )
        limits = _guard(
            context,
            lambda: self._agent.resize(
                key,
                Resources(request.resources.cpu, int(request.resources.memory_mb)),
                list(request.cpuset),
            ),
        )
        self._agent.monitor_once(time.time())
        return _limits_to_status(_guard(context, lambda: _status(self._agent, key)), limits)

    def ListTasks(
        self, request: agent_pb.ListTasksRequest, context: grpc.ServicerContext
    ) -> agent_pb.ListTasksResponse:
        return agent_pb.ListTasksResponse(
            tasks=[status_to_pb(self._agent, o) for o in self._agent.observations()]
        )

    def EnqueueSpeculative(
        self, request: agent_pb.EnqueueSpeculativeRequest, context: grpc.ServicerContext
    ) -> agent_pb.EnqueueSpeculativeResponse:
        task = request.task
        _own_job(context, task.job_id)
        _not_fenced(context, self._agent)
        problem = speculative_request_problem(task)
        if problem is not None:
            _abort(context, grpc.StatusCode.INVALID_ARGUMENT, problem)
        refused = self._gate.pass_problem(
            Purpose.SPECULATIVE, task.job_id, request.speculative_pass, "speculative_pass"
        )
        if refused is not None:
            _refuse(context, "EnqueueSpeculative", refused)
        launch = QueuedLaunch(
            job_id=task.job_id,
            task_id=task.task_id,
            attempt=task.attempt or 1,
            argv=tuple(task.command),
            resources=Resources(task.resources.cpu, int(task.resources.memory_mb)),
            image=task.image or None,
            env=dict(task.env),
            enqueued_at=time.time(),
        )
        known = any(o.task_key == launch.key for o in self._agent.observations())
        accepted, reason, length = self._agent.speculative.enqueue(launch, known)
        if accepted:
            self._agent.speculative_pass(time.time())  # admission now, not at the next pass
        answer = agent_pb.EnqueueSpeculativeResponse(
            accepted=accepted, reason=reason, queue_length=length
        )
        found = self._speculative_status(launch.job_id, launch.task_id, launch.attempt)
        if found is not None:
            answer.task.CopyFrom(found)
        return answer

    def UpgradeSpeculative(
        self, request: agent_pb.UpgradeSpeculativeRequest, context: grpc.ServicerContext
    ) -> agent_pb.SpeculativeTask:
        _own_job(context, request.task.job_id)
        _not_fenced(context, self._agent)
        if request.resources.cpu <= 0 or request.resources.memory_mb <= 0:
            _abort(
                context,
                grpc.StatusCode.INVALID_ARGUMENT,
                "resources: cpu and memory_mb must be positive",
            )
        resources = Resources(request.resources.cpu, int(request.resources.memory_mb))
        refused = self._gate.start_problem(
            request.task.job_id, request.allocation_id, resources, request.grant_token
        )
        if refused is not None:
            _refuse(context, "UpgradeSpeculative", refused)
        key = _key(request.task)
        _guard(context, lambda: self._agent.promote(key, request.allocation_id, resources))
        found = self._speculative_status(
            request.task.job_id, request.task.task_id, request.task.attempt or 1
        )
        if found is None:
            _abort(context, grpc.StatusCode.NOT_FOUND, f"no task {key} on this node")
        return found

    def _speculative_status(
        self, job_id: str, task_id: str, attempt: int
    ) -> agent_pb.SpeculativeTask | None:
        """One speculative task of the job on this node, as ListSpeculative lists it."""
        for status in self._agent.speculative_statuses(job_id):
            if (status.task_id, status.attempt) == (task_id, attempt):
                return speculative_to_pb(status)
        return None

    def ListSpeculative(
        self, request: agent_pb.ListSpeculativeRequest, context: grpc.ServicerContext
    ) -> agent_pb.ListSpeculativeResponse:
        _own_job(context, request.job_id)
        refused = self._gate.pass_problem(
            Purpose.SPECULATIVE, request.job_id, request.speculative_pass, "speculative_pass"
        )
        if refused is not None:
            _refuse(context, "ListSpeculative", refused)
        observed = self._agent.observations()
        return agent_pb.ListSpeculativeResponse(
            tasks=[
                speculative_to_pb(s)
                for s in self._agent.speculative_statuses(request.job_id, observed)
            ],
            queue=queue_state_to_pb(self._agent.speculative.state(observed)),
        )

    def GetTaskLogs(
        self, request: agent_pb.TaskRef, context: grpc.ServicerContext
    ) -> Iterator[agent_pb.LogChunk]:
        refused = self._gate.pass_problem(
            Purpose.LOGS, request.job_id, request.log_pass, "log_pass"
        )
        if refused is not None:
            _refuse(context, "GetTaskLogs", refused)
        data = _guard(context, lambda: self._agent.logs(_key(request)))
        for offset in range(0, len(data), LOG_CHUNK):
            yield agent_pb.LogChunk(data=data[offset : offset + LOG_CHUNK])

    def Drain(
        self, request: agent_pb.DrainRequest, context: grpc.ServicerContext
    ) -> agent_pb.DrainResponse:
        stopped = self._agent.drain()
        if request.exit_after:
            self._on_drained()
        return agent_pb.DrainResponse(stopped_tasks=stopped)
