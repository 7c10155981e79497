"""One job master round, pure: what the plan says in ``Allocate`` and what it makes of the answer.

A round of a job master, live (:mod:`job_master.master`) or simulated (``simulator.engine``), is:

1. :func:`begin_round`: the plan, at the round's ``now``, decides (launches, stops, releases,
   asks, speculative placements and upgrades);
2. the caller carries out the launches, stops and speculative work (the decisions are the plan's;
   carrying them out is the caller's: RPCs to agents, or simulated nodes);
3. unless the job has ended (:attr:`JobPlan.outcome`: the caller reports its end instead),
   :func:`allocate_call` builds everything the job master says to the RM in ``Allocate``
   (:class:`AllocateCall`), from the plan and the round's decisions;
4. the caller sends it: over gRPC (:mod:`job_master.round_pb` converts both ways), or as one call
   of the RM core's ``allocate``;
5. :func:`absorb` feeds the answer (:class:`AllocateAnswer`) into the plan at the time it came,
   and returns what was heard (:class:`Heard`): the simulator wakes the job master again on news,
   the live master publishes the task ends to the aggregator.

Both callers build the call and absorb the answer here, so a field added to the round reaches
both, and neither can leave one out (``kept`` was once sent by the live master only).  Nothing
here reads a clock or does I/O: time comes in as ``now`` (the plan's clock) and, for the RM's
wall-clock deadlines, ``wall_offset``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, NamedTuple

from job_master.plan import Container, Decisions, JobPlan, SpeculativeRecord, node_run_time
from job_master.speculation import Candidate
from policies.scheduling.asks import PhaseAsk
from policies.scheduling.lifecycle import TaskState
from policies.scheduling.progress import PhaseProgress
from policies.scheduling.resources import Resources

if TYPE_CHECKING:  # (numpy only types the random generator: not on the master's start path)
    import numpy as np

SPECULATIVE_MESSAGE_MAX = 200
"""Characters of a speculative attempt's message the RM's log is sent (the rest is cut)."""

_EMPTY: Mapping[str, Any] = MappingProxyType({})


class KeptChange(NamedTuple):
    """One change of a container's slot reservation, as the RM records it: kept for ``phase``
    until ``until`` (the RM's wall time; 0: no deadline yet), or no longer kept (empty
    ``phase``), or one end of its keeping (``ended``: a ``KeptEnd`` reason)."""

    allocation_id: str
    phase: str
    until: float = 0.0
    ended: str = ""


class AllocateCall(NamedTuple):
    """Everything a job master says in one ``Allocate``."""

    job_id: str
    attempt: int  # the job master attempt, as registered (a superseded one is refused)
    asks: tuple[PhaseAsk, ...]  # absolute: what each phase still wants
    releases: tuple[str, ...]  # allocation ids given back
    progress: tuple[PhaseProgress, ...]
    events_after: int  # the highest task event sequence number already absorbed
    kept: tuple[KeptChange, ...] = ()  # slot reservations that changed
    speculative: tuple[SpeculativeRecord, ...] = ()  # speculative attempts whose outcome changed
    resolve_nodes: tuple[str, ...] = ()  # candidate nodes whose agent address is wanted


class Grant(NamedTuple):
    """A container the RM granted (or re-announced)."""

    allocation_id: str
    phase: str
    node_id: str
    node_address: str
    resources: Resources
    grant_token: bytes = b""

    def container(self) -> Container:
        """A fresh :class:`Container` for the plan (which changes its own)."""
        return Container(
            allocation_id=self.allocation_id,
            phase=self.phase,
            node_id=self.node_id,
            node_address=self.node_address,
            resources=self.resources,
            grant_token=self.grant_token,
        )


class SequencedTaskEvent(NamedTuple):
    """The latest state of one task attempt, in the RM's sequence.  ``state`` None: a state
    this job master does not know (a newer RM); the event is skipped but its ``seq`` counts.
    ``start_time`` and ``end_time`` are the node's (its start, and when this state was seen:
    the end, once final)."""

    seq: int
    task_id: str
    attempt: int
    state: TaskState | None
    exit_code: int = 0
    message: str = ""
    preempted: bool = False
    start_time: float = 0.0
    end_time: float = 0.0
    node_id: str = ""


class AllocateAnswer(NamedTuple):
    """Everything the RM answers to one ``Allocate``."""

    granted: tuple[Grant, ...] = ()
    events: tuple[SequencedTaskEvent, ...] = ()  # in sequence order
    lost_allocations: tuple[str, ...] = ()
    kill_requested: bool = False
    node_addresses: Mapping[str, str] = _EMPTY  # for resolve_nodes
    speculative_passes: Mapping[str, bytes] = _EMPTY  # by node id


class TaskEnd(NamedTuple):
    """A final task event the answer brought (stale or not), for the aggregator's ratings."""

    task_id: str
    attempt: int
    node_id: str
    state: TaskState
    preempted: bool


class Heard(NamedTuple):
    """What absorbing an answer brought."""

    events_after: int  # the next call's: the highest sequence number absorbed so far
    granted: int = 0
    lost: int = 0
    ended: tuple[TaskEnd, ...] = ()
    kill_requested: bool = False

    @property
    def news(self) -> bool:
        """Did anything arrive that can change the plan's next decisions (a grant, a lost
        container, an attempt's end)?  What the master only said needs no round of its own."""
        return bool(self.granted or self.lost or self.ended)


def begin_round(
    plan: JobPlan,
    now: float,
    candidates: Sequence[Candidate] = (),
    rng: np.random.Generator | None = None,
) -> Decisions:
    """The plan's clock to ``now``, then its decisions (:meth:`JobPlan.decide`)."""
    plan.advance(now)
    return plan.decide(candidates, rng)


def speculative_report(plan: JobPlan) -> tuple[SpeculativeRecord, ...]:
    """The speculative attempts whose outcome changed since the last report, for the RM's log
    (messages cut to :data:`SPECULATIVE_MESSAGE_MAX`).  Consumes them."""
    return tuple(
        replace(r, message=r.message[:SPECULATIVE_MESSAGE_MAX]) for r in plan.speculative_changes()
    )


def allocate_call(
    plan: JobPlan,
    decisions: Decisions,
    *,
    job_id: str,
    attempt: int,
    events_after: int,
    resolve_nodes: Sequence[str] = (),
    wall_offset: float = 0.0,
) -> AllocateCall:
    """The ``Allocate`` of the round that decided ``decisions``; built once they are carried
    out (their speculative answers are reported in it), and only while the job runs.  Consumes
    the plan's reservation and speculative changes.  ``wall_offset``: the RM's wall clock less
    the plan's clock, to state kept containers' deadlines in the RM's time."""
    kept = tuple(
        KeptChange(
            allocation_id,
            phase,
            expiry + wall_offset if math.isfinite(expiry) else 0.0,
            ended,
        )
        for allocation_id, phase, expiry, ended in plan.kept_changes()
    )
    return AllocateCall(
        job_id=job_id,
        attempt=attempt,
        asks=tuple(decisions.asks),
        releases=tuple(decisions.releases),
        progress=plan.progress(),
        events_after=events_after,
        kept=kept,
        speculative=speculative_report(plan),
        resolve_nodes=tuple(resolve_nodes),
    )


def absorb(plan: JobPlan, call: AllocateCall, answer: AllocateAnswer, now: float) -> Heard:
    """Feed ``answer`` (to ``call``) into the plan, at ``now`` (the plan's clock when it came:
    task times are measured as answers come), in this order: grants, task events (a final one's
    run time as its node measured it, :func:`node_run_time`), lost containers, a kill."""
    plan.advance(now)
    for grant in answer.granted:
        plan.on_granted(grant.container())
    events_after = call.events_after
    ended: list[TaskEnd] = []
    for event in answer.events:
        events_after = max(events_after, event.seq)
        state = event.state
        if state is None:
            continue
        final = state.is_final
        plan.on_task_event(
            event.task_id,
            event.attempt,
            state,
            event.exit_code,
            event.message,
            preempted=event.preempted,
            ran_s=node_run_time(event.start_time, event.end_time) if final else None,
        )
        if final:
            ended.append(
                TaskEnd(event.task_id, event.attempt, event.node_id, state, event.preempted)
            )
    for allocation_id in answer.lost_allocations:
        plan.on_allocation_lost(allocation_id)
    if answer.kill_requested:
        plan.kill("killed")
    return Heard(
        events_after=events_after,
        granted=len(answer.granted),
        lost=len(answer.lost_allocations),
        ended=tuple(ended),
        kill_requested=answer.kill_requested,
    )
