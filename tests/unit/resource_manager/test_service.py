"""The RM's gRPC layer, served for real on a loopback port in this process: status codes, one
unit per request, unknown task states, and watchers that cannot starve the liveness paths."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import grpc
import pytest

from plumbing.rpc import channel, start_aio_server
from resource_manager.core import CoreSettings, ResourceManagerCore
from resource_manager.job_service import JobServicer
from resource_manager.rm_state import RMState
from resource_manager.service import MasterServicer, NodeServicer
from resource_manager.sqlite_store import SqliteStore as Store
from resource_manager.tables import Tables
from sluice_pb import common_pb2 as pb
from sluice_pb import resource_manager_pb2 as rm_pb
from sluice_pb import resource_manager_pb2_grpc as rm_grpc
from tests.unit.resource_manager.harness import at

SPEC = """
name: one
phases:
  - name: p
    tasks: 1
    command: ["true"]
    resources: {cpu: 0.5, memory_mb: 64}
"""


class Served:
    """An RM core behind a real aio gRPC server on its own event loop thread; ``node_servicer``
    makes its NodeService (a test may serve a subclass that counts calls)."""

    def __init__(
        self,
        node_servicer: Callable[[RMState], NodeServicer] = NodeServicer,
        settings: CoreSettings | None = None,
    ) -> None:
        self.clock_value = 1.0
        self.core = ResourceManagerCore(Tables(Store(":memory:")), settings or CoreSettings())
        self.state = RMState(self.core, lambda: at(self.clock_value), advertise_address="rm:1")
        self.node_servicer = node_servicer(self.state)
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()
        self.server, port, _ = asyncio.run_coroutine_threadsafe(self._start(), self.loop).result()
        self.address = f"127.0.0.1:{port}"
        self.channel = channel(self.address)
        self.jobs = rm_grpc.JobServiceStub(self.channel)
        self.nodes = rm_grpc.NodeServiceStub(self.channel)
        self.masters = rm_grpc.MasterServiceStub(self.channel)

    async def _start(self) -> tuple[grpc.aio.Server, int, object]:
        names = rm_pb.DESCRIPTOR.services_by_name
        return await start_aio_server(
            [
                (
                    rm_grpc.add_JobServiceServicer_to_server,
                    JobServicer(self.state),
                    names["JobService"].full_name,
                ),
                (
                    rm_grpc.add_NodeServiceServicer_to_server,
                    self.node_servicer,
                    names["NodeService"].full_name,
                ),
                (
                    rm_grpc.add_MasterServiceServicer_to_server,
                    MasterServicer(self.state),
                    names["MasterService"].full_name,
                ),
            ],
            "127.0.0.1:0",
        )

    def close(self) -> None:
        self.channel.close()
        asyncio.run_coroutine_threadsafe(self.server.stop(0), self.loop).result()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=5)

    def register(self, node_id: str = "n1", *events: pb.TaskEvent) -> None:
        self.nodes.RegisterNode(
            rm_pb.RegisterNodeRequest(
                node_id=node_id,
                address=f"{node_id}:7",
                capacity=pb.Resources(cpu=2, memory_mb=2048),
                runtime="process",
                live_tasks=list(events),
            ),
            timeout=5,
        )


@pytest.fixture
def served() -> Iterator[Served]:
    rm = Served()
    yield rm
    rm.close()


def test_an_unexpected_error_answers_internal_changes_nothing_and_the_rm_keeps_serving(
    served: Served, caplog: pytest.LogCaptureFixture
):
    served.register()
    job_id = served.jobs.SubmitJob(rm_pb.SubmitJobRequest(spec_yaml=SPEC), timeout=5).job.job_id
    before = dict(served.core.jobs)
    original = served.core.kill

    def broken(job_id: str, *, now: object, reason: str = "") -> object:
        served.core.tables.put_job(replace(served.core.jobs[job_id], message="half-done"))
        raise ZeroDivisionError("a bug")

    served.core.kill = broken  # type: ignore[method-assign,assignment]
    with caplog.at_level(logging.INFO), pytest.raises(grpc.RpcError) as caught:
        served.jobs.KillJob(rm_pb.GetJobRequest(job_id=job_id), timeout=5)
    assert caught.value.code() is grpc.StatusCode.INTERNAL
    assert caught.value.details() == (
        "internal error in KillJob (ZeroDivisionError); nothing was changed; the resource "
        "manager's log has details"
    )
    assert served.core.jobs == before  # the half-done change was rolled back
    lines = [r for r in caplog.records if "KillJob failed" in r.getMessage()]
    assert [(r.levelno, r.exc_info) for r in lines] == [(logging.WARNING, None)]  # one line
    served.core.kill = original  # type: ignore[method-assign]
    killed = served.jobs.KillJob(rm_pb.GetJobRequest(job_id=job_id), timeout=5)
    assert killed.state == pb.JOB_KILLED


@pytest.mark.parametrize(
    ("call", "code", "details"),
    [
        ("unknown job", grpc.StatusCode.NOT_FOUND, "job 'job-404' not found"),
        ("bad node id", grpc.StatusCode.INVALID_ARGUMENT, "node_id: 'a\\x08b' must be"),
        ("bad key", grpc.StatusCode.INVALID_ARGUMENT, "idempotency_key: must be at most 64"),
        ("no spec", grpc.StatusCode.INVALID_ARGUMENT, "spec: is required"),
    ],
)
def test_refusals_are_one_line_with_their_code(
    served: Served, call: str, code: grpc.StatusCode, details: str
):
    with pytest.raises(grpc.RpcError) as caught:
        if call == "unknown job":
            served.jobs.GetJob(rm_pb.GetJobRequest(job_id="job-404"), timeout=5)
        elif call == "bad node id":
            served.register("a\bb")
        elif call == "bad key":
            request = rm_pb.SubmitJobRequest(spec_yaml=SPEC, idempotency_key="k" * 65)
            served.jobs.SubmitJob(request, timeout=5)
        else:
            served.jobs.SubmitJob(rm_pb.SubmitJobRequest(), timeout=5)
    assert caught.value.code() is code
    assert caught.value.details().startswith(details)
    assert "\n" not in caught.value.details()


def test_a_task_state_this_rm_does_not_know_is_ignored_not_read_as_lost(
    served: Served, caplog: pytest.LogCaptureFixture
):
    served.register()
    job = served.jobs.SubmitJob(rm_pb.SubmitJobRequest(spec_yaml=SPEC, client_mode=True), timeout=5)
    job_id = job.job.job_id
    served.masters.RegisterMaster(rm_pb.RegisterMasterRequest(job_id=job_id, attempt=1), timeout=5)
    ask = rm_pb.Ask(phase="p", count=1, resources=pb.Resources(cpu=0.5, memory_mb=64))
    (granted,) = served.masters.Allocate(
        rm_pb.AllocateRequest(job_id=job_id, asks=[ask], master_attempt=1), timeout=5
    ).granted
    event = pb.TaskEvent(
        job_id=job_id, task_id="p-0", attempt=1, allocation_id=granted.allocation_id
    )
    running = pb.TaskEvent(state=pb.TASK_RUNNING)
    running.MergeFrom(event)
    served.nodes.ReportTaskEvents(rm_pb.ReportTaskEventsRequest(node_id="n1", events=[running]))
    future = pb.TaskEvent(state=42)  # type: ignore[arg-type]  # a state of a newer agent
    future.MergeFrom(event)
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            served.nodes.ReportTaskEvents(
                rm_pb.ReportTaskEventsRequest(node_id="n1", events=[future]), timeout=5
            )
    (task,) = served.jobs.GetJob(rm_pb.GetJobRequest(job_id=job_id), timeout=5).tasks
    assert task.state == pb.TASK_RUNNING
    warnings = [r.getMessage() for r in caplog.records if "unknown to this" in r.getMessage()]
    assert len(warnings) == 1  # once per node and state, not per report
    assert "node n1 reported task state 42" in warnings[0]


def test_watchers_hold_no_thread_and_never_delay_heartbeats(served: Served):
    served.register()
    job_id = served.jobs.SubmitJob(rm_pb.SubmitJobRequest(spec_yaml=SPEC), timeout=5).job.job_id
    streams = [served.jobs.WatchJob(rm_pb.GetJobRequest(job_id=job_id)) for _ in range(64)]
    firsts = ThreadPoolExecutor(max_workers=64).map(next, streams)
    assert all(s.job_id == job_id for s in firsts)  # 64 streams open and waiting
    for step in range(20):
        served.clock_value += 1.0
        response = served.nodes.Heartbeat(
            rm_pb.HeartbeatRequest(node_id="n1", used=pb.Resources()), timeout=2
        )
        assert not response.reregister, step
    killed = served.jobs.KillJob(rm_pb.GetJobRequest(job_id=job_id), timeout=5)
    assert killed.state == pb.JOB_KILLED
    finals = list(ThreadPoolExecutor(max_workers=64).map(lambda s: list(s)[-1], streams))
    assert {f.state for f in finals} == {pb.JOB_KILLED}  # every watcher saw the end
