"""Conversions at the wire's edge shared by every service: lifecycle states, resources, job
specs and phase progress."""

from __future__ import annotations

from policies.scheduling.jobspec import JobSpec, ReservationSpec
from policies.scheduling.lifecycle import JobState, TaskState
from policies.scheduling.progress import PhaseProgress
from policies.scheduling.resources import Resources
from policies.scheduling.service_spec import ServiceSpec
from policies.scheduling.speculative_spec import SpeculativeSpec
from sluice_pb import common_pb2 as pb
from sluice_pb import resource_manager_pb2 as rm_pb

JOB_STATE_TO_PB = {
    JobState.SUBMITTED: pb.JOB_SUBMITTED,
    JobState.STARTING: pb.JOB_STARTING,
    JobState.RUNNING: pb.JOB_RUNNING,
    JobState.SUCCEEDED: pb.JOB_SUCCEEDED,
    JobState.FAILED: pb.JOB_FAILED,
    JobState.KILLED: pb.JOB_KILLED,
}
JOB_STATE_FROM_PB = {v: k for k, v in JOB_STATE_TO_PB.items()}

TASK_STATE_TO_PB = {
    TaskState.PENDING: pb.TASK_PENDING,
    TaskState.LAUNCHING: pb.TASK_LAUNCHING,
    TaskState.RUNNING: pb.TASK_RUNNING,
    TaskState.SUSPENDED: pb.TASK_SUSPENDED,
    TaskState.SUCCEEDED: pb.TASK_SUCCEEDED,
    TaskState.FAILED: pb.TASK_FAILED,
    TaskState.KILLED: pb.TASK_KILLED,
    TaskState.LOST: pb.TASK_LOST,
}
TASK_STATE_FROM_PB = {v: k for k, v in TASK_STATE_TO_PB.items()}


def job_state_name(state: pb.JobState) -> str:
    """'running' for JOB_RUNNING, and so on (for people and JSON output)."""
    return JOB_STATE_FROM_PB[state].value if state in JOB_STATE_FROM_PB else "unknown"


def task_state_name(state: pb.TaskState) -> str:
    return TASK_STATE_FROM_PB[state].value if state in TASK_STATE_FROM_PB else "unknown"


def resources_to_pb(resources: Resources) -> pb.Resources:
    return pb.Resources(cpu=resources.cpu, memory_mb=resources.memory_mb)


def resources_from_pb(message: pb.Resources) -> Resources:
    return Resources(cpu=message.cpu, memory_mb=int(message.memory_mb))


def spec_to_pb(spec: JobSpec) -> pb.JobSpec:
    return pb.JobSpec(
        name=spec.name,
        priority=spec.priority,
        max_retries=spec.max_retries,
        queue=spec.queue,
        reservation=None if spec.reservation is None else reservation_to_pb(spec.reservation),
        kind=spec.kind,
        service=None if spec.service is None else service_to_pb(spec.service),
        speculative=None if spec.speculative is None else speculative_to_pb(spec.speculative),
        phases=[
            pb.PhaseSpec(
                name=p.name,
                tasks=p.tasks,
                command=list(p.command),
                resources=resources_to_pb(p.resources),
                after=list(p.after),
                image=p.image or "",
                droppable=p.droppable,
            )
            for p in spec.phases
        ],
        approximation=None
        if spec.approximation is None
        else pb.ApproximationSpec(drop_ratio=spec.approximation.drop_ratio),
        on_node_lost=spec.on_node_lost,
    )


def spec_document_from_pb(message: pb.JobSpec) -> dict[str, object]:
    """A structured spec as the document form the validator reads (proto3 has no 'unset':
    an empty image means none, zero resources stay zero and are refused by validation)."""
    phases: list[dict[str, object]] = []
    for p in message.phases:
        phase: dict[str, object] = {
            "name": p.name,
            "tasks": p.tasks,
            "command": list(p.command),
            "resources": {"cpu": p.resources.cpu, "memory_mb": p.resources.memory_mb},
            "after": list(p.after),
        }
        if p.image:
            phase["image"] = p.image
        if p.droppable:
            phase["droppable"] = True
        phases.append(phase)
    document: dict[str, object] = {
        "name": message.name,
        "priority": message.priority,
        "phases": phases,
        "max_retries": message.max_retries,
        "queue": message.queue,
    }
    if message.HasField("reservation"):
        document["reservation"] = reservation_document_from_pb(message.reservation)
    if message.kind:
        document["kind"] = message.kind
    if message.HasField("service"):
        document["service"] = service_document_from_pb(message.service)
    if message.HasField("speculative"):
        document["speculative"] = speculative_document_from_pb(message.speculative)
    if message.HasField("approximation"):
        document["approximation"] = {"drop_ratio": message.approximation.drop_ratio}
    if message.on_node_lost:
        document["on_node_lost"] = message.on_node_lost
    return document


def speculative_to_pb(spec: SpeculativeSpec) -> pb.SpeculativeSpec:
    return pb.SpeculativeSpec(
        after_s=spec.after_s,
        queue_timeout_s=spec.queue_timeout_s,
        upgrade_progress=spec.upgrade_progress,
        max_tasks=spec.max_tasks or 0,
    )


def speculative_document_from_pb(message: pb.SpeculativeSpec) -> dict[str, object]:
    """The document form of a structured speculative block, for the validator (every field
    as sent: the job master writes them all)."""
    return {
        "after_s": message.after_s,
        "queue_timeout_s": message.queue_timeout_s,
        "upgrade_progress": message.upgrade_progress,
        "max_tasks": message.max_tasks,
    }


def service_to_pb(service: ServiceSpec) -> pb.ServiceSpec:
    message = pb.ServiceSpec(latency_sensitive=service.latency_sensitive)
    if service.probe is not None:
        message.probe.CopyFrom(
            pb.ProbeSpec(
                http=service.probe.http or "",
                port=service.probe.port,
                period_s=service.probe.period_s,
                timeout_s=service.probe.timeout_s,
            )
        )
    return message


def service_document_from_pb(message: pb.ServiceSpec) -> dict[str, object]:
    """The document form of a structured service block, for the validator (a zero period or
    timeout is proto3's "unset": the default)."""
    document: dict[str, object] = {"latency_sensitive": message.latency_sensitive}
    if message.HasField("probe"):
        probe = message.probe
        probe_doc: dict[str, object] = {"http": probe.http} if probe.http else {"tcp": True}
        probe_doc["port"] = probe.port
        if probe.period_s:
            probe_doc["period_s"] = probe.period_s
        if probe.timeout_s:
            probe_doc["timeout_s"] = probe.timeout_s
        document["probe"] = probe_doc
    return document


def reservation_to_pb(reservation: ReservationSpec) -> pb.ReservationSpec:
    message = pb.ReservationSpec(
        isolation=reservation.isolation,
        prereserve_at=reservation.prereserve_at,
        straggler_copies=reservation.straggler_copies,
        max_copies=reservation.max_copies or 0,
    )
    if reservation.prior is not None:
        message.prior.alpha = reservation.prior.alpha
        message.prior.t_min = reservation.prior.t_min
    return message


def reservation_document_from_pb(message: pb.ReservationSpec) -> dict[str, object]:
    """The document form of a structured reservation block, for the validator."""
    copies: object = message.straggler_copies
    if message.straggler_copies and message.max_copies != 0:
        copies = message.max_copies
    document: dict[str, object] = {
        "isolation": message.isolation,
        "prereserve_at": message.prereserve_at,
        "straggler_copies": copies,
    }
    if message.HasField("prior"):
        document["prior"] = {"alpha": message.prior.alpha, "t_min": message.prior.t_min}
    return document


def progress_to_pb(progress: PhaseProgress) -> rm_pb.PhaseProgress:
    return rm_pb.PhaseProgress(
        name=progress.name,
        tasks=progress.tasks,
        pending=progress.pending,
        running=progress.running,
        succeeded=progress.succeeded,
        failed=progress.failed,
        dropped=progress.dropped,
    )


def progress_from_pb(message: rm_pb.PhaseProgress) -> PhaseProgress:
    return PhaseProgress(
        name=message.name,
        tasks=message.tasks,
        pending=message.pending,
        running=message.running,
        succeeded=message.succeeded,
        failed=message.failed,
        dropped=message.dropped,
    )
