"""The node protocol's wire form: :mod:`plumbing.node_protocol` <-> protobuf, both ways, for
the one report type and every command.  The RM's service and the node agent both convert here,
so a field added to a protocol type is carried (or lost) the same way on both ends
(tests/unit/plumbing/test_node_wire.py fails for a field a converter forgets).

Reports travel as ``TaskEvent``; commands as ``NodeCommand``.  ``LaunchMaster`` carries, on the
wire only, where the RM listens and the job master's TLS credentials: the RM's core decides that
a master is launched, the RM's service knows the rest (:class:`MasterContact`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import assert_never

from plumbing.node_protocol import (
    LaunchMaster,
    NodeCommand,
    ResizeAllocation,
    ResumeAllocation,
    SprintAllocation,
    StopAllocation,
    SuspendAllocation,
    TaskReport,
)
from plumbing.wire import TASK_STATE_FROM_PB, TASK_STATE_TO_PB, resources_from_pb, resources_to_pb
from policies.scheduling.resources import Resources
from sluice_pb import common_pb2 as pb
from sluice_pb import resource_manager_pb2 as rm_pb


@dataclass(frozen=True)
class MasterContact:
    """What a launched job master needs besides its container: the RM's address, and with TLS
    its own certificate chain and private key (PEM; empty without TLS), issued for the attempt."""

    rm_address: str
    tls_cert_chain_pem: bytes = b""
    tls_key_pem: bytes = b""


# ---------------------------------------------------------------------------- reports


def report_to_pb(report: TaskReport, node_id: str, *, max_message: int = 0) -> pb.TaskEvent:
    """A report as the node sends it; ``max_message`` > 0 cuts a longer message to that many
    characters (its last one an ellipsis), so a batch of events stays within the RM's receive
    limit."""
    message = report.message
    if 0 < max_message < len(message):
        message = message[: max_message - 1] + "…"
    return pb.TaskEvent(
        job_id=report.job_id,
        task_id=report.task_id,
        attempt=report.attempt,
        allocation_id=report.allocation_id,
        state=TASK_STATE_TO_PB[report.state],
        exit_code=report.exit_code,
        message=message,
        timestamp=report.timestamp,
        node_id=node_id,
        start_time=report.start_time,
        job_master=report.job_master,
        limits=_optional_to_pb(report.limits),
        swapping=report.swapping,
        swap_bytes=report.swap_bytes,
        sprint_factor=report.sprint_factor,
        speculative=report.speculative,
    )


def report_from_pb(message: pb.TaskEvent) -> TaskReport | None:
    """A node's report, or None when its state is one this side does not know (an agent of a
    newer version): unknown is not LOST, so the caller ignores it and says so.  The sender's
    ``node_id`` is not part of the report: the RM knows which node speaks."""
    state = TASK_STATE_FROM_PB.get(message.state)
    if state is None:
        return None
    return TaskReport(
        job_id=message.job_id,
        task_id=message.task_id,
        attempt=message.attempt,
        allocation_id=message.allocation_id,
        state=state,
        exit_code=message.exit_code,
        message=message.message,
        timestamp=message.timestamp,
        start_time=message.start_time,
        job_master=message.job_master,
        limits=resources_from_pb(message.limits) if message.HasField("limits") else None,
        swapping=message.swapping,
        swap_bytes=message.swap_bytes,
        speculative=message.speculative,
        sprint_factor=message.sprint_factor or 1.0,  # unset (an older agent): no sprint
    )


# ---------------------------------------------------------------------------- commands


def command_to_pb(command: NodeCommand, contact: MasterContact | None = None) -> rm_pb.NodeCommand:
    """A command as the RM sends it.  ``contact`` is required for a ``LaunchMaster`` (a
    ValueError without it) and ignored for the others."""
    if isinstance(command, LaunchMaster):
        if contact is None:
            raise ValueError("LaunchMaster needs the RM's address (a MasterContact)")
        return rm_pb.NodeCommand(
            launch_master=rm_pb.LaunchMaster(
                job_id=command.job_id,
                allocation_id=command.allocation_id,
                resources=resources_to_pb(command.resources),
                rm_address=contact.rm_address,
                attempt=command.attempt,
                tls_cert_chain_pem=contact.tls_cert_chain_pem,
                tls_key_pem=contact.tls_key_pem,
            )
        )
    if isinstance(command, StopAllocation):
        return rm_pb.NodeCommand(
            stop_allocation=rm_pb.StopAllocation(
                job_id=command.job_id,
                allocation_id=command.allocation_id,
                reason=command.reason,
                preempted=command.preempted,
            )
        )
    if isinstance(command, SuspendAllocation):
        return rm_pb.NodeCommand(
            suspend_allocation=rm_pb.SuspendAllocation(
                job_id=command.job_id,
                allocation_id=command.allocation_id,
                reason=command.reason,
                limits=_optional_to_pb(command.limits),
            )
        )
    if isinstance(command, ResumeAllocation):
        return rm_pb.NodeCommand(
            resume_allocation=rm_pb.ResumeAllocation(
                job_id=command.job_id,
                allocation_id=command.allocation_id,
                limits=_optional_to_pb(command.limits),
            )
        )
    if isinstance(command, ResizeAllocation):
        return rm_pb.NodeCommand(
            resize_allocation=rm_pb.ResizeAllocation(
                job_id=command.job_id,
                allocation_id=command.allocation_id,
                limits=resources_to_pb(command.limits),
                step=_optional_to_pb(command.step),
                freeze_on_swap=command.freeze_on_swap,
            )
        )
    if isinstance(command, SprintAllocation):
        return rm_pb.NodeCommand(
            sprint_allocation=rm_pb.SprintAllocation(
                job_id=command.job_id,
                allocation_id=command.allocation_id,
                factor=command.factor,
            )
        )
    assert_never(command)


def command_from_pb(message: rm_pb.NodeCommand) -> NodeCommand | None:
    """A command as the node reads it, or None for a kind this side does not know (an RM of a
    newer version): the caller ignores it and says so.  A ``LaunchMaster``'s contact is read by
    :func:`master_contact_from_pb`."""
    kind = message.WhichOneof("command")
    if kind == "launch_master":
        launch = message.launch_master
        return LaunchMaster(
            job_id=launch.job_id,
            allocation_id=launch.allocation_id,
            resources=resources_from_pb(launch.resources),
            attempt=launch.attempt or 1,  # unset (an older RM): the first attempt
        )
    if kind == "stop_allocation":
        stop = message.stop_allocation
        return StopAllocation(
            job_id=stop.job_id,
            allocation_id=stop.allocation_id,
            reason=stop.reason,
            preempted=stop.preempted,
        )
    if kind == "suspend_allocation":
        suspend = message.suspend_allocation
        return SuspendAllocation(
            job_id=suspend.job_id,
            allocation_id=suspend.allocation_id,
            reason=suspend.reason,
            limits=resources_from_pb(suspend.limits) if suspend.HasField("limits") else None,
        )
    if kind == "resume_allocation":
        resume = message.resume_allocation
        return ResumeAllocation(
            job_id=resume.job_id,
            allocation_id=resume.allocation_id,
            limits=resources_from_pb(resume.limits) if resume.HasField("limits") else None,
        )
    if kind == "resize_allocation":
        resize = message.resize_allocation
        return ResizeAllocation(
            job_id=resize.job_id,
            allocation_id=resize.allocation_id,
            limits=resources_from_pb(resize.limits),
            step=resources_from_pb(resize.step) if resize.HasField("step") else None,
            freeze_on_swap=resize.freeze_on_swap,
        )
    if kind == "sprint_allocation":
        sprint = message.sprint_allocation
        return SprintAllocation(
            job_id=sprint.job_id, allocation_id=sprint.allocation_id, factor=sprint.factor
        )
    return None


def master_contact_from_pb(launch: rm_pb.LaunchMaster) -> MasterContact:
    """The RM's address and the job master's TLS credentials a ``LaunchMaster`` carries."""
    return MasterContact(
        rm_address=launch.rm_address,
        tls_cert_chain_pem=launch.tls_cert_chain_pem,
        tls_key_pem=launch.tls_key_pem,
    )


def _optional_to_pb(resources: Resources | None) -> pb.Resources | None:
    return None if resources is None else resources_to_pb(resources)
