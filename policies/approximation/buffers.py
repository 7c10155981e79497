"""Priority buffers and the dispatch decision of the DiAS deflator (Sec. 3.2).

Arriving jobs join the FCFS buffer of their priority ``k`` (``0 ≤ k < K``, higher ``k`` is higher
priority). The engine runs one job at a time:

* **non-preemptive** (DiAS): when the engine is idle — the previous job has completed — the job at
  the head of the highest non-empty buffer is dispatched; a higher-priority arrival waits;
* **preemptive** (the paper's baseline): a job arriving with a higher priority than the running
  one evicts it back to the *head* of its buffer and is dispatched at once. The evicted job is
  killed and later re-executed from the start (Sec. 3.3, SIGKILL), so the time it had run is
  wasted; :class:`EngineState` accumulates it to report the resource waste of Sec. 5.1.

Each transition takes the current time and returns a new state plus what the shell must do.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from enum import Enum


class DispatchMode(Enum):
    """Whether a higher-priority arrival may evict the running job."""

    NON_PREEMPTIVE = "non_preemptive"
    PREEMPTIVE = "preemptive"


@dataclass(frozen=True)
class Job:
    """A job as the buffers see it: an identity, a priority and its arrival time."""

    job_id: str
    priority: int
    arrival_time: float


@dataclass(frozen=True)
class RunningJob:
    """The job in the engine and when its current execution attempt started."""

    job: Job
    started_at: float


@dataclass(frozen=True)
class EngineState:
    """Buffers (index ``k`` = priority ``k``, each FCFS head-first), the running job and the
    machine time accounting: ``completed_time`` ran jobs that completed, ``wasted_time`` ran
    attempts that were evicted."""

    buffers: tuple[tuple[Job, ...], ...]
    running: RunningJob | None = None
    completed_time: float = 0.0
    wasted_time: float = 0.0

    @property
    def levels(self) -> int:
        """Number of priority levels ``K``."""
        return len(self.buffers)

    @property
    def queued(self) -> int:
        """Jobs waiting in all buffers."""
        return sum(len(buffer) for buffer in self.buffers)


@dataclass(frozen=True)
class Transition:
    """A new state and the actions for the shell: start ``dispatched``, kill ``evicted``."""

    state: EngineState
    dispatched: Job | None = None
    evicted: Job | None = None


def empty_engine(levels: int) -> EngineState:
    """An idle engine with ``levels ≥ 1`` empty priority buffers."""
    if levels < 1:
        raise ValueError(f"there must be at least one priority level, got {levels}")
    return EngineState(buffers=((),) * levels)


def highest_waiting(state: EngineState) -> Job | None:
    """The head of the highest non-empty buffer, or ``None`` if every buffer is empty."""
    for buffer in reversed(state.buffers):
        if buffer:
            return buffer[0]
    return None


def arrive(state: EngineState, job: Job, now: float, mode: DispatchMode) -> Transition:
    """``job`` arrives at ``now``: buffer it, evict if ``mode`` allows, dispatch if idle."""
    if not 0 <= job.priority < state.levels:
        raise ValueError(f"priority {job.priority} is outside 0..{state.levels - 1}")
    _check_time(state, now)
    buffers = _with_buffer(state.buffers, job.priority, (*state.buffers[job.priority], job))
    state = replace(state, buffers=buffers)
    running = state.running
    if running is None:
        return _dispatch_next(state, now)
    if mode is DispatchMode.PREEMPTIVE and job.priority > running.job.priority:
        evicted = running.job
        requeued = (evicted, *state.buffers[evicted.priority])
        state = replace(
            state,
            buffers=_with_buffer(state.buffers, evicted.priority, requeued),
            running=None,
            wasted_time=state.wasted_time + (now - running.started_at),
        )
        return replace(_dispatch_next(state, now), evicted=evicted)
    return Transition(state)


def complete(state: EngineState, now: float) -> Transition:
    """The running job finished at ``now``: account its time and dispatch the next one."""
    running = state.running
    if running is None:
        raise ValueError("no job is running")
    _check_time(state, now)
    state = replace(
        state, running=None, completed_time=state.completed_time + (now - running.started_at)
    )
    return _dispatch_next(state, now)


def resource_waste(state: EngineState) -> float:
    """Share of machine time spent on attempts that were evicted (Sec. 5.1); 0 if none ran."""
    total = state.completed_time + state.wasted_time
    return state.wasted_time / total if total > 0 else 0.0


def _dispatch_next(state: EngineState, now: float) -> Transition:
    job = highest_waiting(state)
    if job is None:
        return Transition(state)
    buffers = _with_buffer(state.buffers, job.priority, state.buffers[job.priority][1:])
    return Transition(replace(state, buffers=buffers, running=RunningJob(job, now)), dispatched=job)


def _with_buffer(
    buffers: tuple[tuple[Job, ...], ...], priority: int, contents: tuple[Job, ...]
) -> tuple[tuple[Job, ...], ...]:
    return (*buffers[:priority], contents, *buffers[priority + 1 :])


def _check_time(state: EngineState, now: float) -> None:
    if not math.isfinite(now):
        raise ValueError("time must be finite")
    if state.running is not None and now < state.running.started_at:
        raise ValueError("time must not run backwards")
