"""Which containers give back the amount to reclaim, and how (Algorithm 2, Sec. 3.2-3.3, 4.3).

Algorithm 2 of the paper, with the lines each part implements:

- line 3 (and line 10, "goto AGAIN"): jobs are visited by longest remaining time first, a job's
  remaining time being that of its longest-running container (the paper does not say how a
  job's remaining time is estimated); ties broken by job id so plans are reproducible.
- line 5: inside a job, its containers by longest remaining time, ties by container id (the
  paper only says "choose a container"). Suspended containers are never candidates.
- line 4, "while p > (0, 0)": kill and immediate stop as soon as "the over-provisioned dominant
  resource is fully reclaimed" (Sec. 4.3), the dominant resource coming from Algorithm 1
  (:attr:`.amounts.QueueAmount.dominant`). Graceful keeps to the literal condition and goes on
  while any resource of p is still owed (Sec. 3.3: "Graceful preemption will continue until new
  tasks' demands are met").

Kill (lines 5-8 before the paper's modification): whole containers of the job are taken one
after the other, "until either the job has no container left or p has been satisfied", then the
next job. A container is never skipped for being large, so the last one taken may reclaim more
than p, and more than a: that over-reclaim is the fragmentation of kill-based preemption the
paper describes ("A killed long job container may be too large for one short task").

Immediate (IP, Sec. 3.2; "IP does not require algorithmic changes to capacity scheduler"): the
same walk, each container suspended to the minimal footprint; it gives back what it holds
above the footprint.

Graceful (GP, lines 5-8 as modified): each visited job is shrunk in rounds; each round takes
min(r_GP, what the container holds above the footprint, what is still needed) from every
active container of the job (line 7: p = p - r_GP, r_c = r_c - r_GP, the step cut so that
nothing is taken beyond p or below the footprint). A container leaves the rounds when it is
down to the footprint ("empty") or swapping (line 8). A swapping container is frozen: its CPU
is set to the footprint's (Sec. 4.2: the container monitor "freezes the container by setting
the CPU allocation to 1%"), which gives back the CPU it held above it. That CPU counts towards
p, and all of it is reported as reclaimed even beyond what is owed, because the freeze frees it
whatever p is. The job is left when it has no active container, and the walk goes on with the
next job (lines 9-10) until p is met.

Reading of line 8 (documented choice): the plan works on a snapshot in which a container
already swaps, so a swapping container is frozen when the first round reaches it and takes no
step, as the text says ("it is immediately frozen and removed from resource reclamation"); the
listing would take one more step r_GP from it first.  A swapping container the walk does not
reach (p was met before it) is left alone.

Bounds: in graceful mode a plan reclaims at most min(p, a) of memory, and of CPU at most
min(p, a) plus the CPU that freezes free; in kill and immediate modes, everything but the last
container taken reclaims less than p of the dominant resource. New limits are listed in the
settings' apply order (CPU first by default), the order in which the node agent must apply them.

Nodes without swap (an extension the paper does not need: its machines all swap): memory cannot
be taken from a live task there, so a container with ``can_swap`` False gives back CPU only when
it is suspended or shrunk.  Where memory is what is needed, it is killed instead: in kill and
immediate walks while memory of p is still owed; in graceful mode, once every visited job has
been shrunk and memory is still owed, the no-swap containers visited are killed in visit order
until it is not.

Whole MiB: target, limit, holdings, footprint and step are all :class:`Resources`, so whole
MiB, and the walk only takes their differences and minima; every memory amount and limit it
produces is therefore whole MiB without rounding. Each crosses the package's edge through
:func:`policies.preemption.vectors.from_vector` capped at what it is drawn from (a container's
holding, the containers' holdings), which keeps ``reclaimed <= held`` exact.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import groupby

import numpy as np
from numpy.typing import NDArray

from policies.preemption.settings import Mode, PreemptionSettings
from policies.preemption.vectors import (
    CPU,
    EPSILON,
    MEMORY,
    RESOURCE_NAMES,
    ResourceName,
    as_vector,
    check_resources,
    from_vector,
    index,
    whole_mib,
)
from policies.scheduling.resources import Resources


@dataclass(frozen=True)
class Container:
    """A running container of an over-provisioned queue.

    Attributes:
        container_id: unique id.
        job_id: the job it belongs to.
        queue: the queue of that job.
        resources: what it holds now.
        remaining_time: estimated time until it finishes (seconds).
        swapping: whether its memory is swapping (graceful mode freezes it, Alg. 2 line 8).
        suspended: whether it is already suspended (never chosen again).
        can_swap: whether its node has swap, so that memory can be taken from it alive.
    """

    container_id: str
    job_id: str
    queue: str
    resources: Resources
    remaining_time: float
    swapping: bool = False
    suspended: bool = False
    can_swap: bool = True


class ActionKind(enum.Enum):
    """What the node agent does to a container."""

    KILL = "kill"
    SHRINK = "shrink"
    SUSPEND = "suspend"
    FREEZE = "freeze"


@dataclass(frozen=True)
class ContainerAction:
    """One container's part of a plan.

    Attributes:
        container_id: the container.
        job_id: its job.
        kind: kill, shrink, suspend or freeze.
        reclaimed: what this action gives back (a freeze gives back the CPU the container held
            above the footprint, and no memory).
        limits: the new (resource name, limit) pairs in the order to apply them; empty for kill.
            CPU limits are cores (float), memory limits whole MiB (int).
    """

    container_id: str
    job_id: str
    kind: ActionKind
    reclaimed: Resources
    limits: tuple[tuple[ResourceName, float | int], ...]


@dataclass(frozen=True)
class PreemptionPlan:
    """The containers chosen for one target amount.

    Attributes:
        mode: the preemption mode.
        target: p, what should be reclaimed (clipped to ``limit``).
        limit: a, the queue's over-provisioned amount; graceful shrinking takes no memory beyond
            it, whole containers may (see the module docstring).
        reclaimed: the sum of the actions' ``reclaimed``.
        actions: per-container actions, in the order they were chosen.
        satisfied: whether the target's dominant resource is reached.
        dominant: the over-provisioned dominant resource that decides ``satisfied`` and ends the
            kill and immediate walks; None when nothing is to be reclaimed.
    """

    mode: Mode
    target: Resources
    limit: Resources
    reclaimed: Resources
    actions: tuple[ContainerAction, ...]
    satisfied: bool
    dominant: ResourceName | None


def _visit_order(containers: Sequence[Container]) -> list[list[Container]]:
    """Candidate containers grouped by job, longest remaining time first (Alg. 2, lines 3, 5)."""
    live = sorted(
        (c for c in containers if not c.suspended), key=lambda c: (c.job_id, -c.remaining_time)
    )
    jobs = [
        sorted(group, key=lambda c: (-c.remaining_time, c.container_id))
        for _, group in groupby(live, key=lambda c: c.job_id)
    ]
    jobs.sort(key=lambda job: (-job[0].remaining_time, job[0].job_id))
    return jobs


def _dominant(target: NDArray[np.float64], limit: NDArray[np.float64]) -> int | None:
    """The resource of the target closest to its limit, or None when nothing is to be reclaimed.

    The fallback when the caller names no dominant resource: for a p computed by COMPUTEDR it is
    COMPUTEDR's dominant resource (Alg. 1 line 12, p_i = a_i there); for p = a it is a tie that
    falls to the first resource, which is why Algorithm 1 passes its own.
    """
    asked = target > EPSILON
    if not asked.any():
        return None
    ratios = np.where(asked, target / np.maximum(limit, EPSILON), -1.0)
    return int(np.argmax(ratios))


def _limits(
    settings: PreemptionSettings, before: NDArray[np.float64], after: NDArray[np.float64]
) -> tuple[tuple[ResourceName, float | int], ...]:
    """The resources whose limit goes down, with their new limit, in the settings' apply order."""
    limits: list[tuple[ResourceName, float | int]] = []
    for name in settings.apply_order:
        i = index(name)
        if after[i] < before[i] - EPSILON:
            # Memory limits are whole MiB like every Resources; CPU is rounded so that float
            # residue (0.010000000000000009) does not reach the cgroup limits.
            value = whole_mib(after[i]) if i == MEMORY else round(float(after[i]), 9)
            limits.append((name, value))
    return tuple(limits)


def choose_victims(
    containers: Sequence[Container],
    target: Resources,
    limit: Resources,
    mode: Mode,
    settings: PreemptionSettings,
    *,
    dominant: ResourceName | None = None,
) -> PreemptionPlan:
    """Choose containers to give back ``target`` (Algorithm 2, lines 2-13; module docstring).

    ``target`` is p and ``limit`` is a from Algorithm 1 (:func:`.amounts.preemption_amounts`);
    the target is first clipped to the limit. ``dominant`` is the over-provisioned dominant
    resource, Algorithm 1's :attr:`.amounts.QueueAmount.dominant`; when None, the resource of
    the target closest to its limit. Raises ValueError naming a malformed amount.
    """
    for c in containers:
        check_resources(f"containers[{c.container_id}].resources", c.resources)
    return choose_victims_in_order(
        _visit_order(containers), target, limit, mode, settings, dominant=dominant
    )


def choose_victims_in_order(
    jobs: Iterable[Iterable[Container]],
    target: Resources,
    limit: Resources,
    mode: Mode,
    settings: PreemptionSettings,
    *,
    dominant: ResourceName | None = None,
) -> PreemptionPlan:
    """:func:`choose_victims` over jobs the caller has already put in visiting order (longest
    remaining time first, Alg. 2 line 3), each with its containers in order (line 5) and none
    suspended.  ``jobs`` and each job are consumed lazily: only the containers the walk visits
    are read, so a shell with a hundred thousand containers pays for the few it takes from."""
    check_resources("target", target)
    check_resources("limit", limit)
    cap = as_vector(limit)
    goal = np.minimum(as_vector(target), cap)
    key = _dominant(goal, cap) if dominant is None else index(dominant)
    walk = _Walk(goal)
    if mode is Mode.GRACEFUL:
        _graceful(jobs, walk, settings)
    else:
        _whole_containers(jobs, walk, key, mode, settings)
    total = walk.total
    satisfied = key is None or bool(total[key] >= goal[key] - EPSILON)
    return PreemptionPlan(
        mode=mode,
        target=from_vector(goal, most=limit),
        limit=limit,
        reclaimed=from_vector(total, most=walk.held_resources()),
        actions=tuple(walk.actions),
        satisfied=satisfied,
        dominant=None if key is None else RESOURCE_NAMES[key],
    )


@dataclass
class _Walk:
    """What Algorithm 2 has taken so far: the actions, their total, and what the containers it
    visited hold (the cap of the plan's ``reclaimed``)."""

    goal: NDArray[np.float64]
    actions: list[ContainerAction] = field(default_factory=list)
    total: NDArray[np.float64] = field(init=False)
    held: NDArray[np.float64] = field(init=False)

    def __post_init__(self) -> None:
        self.total = np.zeros_like(self.goal)
        self.held = np.zeros_like(self.goal)

    def visit(self, container: Container) -> NDArray[np.float64]:
        check_resources(f"containers[{container.container_id}].resources", container.resources)
        held = as_vector(container.resources)
        self.held += held
        return held

    def held_resources(self) -> Resources:
        return Resources(float(self.held[CPU]), round(float(self.held[MEMORY])))


def _whole_containers(
    jobs: Iterable[Iterable[Container]],
    walk: _Walk,
    dominant: int | None,
    mode: Mode,
    settings: PreemptionSettings,
) -> None:
    """Kill or suspend whole containers, job by job, until the dominant resource of p is met.

    Alg. 2 lines 3-12 before GP: every container of the visited job is taken in turn (line 5-6,
    never skipped for what it holds, so the last may over-reclaim), p is reduced by what it
    gives back (line 7), and the next job is visited when this one has none left (lines 9-10).
    A container that would give back nothing (already at or below the footprint) is passed
    over: killing or suspending it cannot help p.  On a node without swap a suspension keeps
    the memory, and a container there is killed instead while memory of p is still owed.
    """
    footprint = as_vector(settings.minimal_footprint)
    goal, total = walk.goal, walk.total
    if dominant is None:
        return
    for container in (c for job in jobs for c in job):
        # line 4: "as long as the over-provisioned dominant resource is fully reclaimed, p is
        # considered satisfied" (Sec. 4.3)
        if total[dominant] >= goal[dominant] - EPSILON:
            break
        held = walk.visit(container)
        # Without swap, memory can only come back by a kill: one is chosen while memory is
        # still owed, whichever resource is dominant.
        memory_owed = total[MEMORY] < goal[MEMORY] - EPSILON
        kill = mode is Mode.KILL or (not container.can_swap and memory_owed)
        if kill:
            kept = np.zeros_like(held)
        else:
            kept = np.minimum(held, footprint)
            if not container.can_swap:
                kept[MEMORY] = held[MEMORY]
        gain = held - kept
        if not (gain > EPSILON).any():
            continue
        total += gain
        kind = ActionKind.KILL if kill else ActionKind.SUSPEND
        limits = () if kill else _limits(settings, held, kept)
        reclaimed = from_vector(gain, most=container.resources)
        walk.actions.append(
            ContainerAction(container.container_id, container.job_id, kind, reclaimed, limits)
        )


def _freeze(
    container: Container, settings: PreemptionSettings
) -> tuple[ContainerAction, NDArray[np.float64]]:
    """Freeze a swapping container: its CPU to the footprint's (Alg. 2 line 8; Sec. 4.2).

    The container monitor "freezes the container by setting the CPU allocation to 1%" (Sec.
    4.2), the footprint's CPU (Sec. 3.2), whatever resource shrinking throttles first: the CPU
    it held above that is given back, its memory is left alone (taking memory from a container
    short of it would deepen its swapping). Returns the action and the vector it gives back.
    """
    held = as_vector(container.resources)
    frozen = held.copy()
    frozen[CPU] = min(frozen[CPU], float(settings.minimal_footprint.cpu))
    gain = held - frozen
    limits: tuple[tuple[ResourceName, float | int], ...] = ()
    if gain[CPU] > EPSILON:
        limits = (("cpu", round(float(frozen[CPU]), 9)),)
    action = ContainerAction(
        container.container_id,
        container.job_id,
        ActionKind.FREEZE,
        from_vector(gain, most=container.resources),
        limits,
    )
    return action, gain


def _graceful(
    jobs: Iterable[Iterable[Container]], walk: _Walk, settings: PreemptionSettings
) -> None:
    """Shrink the visited jobs' containers a step r_GP at a time (Alg. 2 as modified for GP).

    Per job (line 3), rounds each take one step from every active container (lines 5-7) until
    p is met or the job has no active container (line 9), then the next job (line 10).  A
    container is visited when a round reaches it (line 5): one that swaps is frozen and left out
    (line 8), the CPU it frees counting towards p.  The first round reads the job's containers
    lazily and stops once p is met, so a job of thousands of containers costs only those it
    takes from.  Containers on nodes without swap take CPU steps only; if memory is still owed
    after the walk, they are killed in visit order until it is not (module docstring).
    """
    footprint = as_vector(settings.minimal_footprint)
    full_step = as_vector(settings.graceful_step)
    need = walk.goal.copy()
    actions = walk.actions
    no_swap: list[tuple[Container, NDArray[np.float64], int | None]] = []
    for job in jobs:
        if not (need > EPSILON).any():
            break
        held: dict[str, NDArray[np.float64]] = {}
        left: dict[str, NDArray[np.float64]] = {}
        visited: list[Container] = []

        active: list[Container] = []
        for c in job:  # the first round, reading the job lazily
            if not (need > EPSILON).any():
                break
            vector = walk.visit(c)
            if c.swapping:
                action, freed = _freeze(c, settings)
                actions.append(action)
                walk.total += freed
                need[:] = np.maximum(need - freed, 0.0)
                continue
            held[c.container_id], left[c.container_id] = vector, vector.copy()
            visited.append(c)
            if _step(c, left, need, walk, footprint, full_step):
                active.append(c)
        while active and (need > EPSILON).any():  # the next rounds, over what is still active
            active = [c for c in active if _step(c, left, need, walk, footprint, full_step)]
        for c in visited:
            gain = held[c.container_id] - left[c.container_id]
            index_in_actions: int | None = None
            if (gain > EPSILON).any():
                index_in_actions = len(actions)
                actions.append(
                    ContainerAction(
                        c.container_id,
                        c.job_id,
                        ActionKind.SHRINK,
                        from_vector(gain, most=c.resources),
                        _limits(settings, held[c.container_id], left[c.container_id]),
                    )
                )
            if not c.can_swap:
                no_swap.append((c, gain, index_in_actions))
    _kill_for_memory(no_swap, need, walk)


def _step(
    c: Container,
    left: dict[str, NDArray[np.float64]],
    need: NDArray[np.float64],
    walk: _Walk,
    footprint: NDArray[np.float64],
    full_step: NDArray[np.float64],
) -> bool:
    """One step r_GP from ``c`` (Alg. 2 line 7), never below the footprint nor beyond what is
    still needed (``need`` and ``left`` are updated in place); CPU only on a node without swap.
    False once it has nothing more to give."""
    key = c.container_id
    room = left[key] - footprint
    own_step = full_step.copy()
    if not c.can_swap:
        room[MEMORY] = 0.0
        own_step[MEMORY] = 0.0
    take = np.clip(np.minimum(np.minimum(own_step, room), need), 0, None)
    left[key] -= take
    need -= take
    walk.total += take
    room -= take
    return bool((take > EPSILON).any() and (room > EPSILON).any())


def _kill_for_memory(
    no_swap: list[tuple[Container, NDArray[np.float64], int | None]],
    need: NDArray[np.float64],
    walk: _Walk,
) -> None:
    """Memory still owed after a graceful walk, and containers on nodes without swap that could
    not give it: kill them, in visit order, until it is not (their shrink, if any, replaced)."""
    for c, gain, position in no_swap:
        if need[MEMORY] <= EPSILON:
            break
        whole = as_vector(c.resources)
        more = whole - gain
        walk.total += more
        need = np.maximum(need - more, 0.0)
        kill = ContainerAction(
            c.container_id, c.job_id, ActionKind.KILL, from_vector(whole, most=c.resources), ()
        )
        if position is None:
            walk.actions.append(kill)
        else:
            walk.actions[position] = kill
