"""The agent daemon's heartbeat loop against real gRPC servers: over one stream kept open to the
RM, a new stream when one stops answering, unary calls to an RM without the stream, and a prompt
stop that closes the stream."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import cast

import grpc
import pytest

from node_agent import daemon as daemon_module
from node_agent.agent import AgentConfig, NodeAgent
from node_agent.daemon import AgentDaemon, AgentIdentity
from node_agent.lease import Lease
from node_agent.speculative import QueueState
from plumbing.tls import Identity
from policies.scheduling.resources import Resources
from resource_manager.core import CoreSettings
from resource_manager.rm_state import RMState
from resource_manager.service import NodeServicer
from sluice_pb import resource_manager_pb2 as rm_pb
from tests.unit.resource_manager.test_service import SPEC, Served

DEADLINE = 10.0  # the longest any condition of these tests is waited for
INTERVAL = 0.02  # seconds between heartbeats, unless a test needs them further apart


class FakeAgent:
    """What the daemon asks of a NodeAgent: nothing runs; launches are recorded."""

    def __init__(self) -> None:
        self.config = AgentConfig(node_id="n1", cpu_ids=(0,), capacity=Resources(2.0, 2048))
        self.used = Resources()
        self.has_swap = True
        self.launched: list[tuple[str, str]] = []
        self.launch = threading.Event()
        self.lease = Lease(None, 0.2)  # renewed by the loop; nothing is fenced here

    def live_events(self) -> list[object]:
        return []

    def registration_events(self) -> list[object]:
        return []

    def queue_state(self) -> QueueState:
        return QueueState()

    def set_oversubscription_mode(self, mode: str) -> None:
        self.mode = mode  # the cluster's UP/RP switch, from the RM's registration answer

    def launch_master(self, job_id: str, allocation_id: str, *_: object) -> None:
        self.launched.append((job_id, allocation_id))
        self.launch.set()


class Counts:
    """Counters a server's handlers bump and a test waits on (never polling)."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self.unary = 0  # unary heartbeats answered
        self.opened = 0  # heartbeat streams opened
        self.open = 0  # heartbeat streams open now
        self.streamed = 0  # heartbeats answered over streams

    def add(self, **deltas: int) -> None:
        with self._changed:
            for name, delta in deltas.items():
                setattr(self, name, getattr(self, name) + delta)
            self._changed.notify_all()

    def wait_for(self, condition: Callable[[Counts], bool]) -> None:
        with self._changed:
            assert self._changed.wait_for(lambda: condition(self), timeout=DEADLINE)


class CountingNodeServicer(NodeServicer):
    """The RM's NodeService, counting what it serves; its first ``silent`` streams read their
    requests and answer none (an RM that hangs)."""

    silent = 0

    def __init__(self, state: RMState) -> None:
        super().__init__(state)
        self.counts = Counts()

    async def Heartbeat(
        self, request: rm_pb.HeartbeatRequest, context: grpc.aio.ServicerContext
    ) -> rm_pb.HeartbeatResponse:
        response = await super().Heartbeat(request, context)
        self.counts.add(unary=1)
        return response

    async def HeartbeatStream(
        self,
        request_iterator: AsyncIterator[rm_pb.HeartbeatRequest],
        context: grpc.aio.ServicerContext,
    ) -> None:
        self.counts.add(opened=1, open=1)
        try:
            if self.counts.opened <= self.silent:
                while await context.read() is not grpc.aio.EOF:
                    pass  # never answered
            else:
                await super().HeartbeatStream(request_iterator, context)
        finally:
            self.counts.add(open=-1)

    async def _beat(
        self,
        request: rm_pb.HeartbeatRequest,
        context: grpc.aio.ServicerContext,
        what: str,
        identity: Identity | None,
    ) -> rm_pb.HeartbeatResponse:
        response = await super()._beat(request, context, what, identity)
        if what == "HeartbeatStream":
            self.counts.add(streamed=1)
        return response


class OldRM:
    """An RM from before HeartbeatStream: its NodeService has RegisterNode and Heartbeat only."""

    def __init__(self) -> None:
        self.counts = Counts()
        self.server = grpc.server(ThreadPoolExecutor(max_workers=4))
        self.server.add_generic_rpc_handlers(
            [
                grpc.method_handlers_generic_handler(
                    "sluice.v1.NodeService",
                    {
                        "RegisterNode": grpc.unary_unary_rpc_method_handler(
                            lambda request, context: rm_pb.RegisterNodeResponse(),
                            request_deserializer=rm_pb.RegisterNodeRequest.FromString,
                            response_serializer=rm_pb.RegisterNodeResponse.SerializeToString,
                        ),
                        "Heartbeat": grpc.unary_unary_rpc_method_handler(
                            self._heartbeat,
                            request_deserializer=rm_pb.HeartbeatRequest.FromString,
                            response_serializer=rm_pb.HeartbeatResponse.SerializeToString,
                        ),
                    },
                )
            ]
        )
        self.address = f"127.0.0.1:{self.server.add_insecure_port('127.0.0.1:0')}"
        self.server.start()

    def _heartbeat(
        self, request: rm_pb.HeartbeatRequest, context: grpc.ServicerContext
    ) -> rm_pb.HeartbeatResponse:
        self.counts.add(unary=1)
        return rm_pb.HeartbeatResponse()


class Running:
    """An AgentDaemon for a FakeAgent whose heartbeat loop runs on a thread of its own."""

    def __init__(self, rm_address: str, interval: float = INTERVAL) -> None:
        self.agent = FakeAgent()
        self.daemon = AgentDaemon(
            cast(NodeAgent, self.agent),
            rm_address,
            "n1:7",
            "process",
            threading.Event(),
            identity=AgentIdentity("n1", "sluice", "i1"),
        )
        self.thread = threading.Thread(target=self.daemon.heartbeat_loop, args=(interval,))
        self.thread.start()

    def stop(self) -> float:
        """Set the stop event; how long the loop then took to end."""
        start = time.monotonic()
        self.daemon.stop_event.set()
        self.thread.join(timeout=DEADLINE)
        assert not self.thread.is_alive()
        self.daemon.close()
        return time.monotonic() - start


def serve(silent: int = 0, node_timeout: float = 10.0) -> Served:
    servicer = type("Servicer", (CountingNodeServicer,), {"silent": silent})
    return Served(servicer, settings=CoreSettings(node_timeout=node_timeout))


@pytest.fixture
def rm() -> Iterator[Served]:
    served = serve()
    yield served
    served.close()


def counts_of(served: Served) -> Counts:
    return cast(CountingNodeServicer, served.node_servicer).counts


def test_heartbeats_go_over_one_open_stream_and_bring_commands(rm: Served):
    counts = counts_of(rm)
    running = Running(rm.address)
    try:
        counts.wait_for(lambda c: c.streamed >= 3)
        job_id = rm.jobs.SubmitJob(rm_pb.SubmitJobRequest(spec_yaml=SPEC), timeout=DEADLINE)
        assert running.agent.launch.wait(DEADLINE)  # the LaunchMaster came over the stream
    finally:
        running.stop()
    assert running.agent.launched[0][0] == job_id.job.job_id
    assert (counts.opened, counts.unary) == (1, 0)  # one stream for every heartbeat


def test_a_stream_that_stops_answering_is_cancelled_and_another_opened(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
):
    monkeypatch.setattr(daemon_module, "RPC_TIMEOUT", 0.2)
    rm = serve(silent=1)
    counts = counts_of(rm)
    try:
        with caplog.at_level(logging.WARNING, logger="sluice.agent"):
            running = Running(rm.address)
            try:
                counts.wait_for(lambda c: c.opened == 2 and c.streamed >= 2)
            finally:
                running.stop()
        counts.wait_for(lambda c: c.open == 0)  # the silent one was cancelled, not left open
    finally:
        rm.close()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == ["heartbeat failed, will retry: no answer within 0.2 s"]


def test_an_rm_without_the_stream_gets_unary_heartbeats_for_the_rest_of_the_run(
    caplog: pytest.LogCaptureFixture,
):
    old = OldRM()
    try:
        with caplog.at_level(logging.INFO, logger="sluice.agent"):
            running = Running(old.address)
            try:
                old.counts.wait_for(lambda c: c.unary >= 5)
            finally:
                running.stop()
    finally:
        old.server.stop(None)
    said = [r.getMessage() for r in caplog.records if "no heartbeat stream" in r.getMessage()]
    assert len(said) == 1  # said once, not per heartbeat
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_setting_the_stop_event_ends_the_loop_at_once_and_closes_the_stream():
    rm = serve(node_timeout=1000.0)  # (which allows heartbeats a minute apart)
    counts = counts_of(rm)
    try:
        running = Running(rm.address, interval=60.0)  # the loop waits a minute between heartbeats
        counts.wait_for(lambda c: c.streamed == 1 and c.open == 1)
        assert running.stop() < 1.0
        counts.wait_for(lambda c: c.open == 0)
    finally:
        rm.close()
