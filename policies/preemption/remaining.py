"""A job's remaining time, estimated from the progress its job master reports (Alg. 2, line 3).

Algorithm 2 visits "a job with the longest remaining time" first; the paper takes the heuristic
from the capacity scheduler and does not say how remaining time is estimated.  Sluice estimates
it from the progress the job master reports with every Allocate, as LATE and Hadoop's
progress-rate estimators do, at the granularity of tasks:

    remaining = elapsed × (total − done) / done

where ``done`` counts the tasks that succeeded or were given up on, and ``elapsed`` is the time
since the job started.  A job with nothing done yet has an unknown, so infinite, remaining time:
it is visited first, the youngest first (it has the least work to lose).  Within a job, the
container granted last is taken first, for the same reason (YARN's capacity scheduler also
preempts the most recently allocated containers first).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from policies.scheduling.progress import PhaseProgress

__all__ = ["remaining_time"]


def remaining_time(progress: Sequence[PhaseProgress], started: float, now: float) -> float:
    """The job's estimated remaining time in seconds (module docstring); ``math.inf`` when no
    task is done yet, 0 when every task is."""
    total = sum(p.tasks for p in progress)
    done = sum(p.succeeded + p.dropped for p in progress)
    if done >= total:
        return 0.0
    if done <= 0:
        return math.inf
    return max(now - started, 0.0) * (total - done) / done
