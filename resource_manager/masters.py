"""Job masters in the RM core: their registration, their ``Allocate`` rounds (releases, slot
reservations kept, progress, asks, and the answer of grants, task events and lost containers)
and their job's end.

Everything a round sends is checked (:mod:`resource_manager.checks`) before anything changes,
so a refused round changes nothing.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import NamedTuple

from policies.scheduling.asks import AskError, PhaseAsk, check_asks
from policies.scheduling.lifecycle import JobState
from policies.scheduling.progress import PhaseProgress
from resource_manager.checks import check_attempt, check_kept, check_progress, check_releases
from resource_manager.errors import ConflictError, InvalidRequestError
from resource_manager.jobs import finish, move, set_asks
from resource_manager.plans import update_sprints
from resource_manager.records import (
    AllocationRecord,
    JobRecord,
    KeptSlot,
    MasterReport,
    Now,
    SpeculativeNote,
    TaskRecord,
    evolve,
)
from resource_manager.scheduling import schedule
from resource_manager.state import CoreState, log


class AllocateResult(NamedTuple):
    """What one ``Allocate`` answers: new grants, task events after the caller's, containers
    lost since its last call, and whether the job is to end.  (A named tuple: once a round.)"""

    granted: tuple[AllocationRecord, ...]
    events: tuple[TaskRecord, ...]
    lost_allocations: tuple[str, ...]
    kill_requested: bool


@dataclass(frozen=True)
class MasterRegistration:
    job: JobRecord
    held: tuple[AllocationRecord, ...]  # the job's task containers
    history: tuple[TaskRecord, ...]  # every task attempt so far, in seq order


def register_master(state: CoreState, job_id: str, *, attempt: int, now: Now) -> MasterRegistration:
    """A job master announces itself; it receives what it needs to drive (or resume) the
    job: the job, its task containers and the history of its task attempts."""
    job = state.job(job_id)
    if not job.state.is_final:
        check_attempt(job, attempt)
        if job.state is JobState.SUBMITTED and not job.client_mode:
            raise ConflictError(
                f"job {job_id} has no job master allocation yet (attempt {attempt} was lost)"
            )
    if job.state in (JobState.SUBMITTED, JobState.STARTING):
        move(state, job, JobState.RUNNING, start_time=job.start_time or now.wall)
        log.info("job %s: job master attempt %d registered", job_id, attempt)
    held = tuple(a for a in state.tables.allocations_of_job(job_id) if not a.is_master)
    history = tuple(sorted(state.tables.tasks_of_job(job_id), key=lambda t: t.seq))
    return MasterRegistration(state.jobs[job_id], held, history)


def allocate(
    state: CoreState,
    job_id: str,
    asks: Sequence[PhaseAsk],
    releases: Sequence[str],
    progress: Sequence[PhaseProgress],
    events_after: int,
    *,
    now: Now,
    attempt: int = 1,
    kept: Sequence[KeptSlot] = (),
    speculative: Sequence[SpeculativeNote] = (),
) -> AllocateResult:
    """One job master round: give back ``releases``, record ``progress`` and the slot
    reservations that changed (``kept``), replace the job's asks, place what fits, and
    answer new grants and task events after ``events_after``.  Everything is checked
    against the job's spec before anything changes.  What the job master decided (kept
    containers, drops, ``speculative`` outcomes) is noted for a decision trace."""
    tables, allocations = state.tables, state.allocations
    job = state.job(job_id)
    if not job.state.is_final:
        check_attempt(job, attempt)
    check_releases(allocations, job_id, releases)
    check_kept(allocations, job, kept)
    progressed = check_progress(job, progress)
    delivered: Mapping[str, int] = tables.delivered_of_job(job_id)
    if releases:  # (what it gives back no longer counts; copied only then)
        held = Counter(delivered)
        for allocation_id in releases:
            released = allocations.get(allocation_id)
            if released is not None and released.delivered:
                held[released.phase] -= 1
        delivered = held
    try:
        check_asks(job.spec, asks, delivered)
    except AskError as error:
        raise InvalidRequestError(error.field, error.problem) from None

    dropped = _newly_dropped(job, progress) if progressed else ()  # (unchanged: none new)
    if kept or dropped or speculative:  # (most rounds say none of these)
        state.add_heard(MasterReport(job_id, tuple(kept), dropped, tuple(speculative)))
    _kept_ended(state, releases, kept, now)
    for allocation_id in releases:
        tables.remove_allocation(allocation_id)
    for slot in kept:
        allocation = allocations.get(slot.allocation_id)
        if allocation is not None:  # (gone meanwhile: nothing to keep)
            phase = "" if slot.ended else slot.phase  # (an end: no longer kept)
            until = slot.until if phase else 0.0
            tables.put_allocation(evolve(allocation, kept_for=phase, kept_until=until))
    if job.state.is_final:
        return _answer(state, job_id, events_after)
    if progressed:
        job = evolve(job, progress=tuple(progress))
        tables.put_job(job)
    if job.state is JobState.RUNNING and not job.kill_requested:
        # The master counts only containers it has been told of; grants made since its last
        # call (not yet delivered) already serve part of its absolute ask.
        waiting = tables.undelivered_of_job(job_id)  # (most rounds: none)
        undelivered = Counter(a.phase for a in waiting) if waiting else None
        grew = set_asks(
            state,
            job,
            now.monotonic,
            [
                replace(a, count=a.count - undelivered[a.phase])
                for a in asks
                if a.count > undelivered[a.phase]
            ]
            if undelivered
            else [a for a in asks if a.count > 0],
        )
        if grew:
            # The job master sees at once what it can have.  Only when its own asks grew:
            # a round that repeats itself changes nothing (the simulator skips such rounds).
            schedule(state, now)
    else:
        set_asks(state, job, now.monotonic, ())
    return _answer(state, job_id, events_after)


def _newly_dropped(
    job: JobRecord, progress: Sequence[PhaseProgress]
) -> tuple[tuple[str, int], ...]:
    """(phase, how many more tasks) the job master gave up on since its last report."""
    before = {p.name: p.dropped for p in job.progress}
    return tuple(
        (p.name, p.dropped - before.get(p.name, 0))
        for p in progress
        if p.dropped > before.get(p.name, 0)
    )


def _answer(state: CoreState, job_id: str, events_after: int) -> AllocateResult:
    granted = []
    for allocation in state.tables.undelivered_of_job(job_id):
        granted.append(state.tables.mark_delivered(allocation.allocation_id))
    events = state.tables.tasks_after(job_id, events_after)
    lost = state.take_lost(job_id)
    job = state.job(job_id)
    return AllocateResult(
        tuple(granted), tuple(events), tuple(lost), job.kill_requested or job.state.is_final
    )


def finish_job(
    state: CoreState,
    job_id: str,
    final: JobState,
    message: str,
    progress: Sequence[PhaseProgress],
    *,
    now: Now,
    attempt: int = 1,
) -> JobRecord:
    """The job master reports its job's end (``final``, a final state)."""
    job = state.job(job_id)
    if not final.is_final:
        raise InvalidRequestError("state", f"{final.value} is not a final job state")
    if job.state.is_final:
        return job
    check_attempt(job, attempt)
    check_progress(job, progress)
    if progress:
        job = replace(job, progress=tuple(progress))
    finish(state, job, final, message, now)
    update_sprints(state, now)
    return state.jobs[job_id]


def _kept_ended(
    state: CoreState, releases: Sequence[str], kept: Sequence[KeptSlot], now: Now
) -> None:
    """Record each end of a kept container the job reports (``ended``: the phase it was
    kept for, or the one the RM knew, and the job master's reason), and of each kept one
    it gives back with no report ("released") (:class:`KeptLog`)."""
    reported = set()
    for slot in kept:
        allocation = state.allocations.get(slot.allocation_id)
        if allocation is None:
            continue
        if slot.ended or (not slot.phase and allocation.kept_for):
            reported.add(slot.allocation_id)
            phase = (slot.phase if slot.ended else "") or allocation.kept_for
            reason = (slot.ended or "released")[:200]  # (bounded: from the wire)
            state.note_kept_end(allocation, reason, now, phase)
    for allocation_id in releases:
        allocation = state.allocations.get(allocation_id)
        if allocation is not None and allocation.kept_for and allocation_id not in reported:
            state.note_kept_end(allocation, "released", now)


def kept_slots(state: CoreState, job_id: str) -> list[AllocationRecord]:
    """The job's task containers kept for a downstream phase now, oldest grant first."""
    return sorted(
        (a for a in state.tables.allocations_of_job(job_id) if a.kept_for),
        key=lambda a: a.granted_time,
    )
