"""A long simulation's progress on stderr: simulated time, jobs done, events per second and an
estimate of the time left."""

from __future__ import annotations

import time
from typing import TextIO

from simulator.engine import Simulation


class Progress:
    """One line on stderr, rewritten at most twice a second: simulated time, jobs done,
    events per second and an estimate of the time left (from the share of jobs done)."""

    def __init__(self, label: str, jobs: int, stream: TextIO) -> None:
        self._label = label
        self._jobs = jobs
        self._stream = stream
        self._started = time.monotonic()
        self._shown = 0.0
        self._interactive = stream.isatty()

    def update(self, simulation: Simulation) -> None:
        now = time.monotonic()
        if now - self._shown < (0.5 if self._interactive else 10.0):
            return
        self._shown = now
        self._write(simulation, now, final=False)

    def done(self, simulation: Simulation) -> None:
        self._write(simulation, time.monotonic(), final=True)

    def _write(self, simulation: Simulation, now: float, *, final: bool) -> None:
        elapsed = max(now - self._started, 1e-9)
        finished = self._jobs - simulation.unfinished_jobs
        rate = simulation.events / elapsed
        share = finished / self._jobs if self._jobs else 1.0
        eta = (
            "done"
            if final
            else (f"ETA {elapsed * (1 - share) / share:.0f} s" if share else "ETA ?")
        )
        line = (
            f"{self._label}: simulated {simulation.now:,.0f} s | jobs {finished}/{self._jobs} | "
            f"{rate:,.0f} events/s | {elapsed:.1f} s | {eta}"
        )
        end = "\n" if final or not self._interactive else ""
        prefix = "\r\x1b[2K" if self._interactive else ""
        self._stream.write(f"{prefix}{line}{end}")
        self._stream.flush()
