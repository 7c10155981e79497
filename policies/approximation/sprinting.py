"""The sprinter: when the running job runs at the sprint frequency, and the budget it spends.

DiAS (Sec. 3.2-3.3, 5.1) gives each priority ``k`` a sprinting timeout ``T_k``. When a job has
run for ``T_k`` after dispatch it sprints until it ends or the sprinting budget is spent; the
timeout is moot if the job ends sooner. The budget replenishes continuously at a configured rate
(e.g. 6 sprinting minutes per hour) up to a capacity, also while a job sprints.

Budget units are the operator's: with ``drain_rate = 1`` the budget is in sprint-seconds; with
``drain_rate`` set to the extra power of a sprint (e.g. 90 W) it is in joules (the paper's 22 kJ).

Two choices the paper leaves open, made explicit here: a timer that fires with an empty budget
does not sprint, and a job whose sprint ran the budget dry does not sprint again — otherwise it
would flap at the replenishing rate. ``T_k = 0`` sprints at dispatch; ``T_k = inf`` never.

All transitions are pure: the current time is passed in and a new state returned. The shell
sets the CPU frequency whenever ``job.sprinting`` changes and should call :func:`advance` at
:func:`next_change` so the frequency drops on time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class SprintConfig:
    """``timeouts[k]`` is ``T_k`` (seconds, ≥ 0 or ``inf``); the budget holds at most
    ``capacity`` units, gains ``replenish_rate`` units per second and loses ``drain_rate`` units
    per sprinting second."""

    timeouts: tuple[float, ...]
    capacity: float
    replenish_rate: float
    drain_rate: float = 1.0

    def __post_init__(self) -> None:
        if not self.timeouts:
            raise ValueError("timeouts needs one entry per priority")
        if any(math.isnan(t) or t < 0 for t in self.timeouts):
            raise ValueError("timeouts must be non-negative (inf disables sprinting)")
        if not (math.isfinite(self.capacity) and self.capacity >= 0):
            raise ValueError("capacity must be finite and non-negative")
        if not (math.isfinite(self.replenish_rate) and self.replenish_rate >= 0):
            raise ValueError("replenish_rate must be finite and non-negative")
        if not (math.isfinite(self.drain_rate) and self.drain_rate > 0):
            raise ValueError("drain_rate must be finite and positive")


@dataclass(frozen=True)
class SprintingJob:
    """The dispatched job: whether it sprints now, whether its sprint is over, time sprinted."""

    job_id: str
    priority: int
    dispatched_at: float
    sprinting: bool = False
    sprint_over: bool = False
    sprinted_time: float = 0.0


@dataclass(frozen=True)
class SprinterState:
    """Budget left at ``clock``, and the job in the engine (if any)."""

    budget: float
    clock: float
    job: SprintingJob | None = None


def initial_sprinter(config: SprintConfig, now: float) -> SprinterState:
    """A sprinter with a full budget and no job, at time ``now``."""
    return SprinterState(budget=config.capacity, clock=now)


def dispatch(
    state: SprinterState, config: SprintConfig, job_id: str, priority: int, now: float
) -> SprinterState:
    """A job of ``priority`` enters the engine at ``now``; its timer starts."""
    if not 0 <= priority < len(config.timeouts):
        raise ValueError(f"priority {priority} is outside 0..{len(config.timeouts) - 1}")
    state = advance(state, config, now)
    if state.job is not None:
        raise ValueError(f"job {state.job.job_id} is still in the engine")
    job = SprintingJob(job_id=job_id, priority=priority, dispatched_at=now)
    return _fire_timer_if_due(replace(state, job=job), config)


def finish(
    state: SprinterState, config: SprintConfig, now: float
) -> tuple[SprinterState, SprintingJob]:
    """The job leaves the engine at ``now`` (ends or is evicted); returns its final record."""
    state = advance(state, config, now)
    if state.job is None:
        raise ValueError("no job is in the engine")
    return replace(state, job=None), replace(state.job, sprinting=False)


def advance(state: SprinterState, config: SprintConfig, now: float) -> SprinterState:
    """Bring the state to time ``now``: fire a due timer, spend and replenish the budget."""
    if not math.isfinite(now) or now < state.clock:
        raise ValueError("time must be finite and must not run backwards")
    while True:
        state = _fire_timer_if_due(state, config)
        if state.clock >= now:
            return state
        state = _run_until(state, config, min(now, next_change(state, config)))


def next_change(state: SprinterState, config: SprintConfig) -> float:
    """When the job's sprinting next switches on (timer) or off (budget spent); ``inf`` if never."""
    job = state.job
    if job is None or job.sprint_over:
        return math.inf
    if job.sprinting:
        net = config.replenish_rate - config.drain_rate
        return state.clock + state.budget / -net if net < 0 else math.inf
    return job.dispatched_at + config.timeouts[job.priority]


def _fire_timer_if_due(state: SprinterState, config: SprintConfig) -> SprinterState:
    job = state.job
    if job is None or job.sprinting or job.sprint_over:
        return state
    if state.clock < job.dispatched_at + config.timeouts[job.priority]:
        return state
    if state.budget > 0:
        return replace(state, job=replace(job, sprinting=True))
    return replace(state, job=replace(job, sprint_over=True))


def _run_until(state: SprinterState, config: SprintConfig, until: float) -> SprinterState:
    """Advance to ``until``, which is no later than the next change, so the mode is constant."""
    elapsed = until - state.clock
    job = state.job
    if job is None or not job.sprinting:
        budget = min(config.capacity, state.budget + config.replenish_rate * elapsed)
        return replace(state, budget=budget, clock=until)
    budget = state.budget + (config.replenish_rate - config.drain_rate) * elapsed
    job = replace(job, sprinted_time=job.sprinted_time + elapsed)
    if until >= next_change(state, config):
        # The budget ran dry exactly now; clamp away the rounding error of the division.
        return SprinterState(
            budget=0.0, clock=until, job=replace(job, sprinting=False, sprint_over=True)
        )
    return SprinterState(budget=min(config.capacity, budget), clock=until, job=job)


def sprinted_job_time(base_time: float, speedup: float, timeout: float) -> float:
    """Duration of a job needing ``base_time`` seconds at base speed, sprinting after ``timeout``
    at ``speedup`` (≥ 1) with an unlimited budget: ``min(b, T) + max(0, b − T) / speedup``.

    This is the effective-rate view of Sec. 4: the sprinted and unsprinted parts weighted by
    time. With a finite budget the real time lies between this and ``base_time``.
    """
    if base_time < 0 or speedup < 1 or timeout < 0:
        raise ValueError("base_time and timeout must be non-negative and speedup at least 1")
    return min(base_time, timeout) + max(0.0, base_time - timeout) / speedup
