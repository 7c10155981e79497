"""What every Sluice daemon does the same way: publish its address, stop on a signal."""

from __future__ import annotations

import logging
import signal
import threading
from pathlib import Path


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
