"""``NodeService.HeartbeatStream`` served for real on a loopback port: each request answered in
order as the unary ``Heartbeat`` answers it, commands delivered on the open stream, and a refused
request ending its own stream only."""

from __future__ import annotations

import queue
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from resource_manager.errors import (
    AlreadyExistsError,
    ConflictError,
    InvalidRequestError,
    NotFoundError,
)
from sluice_pb import common_pb2 as pb
from sluice_pb import resource_manager_pb2 as rm_pb
from sluice_pb import resource_manager_pb2_grpc as rm_grpc
from tests.unit.resource_manager.test_service import SPEC, Served

# A deadline for every call of these tests: a bug shows as a failure, not a hung test.
DEADLINE = 10.0


class Stream:
    """One HeartbeatStream driven by the test: :meth:`send` writes, :meth:`read` reads the next
    answer (blocking, at most until the call's deadline)."""

    def __init__(self, stub: rm_grpc.NodeServiceStub) -> None:
        self._requests: queue.SimpleQueue[rm_pb.HeartbeatRequest | None] = queue.SimpleQueue()
        self.call = stub.HeartbeatStream(iter(self._requests.get, None), timeout=DEADLINE)

    def send(self, *requests: rm_pb.HeartbeatRequest) -> None:
        for request in requests:
            self._requests.put(request)

    def read(self) -> rm_pb.HeartbeatResponse:
        return next(self.call)

    def beat(self, request: rm_pb.HeartbeatRequest) -> rm_pb.HeartbeatResponse:
        self.send(request)
        return self.read()

    def close(self) -> None:
        self._requests.put(None)
        self.call.cancel()


def beat(node_id: str, instance_id: str = "") -> rm_pb.HeartbeatRequest:
    return rm_pb.HeartbeatRequest(node_id=node_id, used=pb.Resources(), instance_id=instance_id)


@pytest.fixture
def served() -> Iterator[Served]:
    rm = Served()
    yield rm
    rm.close()


@pytest.fixture
def streams(served: Served) -> Iterator[list[Stream]]:
    """Streams a test opens with ``open``; all closed at its end."""
    opened: list[Stream] = []
    yield opened
    for stream in opened:
        stream.close()


def open_stream(served: Served, streams: list[Stream]) -> Stream:
    stream = Stream(served.nodes)
    streams.append(stream)
    return stream


def test_each_request_is_answered_in_order_even_when_written_ahead(
    served: Served, streams: list[Stream]
):
    served.register("n1")
    stream = open_stream(served, streams)
    nodes = ["n1", "n9", "n1", "n1", "n9", "n1"]  # n9 is unknown: its answers say reregister
    stream.send(*(beat(n) for n in nodes))  # all written before any answer is read
    answers = [stream.read() for _ in nodes]
    assert [a.reregister for a in answers] == [n == "n9" for n in nodes]
    # the stream stays open for the next heartbeat
    assert not stream.beat(beat("n1")).reregister


def test_a_command_for_the_node_comes_over_its_open_stream(served: Served, streams: list[Stream]):
    served.register("n1")
    stream = open_stream(served, streams)
    assert list(stream.beat(beat("n1")).commands) == []
    job_id = served.jobs.SubmitJob(
        rm_pb.SubmitJobRequest(spec_yaml=SPEC), timeout=DEADLINE
    ).job.job_id
    # the scheduling pass places the job master a moment later: wait for it to be placed
    watch = served.jobs.WatchJob(rm_pb.GetJobRequest(job_id=job_id), timeout=DEADLINE)
    assert next(s for s in watch if s.master_node).master_node == "n1"
    watch.cancel()
    for _ in range(2):  # repeated with every heartbeat until the node reports it running
        (command,) = stream.beat(beat("n1")).commands
        assert command.WhichOneof("command") == "launch_master"
        assert command.launch_master.job_id == job_id
        assert command.launch_master.rm_address == "rm:1"
        assert command.launch_master.attempt == 1


def test_an_unknown_node_or_instance_is_told_to_register_again(
    served: Served, streams: list[Stream]
):
    served.nodes.RegisterNode(
        rm_pb.RegisterNodeRequest(
            node_id="n1",
            address="n1:7",
            capacity=pb.Resources(cpu=2, memory_mb=2048),
            runtime="process",
            instance_id="i1",
        ),
        timeout=DEADLINE,
    )
    stream = open_stream(served, streams)
    assert stream.beat(beat("n9")).reregister  # never registered
    assert stream.beat(beat("n1", "another")).reregister  # not the agent that registered
    assert not stream.beat(beat("n1", "i1")).reregister
    # the same answers as the unary call's
    assert served.nodes.Heartbeat(beat("n9"), timeout=DEADLINE).reregister


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (InvalidRequestError("used", "must not be negative"), grpc.StatusCode.INVALID_ARGUMENT),
        (NotFoundError("node 'bad' not found"), grpc.StatusCode.NOT_FOUND),
        (ConflictError("node 'bad' is of another cluster"), grpc.StatusCode.FAILED_PRECONDITION),
        (AlreadyExistsError("node 'bad' is held"), grpc.StatusCode.ALREADY_EXISTS),
        (ZeroDivisionError("a bug"), grpc.StatusCode.INTERNAL),
    ],
)
def test_a_refused_heartbeat_ends_its_stream_with_the_unary_status_and_others_go_on(
    served: Served, streams: list[Stream], error: Exception, code: grpc.StatusCode
):
    # The core refuses no heartbeat today (an unknown node or instance is told to register
    # again): one that does is made here, for node "bad" only.
    original = served.core.heartbeat

    def heartbeat(node_id: str, *args: Any, **kwargs: Any) -> Any:
        if node_id == "bad":
            raise error
        return original(node_id, *args, **kwargs)

    served.core.heartbeat = heartbeat  # type: ignore[method-assign]
    served.register("n1")
    other = open_stream(served, streams)
    assert not other.beat(beat("n1")).reregister
    with pytest.raises(grpc.RpcError) as unary:
        served.nodes.Heartbeat(beat("bad"), timeout=DEADLINE)

    refused = open_stream(served, streams)
    assert not refused.beat(beat("n1")).reregister
    with pytest.raises(grpc.RpcError) as streamed:
        refused.beat(beat("bad"))

    assert streamed.value.code() is unary.value.code() is code
    details = streamed.value.details()
    assert "\n" not in details
    # the same message, but for an unexpected error, which names the call it failed in
    assert details == unary.value.details().replace("in Heartbeat ", "in HeartbeatStream ")
    # the RM keeps serving: the stream open before, and a new one
    assert not other.beat(beat("n1")).reregister
    assert not open_stream(served, streams).beat(beat("n1")).reregister
