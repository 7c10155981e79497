"""The node protocol on the wire (plumbing/node_wire.py): every report and command survives a
round trip through protobuf with every field set, and a field added to a protocol type fails
here until both converters carry it."""

from __future__ import annotations

import dataclasses
import typing

import pytest

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
from plumbing.node_wire import (
    MasterContact,
    command_from_pb,
    command_to_pb,
    master_contact_from_pb,
    report_from_pb,
    report_to_pb,
)
from policies.scheduling.lifecycle import TaskState
from policies.scheduling.resources import Resources
from sluice_pb import common_pb2 as pb
from sluice_pb import resource_manager_pb2 as rm_pb

CONTACT = MasterContact("rm.example:7070", b"chain-pem", b"key-pem")
COMMAND_TYPES: tuple[type, ...] = typing.get_args(NodeCommand)

# A value unlike every default, per field type (the wire's unset values included: 0, "", 1.0
# for a sprint factor, 1 for an attempt), so a field a converter drops cannot round-trip.
_NON_DEFAULT: dict[object, object] = {
    str: "set",
    int: 7,
    float: 2.5,
    bool: True,
    Resources: Resources(1.5, 300),
    Resources | None: Resources(0.5, 100),
    TaskState: TaskState.SUSPENDED,
}


def every_field_set(cls: type) -> object:
    """An instance of ``cls`` with every field at a value unlike its default."""
    hints = typing.get_type_hints(cls)
    values = {}
    for f in dataclasses.fields(cls):
        kind = hints[f.name]
        assert kind in _NON_DEFAULT, f"{cls.__name__}.{f.name}: give {kind} a test value"
        value = _NON_DEFAULT[kind]
        if isinstance(value, str):
            value = f"{f.name}-{value}"
        assert value != f.default, f"{cls.__name__}.{f.name}: the test value is its default"
        values[f.name] = value
    return cls(**values)


def round_trip(command: NodeCommand) -> NodeCommand | None:
    """What a node reads of what the RM sent, through bytes as on the wire."""
    wire = rm_pb.NodeCommand.FromString(command_to_pb(command, CONTACT).SerializeToString())
    return command_from_pb(wire)


def test_every_command_type_of_the_union_is_covered() -> None:
    assert set(COMMAND_TYPES) == {
        LaunchMaster,
        StopAllocation,
        SuspendAllocation,
        ResumeAllocation,
        ResizeAllocation,
        SprintAllocation,
    }


@pytest.mark.parametrize("cls", COMMAND_TYPES, ids=lambda c: c.__name__)
def test_a_command_with_every_field_set_round_trips(cls: type) -> None:
    command = typing.cast(NodeCommand, every_field_set(cls))
    assert round_trip(command) == command


def test_a_report_with_every_field_set_round_trips() -> None:
    report = typing.cast(TaskReport, every_field_set(TaskReport))
    message = report_to_pb(report, "n1")
    wire = pb.TaskEvent.FromString(message.SerializeToString())
    assert wire.node_id == "n1"
    assert report_from_pb(wire) == report


R = Resources(2.0, 1024)
HALF = Resources(1.0, 512)

COMMANDS: list[NodeCommand] = [
    LaunchMaster("j", "a1", R, 1),
    LaunchMaster("j", "a1", R, 3),
    StopAllocation("j", "a1", "job killed"),
    StopAllocation("j", "a1", "preempted: queue a is short", preempted=True),
    SuspendAllocation("j", "a1", "room"),
    SuspendAllocation("j", "a1", "room", HALF),
    ResumeAllocation("j", "a1"),
    ResumeAllocation("j", "a1", R),
    ResizeAllocation("j", "a1", HALF),
    ResizeAllocation("j", "a1", HALF, step=Resources(0.25, 128), freeze_on_swap=True),
    SprintAllocation("j", "a1", 1.0),
    SprintAllocation("j", "a1", 2.0),
]


@pytest.mark.parametrize("command", COMMANDS, ids=repr)
def test_each_command_as_the_rm_makes_it_round_trips(command: NodeCommand) -> None:
    assert round_trip(command) == command


REPORTS = [
    TaskReport("j", "map-0", 1, "a1", TaskState.RUNNING),
    TaskReport("j", "map-0", 2, "a1", TaskState.KILLED, exit_code=137, message="killed"),
    TaskReport("j", "jm", 1, "a0", TaskState.RUNNING, job_master=True, limits=R),
    TaskReport("j", "map-1", 1, "s1", TaskState.RUNNING, speculative=True, sprint_factor=2.0),
    TaskReport("j", "map-2", 1, "a2", TaskState.SUSPENDED, swapping=True, swap_bytes=1 << 20),
]


@pytest.mark.parametrize("report", REPORTS, ids=repr)
def test_each_report_round_trips(report: TaskReport) -> None:
    assert report_from_pb(report_to_pb(report, "n1")) == report


def test_a_launch_carries_the_contact_the_rm_gives() -> None:
    message = command_to_pb(LaunchMaster("j", "a1", R, 2), CONTACT)
    assert master_contact_from_pb(message.launch_master) == CONTACT


def test_a_launch_without_a_contact_is_refused() -> None:
    with pytest.raises(ValueError, match="MasterContact"):
        command_to_pb(LaunchMaster("j", "a1", R, 1))


def test_what_older_peers_leave_unset_reads_as_the_first_attempt_and_no_sprint() -> None:
    launch = command_from_pb(rm_pb.NodeCommand(launch_master=rm_pb.LaunchMaster(job_id="j")))
    assert isinstance(launch, LaunchMaster) and launch.attempt == 1
    report = report_from_pb(pb.TaskEvent(job_id="j", state=pb.TASK_RUNNING))
    assert report is not None and report.sprint_factor == 1.0 and report.limits is None


def test_unknown_kinds_and_states_are_none_not_guessed() -> None:
    assert command_from_pb(rm_pb.NodeCommand()) is None
    assert report_from_pb(pb.TaskEvent(job_id="j", state=typing.cast(pb.TaskState, 99))) is None


@pytest.mark.parametrize(
    ("message", "sent"),
    [("short", "short"), ("x" * 8, "x" * 8), ("x" * 9, "x" * 7 + "…")],
)
def test_a_long_message_is_cut_to_the_limit(message: str, sent: str) -> None:
    report = TaskReport("j", "map-0", 1, "a1", TaskState.FAILED, message=message)
    assert report_to_pb(report, "n1", max_message=8).message == sent
