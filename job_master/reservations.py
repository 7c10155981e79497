"""Speculative slot reservation, as the job master keeps it (slot-reservation paper, Sec. III-IV).

A job whose spec has a ``reservation`` block keeps the container of a finished task for its
downstream phase instead of giving it back at the barrier, so that lower-priority work cannot
take it (Algorithm 1, :func:`policies.reservation.slot_decisions.handle_task_completion`):

* the container of a task of phase X is kept for X's first downstream phase whose tasks fit in
  it and that is not yet full (a phase never holds more reserved containers than it has tasks).
  On a fork, Alg. 1's n is every task X's barrier releases: the sum over the downstream phases
  the container may serve, so each of them gets its containers (kept, or pre-reserved below);
  a join takes what its upstream phases keep, never more than its task count;
* X's final phase (no downstream phase) gives its containers back (Alg. 1 line 3), except
  with straggler copies on: then it keeps them for copies of its own stragglers until it ends
  (or its deadline), as a Spark application keeps its executors through its last stage
  (a departure: Alg. 1 has no reserved slot in the last phase, so Sec. IV-C could not help it;
  docs/reservation.md);
* m > n: the first m - n finishers give theirs back; m < n: once the finished fraction of X
  passes R (``prereserve_at``), n - m more containers are asked before the barrier (Case-2.3),
  shared among X's downstream phases (:func:`share_prereservation`);
* every container kept from X is released at X's deadline, ``started(X) + D``, with D from
  Eq. 4 for the job's isolation P and X's N tasks (:func:`deadline_for_isolation`).  Time 0 is
  when the last of X's tasks started (Sec. IV-B's phase starts its N tasks together; on a busy
  cluster they start as containers come, and X's barrier cannot pass before its last task
  ends): until every task of X has started, its kept containers have no deadline.  Counted
  from X's barrier instead, the containers kept from X's first finishers lapsed while its
  late-started tasks still ran, and the downstream phase lost them.  The task
  times are the job's own, fitted by maximum likelihood once :data:`MIN_FIT_SAMPLES` of its
  tasks (of any phase) have finished, and refitted each time their number doubles (so the
  deadlines, and what the RM is told of them, move O(log n) times) and when a deadline comes
  with task times the fit has not seen (:meth:`SlotReservations.refit_before_expiry`: tasks
  finish shortest first, so a fit of the first finishers sets D too early); before that, the spec's
  ``prior``.  With neither there is no deadline yet: the containers are kept until the barrier
  passes, which is Alg. 1 without Sec. IV-B (the paper fits the task times of a recurring job's
  earlier runs; a job seen for the first time has none, and Sluice then errs towards isolation);
* once a phase's ongoing tasks are no more than the idle containers kept from it, each ongoing
  task gets one copy on one of them (Sec. IV-C, :func:`plan_copies`), the longest-running first,
  at most ``max_copies`` at once.

This module keeps the bookkeeping and answers questions; :class:`job_master.plan.JobPlan` owns
the containers and calls it.  It reads no clock: times are the plan's ``now``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from policies.reservation.deadline import deadline_for_isolation, fit_pareto
from policies.reservation.slot_decisions import (
    PhaseView,
    SlotAction,
    handle_task_completion,
    share_prereservation,
)
from policies.scheduling.jobspec import JobSpec, PhaseSpec, ReservationSpec
from policies.scheduling.resources import Resources

MIN_FIT_SAMPLES = 5
"""Finished tasks of the job before their own fit replaces the prior."""


@dataclass(frozen=True)
class Kept:
    """A container kept for ``phase`` from a finished task of ``origin`` (until
    :meth:`SlotReservations.expiry` of ``origin``)."""

    phase: str
    origin: str


@dataclass(frozen=True)
class KeptEnd:
    """A kept container stopped being kept, at ``at`` (the plan's clock), because of
    ``reason``: ``used`` (a task of its phase runs in it), ``deadline`` (its deadline came
    before its phase could use it), ``released`` (not needed: its phase opened with nothing
    for it to run, or the job ended), ``lost`` (taken back by the RM, or its node was lost:
    the RM records which)."""

    allocation_id: str
    node_id: str
    phase: str
    origin: str
    reason: str
    at: float


@dataclass
class _Origin:
    """A phase whose finished tasks' containers are kept."""

    started_at: float | None = None  # when the last of its tasks started; None: not all yet
    finished: int = 0  # tasks of it that have finished (the finish rank of the next)
    deadline: float | None = None  # D, until the task times change


@dataclass
class SlotReservations:
    """See the module docstring.  ``downstream`` maps each phase to the phases after it."""

    spec: JobSpec
    settings: ReservationSpec
    downstream: Mapping[str, Sequence[str]]
    _origins: dict[str, _Origin] = field(default_factory=dict)
    _held: dict[str, int] = field(default_factory=dict)  # phase -> containers kept for it
    _prereserve: dict[str, tuple[int, str]] = field(default_factory=dict)  # phase -> (n, origin)
    _durations: list[float] = field(default_factory=list)
    _open: set[str] = field(default_factory=set)
    _fit: tuple[float, float] | None = None  # (alpha, t_min) of the last fit
    _next_fit: int = MIN_FIT_SAMPLES  # task times at which to fit again
    _fitted_on: int = 0  # task times the last fit saw
    refits: int = 0  # bumps whenever the deadlines may have moved

    def __post_init__(self) -> None:
        self._phases: dict[str, PhaseSpec] = {phase.name: phase for phase in self.spec.phases}

    # ------------------------------------------------------------------ observations

    def opened(self, phase: str, now: float) -> None:
        """The phase's barrier has passed: its tasks are ready (none of them started yet)."""
        self._origins.setdefault(phase, _Origin()).started_at = None
        self._open.add(phase)
        self._prereserve.pop(phase, None)

    def started(self, phase: str, now: float) -> None:
        """Every task of the phase has started, the last one at ``now`` (time 0 of Sec. IV-B;
        again when a retried task starts later): the deadlines of the containers kept from it
        move (:attr:`refits` bumps, so the RM is told)."""
        self._origins.setdefault(phase, _Origin()).started_at = now
        self.refits += 1

    def task_time(self, seconds: float) -> None:
        """A task of the job succeeded after running ``seconds``."""
        if seconds > 0 and math.isfinite(seconds):
            self._durations.append(seconds)
            if len(self._durations) >= self._next_fit:
                # Fitted again each time the samples double: the estimate settles as they grow,
                # and each refit moves every kept container's deadline (told to the RM), so a
                # refit per task would cost O(kept) per task.
                self._next_fit = 2 * len(self._durations)
                self._refit()

    def refit_before_expiry(self) -> bool:
        """A kept container's deadline has come: fit the task times again if some finished
        since the last fit, so the deadline that releases it is the one every task time known
        now gives (Eq. 4), not the fit of the first 5, 10, 20, ... finishers; True if the
        deadlines may have moved.  Tasks finish shortest first, so the fit in force between
        two doublings is of the job's fastest tasks: its t_m and alpha put D before the slower
        tasks already seen (a SQL-like join's tasks without local input run five times as
        long), and kept containers lapsed just before their barrier."""
        known = len(self._durations)
        if known < MIN_FIT_SAMPLES or known == self._fitted_on:
            return False
        return self._refit()

    def _refit(self) -> bool:
        """Fit every task time known (the deadlines move; :attr:`refits` bumps); False if they
        have no shape to fit (all equal: the fit in force, or the prior, stands)."""
        self._fitted_on = len(self._durations)
        try:
            fit = fit_pareto(self._durations)
        except ValueError:
            return False
        self._fit = (fit.alpha, fit.t_min)
        for origin in self._origins.values():  # the fit moves: so do the deadlines
            origin.deadline = None
        self.refits += 1
        return True

    def released(self, kept: Kept) -> None:
        """A kept container went back, or went to a task of its phase."""
        self._held[kept.phase] -= 1

    # ------------------------------------------------------------------ decisions

    def count_completion(self, phase: str) -> None:
        """A task of ``phase`` finished (once per task, whichever attempt won)."""
        self._origins.setdefault(phase, _Origin()).finished += 1

    def decide_slot(
        self, phase: str, resources: Resources, now: float, *, free: bool = True
    ) -> Kept | None:
        """The container of ``resources`` a task of ``phase`` has just finished in (counted
        already): keep it (for which phase, until when), or None to give it back (Alg. 1,
        lines 1-17).  ``free`` False: the container is kept already (a copy won in it), and
        only the pre-reservation of the completion is taken."""
        origin = self._origins.setdefault(phase, _Origin())
        served = self._served(phase, resources)
        target = next((name for name in served if self._room(name) > 0), None)
        if target is None:
            if free and not self.downstream.get(phase) and self.settings.straggler_copies:
                return self.keep(phase, phase, now)  # a final phase's: for its own copies
            return None
        tasks = self._phases[phase].tasks
        finished = min(max(origin.finished, 1), tasks)
        decision = handle_task_completion(
            PhaseView(
                job_priority=self.spec.priority,
                num_tasks=tasks,
                finished_before=finished - 1,
                # n: every task the barrier releases that this container may serve (a fork's
                # downstream phases together, as the paper's barrier releases them all)
                downstream_num_tasks=sum(self._phases[name].tasks for name in served),
                prereserve_threshold=self.settings.prereserve_at,
            )
        )
        kept = None
        if decision.action is SlotAction.RESERVE and free:
            kept = self.keep(target, phase, now)
        if decision.prereserve:
            shares = share_prereservation(
                [self._room(name, coming_besides=phase) for name in served], tasks - finished
            )
            for name, share in zip(served, shares, strict=True):
                if share > 0:
                    self._prereserve[name] = (share, phase)
        return kept

    def keep(self, phase: str, origin: str, now: float) -> Kept:
        """Count a container kept for ``phase`` from ``origin``'s tasks."""
        self._held[phase] = self._held.get(phase, 0) + 1
        self._origins.setdefault(origin, _Origin())
        return Kept(phase, origin)

    def expiry(self, origin: str) -> float:
        """When the containers kept from ``origin``'s tasks go back: ``started + D`` (time 0
        the start of its last task), ``math.inf`` while some of its tasks have not started."""
        state = self._origins[origin]
        if state.started_at is None:
            return math.inf
        return state.started_at + self.deadline(origin)

    def prereserve_asks(self) -> Mapping[str, int]:
        """Downstream phase -> containers still to ask for ahead of its barrier (Case-2.3)."""
        return {phase: count for phase, (count, _origin) in self._prereserve.items() if count > 0}

    def on_prereserved(self, phase: str, now: float) -> Kept | None:
        """A container granted for a phase not yet open: kept, if it was pre-reserved."""
        wanted = self._prereserve.get(phase)
        if wanted is None or wanted[0] <= 0:
            return None
        self._prereserve[phase] = (wanted[0] - 1, wanted[1])
        return self.keep(phase, wanted[1], now)

    def deadline(self, origin: str) -> float:
        """D for the containers kept from ``origin`` (seconds after it opened; Eq. 4), or
        ``math.inf`` while the task times are unknown."""
        state = self._origins.setdefault(origin, _Origin())
        if state.deadline is None:
            times = self._task_times()
            if times is None:
                return math.inf
            alpha, t_min = times
            tasks = self._phases[origin].tasks
            state.deadline = deadline_for_isolation(self.settings.isolation, t_min, alpha, tasks)
        return state.deadline

    # ------------------------------------------------------------------ internals

    def _served(self, phase: str, resources: Resources) -> list[str]:
        """The downstream phases of ``phase``, in spec order, not open yet and whose tasks fit
        in a container of ``resources``: those its barrier releases that the container may
        serve."""
        return [
            name
            for name in self.downstream.get(phase, ())
            if name not in self._open and self._phases[name].resources.fits_in(resources)
        ]

    def _room(self, phase: str, coming_besides: str | None = None) -> int:
        """Containers ``phase`` still lacks: its tasks less those kept for it, and (given
        ``coming_besides``, a phase it joins) less those its other upstream phases' unfinished
        tasks will keep for it (a join's barrier has all of them to draw on)."""
        room = self._phases[phase].tasks - self._held.get(phase, 0)
        if coming_besides is not None:
            for upstream in self._phases[phase].after:
                if upstream != coming_besides:
                    state = self._origins.get(upstream)
                    room -= self._phases[upstream].tasks - (state.finished if state else 0)
        return max(room, 0)

    def _task_times(self) -> tuple[float, float] | None:
        """(alpha, t_min) of the Pareto task times: fitted, else the prior, else unknown."""
        if self._fit is not None:
            return self._fit
        if self.settings.prior is not None:
            return self.settings.prior.alpha, self.settings.prior.t_min
        return None
