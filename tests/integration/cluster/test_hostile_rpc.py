"""Hostile callers against a real local cluster (mutual TLS on): undecodable requests, huge
fields and oversized messages, under certificates that may call nothing (a broker's) and that may
call something (an agent's).  Each is answered in one line, costs the daemon's log a bounded
number of lines and no traceback, and leaves no memory behind (issue 27, items 3 and 4)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from plumbing import tls
from plumbing.rpc import channel
from plumbing.tls import ClientTls, Identity, Role
from sluice_pb import node_agent_pb2 as agent_pb
from sluice_pb import resource_manager_pb2 as rm_pb
from tests.integration.cluster.harness import Cluster, running_cluster, wait_until

pytestmark = pytest.mark.integration

CALLERS = {
    "broker": Identity(Role.BROKER, "kafka"),  # may call nothing but health and reflection
    "agent": Identity(Role.AGENT, "node-1"),  # may heartbeat the RM, list an agent's tasks...
    "client": Identity(Role.CLIENT, "bob"),
}

# Bytes no protobuf message decodes: a tag of wire type 7 (none such), a field whose length
# runs past the end, a varint that never ends.
GARBAGE = [b"\x07", b"\x0a\xff\xff\xff\x0f", b"\x08" + b"\xff" * 11, b"\xff" * 64]
FLOOD = 300  # requests per (server, certificate): the probe's 2,986 in one run, scaled down

# The log a flood may cost its daemon: a first line per kind of refusal, and a summary.
MAX_LOG_LINES = 50
MAX_LOG_BYTES = 20_000

# (server, method a broker may not call but an agent may, log file)
TARGETS = {
    "rm": "/sluice.v1.NodeService/Heartbeat",
    "agent": "/sluice.v1.AgentService/ListTasks",
    "aggregator": "/sluice.v1.AggregatorService/GetMachineList",
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    yield from running_cluster(tmp_path_factory, "cluster-hostile")


@pytest.fixture(scope="module")
def credentials(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> dict[str, ClientTls]:
    authority = tls.load_ca(cluster.directory / "tls" / "ca")
    out = tmp_path_factory.mktemp("hostile-callers")
    found = {}
    for name, identity in CALLERS.items():
        tls.issue(authority, identity, out / name)
        found[name] = ClientTls.of(tls.load_tls_dir(out / name))
    return found


def _address(cluster: Cluster, server: str) -> str:
    if server == "rm":
        return str(cluster.info["rm"])
    if server == "agent":
        return str(cluster.info["nodes"][0]["address"])
    return str(cluster.info["data_plane"]["aggregator"])


def _log(cluster: Cluster, server: str) -> Path:
    name = {"rm": "rm", "agent": cluster.info["nodes"][0]["node_id"], "aggregator": "aggregator"}
    return cluster.directory / "logs" / f"{name[server]}.log"


def _pid(cluster: Cluster, server: str) -> int:
    if server == "rm":
        return int(cluster.info["rm_pid"])
    if server == "agent":
        return int(cluster.info["nodes"][0]["pid"])
    return int(cluster.service("aggregator")["pid"])


class LogTail:
    """What a daemon wrote to its log since this was made."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._start = path.stat().st_size

    def text(self) -> str:
        with self._path.open("rb") as log:
            log.seek(self._start)
            return log.read().decode(errors="replace")


def _raw_call(ch: grpc.Channel, method: str, payload: bytes, timeout: float = 30) -> grpc.RpcError:
    """Send ``payload`` as the request of ``method``, undecoded; the error it was answered with."""
    call = ch.unary_unary(method, request_serializer=None, response_deserializer=None)
    with pytest.raises(grpc.RpcError) as caught:
        call(payload, timeout=timeout)
    error = caught.value
    assert isinstance(error, grpc.Call)
    return error


def _assert_bounded(tail: LogTail, what: str) -> str:
    text = tail.text()
    assert "Traceback" not in text, f"{what}: a traceback in the log:\n{text[:3000]}"
    lines = text.count("\n")
    assert lines < MAX_LOG_LINES, f"{what}: {lines} log lines:\n{text[:3000]}"
    assert len(text.encode()) < MAX_LOG_BYTES, f"{what}: {len(text.encode())} bytes of log"
    return text


@pytest.mark.parametrize("server", sorted(TARGETS))
@pytest.mark.parametrize(
    ("role", "code"),
    [
        # A broker may call none of these: refused before its bytes are even decoded.
        ("broker", grpc.StatusCode.PERMISSION_DENIED),
        # An agent may: its undecodable request is its own mistake, one line.
        ("agent", grpc.StatusCode.INVALID_ARGUMENT),
    ],
)
def test_a_flood_of_undecodable_requests_costs_a_few_log_lines(
    cluster: Cluster,
    credentials: dict[str, ClientTls],
    server: str,
    role: str,
    code: grpc.StatusCode,
) -> None:
    tail = LogTail(_log(cluster, server))
    ch = channel(_address(cluster, server), credentials[role])
    try:
        for i in range(FLOOD):
            error = _raw_call(ch, TARGETS[server], GARBAGE[i % len(GARBAGE)])
            assert error.code() is code, f"{role} on {server}: {error.code()} {error.details()}"
            details = error.details() or ""
            assert "\n" not in details and len(details) < 300, details
            if code is grpc.StatusCode.INVALID_ARGUMENT:
                assert details.startswith("request: "), details
    finally:
        ch.close()
    # Still serving, and the flood logged in a few lines.
    assert cluster.client.jobs.ListJobs(rm_pb.ListJobsRequest(), timeout=20) is not None
    text = _assert_bounded(tail, f"{role} flooding the {server}")
    assert role in text or CALLERS[role].name in text  # the first refusal named the caller


def test_a_huge_node_id_is_never_logged_in_full(
    cluster: Cluster, credentials: dict[str, ClientTls]
) -> None:
    tail = LogTail(_log(cluster, "rm"))
    huge = "n" * 1_000_000
    ch = channel(_address(cluster, "rm"), credentials["agent"])
    try:
        for _ in range(20):
            request = rm_pb.HeartbeatRequest(node_id=huge, instance_id=uuid.uuid4().hex)
            error = _raw_call(ch, TARGETS["rm"], request.SerializeToString())
            assert error.code() is grpc.StatusCode.PERMISSION_DENIED
            details = error.details() or ""
            assert len(details) < 400 and details.startswith("node_id: "), details[:400]
    finally:
        ch.close()
    text = _assert_bounded(tail, "a 1 MB node_id")
    assert "n" * 200 not in text
    assert "node_id" in text  # the refusal itself is logged, shortened


@pytest.mark.parametrize(
    ("server", "method", "payload"),
    [
        # Job specs are capped at 1 MiB: 8 MB is no legitimate SubmitJob.
        (
            "rm",
            "/sluice.v1.JobService/SubmitJob",
            rm_pb.SubmitJobRequest(spec_yaml="#" * 8_000_000).SerializeToString(),
        ),
        # A command is capped at 256 KiB: 8 MB is no legitimate StartTask.
        (
            "agent",
            "/sluice.v1.AgentService/StartTask",
            agent_pb.StartTaskRequest(
                job_id="job-1", command=["x" * 8_000_000]
            ).SerializeToString(),
        ),
        # Every request of the aggregator is empty.
        (
            "aggregator",
            "/sluice.v1.AggregatorService/GetMachineList",
            b"\x0a" + b"\x00" * 2_000_000,
        ),
    ],
    ids=["rm-SubmitJob", "agent-StartTask", "aggregator"],
)
def test_oversized_messages_are_refused_with_resource_exhausted(
    cluster: Cluster,
    credentials: dict[str, ClientTls],
    server: str,
    method: str,
    payload: bytes,
) -> None:
    tail = LogTail(_log(cluster, server))
    ch = channel(_address(cluster, server), credentials["client"])
    try:
        for _ in range(3):
            error = _raw_call(ch, method, payload)
            assert error.code() is grpc.StatusCode.RESOURCE_EXHAUSTED, error.details()
    finally:
        ch.close()
    _assert_bounded(tail, f"oversized requests to the {server}")


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmRSS for pid {pid}")


def _refused_submissions(
    cluster: Cluster, caller: ClientTls, size: int, count: int, codes: set[grpc.StatusCode]
) -> None:
    """``count`` SubmitJob calls of ``size`` bytes, 10 at a time, each refused with one of
    ``codes``."""
    payload = rm_pb.SubmitJobRequest(spec_yaml="#" * size).SerializeToString()
    ch = channel(_address(cluster, "rm"), caller)
    call: Any = ch.unary_unary(
        "/sluice.v1.JobService/SubmitJob", request_serializer=None, response_deserializer=None
    )
    try:
        for start in range(0, count, 10):
            futures = [call.future(payload, timeout=120) for _ in range(min(10, count - start))]
            for future in futures:
                with pytest.raises(grpc.RpcError) as caught:
                    future.result()
                assert caught.value.code() in codes, caught.value.details()
    finally:
        ch.close()


OVERSIZED = {grpc.StatusCode.RESOURCE_EXHAUSTED}
SPEC_TOO_LARGE = {grpc.StatusCode.INVALID_ARGUMENT}


@pytest.mark.parametrize(
    ("role", "sizes", "codes"),
    [
        # The probe's: turned away by the receive limit, unread.
        ("client", [60_000_000, 8_000_000], OVERSIZED),
        # Within the receive limit, refused by the handler (a spec is at most 1 MiB): the
        # abort's frames held the request in a cycle with the call's state.
        ("client", [3_500_000], SPEC_TOO_LARGE),
        # Within the receive limit, refused before decoding (a broker may submit nothing).
        ("broker", [3_500_000], {grpc.StatusCode.PERMISSION_DENIED}),
    ],
    ids=["oversized", "refused-by-the-handler", "refused-by-access"],
)
def test_refused_large_requests_leave_no_memory_behind(
    cluster: Cluster,
    credentials: dict[str, ClientTls],
    role: str,
    sizes: list[int],
    codes: set[grpc.StatusCode],
) -> None:
    """The probe's 30 refused 60 MB submissions grew the RM by 3.8 GB for good.  Here the RM's
    resident memory after 30 refused large submissions (10 at a time, as a client may) is back
    within 10 % of its level before: the receive limit turns the oversized away before they
    are read, and a refusal keeps nothing of the others.  (Warmed up first with two rounds of
    the very calls measured, so the level before already holds what the allocator keeps
    after its first large buffers, which a refusal that keeps its request (about 200 MB per
    30 of 3.5 MB before the fix) passes many times over; the level after is waited for, so a
    late collection or a loaded host only delays the answer.)"""
    pid = _pid(cluster, "rm")
    for _ in range(2):
        for size in sizes:
            _refused_submissions(cluster, credentials[role], size, 10, codes)
    before = _rss_kib(pid)
    for size in sizes:
        _refused_submissions(cluster, credentials[role], size, 30, codes)
    settled = wait_until(
        lambda: _rss_kib(pid) <= before * 1.10 or None,
        60,
        f"RM resident memory back within 10 % of {before} KiB (now {_rss_kib(pid)} KiB)",
    )
    assert settled
    assert Path(f"/proc/{pid}").exists()  # the RM lived through it


@pytest.mark.parametrize(
    ("server", "method", "role"),
    [
        ("rm", "/sluice.v1.NodeService/HeartbeatStream", "agent"),
        ("rm", "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", "broker"),
        ("agent", "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", "broker"),
    ],
)
def test_undecodable_streamed_requests_answer_one_line(
    cluster: Cluster, credentials: dict[str, ClientTls], server: str, method: str, role: str
) -> None:
    """A streamed request is decoded as the handler reads it, after the check: bad bytes end the
    stream with INVALID_ARGUMENT, on the asyncio RM and the thread-pool agent alike."""
    tail = LogTail(_log(cluster, server))
    ch = channel(_address(cluster, server), credentials[role])
    try:
        call = ch.stream_stream(method, request_serializer=None, response_deserializer=None)
        for i in range(50):
            with pytest.raises(grpc.RpcError) as caught:
                list(call(iter([GARBAGE[i % len(GARBAGE)]]), timeout=30))
            assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT, caught.value
            assert (caught.value.details() or "").startswith("request: does not decode as ")
    finally:
        ch.close()
    _assert_bounded(tail, f"streamed garbage to the {server}")
