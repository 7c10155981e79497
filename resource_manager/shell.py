"""The one shell around the resource manager's core: an action in, one unit of work, effects out.

Everything that drives the RM core goes through :class:`RMShell`: the gRPC service
(:mod:`resource_manager.rm_state`, each request and each timer), the simulator
(:mod:`simulator.engine`, each simulated request and timer) and the tests' driver
(``tests/unit/resource_manager/harness.py``).  None of them begins, commits or rolls back a unit,
drains what the core placed, or decides whether a pass is due: they carry out the
:class:`Effects` this shell hands back, each with its own transport and its own clock (asyncio
timers and the network for the service, an event queue for the simulator, at once for tests).

An action is ``action(core, now) -> T``: one request's, one heartbeat's or one timer's call into
the core, **with everything that may still refuse it inside**: request checks first, then the
core's call, then the building of the answer (a protobuf message, a grant token).  If any of it
raises, memory and the store are as they were before, and no grant is marked delivered: a
caller refused is never told less than the core committed (issue 29: a refused ``Allocate``
used to have marked its grants delivered already).

Modelled on Nomad's plan applier and dask's ``Worker``: the core decides, the shell applies and
reports what its driver must do; nothing here decides anything.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from enum import Enum
from typing import Generic, NamedTuple, TypeVar

from policies.scheduling.framework import AllocationKind, Placement, Plan
from resource_manager.core import ResourceManagerCore
from resource_manager.errors import StateUnavailableError
from resource_manager.records import MasterReport, Now
from resource_manager.scheduling import needs_pass, next_locality_end
from resource_manager.state import CoreState

log = logging.getLogger(__name__)

_NO_JOBS: frozenset[str] = frozenset()
_tuple_new = tuple.__new__

T = TypeVar("T")
Action = Callable[[ResourceManagerCore, Now], T]


class PassDue(Enum):
    """When the driver should run the next scheduling pass (:meth:`RMShell.schedule`)."""

    NO = "no"  # nothing a pass could place
    SOON = "soon"  # after the driver's batching delay (the service's 20 ms): one pass per batch
    AT_ONCE = "at_once"  # the last pass stopped at its placement limit: go on without delay


class Effects(NamedTuple):
    """What one committed unit of work asks its driver to carry out.  Nothing here is decided by
    the driver: it only chooses how (a network answer, a timer, an event).  (A named tuple:
    immutable, and built in a fraction of a microsecond, once per heartbeat.)"""

    changed_jobs: frozenset[str]
    """Jobs the unit changed: their watchers (``WatchJob``) must hear."""
    placed: tuple[Placement, ...]
    """Containers the unit placed.  A job master's is launched by its node's next heartbeat
    answer; a task container is delivered to its job master by its next ``Allocate``."""
    plans: tuple[Plan, ...]
    """Every plan the unit applied, in order: each decision a pass or a timer made (placements,
    preemptions, resumptions, resizes, ...), with its reasons; what a decision trace records."""
    heard: tuple[MasterReport, ...]
    """What job masters decided and said in the unit's ``Allocate`` (kept containers, drops,
    speculative outcomes): the rest of what a decision trace records."""
    nodes_to_tell: tuple[str, ...]
    """Nodes whose containers got a new goal: their next heartbeat answer carries commands (a
    driver that does not heartbeat idle nodes, the simulator, heartbeats these)."""
    pass_due: PassDue
    version: int
    """:attr:`Tables.version` after the unit: a driver that samples usage samples on change."""

    @property
    def masters_placed(self) -> tuple[str, ...]:
        """Nodes where a job master was placed (their next heartbeat launches it)."""
        return tuple(p.node_id for p in self.placed if p.kind is AllocationKind.JOB_MASTER)

    @property
    def jobs_granted(self) -> tuple[str, ...]:
        """Jobs granted task containers, once each in placement order (their job masters hear
        at their next ``Allocate``)."""
        jobs = (p.job_id for p in self.placed if p.kind is not AllocationKind.JOB_MASTER)
        return tuple(dict.fromkeys(jobs))


class Outcome(NamedTuple, Generic[T]):
    """An action's result and the effects of its unit."""

    result: T
    effects: Effects


class RMShell:
    """Runs actions on the core as units of work (whole, or not at all) and reports their
    effects.  Not thread-safe: one unit at a time, as each driver calls it (the service from
    its one event loop)."""

    def __init__(self, core: ResourceManagerCore) -> None:
        self.core = core
        self._state = core.state  # (the core's for its lifetime; read after every unit)
        self._sprints = core.state.sprints
        self._state_refusals = 0  # units refused since the state directory failed (0: fine)

    def run(self, action: Action[T], now: Now) -> Outcome[T]:
        """Apply ``action(core, now)`` whole or not at all, and report its effects.

        Whole or not at all includes the commit: if the state directory cannot take the unit
        (full, read-only, failing), memory is rolled back too and StateUnavailableError is
        raised (nothing is answered or done after a commit that failed).  The next unit tries
        again: the RM recovers by itself once there is room.  The log says so once when it
        begins and once when it ends."""
        core, state = self.core, self._state
        tables = state.tables
        tables.begin()
        try:
            result = action(core, now)
        except BaseException:
            tables.rollback()
            raise
        try:
            changed = tables.commit()  # (a commit that fails rolls the unit back itself)
        except StateUnavailableError as error:
            if not self._state_refusals:
                log.error("%s: changes are refused until it can take them", error)
            self._state_refusals += 1
            raise
        if self._state_refusals:
            log.warning(
                "the state directory takes changes again (%d refused meanwhile)",
                self._state_refusals,
            )
            self._state_refusals = 0
        # (Most units, heartbeats that change nothing, have nothing to drain: each is looked at
        # before a drain allocates anything.)
        # Built by tuple.__new__ itself, in the fields' order: a named tuple's own constructor
        # is a Python function, a measurable share of a unit that changes nothing.
        effects = _tuple_new(
            Effects,
            (
                frozenset(changed) if changed else _NO_JOBS,
                tuple(state.drain_placed()) if state.placed else (),
                tuple(state.drain_applied()) if state.applied else (),
                tuple(state.drain_heard()) if state.heard else (),
                tuple(state.drain_to_tell()) if state.to_tell else (),
                _pass_due(state),
                tables.version,
            ),
        )
        return _tuple_new(Outcome, (result, effects))

    def pass_due(self) -> PassDue:
        """Whether a scheduling pass could place something now, and how soon to run it."""
        return _pass_due(self._state)

    def schedule(self, now: Now) -> Outcome[Plan]:
        """One scheduling pass, as a unit of work of its own (group commit: the requests of a
        batch share it)."""
        return self.run(lambda core, at: core.schedule(at), now)

    def tick(self, now: Now) -> Outcome[None]:
        """The core's timers (lost nodes, overdue suspensions, locality waits, sprints)."""
        return self.run(lambda core, at: core.tick(at), now)

    def settle(self, now: Now, effects: Effects) -> Effects:
        """Run passes until none is due (a driver with no delay of its own: the tests').
        Returns the effects of the last unit run (``effects`` if none was)."""
        while effects.pass_due is not PassDue.NO:
            effects = self.schedule(now).effects
        return effects

    def next_wakeup(self) -> float | None:
        """When (monotonic) :meth:`tick` has something to do, or None."""
        return self.core.next_wakeup()

    def next_sprint_change(self) -> float | None:
        """When (wall) a sprint starts or the sprint budget runs dry (DiAS)."""
        return self._sprints.next_change()

    def next_locality_end(self) -> float | None:
        """When (monotonic) the earliest held-back ask's locality wait ends."""
        return next_locality_end(self._state)


def _pass_due(state: CoreState) -> PassDue:
    """:meth:`RMShell.pass_due` of ``state``: NO when no pass could place anything, AT_ONCE
    when the last pass stopped at its placement limit, SOON otherwise."""
    if not needs_pass(state):
        return PassDue.NO
    return PassDue.AT_ONCE if state.cut_short else PassDue.SOON
