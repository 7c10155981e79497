"""The node agent's speculative queue, as pure decisions (ROSE Sec. 3.2, 6.1 and 6.2).

Each function takes a snapshot of the node and answers what to do; the agent carries it out.

* :func:`core_classes` (Sec. 6.2, "protective resource isolation"): in RP mode the node's cores
  split in two classes.  *First-class* cores are those regular tasks and services are pinned to,
  plus ``slack_cores`` more next to the services' for their wake-ups; the rest are
  *second-class*.  In UP mode there are no classes (the paper ties them to RP).  Departure: the
  paper gives first-class cores to latency-sensitive applications only and lets batch tasks
  use the second class; here regular batch tasks keep their own cores too (they hold a grant),
  which is what the issue asks.
* :func:`speculative_cpuset`: a speculative task runs on the second-class cores; with none left
  it shares every core and counts as *on first-class cores*, the first to be evicted.
* :func:`launches` (Sec. 6.1): pop the head of the queue while :func:`admission.admit_launch`
  admits it, counting each launch against the quota before the next; the first refusal blocks
  the queue (the head is never skipped) and its reason is the node's throttle state.
* :func:`evictions` (Sec. 6.2, "runtime throttling"): on an anomaly, every running speculative
  task is preempted, those on first-class cores first and, among them, the least progressed
  first.  The agent cannot know a task's progress; the time it has run stands for it (the one
  that ran least loses least).  The paper sizes the eviction with a sensitivity model it omits
  ([38]); here all of them go, and the queue stays blocked while the anomaly lasts.
* :func:`reclaim_hold` and the memory fit of :func:`launches` (not in the paper): a regular
  task reclaims the memory speculative ones borrowed (:func:`memory_evictions`), so admission
  must not re-admit what reclamation is about to evict.  A launch must fit the node's memory
  with every live task's limit (``committed_mb``), and after a reclaim the queue is held, with
  hysteresis: at least ``reclaim_hold_s``, and until the live limits leave the speculative
  memory quota's room again (the reclaim starts above the capacity, the hold ends below
  capacity minus the quota).  Without both, a job master's re-placed tasks were admitted into
  the memory being reclaimed and evicted again, over and over, while the regular task lived.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from policies.oversubscription.admission import NodeUsage, admit_launch
from policies.oversubscription.config import OversubscriptionConfig
from policies.scheduling.resources import Resources


@dataclass(frozen=True)
class CoreClasses:
    """The node's cores by class: ``first`` protected, ``second`` for speculative work."""

    first: tuple[int, ...]
    second: tuple[int, ...]


def core_classes(
    cpu_ids: Sequence[int],
    regular_cpusets: Iterable[Sequence[int]],
    service_cpusets: Iterable[Sequence[int]],
    config: OversubscriptionConfig,
) -> CoreClasses:
    """Sec. 6.2: the cores of regular tasks and services, plus ``slack_cores`` free cores when a
    service runs, are first-class; the rest second-class.  UP mode: every core second-class."""
    if not config.is_responsiveness_prioritized:
        return CoreClasses((), tuple(cpu_ids))
    first = {cpu for cpuset in regular_cpusets for cpu in cpuset}
    services = [tuple(cpuset) for cpuset in service_cpusets]
    first.update(cpu for cpuset in services for cpu in cpuset)
    if services:
        free = [cpu for cpu in cpu_ids if cpu not in first]
        first.update(free[: config.slack_cores])
    first &= set(cpu_ids)
    return CoreClasses(
        tuple(cpu for cpu in cpu_ids if cpu in first),
        tuple(cpu for cpu in cpu_ids if cpu not in first),
    )


def speculative_cpuset(classes: CoreClasses) -> tuple[tuple[int, ...], bool]:
    """Where a speculative task may run, and whether that is on first-class cores (no
    second-class core left: it shares them all)."""
    if classes.second:
        return classes.second, False
    return tuple(sorted(classes.first)), True


@dataclass(frozen=True)
class QueuedTask:
    """A speculative task waiting in the node's queue, in arrival order."""

    key: str
    demand: Resources
    enqueued_at: float


@dataclass(frozen=True)
class NodeLoad:
    """The node now: measured utilisation per admission resource (fractions of capacity), what
    the running speculative tasks hold, and the capacity those are measured against."""

    utilisation: tuple[float, ...]
    speculative_held: Resources
    capacity: Resources


@dataclass(frozen=True)
class ReclaimHold:
    """Admission held because speculative tasks were evicted to reclaim memory: ``since`` the
    last such eviction (inactive: not held)."""

    active: bool = False
    since: float = -math.inf


def memory_quota_mb(capacity_mb: int, config: OversubscriptionConfig) -> float:
    """The speculative tasks' memory quota in MiB (0 when memory is not an admission
    resource)."""
    names = config.admission_resources
    if "memory" not in names:
        return 0.0
    return capacity_mb * config.oversubscription_quota[names.index("memory")]


def reclaim_hold(
    previous: ReclaimHold,
    reclaimed: bool,
    committed_mb: int,
    capacity_mb: int,
    now: float,
    config: OversubscriptionConfig,
) -> ReclaimHold:
    """The hold after a pass: ``reclaimed`` (speculative tasks were evicted for memory this
    pass) (re)starts it at ``now``; it lifts once ``config.reclaim_hold_s`` has passed since the
    last reclaim *and* the live tasks' memory limits (``committed_mb``) are at most the capacity
    less the speculative memory quota."""
    if reclaimed:
        return ReclaimHold(True, now)
    if not previous.active:
        return ReclaimHold()
    low_water = capacity_mb - memory_quota_mb(capacity_mb, config)
    if now - previous.since >= config.reclaim_hold_s and committed_mb <= low_water:
        return ReclaimHold()
    return previous


@dataclass(frozen=True)
class Launches:
    """What to start now (queue order) and why the rest waits (``""``: the queue emptied)."""

    keys: tuple[str, ...]
    blocked: str


def launches(
    queue: Sequence[QueuedTask],
    load: NodeLoad,
    config: OversubscriptionConfig,
    *,
    throttled: bool = False,
    committed_mb: int | None = None,
    hold: ReclaimHold = ReclaimHold(),
) -> Launches:
    """Sec. 6.1: pop the head while every resource is under its threshold and, with it, the
    speculative share of each stays within its quota.  Each launch counts before the next
    (its measured use does not show until the next look).

    ``committed_mb``: the live tasks' memory limits (speculative and starting ones included);
    when given, a launch must also fit the node's memory with them, else reclamation would
    evict it at once.  An active ``hold`` admits nothing (memory is being reclaimed)."""
    held = load.speculative_held
    started: list[str] = []
    capacity_mb = load.capacity.memory_mb
    if hold.active and queue:
        low_water = capacity_mb - memory_quota_mb(capacity_mb, config)
        return Launches(
            (),
            f"memory reclaimed for regular tasks: held until their limits are at most "
            f"{low_water:.0f} MiB"
            + (f" (now {committed_mb} MiB)" if committed_mb is not None else ""),
        )
    for position, task in enumerate(queue):
        if committed_mb is not None:
            after = committed_mb + task.demand.memory_mb
            if after > capacity_mb:
                return Launches(
                    tuple(started),
                    f"memory committed {after} MiB with it, over the node's {capacity_mb} MiB",
                )
        usage = NodeUsage(
            utilisation=load.utilisation,
            oversubscribed=_fractions(held, load.capacity, config),
            queue_length=len(queue) - position,
        )
        decision = admit_launch(
            usage, _fractions(task.demand, load.capacity, config), config, throttled=throttled
        )
        if not decision.admitted:
            return Launches(tuple(started), decision.reason)
        started.append(task.key)
        held = held + task.demand
        if committed_mb is not None:
            committed_mb += task.demand.memory_mb
    return Launches(tuple(started), "")


@dataclass(frozen=True)
class RunningSpeculative:
    """A live speculative task: when it started and whether it sits on first-class cores."""

    key: str
    started_at: float
    on_first_class: bool


def evictions(running: Iterable[RunningSpeculative]) -> tuple[str, ...]:
    """Sec. 6.2: the order in which an anomaly preempts running speculative tasks: those on
    first-class cores first, then the least progressed (the latest started) first."""
    ordered = sorted(running, key=lambda t: (not t.on_first_class, -t.started_at, t.key))
    return tuple(task.key for task in ordered)


def memory_evictions(
    running: Iterable[RunningSpeculative],
    memory_mb: Mapping[str, int],
    live_total_mb: int,
    capacity_mb: int,
) -> tuple[str, ...]:
    """The speculative tasks to evict, in :func:`evictions` order, so that the live tasks'
    memory limits (``live_total_mb``, speculative ones' included, each in ``memory_mb``) fit
    the node: a regular task reclaims what speculative ones borrowed."""
    victims: list[str] = []
    total = live_total_mb
    for key in evictions(running):
        if total <= capacity_mb:
            break
        victims.append(key)
        total -= memory_mb[key]
    return tuple(victims)


def _fractions(
    amount: Resources, capacity: Resources, config: OversubscriptionConfig
) -> tuple[float, ...]:
    """``amount`` as fractions of ``capacity`` per admission resource (a resource tasks do not
    declare, disk, counts 0)."""
    values = {
        "cpu": amount.cpu / capacity.cpu if capacity.cpu > 0 else 0.0,
        "memory": amount.memory_mb / capacity.memory_mb if capacity.memory_mb > 0 else 0.0,
    }
    return tuple(values.get(name, 0.0) for name in config.admission_resources)


@dataclass(frozen=True)
class Throttle:
    """Sec. 6.2's throttle on a node: why it holds (empty: it does not), and until when."""

    reason: str = ""
    until: float = -math.inf

    @property
    def active(self) -> bool:
        return bool(self.reason)


def throttle(
    previous: Throttle, anomaly: str | None, now: float, config: OversubscriptionConfig
) -> Throttle:
    """The throttle after a look at the services (``anomaly``: why one is anomalous now, or
    None): an anomaly (re)starts it for ``config.throttle_hold_s``; without one it holds
    until then, then lifts.  UP never throttles."""
    if not config.is_responsiveness_prioritized:
        return Throttle()
    if anomaly is not None:
        return Throttle(anomaly, now + config.throttle_hold_s)
    if previous.active and now < previous.until:
        return previous
    return Throttle()


@dataclass(frozen=True)
class InterferenceLook:
    """What a node does after a look at its services (Sec. 6.2): its throttle from now, and
    the running speculative tasks to evict, in :func:`evictions` order (every one of them
    while a service is anomalous, none otherwise)."""

    throttle: Throttle
    evict: tuple[str, ...]


def look_at_interference(
    previous: Throttle,
    anomaly: str | None,
    running: Iterable[RunningSpeculative],
    now: float,
    config: OversubscriptionConfig,
) -> InterferenceLook:
    """The throttle (:func:`throttle`) and the evictions an anomaly (``anomaly``: why a
    service is anomalous now, or None) brings; the node agent's speculative queue and the
    simulator's nodes both decide with it."""
    evict = evictions(running) if anomaly is not None else ()
    return InterferenceLook(throttle(previous, anomaly, now, config), evict)
