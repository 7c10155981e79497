"""The round's messages on the wire (job_master/round_pb.py): every field of AllocateCall and
AllocateAnswer survives a round trip through AllocateRequest / AllocateResponse, and every field
of those messages is filled.  A field added to either side without its converter fails here."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping

import pytest
from google.protobuf.message import Message

from job_master.plan import SpeculativeRecord
from job_master.round import AllocateAnswer, AllocateCall, Grant, KeptChange, SequencedTaskEvent
from job_master.round_pb import answer_from_pb, answer_to_pb, call_from_pb, call_to_pb
from policies.scheduling.asks import PhaseAsk
from policies.scheduling.lifecycle import TaskState
from policies.scheduling.progress import PhaseProgress
from tests.builders import res

# Every field, at every depth, differs from its default (checked below).
CALL = AllocateCall(
    job_id="job-1",
    attempt=3,
    asks=(PhaseAsk("a", 2, res(2.0, 512), ("n1", "n2"), local_only=True),),
    releases=("r1", "r2"),
    progress=(PhaseProgress("a", 9, 1, 2, 3, 4, 5),),
    events_after=42,
    kept=(KeptChange("k1", "b", 1234.5, "used"),),
    speculative=(SpeculativeRecord("a-1", 2, "n3", "queued", "in its queue"),),
    resolve_nodes=("n4",),
)
ANSWER = AllocateAnswer(
    granted=(Grant("g1", "a", "n1", "n1:7000", res(1.5, 256), b"token"),),
    events=(
        SequencedTaskEvent(
            seq=17,
            task_id="a-0",
            attempt=2,
            state=TaskState.SUCCEEDED,
            exit_code=3,
            message="done",
            preempted=True,
            start_time=100.0,
            end_time=110.0,
            node_id="n1",
        ),
    ),
    lost_allocations=("g0",),
    kill_requested=True,
    node_addresses={"n4": "n4:7000"},
    speculative_passes={"n4": b"pass"},
)


def _leaves(value: object, path: str) -> Iterator[tuple[str, object]]:
    """Every scalar in ``value`` (dataclasses, named tuples, sequences, mappings), by path."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            yield from _leaves(getattr(value, f.name), f"{path}.{f.name}")
    elif isinstance(value, tuple) and hasattr(value, "_fields"):  # Resources
        for name in value._fields:
            yield from _leaves(getattr(value, name), f"{path}.{name}")
    elif isinstance(value, Mapping):
        yield f"{path}{{}}", value
        for key, item in value.items():
            yield from _leaves(item, f"{path}[{key}]")
    elif isinstance(value, tuple):
        yield f"{path}[]", value
        for index, item in enumerate(value):
            yield from _leaves(item, f"{path}[{index}]")
    else:
        yield path, value


@pytest.mark.parametrize("value", [CALL, ANSWER], ids=["call", "answer"])
def test_the_examples_set_every_field(value: object) -> None:
    """So that a converter dropping one would be seen by the round trips below."""
    defaults = [path for path, leaf in _leaves(value, "") if not leaf]
    assert defaults == []


def test_a_call_survives_the_wire() -> None:
    assert call_from_pb(call_to_pb(CALL)) == CALL


def test_an_answer_survives_the_wire() -> None:
    assert answer_from_pb(answer_to_pb(ANSWER)) == ANSWER


def _unset(message: Message) -> list[str]:
    """The message's top-level fields left at their defaults."""
    unset = []
    for field in message.DESCRIPTOR.fields:
        value = getattr(message, field.name)
        if field.type == field.TYPE_MESSAGE and not hasattr(value, "__len__"):
            filled = message.HasField(field.name)
        else:
            filled = bool(value)
        if not filled:
            unset.append(field.name)
    return unset


def test_every_field_of_the_messages_is_filled() -> None:
    """A field added to AllocateRequest or AllocateResponse without its place in the round's
    types is caught here."""
    assert _unset(call_to_pb(CALL)) == []
    assert _unset(answer_to_pb(ANSWER)) == []


def test_a_state_this_job_master_does_not_know_comes_through_as_none() -> None:
    response = answer_to_pb(ANSWER)
    response.events[0].event.state = 99  # type: ignore[assignment]  # a newer RM's
    (event,) = answer_from_pb(response).events
    assert event.state is None and event.seq == 17
