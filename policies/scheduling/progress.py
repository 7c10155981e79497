"""How far a job's phases have come: the progress job masters report and clients read."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PhaseProgress:
    """Task counts of one phase.  ``failed`` counts failed attempts (retried or not);
    ``dropped`` counts tasks given up on after ``max_retries``."""

    name: str
    tasks: int
    pending: int = 0
    running: int = 0
    succeeded: int = 0
    failed: int = 0
    dropped: int = 0
