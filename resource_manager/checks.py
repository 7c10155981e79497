"""Request checks of the RM core: what a job master or an agent sends is checked against the
records before anything changes, and refused with a one-line reason.  Pure reads: none of
these functions changes a record."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from policies.scheduling.jobspec import SpecError
from policies.scheduling.lifecycle import JobState
from policies.scheduling.progress import PhaseProgress
from policies.scheduling.resources import Resources
from resource_manager.errors import ConflictError, InvalidRequestError
from resource_manager.records import AllocationRecord, JobRecord, KeptSlot
from resource_manager.state import MASTER_RESOURCES

MAX_SESSION_LENGTH = 64
"""An agent's session id (a random id drawn when its process starts) has at most this many
characters."""


def check_session(session: str) -> None:
    if len(session) > MAX_SESSION_LENGTH:
        raise InvalidRequestError(
            "session", f"must be at most {MAX_SESSION_LENGTH} characters, got {len(session)}"
        )


def check_fits_master(capacities: Sequence[Resources]) -> None:
    """Refuse a job whose job master could run on no node (only when nodes are known)."""
    if capacities and not any(MASTER_RESOURCES.fits_in(c) for c in capacities):
        raise SpecError(
            "cluster",
            f"no node can host a job master ({MASTER_RESOURCES.cpu:g} cpu, "
            f"{MASTER_RESOURCES.memory_mb} MiB)",
        )


def check_attempt(job: JobRecord, attempt: int) -> None:
    """Only the job's current job master attempt may speak for it."""
    if job.state is JobState.SUBMITTED and not job.client_mode and job.master_attempt:
        raise ConflictError(
            f"job master attempt {attempt} of {job.job_id} is gone: the job waits for a new "
            f"one ({job.message})"
        )
    if attempt == job.master_attempt:
        return
    if 0 < attempt < job.master_attempt:
        raise ConflictError(
            f"job master attempt {attempt} of {job.job_id} was superseded by attempt "
            f"{job.master_attempt}"
        )
    raise ConflictError(
        f"attempt: job {job.job_id} has no job master attempt {attempt} "
        f"(its current attempt is {job.master_attempt})"
    )


def check_releases(
    allocations: Mapping[str, AllocationRecord], job_id: str, releases: Sequence[str]
) -> None:
    """Only the job's own task containers can be given back; unknown ids are ignored (a
    release repeated after a lost answer is no error)."""
    for index, allocation_id in enumerate(releases):
        allocation = allocations.get(allocation_id)
        if allocation is not None and (allocation.job_id != job_id or allocation.is_master):
            raise InvalidRequestError(
                f"releases[{index}]",
                f"{allocation_id} is not a task container of {job_id}",
            )


def check_kept(
    allocations: Mapping[str, AllocationRecord], job: JobRecord, kept: Sequence[KeptSlot]
) -> None:
    """Only the job's own task containers can be kept, for one of its phases, until a
    finite time; unknown ids are ignored (released or lost meanwhile)."""
    phases = {phase.name for phase in job.spec.phases}
    for index, slot in enumerate(kept):
        allocation = allocations.get(slot.allocation_id)
        if allocation is not None and (allocation.job_id != job.job_id or allocation.is_master):
            raise InvalidRequestError(
                f"kept[{index}].allocation_id",
                f"{slot.allocation_id} is not a task container of {job.job_id}",
            )
        if slot.phase and slot.phase not in phases:
            raise InvalidRequestError(
                f"kept[{index}].phase", f"the job has no phase {slot.phase!r}"
            )
        if not (0 <= slot.until < float("inf")):
            raise InvalidRequestError(
                f"kept[{index}].until", f"must be a time >= 0, got {slot.until}"
            )


def check_progress(job: JobRecord, progress: Sequence[PhaseProgress]) -> bool:
    """Progress must describe the job's phases, in order, with counts within each phase.
    True if it differs from what the job records."""
    if not progress or tuple(progress) == job.progress:
        return False  # nothing, or what was checked and recorded already (most rounds)
    if len(progress) != len(job.spec.phases):
        raise InvalidRequestError(
            "progress",
            f"must list the job's {len(job.spec.phases)} phases, got {len(progress)}",
        )
    for index, (reported, phase) in enumerate(zip(progress, job.spec.phases, strict=True)):
        if reported.name != phase.name or reported.tasks != phase.tasks:
            raise InvalidRequestError(
                f"progress[{index}]", f"must be phase {phase.name!r} of {phase.tasks} tasks"
            )
        counts = (reported.pending, reported.running, reported.succeeded, reported.dropped)
        if min(*counts, reported.failed) < 0 or sum(counts) > phase.tasks:
            raise InvalidRequestError(
                f"progress[{index}]", "task counts must be >= 0 and add up to tasks"
            )
    return True
