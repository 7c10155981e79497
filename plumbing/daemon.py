"""What every Sluice daemon does the same way: publish its address, run its loops until a
signal, and shut its gRPC server down gracefully."""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
from collections.abc import Sequence
from pathlib import Path

import grpc
from grpc_health.v1 import _async as health_aio
from grpc_health.v1 import health


def publish_address(path: Path | None, address: str) -> None:
    """Write the bound address to ``path`` atomically (launchers wait for this file)."""
    if path is None:
        return
    tmp = path.with_suffix(".tmp")
    tmp.write_text(address)
    tmp.replace(path)


def stop_on_signals(stop: threading.Event, log: logging.Logger, what: str) -> None:
    """Set ``stop`` on SIGTERM or SIGINT, logging which signal and ``what`` happens next."""

    def on_signal(signum: int, _frame: object) -> None:
        log.info("received %s: %s", signal.Signals(signum).name, what)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)


def serve_until_signalled(
    stop: threading.Event,
    threads: Sequence[threading.Thread],
    server: grpc.Server,
    health_servicer: health.HealthServicer,
    log: logging.Logger,
    what: str,
    *,
    grace: float = 1.0,
) -> None:
    """Start ``threads``, wait for SIGTERM/SIGINT (or ``stop``), then report NOT_SERVING, stop
    the server with ``grace`` seconds for calls in flight, and join the threads (5 s each)."""
    for thread in threads:
        thread.start()
    stop_on_signals(stop, log, what)
    stop.wait()
    health_servicer.enter_graceful_shutdown()
    server.stop(grace=grace).wait()
    for thread in threads:
        thread.join(timeout=5)


async def serve_aio_until_signalled(
    stop: asyncio.Event,
    server: grpc.aio.Server,
    health_servicer: health_aio.HealthServicer,
    log: logging.Logger,
    what: str,
    *,
    grace: float = 1.0,
) -> None:
    """The asyncio form of :func:`serve_until_signalled`: wait for SIGTERM/SIGINT (or
    ``stop``), report NOT_SERVING and stop the server with ``grace`` seconds for calls in
    flight."""
    loop = asyncio.get_running_loop()

    def on_signal(signum: int) -> None:
        log.info("received %s: %s", signal.Signals(signum).name, what)
        stop.set()

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, on_signal, signum)
    await stop.wait()
    await health_servicer.enter_graceful_shutdown()
    await server.stop(grace)
