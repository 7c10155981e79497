"""DiAS's dispatch from priority buffers, as plugins of the scheduling framework (Sec. 3.2).

In the paper one job at a time seizes the engine; Sluice generalises this to at most
``max_running`` jobs *in execution* at once (a job is in execution from the grant of its job
master's container until it ends).  The jobs waiting for a job master are the buffers: their
asks are served in :class:`~policies.scheduling.framework.PriorityFifo` order, that is the head
of the highest non-empty buffer first, FIFO within a priority, and

* **queue order**: unchanged, the baseline's strict priority with FIFO inside a priority;
* **permit** (:class:`JobsInExecution`): a job master's container is granted only while fewer
  than ``max_running`` jobs are in execution.  Every job master asks for the same container, so
  a head whose container fits nowhere stops every job behind it in the same pass: dispatch
  never overtakes the head of the highest non-empty buffer;
* **non-preemptive** (``dias``): a running job is never evicted; an arrival of a higher
  priority waits for one to end;
* **preemptive** (the paper's baseline ``P``): when the head of the highest buffer waits and a
  job of a lower priority is in execution, :func:`eviction_victim` names the job to evict: it is
  stopped, goes back to the head of its buffer (its submission order is kept), and is later
  executed again from the start (Sec. 3.3 kills it), so the machine time it had used is wasted
  (:func:`waste_share`, Sec. 5.1).

Pure: the shell passes the jobs in execution and the time in.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import ClassVar

from policies.identity_enum import IdentityEnum
from policies.scheduling.framework import AllocationKind, PassContext, PendingAsk, Refusal


class DispatchMode(IdentityEnum):
    """How the RM admits jobs into execution (``sluice rm --dispatch``)."""

    PRIORITY = "priority"  # no buffer bound: every job master as soon as it fits (the default)
    DIAS = "dias"  # buffers, at most max_running jobs, never evicts (Sec. 3.2)
    PREEMPTIVE = "preemptive"  # buffers, at most max_running jobs, evicts lower priorities (P)

    @property
    def buffered(self) -> bool:
        return self is not DispatchMode.PRIORITY


@dataclass(frozen=True)
class JobsInExecution:
    """Permit: a job master's container only while fewer than ``max_running`` jobs are in
    execution (``context.jobs_in_execution``, which the pass raises as it places job masters)."""

    max_running: int
    shape_only: bool = True  # the count only grows during a pass
    name: ClassVar[str] = "JobsInExecution"

    def __post_init__(self) -> None:
        if self.max_running < 1:
            raise ValueError(f"max_running must be at least 1, got {self.max_running}")

    def admit(self, ask: PendingAsk, context: PassContext) -> Refusal | None:
        if ask.kind is not AllocationKind.JOB_MASTER or (
            context.jobs_in_execution < self.max_running
        ):
            return None
        return Refusal(
            self.name,
            f"{self.max_running} jobs are in execution, the most DiAS dispatches (max_running)",
        )


@dataclass(frozen=True)
class RunningJob:
    """A job in execution, as eviction sees it: its priority and when it was dispatched."""

    job_id: str
    priority: int
    dispatched_at: float


def eviction_victim(head_priority: int, running: Iterable[RunningJob]) -> str | None:
    """Preemptive mode: the job to evict for a waiting head of priority ``head_priority``, or
    None when every job in execution has at least that priority.  The lowest priority goes
    first, and among equals the one dispatched last (it has done the least work to lose)."""
    lower = [job for job in running if job.priority < head_priority]
    if not lower:
        return None
    victim = min(lower, key=lambda job: (job.priority, -job.dispatched_at, job.job_id))
    return victim.job_id


def waste_share(wasted: float, completed: float) -> float:
    """Resource waste (Sec. 5.1): the share of machine time spent on executions that were
    evicted, of all machine time used; 0 when nothing ran."""
    if wasted < 0 or completed < 0:
        raise ValueError("machine times are never negative")
    total = wasted + completed
    return wasted / total if total > 0 else 0.0
