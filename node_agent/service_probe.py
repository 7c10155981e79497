"""Measure a service's latency the way its spec says (``service.probe``): an HTTP GET of a path,
or a TCP connect, to a port on the task's host (docs/jobspec.md, "Services").

One probe is one request on a fresh connection, timed from the connect to the end of the
answer, so what it measures includes what a client would see of a busy machine: a slow accept,
a slow handler.  A probe that fails (refused, timed out, an HTTP status of 400 or more, an
answer that is not HTTP) gives no latency and says why, in one line.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass

from policies.scheduling.service_spec import ProbeSpec

MAX_STATUS_LINE = 1024


@dataclass(frozen=True)
class ProbeResult:
    """``latency_s`` when it succeeded; otherwise ``None`` and ``problem``."""

    latency_s: float | None
    problem: str = ""


async def probe_once(host: str, probe: ProbeSpec) -> ProbeResult:
    """One probe of ``probe.port`` on ``host``, within ``probe.timeout_s``."""
    started = time.perf_counter()
    try:
        async with asyncio.timeout(probe.timeout_s):
            reader, writer = await asyncio.open_connection(host, probe.port)
            try:
                if probe.http is not None:
                    problem = await _http_get(reader, writer, host, probe)
                    if problem:
                        return ProbeResult(None, problem)
            finally:
                writer.close()
                with contextlib.suppress(OSError):  # (reset by the peer: the answer is read)
                    await writer.wait_closed()
    except TimeoutError:
        return ProbeResult(None, f"no answer within {probe.timeout_s:g} s")
    except OSError as error:
        return ProbeResult(
            None, f"cannot connect to {host}:{probe.port}: {error.strerror or error}"
        )
    return ProbeResult(time.perf_counter() - started)


async def _http_get(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, host: str, probe: ProbeSpec
) -> str:
    """Send the GET and read the whole answer; its problem, or "" when it is a success."""
    request = f"GET {probe.http} HTTP/1.0\r\nHost: {host}:{probe.port}\r\nConnection: close\r\n\r\n"
    writer.write(request.encode("ascii"))
    await writer.drain()
    status = await reader.readline()
    if len(status) > MAX_STATUS_LINE:
        return "the answer is not HTTP (its first line is too long)"
    parts = status.decode("latin-1").split(maxsplit=2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
        return f"the answer is not HTTP: {status[:80]!r}"
    while await reader.read(65536):  # the rest of it: the latency is that of a whole answer
        pass
    code = int(parts[1])
    return f"HTTP status {code}" if code >= 400 else ""
