"""The event loop the asyncio daemons run on: uvloop when it is installed, else asyncio's own.

The resource manager serves every agent's heartbeat stream and every job master's calls on one
event loop; with thousands of agents the loop's own overhead (scheduling callbacks, futures,
polling) is a large share of its core.  uvloop halves it: measured on this project's 2-core
machine, a gRPC stream answered about 6,300 messages per second on asyncio's loop and about
9,000 on uvloop (with ``context.read``/``write``).  gRPC's asyncio API runs on either.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

log = logging.getLogger(__name__)
T = TypeVar("T")


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's loop factory, or None (asyncio's default) when uvloop is not installed or
    ``SLUICE_EVENT_LOOP=asyncio`` asks for asyncio's own (e.g. for its debug mode)."""
    if os.environ.get("SLUICE_EVENT_LOOP") == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)`` on the fastest loop available; says which at debug level."""
    factory = loop_factory()
    log.debug("event loop: %s", "uvloop" if factory else "asyncio")
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main)
