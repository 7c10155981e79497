"""The job master round's two messages on the wire: :class:`AllocateCall` <-> ``AllocateRequest``
and :class:`AllocateAnswer` <-> ``AllocateResponse``.

The live job master uses :func:`call_to_pb` and :func:`answer_from_pb`; the other two directions
(the RM's side of the same messages) make the converters checkable as round trips
(``tests/unit/job_master/test_round_pb.py``), so a field the round gains cannot be dropped on
the wire unnoticed.
"""

from __future__ import annotations

from job_master.plan import SpeculativeRecord
from job_master.round import (
    AllocateAnswer,
    AllocateCall,
    Grant,
    KeptChange,
    SequencedTaskEvent,
)
from plumbing.wire import (
    TASK_STATE_FROM_PB,
    TASK_STATE_TO_PB,
    progress_from_pb,
    progress_to_pb,
    resources_from_pb,
    resources_to_pb,
)
from policies.scheduling.asks import PhaseAsk
from sluice_pb import common_pb2 as pb
from sluice_pb import resource_manager_pb2 as rm_pb


def call_to_pb(call: AllocateCall) -> rm_pb.AllocateRequest:
    return rm_pb.AllocateRequest(
        job_id=call.job_id,
        asks=[
            rm_pb.Ask(
                phase=a.phase,
                count=a.count,
                resources=resources_to_pb(a.resources),
                preferred_nodes=a.preferred_nodes,
                local_only=a.local_only,
            )
            for a in call.asks
        ],
        releases=call.releases,
        progress=[progress_to_pb(p) for p in call.progress],
        events_after=call.events_after,
        master_attempt=call.attempt,
        kept=[
            rm_pb.ReservedSlot(
                allocation_id=k.allocation_id, phase=k.phase, until=k.until, ended=k.ended
            )
            for k in call.kept
        ],
        resolve_nodes=call.resolve_nodes,
        speculative=[speculative_attempt_to_pb(r) for r in call.speculative],
    )


def speculative_attempt_to_pb(record: SpeculativeRecord) -> rm_pb.SpeculativeAttempt:
    """One entry of the RM's speculative log (``Allocate`` and ``FinishJob`` carry them)."""
    return rm_pb.SpeculativeAttempt(
        task_id=record.task_id,
        attempt=record.attempt,
        node_id=record.node_id,
        outcome=record.outcome,
        message=record.message,
    )


def call_from_pb(request: rm_pb.AllocateRequest) -> AllocateCall:
    return AllocateCall(
        job_id=request.job_id,
        attempt=request.master_attempt,
        asks=tuple(
            PhaseAsk(
                a.phase,
                a.count,
                resources_from_pb(a.resources),
                tuple(a.preferred_nodes),
                a.local_only,
            )
            for a in request.asks
        ),
        releases=tuple(request.releases),
        progress=tuple(progress_from_pb(p) for p in request.progress),
        events_after=request.events_after,
        kept=tuple(KeptChange(k.allocation_id, k.phase, k.until, k.ended) for k in request.kept),
        speculative=tuple(
            SpeculativeRecord(r.task_id, r.attempt, r.node_id, r.outcome, r.message)
            for r in request.speculative
        ),
        resolve_nodes=tuple(request.resolve_nodes),
    )


def answer_to_pb(answer: AllocateAnswer) -> rm_pb.AllocateResponse:
    return rm_pb.AllocateResponse(
        granted=[
            rm_pb.Allocation(
                allocation_id=g.allocation_id,
                phase=g.phase,
                node_id=g.node_id,
                node_address=g.node_address,
                resources=resources_to_pb(g.resources),
                grant_token=g.grant_token,
            )
            for g in answer.granted
        ],
        events=[
            rm_pb.SequencedTaskEvent(
                seq=e.seq,
                event=pb.TaskEvent(
                    task_id=e.task_id,
                    attempt=e.attempt,
                    state=(
                        pb.TASK_STATE_UNSPECIFIED if e.state is None else TASK_STATE_TO_PB[e.state]
                    ),
                    exit_code=e.exit_code,
                    message=e.message,
                    preempted=e.preempted,
                    start_time=e.start_time,
                    timestamp=e.end_time,
                    node_id=e.node_id,
                ),
            )
            for e in answer.events
        ],
        lost_allocations=answer.lost_allocations,
        kill_requested=answer.kill_requested,
        node_addresses=answer.node_addresses,
        speculative_passes=answer.speculative_passes,
    )


def answer_from_pb(response: rm_pb.AllocateResponse) -> AllocateAnswer:
    return AllocateAnswer(
        granted=tuple(grant_from_pb(a) for a in response.granted),
        events=tuple(
            SequencedTaskEvent(
                seq=s.seq,
                task_id=s.event.task_id,
                attempt=s.event.attempt,
                # An unknown state (a newer RM) is skipped; its later events settle the attempt.
                state=TASK_STATE_FROM_PB.get(s.event.state),
                exit_code=s.event.exit_code,
                message=s.event.message,
                preempted=s.event.preempted,
                start_time=s.event.start_time,
                end_time=s.event.timestamp,
                node_id=s.event.node_id,
            )
            for s in response.events
        ),
        lost_allocations=tuple(response.lost_allocations),
        kill_requested=response.kill_requested,
        node_addresses=dict(response.node_addresses),
        speculative_passes=dict(response.speculative_passes),
    )


def grant_from_pb(allocation: rm_pb.Allocation) -> Grant:
    """A container granted in ``Allocate``, or held at registration (``RegisterMaster``)."""
    return Grant(
        allocation_id=allocation.allocation_id,
        phase=allocation.phase,
        node_id=allocation.node_id,
        node_address=allocation.node_address,
        resources=resources_from_pb(allocation.resources),
        grant_token=allocation.grant_token,
    )
