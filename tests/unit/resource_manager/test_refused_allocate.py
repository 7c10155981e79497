"""A refused ``Allocate`` changes nothing (issue 29): no grant is marked delivered, nothing is
committed, and the grants it would have carried reach the job master at its next call.

Served for real (an aio gRPC server on a loopback port): the property holds for the service as
the job master sees it, through the RM's one shell.  Each example starts a fresh RM holding a
grant not yet delivered, sends one ``Allocate`` drawn from valid and invalid parts, and checks
that if it was refused, memory and the state database are exactly as before.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

import grpc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from resource_manager.records import AllocationRecord
from sluice_pb import common_pb2 as pb
from sluice_pb import resource_manager_pb2 as rm_pb
from tests.unit.resource_manager.test_service import Served

T = TypeVar("T")

SPEC = """
name: two
phases:
  - name: p
    tasks: 2
    command: ["true"]
    resources: {cpu: 2, memory_mb: 64}
"""


class AnswerBrokenError(RuntimeError):
    """Raised while the answer is built (a bug, or a token that cannot be signed)."""


def _on_loop(served: Served, read: Callable[[], T]) -> T:
    """``read()`` on the RM's event loop, between its units of work (never inside one)."""

    async def call() -> T:
        return read()

    return asyncio.run_coroutine_threadsafe(call(), served.loop).result(timeout=30)


def _snapshot(served: Served) -> tuple[object, ...]:
    """Everything a unit may change: the hot records in memory and the database's rows."""

    def read() -> tuple[object, ...]:
        core = served.core
        rows = tuple(core.tables._store._db.iterdump())  # type: ignore[attr-defined]
        return (dict(core.jobs), dict(core.tasks), dict(core.allocations), dict(core.nodes), rows)

    return _on_loop(served, read)


@contextmanager
def _holding_an_undelivered_grant() -> Iterator[tuple[Served, str, AllocationRecord]]:
    """An RM whose running job asked for two 2-CPU containers while one node could hold one:
    that one was delivered; a second node registered since, and a pass on the RM's own timer
    granted it a container its job master has not heard of yet."""
    served = Served()
    try:
        served.register("n1")
        job_id = served.jobs.SubmitJob(
            rm_pb.SubmitJobRequest(spec_yaml=SPEC, client_mode=True), timeout=5
        ).job.job_id
        served.masters.RegisterMaster(rm_pb.RegisterMasterRequest(job_id=job_id), timeout=5)
        first = served.masters.Allocate(_ask(job_id, 2), timeout=5)
        assert len(first.granted) == 1
        served.register("n2")
        waiting = _wait_for_undelivered(served, job_id)
        yield served, job_id, waiting
    finally:
        served.close()


def _wait_for_undelivered(served: Served, job_id: str) -> AllocationRecord:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        waiting = _on_loop(served, lambda: served.core.tables.undelivered_of_job(job_id))
        if waiting:
            return waiting[0]
        time.sleep(0.01)  # polling a condition (the RM's pass timer), not a timed assertion
    raise AssertionError("the RM's pass never granted the second container")


def _ask(job_id: str, count: int, **fields: object) -> rm_pb.AllocateRequest:
    request = rm_pb.AllocateRequest(
        job_id=job_id,
        asks=[rm_pb.Ask(phase="p", count=count, resources=pb.Resources(cpu=2, memory_mb=64))],
        master_attempt=1,
    )
    for name, value in fields.items():
        if isinstance(value, list):
            getattr(request, name).extend(value)
        else:
            setattr(request, name, value)
    return request


# The parts of a request: each valid, or invalid in one way the RM must refuse.
BAD_PARTS: dict[str, dict[str, object]] = {
    "unknown phase": {"asks": [rm_pb.Ask(phase="nope", count=1)]},
    "too many": {"asks": [rm_pb.Ask(phase="p", count=9, resources=pb.Resources(cpu=2))]},
    "superseded attempt": {"master_attempt": 7},
    "kept for no phase": {"kept": [rm_pb.ReservedSlot(allocation_id="alloc-404", phase="x")]},
    "kept for ever": {"kept": [rm_pb.ReservedSlot(phase="p", until=float("inf"))]},
    "unknown progress": {"progress": [rm_pb.PhaseProgress(name="nope")]},
    "bad speculative": {"speculative": [rm_pb.SpeculativeAttempt(outcome="exploded")]},
    "too many nodes": {"resolve_nodes": ["n1"] * 1001},
}


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    derandomize=True,  # the same examples every run: a test, not a search
)
@given(
    bad=st.lists(st.sampled_from(sorted(BAD_PARTS)), max_size=3, unique=True),
    releases=st.booleans(),
    answer_breaks=st.booleans(),
    resolve=st.booleans(),
)
def test_a_refused_allocate_changes_nothing(
    bad: list[str], releases: bool, answer_breaks: bool, resolve: bool
) -> None:
    with _holding_an_undelivered_grant() as (served, job_id, waiting):
        fields: dict[str, object] = {"resolve_nodes": ["n1", "n2"]} if resolve else {}
        if releases:  # a part that changes much when applied: its container goes back
            held = _on_loop(
                served, lambda: [a for a in served.core.allocations.values() if a.delivered]
            )
            fields["releases"] = [a.allocation_id for a in held]
        for name in bad:
            fields.update(BAD_PARTS[name])
        # (it holds one of its two already, unless it gives it back)
        request = _ask(job_id, 2 if releases else 1, **fields)
        if "asks" in fields:  # (the bad ask replaces the good one)
            del request.asks[:]
            request.asks.extend(fields["asks"])  # type: ignore[arg-type]
        original = served.state.allocation_to_pb
        if answer_breaks:

            def broken(allocation: AllocationRecord) -> rm_pb.Allocation:
                raise AnswerBrokenError("the answer could not be built")

            served.state.allocation_to_pb = broken  # type: ignore[method-assign]
        before = _snapshot(served)
        try:
            answer = served.masters.Allocate(request, timeout=5)
        except grpc.RpcError as error:
            refused = True
            assert error.code() in {
                grpc.StatusCode.INVALID_ARGUMENT,
                grpc.StatusCode.FAILED_PRECONDITION,
                grpc.StatusCode.NOT_FOUND,
                grpc.StatusCode.INTERNAL,
            }, error
        else:
            refused = False
        served.state.allocation_to_pb = original  # type: ignore[method-assign]

        expect_refused = bool(bad) or answer_breaks
        assert refused == expect_refused, (bad, answer_breaks)
        if refused:
            assert _snapshot(served) == before
            assert not _on_loop(
                served, lambda: served.core.allocations[waiting.allocation_id]
            ).delivered
            # The grant reaches the job master at its next call, which is not refused.
            answer = served.masters.Allocate(_ask(job_id, 1), timeout=5)
        assert waiting.allocation_id in [a.allocation_id for a in answer.granted]
        assert _on_loop(served, lambda: served.core.allocations[waiting.allocation_id]).delivered
