"""One pass of a node's speculative queue, as one pure decision (ROSE Sec. 3.2, 6.1 and 6.2).

The node agent's :class:`node_agent.speculative.SpeculativeQueue` and the simulator's nodes
(:mod:`simulator.oversubscription`) both decide with :func:`decide_pass`: they build a
:class:`NodePassInput` of the node now, and carry out the :class:`NodePassDecision` it
answers.  The pieces are in :mod:`policies.oversubscription.node_queue`; this module is their
composition, in this order:

1. **Throttle** (Sec. 6.2, RP mode; :func:`node_queue.look_at_interference`): while a watched
   service is anomalous every running speculative task is evicted (first-class cores, then the
   least progressed, first) and the pass ends there: nothing else is decided until they are
   gone.  The throttle then blocks the queue until ``throttle_hold_s`` after the last anomaly.
2. **Memory reclamation** (:func:`node_queue.memory_evictions`): when the live tasks' memory
   limits (regular, service, job master and speculative ones) no longer fit the node,
   speculative tasks are evicted in the same order until they do.
3. **Reclaim hold** (:func:`node_queue.reclaim_hold`): after a reclaim, admission is held at
   least ``reclaim_hold_s`` and until the live limits leave the speculative memory quota's
   room again.
4. **Core classes** (Sec. 6.2; :func:`node_queue.core_classes`): regular tasks' and services'
   cores (plus slack) are first-class; when the classes change, every running speculative task
   not on the second-class cores is re-pinned there.
5. **Admission** (Sec. 6.1; :func:`node_queue.launches`): unless throttled, the queue's head
   is popped while every resource is under its threshold, the speculative share within its
   quota, and the launch fits the node's memory with every live limit.  Tasks still starting
   (admitted by an earlier pass, not running yet) count as held and committed.

Evictions of tasks already being evicted (``RunningTask.evicting``) are not decided again,
but such a task still counts (its memory is held until it has stopped).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from policies.oversubscription.config import OversubscriptionConfig
from policies.oversubscription.node_queue import (
    CoreClasses,
    NodeLoad,
    QueuedTask,
    ReclaimHold,
    RunningSpeculative,
    Throttle,
    core_classes,
    launches,
    look_at_interference,
    memory_evictions,
    reclaim_hold,
    speculative_cpuset,
)
from policies.scheduling.resources import Resources

MEMORY_RECLAIMED = "memory reclaimed for regular tasks"
"""Why a memory squeeze evicts (and the start of the hold's blocked reason)."""


@dataclass(frozen=True)
class RunningTask:
    """A live speculative task on the node: its limits, the cores it is pinned to, when it
    started, and whether an earlier pass already evicted it (it is still stopping)."""

    key: str
    limits: Resources
    cpuset: tuple[int, ...]
    started_at: float
    evicting: bool = False


@dataclass(frozen=True)
class LiveTask:
    """A live non-speculative task: a regular task, a watched service (``key`` in
    :attr:`NodePassInput.services`) or a job master (no core class of its own)."""

    key: str
    memory_mb: int
    cpuset: tuple[int, ...] = ()
    job_master: bool = False


@dataclass(frozen=True)
class NodeState:
    """What a node's queue remembers between passes (the decision's own state)."""

    throttle: Throttle = field(default_factory=Throttle)
    hold: ReclaimHold = field(default_factory=ReclaimHold)
    classes: CoreClasses | None = None


@dataclass(frozen=True)
class NodePassInput:
    """The node now, as one pass sees it.

    ``queue``: waiting tasks in arrival order (those still starting excluded); ``starting``:
    admitted by an earlier pass, not running yet; ``anomaly``: why a watched service is
    anomalous (None: none is, or UP mode); ``utilisation``: the machine's measured use per
    admission resource (read only when something waits: ``None`` is allowed when ``queue`` is
    empty)."""

    queue: tuple[QueuedTask, ...]
    running: tuple[RunningTask, ...]
    regular: tuple[LiveTask, ...]
    capacity: Resources
    cpu_ids: tuple[int, ...]
    state: NodeState = NodeState()
    services: frozenset[str] = frozenset()
    anomaly: str | None = None
    utilisation: tuple[float, ...] | None = None
    starting: tuple[QueuedTask, ...] = ()


@dataclass(frozen=True)
class Evict:
    """Stop this running speculative task: it ends ``evicted: <why>``."""

    key: str
    why: str


@dataclass(frozen=True)
class Repin:
    """Move a running speculative task to ``cpuset`` (the second-class cores)."""

    key: str
    cpuset: tuple[int, ...]


@dataclass(frozen=True)
class NodePassDecision:
    """What one pass decided, to be carried out in this order: evict, re-pin, start
    ``admitted`` (queue order) on ``cpuset``.  ``blocked``: why the queue waits (``""``:
    it does not, or it is empty); ``state``: the queue's state from now;
    ``reclaimed``: memory was reclaimed this pass; ``committed_mb``: the live tasks' memory
    limits after this pass's evictions."""

    evictions: tuple[Evict, ...]
    repins: tuple[Repin, ...]
    admitted: tuple[str, ...]
    cpuset: tuple[int, ...]
    blocked: str
    state: NodeState
    reclaimed: bool = False
    committed_mb: int = 0

    @property
    def throttled(self) -> bool:
        return self.state.throttle.active


def decide_pass(
    facts: NodePassInput, now: float, config: OversubscriptionConfig
) -> NodePassDecision:
    """One pass over the node (see the module docstring for the order)."""
    previous = facts.state
    running = _as_running(facts.running, previous.classes)
    look = look_at_interference(previous.throttle, facts.anomaly, running, now, config)
    reason = look.throttle.reason
    throttled_state = NodeState(look.throttle, previous.hold, previous.classes)
    if facts.anomaly is not None and facts.running:
        evicted = _new_evictions(facts.running, look.evict, facts.anomaly)
        return NodePassDecision(evicted, (), (), (), f"throttled: {reason}", throttled_state)
    memory_of = {t.key: t.limits.memory_mb for t in facts.running}
    committed = sum(t.memory_mb for t in facts.regular) + sum(memory_of.values())
    squeezed = (
        memory_evictions(running, memory_of, committed, facts.capacity.memory_mb)
        if facts.running
        else ()
    )
    staying = tuple(t for t in facts.running if t.key not in squeezed)
    committed -= sum(memory_of[key] for key in squeezed)
    hold = reclaim_hold(
        previous.hold, bool(squeezed), committed, facts.capacity.memory_mb, now, config
    )
    classes = core_classes(
        facts.cpu_ids,
        [t.cpuset for t in facts.regular if not t.job_master and t.key not in facts.services],
        [t.cpuset for t in facts.regular if t.key in facts.services],
        config,
    )
    cpuset, _ = speculative_cpuset(classes)
    repins: tuple[Repin, ...] = ()
    if classes != previous.classes:
        repins = tuple(Repin(t.key, cpuset) for t in staying if tuple(t.cpuset) != cpuset)
    evicted = _new_evictions(facts.running, squeezed, MEMORY_RECLAIMED)
    state = NodeState(look.throttle, hold, classes)
    if reason:
        return NodePassDecision(
            evicted, repins, (), cpuset, f"throttled: {reason}", state, bool(squeezed), committed
        )
    if not facts.queue:
        return NodePassDecision(evicted, repins, (), cpuset, "", state, bool(squeezed), committed)
    held = Resources()
    for task in staying:
        held = held + Resources(task.limits.cpu, task.limits.memory_mb)
    admitting = committed
    seen = {t.key for t in staying}
    for launch in facts.starting:  # admitted by a pass before, not running yet
        if launch.key not in seen:
            held = held + launch.demand
            admitting += launch.demand.memory_mb
    if facts.utilisation is None:
        raise ValueError("utilisation: needed when tasks wait in the queue")
    decision = launches(
        facts.queue,
        NodeLoad(facts.utilisation, held, facts.capacity),
        config,
        committed_mb=admitting,
        hold=hold,
    )
    return NodePassDecision(
        evicted, repins, decision.keys, cpuset, decision.blocked, state, bool(squeezed), committed
    )


def _as_running(
    running: Sequence[RunningTask], classes: CoreClasses | None
) -> list[RunningSpeculative]:
    """The running tasks as the eviction order sees them: on first-class cores when their
    cpuset meets the first class as the last pass knew it."""
    first = set(classes.first) if classes is not None else set()
    return [
        RunningSpeculative(t.key, t.started_at, bool(first) and bool(first & set(t.cpuset)))
        for t in running
    ]


def _new_evictions(
    running: Sequence[RunningTask], keys: Sequence[str], why: str
) -> tuple[Evict, ...]:
    """``keys`` (in eviction order already), without those an earlier pass evicted."""
    already = {t.key for t in running if t.evicting}
    return tuple(Evict(key, why) for key in keys if key not in already)
