"""The sprinter: which jobs in execution sprint now, and the budget they spend (DiAS Sec. 3.2-3.3,
5.1).

Each priority ``k`` has a sprinting timeout ``T_k``.  A job still in execution ``T_k`` after its
first task started sprints until it ends or the budget is spent; the timeout is moot if the job
ends sooner.  A sprint spends the budget only while the job has tasks running: before its first
task (its job master starting) and between its phases it spends nothing.  The paper's job, a
Spark application, computes from its dispatch; :func:`dispatch` with ``tasks_running=True`` (the
default) is exactly that: the timer starts at dispatch and the job always runs.  The budget
replenishes continuously at a configured rate (e.g. 6 sprinting minutes per hour) up to a
capacity, also while jobs sprint.

The paper's engine runs one job at a time; Sluice may run several (``--max-running-jobs``), so
the budget is shared: it drains at ``drain_rate`` per second for *each* sprinting job with tasks
running.  With one job in execution this is the paper's sprinter.

Budget units are the operator's: with ``drain_rate = 1`` the budget is in sprint-seconds; with
``drain_rate`` set to the extra power of a sprint (e.g. 90 W) it is in joules (the paper's 22 kJ).

Choices the paper leaves open, made explicit here: a timer that fires with an empty budget does
not sprint; when the budget runs dry every sprinting job stops, and a job whose sprint ended so
does not sprint again (otherwise it would flap at the replenishing rate).  ``T_k = 0`` sprints
after the first task starts; ``T_k = inf`` never.  A job whose timer fired while no task ran
sprints (its next tasks are sprinted as they start) and spends nothing until one runs.

All transitions are pure: the current time is passed in and a new state returned.  The shell
raises or lowers the jobs' CPU (frequency, or quota) whenever a job's ``sprinting`` changes and
calls :func:`advance` at :func:`next_change` so a sprint ends on time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class SprintConfig:
    """The budget holds at most ``capacity`` units, gains ``replenish_rate`` units per second
    and loses ``drain_rate`` units per second of each sprinting job."""

    capacity: float
    replenish_rate: float
    drain_rate: float = 1.0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.capacity) and self.capacity >= 0):
            raise ValueError("capacity must be finite and non-negative")
        if not (math.isfinite(self.replenish_rate) and self.replenish_rate >= 0):
            raise ValueError("replenish_rate must be finite and non-negative")
        if not (math.isfinite(self.drain_rate) and self.drain_rate > 0):
            raise ValueError("drain_rate must be finite and positive")


@dataclass(frozen=True)
class SprintingJob:
    """A job in execution: its timeout ``T_k``, when it entered execution, whether it sprints
    now, whether its sprint is over, the time it sprinted (with tasks running), when its first
    task started (``inf``: none yet) and whether it has tasks running now."""

    job_id: str
    timeout: float
    dispatched_at: float
    sprinting: bool = False
    sprint_over: bool = False
    sprinted_time: float = 0.0
    first_task_at: float = math.inf
    running: bool = False

    @property
    def due(self) -> float:
        """When its timer fires: ``T_k`` after its first task started (``inf`` until then)."""
        return self.first_task_at + self.timeout

    @property
    def spending(self) -> bool:
        """It sprints with tasks running: the budget drains for it."""
        return self.sprinting and self.running


@dataclass(frozen=True)
class SprinterState:
    """Budget left at ``clock``, and the jobs in execution (in dispatch order)."""

    budget: float
    clock: float
    jobs: tuple[SprintingJob, ...] = ()

    def job(self, job_id: str) -> SprintingJob | None:
        for job in self.jobs:
            if job.job_id == job_id:
                return job
        return None

    @property
    def sprinting(self) -> int:
        """How many jobs sprint now."""
        return sum(job.sprinting for job in self.jobs)

    @property
    def spending(self) -> int:
        """How many jobs sprint with tasks running (each drains the budget)."""
        return sum(job.spending for job in self.jobs)


def initial_sprinter(config: SprintConfig, now: float) -> SprinterState:
    """A sprinter with a full budget and no job, at time ``now``."""
    return SprinterState(budget=config.capacity, clock=now)


def dispatch(
    state: SprinterState,
    config: SprintConfig,
    job_id: str,
    timeout: float,
    now: float,
    *,
    tasks_running: bool = True,
) -> SprinterState:
    """A job enters execution at ``now`` with sprinting timeout ``timeout`` (≥ 0; ``inf``:
    never).  ``tasks_running``: it computes from now on (the paper's Spark job), its timer
    starts now; else its timer starts when :func:`tasks_changed` first says tasks run."""
    if math.isnan(timeout) or timeout < 0:
        raise ValueError(f"a sprinting timeout must be 0 or more (inf: never), got {timeout}")
    state = advance(state, config, now)
    if state.job(job_id) is not None:
        raise ValueError(f"job {job_id} is already in execution")
    job = SprintingJob(job_id=job_id, timeout=timeout, dispatched_at=now)
    if tasks_running:
        job = replace(job, first_task_at=now, running=True)
    return _fire_timers(replace(state, jobs=(*state.jobs, job)))


def tasks_changed(
    state: SprinterState, config: SprintConfig, job_id: str, running: bool, now: float
) -> SprinterState:
    """The job has tasks running from ``now`` on (``running``), or none: its first running task
    starts its timer; a sprint spends only while tasks run.  A job not in execution: unchanged
    (after advancing)."""
    state = advance(state, config, now)
    job = state.job(job_id)
    if job is None or job.running == running:
        return state
    moved = replace(job, running=running)
    if running and not math.isfinite(job.first_task_at):
        moved = replace(moved, first_task_at=now)
    jobs = tuple(moved if j.job_id == job_id else j for j in state.jobs)
    return _fire_timers(replace(state, jobs=jobs))


def finish(
    state: SprinterState, config: SprintConfig, job_id: str, now: float
) -> tuple[SprinterState, SprintingJob]:
    """The job leaves execution at ``now`` (ends or is evicted); returns its final record."""
    state = advance(state, config, now)
    job = state.job(job_id)
    if job is None:
        raise ValueError(f"no job {job_id} is in execution")
    jobs = tuple(j for j in state.jobs if j.job_id != job_id)
    return replace(state, jobs=jobs), replace(job, sprinting=False)


def advance(state: SprinterState, config: SprintConfig, now: float) -> SprinterState:
    """Bring the state to time ``now``: fire due timers, spend and replenish the budget."""
    if not math.isfinite(now) or now < state.clock:
        raise ValueError("time must be finite and must not run backwards")
    while True:
        state = _fire_timers(state)
        if state.clock >= now:
            return state
        state = _run_until(state, config, min(now, next_change(state, config)))


def next_change(state: SprinterState, config: SprintConfig) -> float:
    """When some job next starts sprinting (its timer) or every sprint stops (the budget runs
    dry); ``inf`` if never."""
    timers = [j.due for j in state.jobs if not (j.sprinting or j.sprint_over)]
    change = min(timers, default=math.inf)
    net = config.replenish_rate - config.drain_rate * state.spending
    if state.spending and net < 0:
        change = min(change, state.clock + state.budget / -net)
    return change


def _fire_timers(state: SprinterState) -> SprinterState:
    if not any(_fires(j, state.clock) for j in state.jobs):
        return state
    fired = tuple(
        (replace(j, sprinting=True) if state.budget > 0 else replace(j, sprint_over=True))
        if _fires(j, state.clock)
        else j
        for j in state.jobs
    )
    return replace(state, jobs=fired)


def _fires(job: SprintingJob, clock: float) -> bool:
    return not (job.sprinting or job.sprint_over) and clock >= job.due


def _run_until(state: SprinterState, config: SprintConfig, until: float) -> SprinterState:
    """Advance to ``until``, no later than the next change, so every job's mode is constant."""
    elapsed = until - state.clock
    spending = state.spending
    if not spending:
        budget = min(config.capacity, state.budget + config.replenish_rate * elapsed)
        return replace(state, budget=budget, clock=until)
    jobs = tuple(
        replace(j, sprinted_time=j.sprinted_time + elapsed) if j.spending else j for j in state.jobs
    )
    net = config.replenish_rate - config.drain_rate * spending
    if net < 0 and until >= state.clock + state.budget / -net:
        # The budget ran dry exactly now (clamping away the division's rounding): every sprint
        # stops, and none starts again.
        dry = tuple(
            replace(j, sprinting=False, sprint_over=True) if j.sprinting else j for j in jobs
        )
        return SprinterState(budget=0.0, clock=until, jobs=dry)
    budget = min(config.capacity, state.budget + net * elapsed)
    return SprinterState(budget=budget, clock=until, jobs=jobs)


def sprinted_job_time(base_time: float, speedup: float, timeout: float) -> float:
    """Duration of a job needing ``base_time`` seconds at base speed, sprinting after ``timeout``
    at ``speedup`` (≥ 1) with an unlimited budget: ``min(b, T) + max(0, b − T) / speedup``.

    This is the effective-rate view of Sec. 4: the sprinted and unsprinted parts weighted by
    time. With a finite budget the real time lies between this and ``base_time``.
    """
    if base_time < 0 or speedup < 1 or timeout < 0:
        raise ValueError("base_time and timeout must be non-negative and speedup at least 1")
    return min(base_time, timeout) + max(0.0, base_time - timeout) / speedup
