"""The scheduling framework: a pass over pending asks, with policies plugged in at named points.

The points are those of the Kubernetes scheduling framework, and a pass returns a plan in the
manner of Nomad's scheduler: the decisions, not their effects.  The shell (the resource manager's
core, or the simulator) checks the plan against its records, applies it and turns it into node
commands.  Each plugin is a small object reading the immutable :class:`PendingAsk`, the node's
:class:`NodeCapacity` and the pass's :class:`PassContext`; none does I/O or reads a clock.

=============  ==============================================  =========================
point          contract                                        baseline plugin
=============  ==============================================  =========================
queue order    ``sort_key(ask)``: serving order, lowest first  :class:`PriorityFifo`
permit         ``admit(ask, context)``: may it be placed now?  :class:`MasterShare`
filter         ``feasible(ask, node, context)``                (capacity check built in)
score          ``score(ask, node, context)``: higher is better :class:`LeastAllocated`
reserve        ``held_for_others(ask, node)``; ``on_placed``   none
post-filter    ``preempt(ask, context)`` when nothing fits     none
=============  ==============================================  =========================

(See docs/architecture.md for which design plugs in where.)

A pass (:func:`schedule_pass`) serves the asks in the order given (the shell keeps them in
queue order, :mod:`pending_asks`), container by container:

1. *permit*: every permit plugin must admit the container; otherwise the ask waits (it is listed
   in :attr:`Plan.waiting` with the plugin's :class:`Refusal`) and the pass goes on with the
   next ask.  A permit that declares
   itself ``shape_only`` (its refusal depends on the ask's kind and size alone, and holds for
   the rest of the pass) is not asked again for asks of that kind no smaller: a queue full of
   job master asks held back by :class:`MasterShare` costs a pass O(1) each, not a plugin call.
2. *filter*: nodes are visited least-allocated first through the :class:`CapacityIndex`; a node
   is feasible when the container fits in its free capacity less what reserve plugins hold there
   for other jobs, and every filter plugin agrees.  On clusters of up to
   :attr:`Profile.exhaustive_below` nodes every feasible node is scored (exactly the baseline's
   least-allocated choice); on larger ones the search stops after
   :attr:`Profile.nodes_to_score` feasible nodes, like Kubernetes' percentage of nodes to score
   and Nomad's limit iterator, or at the end of the bucket (1 % of allocated share) where the
   first feasible node was found: the nodes after it are more allocated.  An ask larger than
   every node's free capacity is refused at once (the index's cluster-wide maximum), and a
   shape found to fit nowhere is remembered for the rest of the pass, so asks that fit nowhere
   cost O(1) after the first.
3. *score*: the feasible node with the highest weighted score wins; ties go to the lowest node id.
4. *reserve*: plugins are told of the placement and may change reservations.
5. *post-filter*: when a container fits nowhere, post-filter plugins may propose preemptions.

*Locality* (delay scheduling, Zaharia et al., EuroSys 2010): an ask that names
``preferred_nodes`` is placed on one of them when one fits (filters and reserves apply; the best
score wins), looked up directly, O(preferred).  Until its ``local_until`` it takes no other node:
it waits (listed in :attr:`Plan.waiting`, refused by :data:`LOCALITY`, no post-filter), and the
shell runs a pass when that time comes.  After, it takes any node, as any ask.
   The pass never counts the capacity they would free (it is freed when the nodes report it
   done); the next pass places the ask.

Every plugin has a :attr:`~Plugin.name`, and a permit's refusal says why (:class:`Refusal`):
the plan lists what waits and why, and :mod:`policies.scheduling.diagnosis` tells a user why an
ask is pending, node by node (as Kubernetes' "0/N nodes are available: ...").

An ask whose container fits nowhere does not block the asks behind it (work-conserving).  The
same container shape is not tried again after it failed, since capacity only shrinks during a
pass.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from typing import ClassVar, Protocol

from policies.identity_enum import IdentityEnum
from policies.scheduling.capacity_index import CapacityIndex, NodeCapacity
from policies.scheduling.resources import Resources

__all__ = [
    "AllocationKind",
    "Eviction",
    "Filter",
    "LeastAllocated",
    "MasterShare",
    "NodeCapacity",
    "PassContext",
    "PendingAsk",
    "Permit",
    "Placement",
    "Plan",
    "Plugin",
    "PostFilter",
    "Preemption",
    "PreemptionAction",
    "PriorityFifo",
    "Profile",
    "QueueOrder",
    "Refusal",
    "Reservation",
    "Reserve",
    "Resize",
    "Resumption",
    "Score",
    "SprintChange",
    "Waiting",
    "baseline_profile",
    "locality_wait",
    "schedule_pass",
]


class AllocationKind(IdentityEnum):
    """What a container is for: a task of a phase, or the job's own job master."""

    TASK = "task"
    JOB_MASTER = "job_master"


AskShape = tuple[AllocationKind, Resources]
"""What a container is for and its size: asks of one shape are alike to shape-only plugins."""


@dataclass(frozen=True)
class PendingAsk:
    """``count`` more containers of ``resources`` for ``phase`` of ``job_id`` (a JOB_MASTER ask
    has an empty phase and a count of 1).  ``submit_seq`` is the job's submission order."""

    job_id: str
    priority: int
    submit_seq: int
    phase: str
    count: int
    resources: Resources
    kind: AllocationKind = AllocationKind.TASK
    queue: str = ""  # the queue the job is charged to (empty: queues are not in use)
    preferred_nodes: frozenset[str] = frozenset()  # where its input is (locality)
    local_until: float = 0.0  # until then (the pass's ``now``), only preferred nodes will do

    def local_only(self, now: float) -> bool:
        """Does it still wait for a preferred node (its locality wait not yet over)?"""
        return bool(self.preferred_nodes) and now < self.local_until


# ------------------------------------------------------------------------------ the plan


@dataclass(frozen=True)
class Placement:
    """Grant a container of ``resources`` on ``node_id`` to ``phase`` of ``job_id``."""

    job_id: str
    phase: str
    node_id: str
    resources: Resources
    kind: AllocationKind = AllocationKind.TASK
    queue: str = ""  # the ask's queue


class PreemptionAction(enum.Enum):
    KILL = "kill"  # stop it; its work is lost
    SUSPEND = "suspend"  # freeze it in place (its memory stays, or is swapped out)
    SHRINK = "shrink"  # lower its limits to ``Preemption.limits``


@dataclass(frozen=True)
class Preemption:
    """Take resources from a running container.

    ``limits``: SHRINK, its new limits; SUSPEND, the minimal footprint to cut it to once
    frozen (None: freeze only, its memory stays).  ``step``: SHRINK, gracefully: the node lowers
    the limits by at most this per round and freezes the task once it swaps (BIG-C Alg. 2).
    ``for_queue``: the queue the capacity is taken for; the shell holds it for that queue.
    ``by``: the plugin or timer that decided it (a takeover of a kept container is
    ``ReservationOverride``'s)."""

    allocation_id: str
    action: PreemptionAction
    reason: str
    limits: Resources | None = None
    step: Resources | None = None
    for_queue: str = ""
    by: str = ""


@dataclass(frozen=True)
class Resumption:
    """Let a suspended or shrunk container run again with its granted resources."""

    allocation_id: str
    reason: str = ""


@dataclass(frozen=True)
class Resize:
    """Set a running container's current limits (never above its grant)."""

    allocation_id: str
    limits: Resources


@dataclass(frozen=True)
class Eviction:
    """Take a job's execution back (DiAS's preemptive dispatch, the paper's baseline P): its
    job master and tasks stop, and it waits again at the head of its buffer."""

    job_id: str
    reason: str


@dataclass(frozen=True)
class SprintChange:
    """A job in execution starts (``sprinting``) or stops sprinting (DiAS Sec. 3.2): its task
    containers run at the sprint factor times their CPU, on idle cores, or back at 1."""

    job_id: str
    sprinting: bool
    reason: str


@dataclass(frozen=True)
class Reservation:
    """Hold (``hold=True``) or stop holding ``resources`` on ``node_id`` for ``job_id``."""

    job_id: str
    node_id: str
    resources: Resources
    hold: bool


@dataclass(frozen=True)
class Refusal:
    """Why a plugin holds an ask back: the plugin's :attr:`~Plugin.name` and a short reason a
    user can act on ("queue 'batch' is at its max_share")."""

    plugin: str
    reason: str

    def __str__(self) -> str:
        return f"{self.reason} ({self.plugin})"


LOCALITY = "Locality"
"""The name under which the pass itself holds an ask back for a node near its input (delay
scheduling): not a plugin, but said alike."""


@dataclass(frozen=True)
class Waiting:
    """An ask the pass held back, and why."""

    ask: PendingAsk
    why: Refusal


@dataclass(frozen=True)
class Plan:
    """What one pass, or one timer, decided: every change of what runs where goes through a
    plan, which the shell checks and applies (Nomad's plan applier).  A scheduling pass fills
    placements, preemptions (with takeovers of kept containers) and reservations; DiAS adds
    evictions and sprint changes; BIG-C's delayed resumption, offered at a node's heartbeat,
    resumptions; a queue's ``max_suspended_s``, kills.  ``waiting`` lists the asks held back
    (by a permit plugin, or waiting for a node near their input), with why, of those the pass
    visited (it stops early once nothing left can be placed); ``cut_short`` says the pass
    stopped at its placement limit (see :func:`schedule_pass`)."""

    placements: tuple[Placement, ...] = ()
    preemptions: tuple[Preemption, ...] = ()
    resumptions: tuple[Resumption, ...] = ()
    resizes: tuple[Resize, ...] = ()
    reservations: tuple[Reservation, ...] = ()
    evictions: tuple[Eviction, ...] = ()
    sprints: tuple[SprintChange, ...] = ()
    waiting: tuple[Waiting, ...] = ()
    cut_short: bool = False  # it stopped at its placement limit: more may fit now

    @property
    def decides(self) -> bool:
        """Does it change anything (``waiting`` and ``cut_short`` only say what did not)?"""
        return bool(
            self.placements
            or self.preemptions
            or self.resumptions
            or self.resizes
            or self.reservations
            or self.evictions
            or self.sprints
        )


# ------------------------------------------------------------------------------ the points


@dataclass
class PassContext:
    """What plugins may read during a pass: the time (the shell's clock, passed in), the
    cluster's nodes, what each kind of allocation holds, and how many jobs are in execution
    (their job master's container granted, not ended yet), kept current as the pass places."""

    now: float
    cluster: CapacityIndex
    held: dict[AllocationKind, Resources] = field(default_factory=dict)
    jobs_in_execution: int = 0

    def held_by(self, kind: AllocationKind) -> Resources:
        return self.held.get(kind, Resources())

    def placed(self, placement: Placement) -> None:
        self.held[placement.kind] = self.held_by(placement.kind) + placement.resources
        if placement.kind is AllocationKind.JOB_MASTER:
            self.jobs_in_execution += 1


class Plugin(Protocol):
    @property
    def name(self) -> str:
        """What users and logs call it (a CamelCase word, as Kubernetes' plugin names)."""
        ...


class QueueOrder(Plugin, Protocol):
    def sort_key(self, ask: PendingAsk) -> tuple[int | str, ...]:
        """Asks are served by ascending key."""
        ...


class Permit(Plugin, Protocol):
    @property
    def shape_only(self) -> bool:
        """True when a refusal depends on the ask's kind and resources alone and holds for the
        rest of the pass for every ask of that kind no smaller (placements only add to what is
        held), so the pass may remember it."""
        ...

    def admit(self, ask: PendingAsk, context: PassContext) -> Refusal | None:
        """None if one more container of ``ask`` may be placed now, else why not."""
        ...


class Filter(Plugin, Protocol):
    @property
    def shape_only(self) -> bool:
        """True when the verdict depends on the ask's resources alone, not on its job (so a
        pass may remember that a shape fits nowhere)."""
        ...

    def feasible(self, ask: PendingAsk, node: NodeCapacity, context: PassContext) -> bool:
        """May ``ask`` go on ``node``?  (A refusal is told as "refused by <name>".)"""
        ...


class Score(Plugin, Protocol):
    def score(self, ask: PendingAsk, node: NodeCapacity, context: PassContext) -> float:
        """Higher is better; the pass weighs and adds the scores of every score plugin."""
        ...


class Reserve(Plugin, Protocol):
    @property
    def by_queue(self) -> bool:
        """True when what it holds for others depends on the ask's queue alone (not its job):
        a pass may then remember that a shape fits nowhere for a whole queue."""
        ...

    def held_for_others(self, ask: PendingAsk, node: NodeCapacity) -> Resources:
        """Capacity of ``node`` held for jobs other than ``ask``'s: not free for it."""
        ...

    def on_placed(self, placement: Placement) -> Sequence[Reservation]:
        """Reservation changes that follow from a placement."""
        ...


class PostFilter(Plugin, Protocol):
    def preempt(self, ask: PendingAsk, context: PassContext) -> Sequence[Preemption]:
        """What to preempt so that ``ask`` can be placed by a later pass (may be nothing)."""
        ...


@dataclass(frozen=True)
class Profile:
    """The plugins of each point, and how many feasible nodes to score."""

    queue_order: QueueOrder
    permits: tuple[Permit, ...] = ()
    filters: tuple[Filter, ...] = ()
    scores: tuple[tuple[Score, float], ...] = ()
    reserves: tuple[Reserve, ...] = ()
    post_filters: tuple[PostFilter, ...] = ()
    nodes_to_score: int = 8
    exhaustive_below: int = 100


# ------------------------------------------------------------------------------ baseline plugins


@dataclass(frozen=True)
class PriorityFifo:
    """Strict priority between jobs, FIFO (submission order) within a priority."""

    name: ClassVar[str] = "PriorityFifo"

    def sort_key(self, ask: PendingAsk) -> tuple[int | str, ...]:
        return (-ask.priority, ask.submit_seq, ask.kind.value, ask.phase)


@dataclass(frozen=True)
class LeastAllocated:
    """Prefer the node whose dominant allocated share after the placement is lowest: spreads
    load (Kubernetes' NodeResourcesFit with LeastAllocated, over DRF shares)."""

    name: ClassVar[str] = "LeastAllocated"

    def score(self, ask: PendingAsk, node: NodeCapacity, context: PassContext) -> float:
        capacity, allocated, request = node.capacity, node.allocated, ask.resources
        share = 0.0
        if capacity.cpu > 0:
            share = (allocated.cpu + request.cpu) / capacity.cpu
        if capacity.memory_mb > 0:
            share = max(share, (allocated.memory_mb + request.memory_mb) / capacity.memory_mb)
        return 1.0 - share


@dataclass(frozen=True)
class MasterShare:
    """Job masters together hold at most ``share`` of the cluster's capacity in each resource,
    like YARN's maximum-am-resource-percent, so they can never take every node and leave no
    room for the tasks they wait for.  One job master may always run, so a small cluster is
    never stuck."""

    share: float
    shape_only: bool = True  # what job masters hold only grows during a pass
    name: ClassVar[str] = "MasterShare"

    def admit(self, ask: PendingAsk, context: PassContext) -> Refusal | None:
        if ask.kind is not AllocationKind.JOB_MASTER:
            return None
        held = context.held_by(AllocationKind.JOB_MASTER)
        if held.cpu <= 0 and held.memory_mb <= 0:
            return None
        total = context.cluster.total_capacity
        limit = Resources(total.cpu * self.share, int(total.memory_mb * self.share))
        if (held + ask.resources).fits_in(limit):
            return None
        return Refusal(
            self.name,
            f"job masters hold their share of the cluster ({self.share:.0%}, max_master_share)",
        )


def baseline_profile(*, max_master_share: float = 0.1, nodes_to_score: int = 8) -> Profile:
    """Strict priority, FIFO within a priority, least-allocated node, no preemption."""
    return Profile(
        queue_order=PriorityFifo(),
        permits=(MasterShare(max_master_share),),
        scores=((LeastAllocated(), 1.0),),
        nodes_to_score=nodes_to_score,
    )


# ------------------------------------------------------------------------------ the pass


def schedule_pass(
    asks: Iterable[PendingAsk],
    context: PassContext,
    profile: Profile,
    shapes: Collection[AskShape] = (),
    nowhere: dict[Resources, int] | None = None,
    max_placements: int = 0,
) -> Plan:
    """Plan placements for ``asks`` (in serving order) on ``context.cluster``; see the module
    docstring.  The index is left as it was: its changes are tentative (a scratch).

    ``max_placements`` (0: no limit) bounds the work of one pass: once it has placed that many
    containers it stops, with :attr:`Plan.cut_short` set, and the shell runs another pass soon
    after, which starts again from the head of the queue.  The shell serves its other requests
    in between, so no pass holds them up for long.

    ``shapes``, if given, are the distinct (kind, container size) pairs among ``asks``: once each
    of them has fitted nowhere or been refused by a shape-only permit (and no plugin makes the
    verdict depend on the job), no later ask can be placed in this pass, and the pass stops
    instead of visiting the rest of the queue.

    ``nowhere``, if given, is kept by the shell from pass to pass: container sizes found to fit
    on no node, with the index's :attr:`~CapacityIndex.generation` then.  Such a size can fit
    now only on a node whose free amount grew since, so only those nodes are looked at, not all
    of them (a fragmented cluster would otherwise cost a scan of every node per size and pass).
    Used only when no plugin makes the verdict depend on the job."""
    shape_only = all(f.shape_only for f in profile.filters) and not profile.reserves
    by_queue = all(f.shape_only for f in profile.filters) and all(
        r.by_queue for r in profile.reserves
    )
    state = _PassState(
        context,
        profile,
        shape_only=shape_only,
        by_queue=by_queue,
        permits_shape_only=all(p.shape_only for p in profile.permits),
        remembered=nowhere if shape_only and nowhere is not None else None,
        max_placements=max_placements,
    )
    # With shape-only plugins, a shape (kind, size) nothing more can be placed for is settled
    # for the rest of the pass: True if a permit holds it back, False if it fits nowhere.  A
    # long queue behind a full cluster then costs a lookup per ask.
    settled: dict[AskShape, Refusal | None] = {}
    with context.cluster.scratch() as cluster:
        for ask in asks:
            if state.cut_short:
                break
            shape = (ask.kind, ask.resources)
            if shape_only and shape in settled:
                held_back = settled[shape]
                if held_back is not None:
                    state.waiting.append(Waiting(ask, held_back))
                continue
            verdict = _serve(ask, cluster, state)
            if shape_only and verdict is not _UNSETTLED:
                settled[shape] = verdict
                if shapes and _all_failed(shapes, state.failed, state.refused):
                    break  # nothing asked for can be placed any more
    return Plan(
        placements=tuple(state.placements),
        preemptions=tuple(state.preemptions),
        reservations=tuple(state.reservations),
        waiting=tuple(state.waiting),
        cut_short=state.cut_short,
    )


@dataclass
class _PassState:
    """What one pass has decided and learnt so far."""

    context: PassContext
    profile: Profile
    shape_only: bool  # no plugin makes a verdict depend on the job
    by_queue: bool  # ... or only on the job's queue (reserves that hold capacity per queue)
    permits_shape_only: bool
    remembered: dict[Resources, int] | None  # the shell's memo of sizes that fit nowhere
    max_placements: int
    placements: list[Placement] = field(default_factory=list)
    reservations: list[Reservation] = field(default_factory=list)
    preemptions: list[Preemption] = field(default_factory=list)
    waiting: list[Waiting] = field(default_factory=list)
    failed: list[tuple[str, Resources]] = field(default_factory=list)  # (job id or "", size)
    refused: dict[AskShape, Refusal] = field(default_factory=dict)  # by shape-only permits
    cut_short: bool = False


_UNSETTLED = Refusal("", "")
"""What :func:`_serve` returns when its verdict does not settle the ask's shape."""


def _serve(ask: PendingAsk, cluster: CapacityIndex, state: _PassState) -> Refusal | None:
    """Place as many of ``ask``'s containers as can be, one by one.  Returns what settles its
    shape for the rest of the pass: a shape-only permit's refusal if one held it back, None if
    it fits nowhere, :data:`_UNSETTLED` if nothing does (all placed, the pass's limit, a
    job-dependent verdict)."""
    context, profile, remembered = state.context, state.profile, state.remembered
    # What "fits nowhere" is remembered for, in this pass: any ask of the shape, the shape in
    # the ask's queue, or the shape for the ask's job.  (One failed search per queue, not one
    # per job: with capacity claimed for another queue, each search visits every node.)
    if state.shape_only:
        memo_key = ""
    elif state.by_queue:
        memo_key = f"queue:{ask.queue}"
    else:
        memo_key = ask.job_id
    for _ in range(ask.count):
        if _known_to_fail(ask.resources, memo_key, state.failed):
            return None
        known = _known_refused(ask.kind, ask.resources, state.refused)
        if known is not None:
            state.waiting.append(Waiting(ask, known))
            return known
        refusal = _refusal(ask, context, profile.permits)
        if refusal is not None:
            state.waiting.append(Waiting(ask, refusal))
            if not state.permits_shape_only:
                return _UNSETTLED
            state.refused[ask.kind, ask.resources] = refusal
            return refusal
        if ask.preferred_nodes:
            local = _choose_preferred(ask, cluster, context, profile)
            if local is not None:
                _place(ask, local, cluster, state)
                if state.cut_short:
                    return _UNSETTLED
                continue
            if ask.local_only(context.now):
                # delay scheduling: no other node yet
                state.waiting.append(Waiting(ask, locality_wait(ask)))
                return _UNSETTLED
        if remembered is not None and _still_nowhere(ask, cluster, context, profile, remembered):
            state.failed.append((memo_key, ask.resources))
            node = None
        else:
            generation = cluster.generation
            node = _choose_node(ask, cluster, context, profile, state.failed, memo_key)
            if remembered is not None:
                if node is None:
                    remembered[ask.resources] = generation
                else:
                    remembered.pop(ask.resources, None)
        if node is None:
            for post_filter in profile.post_filters:
                state.preemptions.extend(post_filter.preempt(ask, context))
            return None  # identical containers: if one fits nowhere, the rest do not either
        _place(ask, node, cluster, state)
        if state.cut_short:
            return _UNSETTLED
    return _UNSETTLED


def _refusal(ask: PendingAsk, context: PassContext, permits: Sequence[Permit]) -> Refusal | None:
    """The first permit plugin's refusal of one more container of ``ask``, or None."""
    for permit in permits:
        refusal = permit.admit(ask, context)
        if refusal is not None:
            return refusal
    return None


def locality_wait(ask: PendingAsk) -> Refusal:
    """Why an ask waits for a node near its input (delay scheduling)."""
    return Refusal(
        LOCALITY,
        f"waits for one of {len(ask.preferred_nodes)} nodes near its input "
        f"until {ask.local_until:g} s (locality wait)",
    )


def _place(ask: PendingAsk, node: NodeCapacity, cluster: CapacityIndex, state: _PassState) -> None:
    cluster.take(node.node_id, ask.resources)
    placement = Placement(ask.job_id, ask.phase, node.node_id, ask.resources, ask.kind, ask.queue)
    state.placements.append(placement)
    state.context.placed(placement)
    for reserve in state.profile.reserves:
        state.reservations.extend(reserve.on_placed(placement))
    if len(state.placements) == state.max_placements:
        state.cut_short = True


def _choose_preferred(
    ask: PendingAsk, cluster: CapacityIndex, context: PassContext, profile: Profile
) -> NodeCapacity | None:
    """The best-scoring preferred node the container fits on, or None.  O(preferred nodes)."""
    best: NodeCapacity | None = None
    best_score = 0.0
    for node_id in ask.preferred_nodes:
        node = cluster.get(node_id)
        if node is None:
            continue  # gone, or not schedulable now
        free = node.free
        for reserve in profile.reserves:
            free = free - reserve.held_for_others(ask, node)
        if not ask.resources.fits_in(free):
            continue
        if not all(f.feasible(ask, node, context) for f in profile.filters):
            continue
        score = _total_score(ask, node, context, profile)
        if (
            best is None
            or score > best_score
            or (score == best_score and node.node_id < best.node_id)
        ):
            best, best_score = node, score
    return best


def _choose_node(
    ask: PendingAsk,
    cluster: CapacityIndex,
    context: PassContext,
    profile: Profile,
    failed: list[tuple[str, Resources]],
    memo_key: str,
) -> NodeCapacity | None:
    request = ask.resources
    if not request.fits_in(cluster.max_free()):
        failed.append((memo_key, request))
        return None
    exhaustive = len(cluster) <= profile.exhaustive_below
    limit = len(cluster) if exhaustive else profile.nodes_to_score
    candidates: list[NodeCapacity] = []
    first_level = -1
    reserves, filters = profile.reserves, profile.filters
    for level, node in cluster.by_level():
        if candidates and not exhaustive and level != first_level:
            # Nodes further on are more allocated: they would score worse (and on a nearly full
            # cluster they are the full ones, which it would cost O(nodes) to visit).
            break
        free = node.free
        for reserve in reserves:
            free = free - reserve.held_for_others(ask, node)
        if not request.fits_in(free):
            continue
        if filters and not all(f.feasible(ask, node, context) for f in filters):
            continue
        if not candidates:
            first_level = level
        candidates.append(node)
        if len(candidates) >= limit:
            break
    if not candidates:
        failed.append((memo_key, request))
        return None
    best = candidates[0]
    best_score = _total_score(ask, best, context, profile)
    for node in candidates[1:]:
        score = _total_score(ask, node, context, profile)
        if score > best_score or (score == best_score and node.node_id < best.node_id):
            best, best_score = node, score
    return best


def _still_nowhere(
    ask: PendingAsk,
    cluster: CapacityIndex,
    context: PassContext,
    profile: Profile,
    nowhere: dict[Resources, int],
) -> bool:
    """True if ``ask``'s size fitted nowhere before and no node that gained room since can take
    it now (the remembered verdict is then brought up to date)."""
    since = nowhere.get(ask.resources)
    if since is None:
        return False
    gained = cluster.gained_since(since)
    if gained is None:
        return False
    generation = cluster.generation
    for node_id in set(gained):
        node = cluster.get(node_id)
        if (
            node is not None
            and ask.resources.fits_in(node.free)
            and all(f.feasible(ask, node, context) for f in profile.filters)
        ):
            return False
    nowhere[ask.resources] = generation
    return True


def _known_to_fail(request: Resources, memo_key: str, failed: list[tuple[str, Resources]]) -> bool:
    """A container no larger already fitted nowhere in this pass (capacity only shrinks)."""
    return any(key == memo_key and shape.fits_in(request) for key, shape in failed)


def _known_refused(
    kind: AllocationKind, request: Resources, refused: dict[AskShape, Refusal]
) -> Refusal | None:
    """A shape-only permit's refusal of an ask of this kind and no larger in this pass."""
    for (k, shape), refusal in refused.items():
        if k is kind and shape.fits_in(request):
            return refusal
    return None


def _all_failed(
    shapes: Collection[AskShape],
    failed: list[tuple[str, Resources]],
    refused: dict[AskShape, Refusal],
) -> bool:
    return all(
        _known_to_fail(shape, "", failed) or _known_refused(kind, shape, refused) is not None
        for kind, shape in shapes
    )


def _total_score(
    ask: PendingAsk, node: NodeCapacity, context: PassContext, profile: Profile
) -> float:
    scores = profile.scores
    if len(scores) == 1:  # the common case, spared a generator per node scored
        plugin, weight = scores[0]
        return weight * plugin.score(ask, node, context)
    return sum(weight * plugin.score(ask, node, context) for plugin, weight in scores)
