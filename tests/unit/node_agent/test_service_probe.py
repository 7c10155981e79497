"""A service's probe against real sockets: HTTP answers of every kind, TCP, refusals, silence."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable

import pytest

from node_agent.service_probe import ProbeResult, probe_once
from policies.scheduling.service_spec import ProbeSpec

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


def answering(raw: bytes) -> Handler:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(raw)
        await writer.drain()
        writer.close()

    return handle


async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await asyncio.sleep(10)


async def probe_server(handler: Handler, probe: ProbeSpec) -> ProbeResult:
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        return await probe_once("127.0.0.1", ProbeSpec(port, probe.http, 1.0, probe.timeout_s))


OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"


@pytest.mark.parametrize(
    ("handler", "http", "timeout", "problem"),
    [
        (answering(OK), "/healthz", 1.0, ""),
        (answering(b"HTTP/1.0 301 Moved\r\n\r\n"), "/", 1.0, ""),
        (answering(b"HTTP/1.1 503 Unavailable\r\n\r\n"), "/", 1.0, "HTTP status 503"),
        (answering(b"hello\n"), "/", 1.0, "the answer is not HTTP: b'hello\\n'"),
        (answering(b""), "/", 1.0, "the answer is not HTTP: b''"),
        (silent, "/", 0.2, "no answer within 0.2 s"),
        (silent, None, 0.2, ""),  # TCP: the connect is the answer
    ],
)
def test_a_probe_times_a_good_answer_and_names_what_was_wrong_with_a_bad_one(
    handler: Handler, http: str | None, timeout: float, problem: str
) -> None:
    result = asyncio.run(probe_server(handler, ProbeSpec(1, http, 1.0, timeout)))
    assert result.problem == problem
    assert (result.latency_s is not None) is (not problem)
    if result.latency_s is not None:
        assert 0 < result.latency_s < timeout


def test_a_closed_port_is_refused() -> None:
    with socket.socket() as held:  # a port nobody listens on
        held.bind(("127.0.0.1", 0))
        port = held.getsockname()[1]
    result = asyncio.run(probe_once("127.0.0.1", ProbeSpec(port, None, 1.0, 0.5)))
    assert result.latency_s is None and result.problem.startswith(
        f"cannot connect to 127.0.0.1:{port}"
    )
