"""The scheduling framework: the pass, its extension points, the capacity index it searches and
the pending asks it serves."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from policies.scheduling import priority_fifo
from policies.scheduling.capacity_index import LEVELS, CapacityIndex, allocated_level
from policies.scheduling.framework import (
    AllocationKind,
    NodeCapacity,
    PassContext,
    PendingAsk,
    Plan,
    Preemption,
    PreemptionAction,
    PriorityFifo,
    Profile,
    Refusal,
    baseline_profile,
    schedule_pass,
)
from policies.scheduling.pending_asks import PendingAsks
from policies.scheduling.resources import Resources
from tests.builders import res


def index_of(*nodes: tuple[str, float, int, float, int]) -> CapacityIndex:
    """(node, cpu, memory, allocated cpu, allocated memory) per node."""
    index = CapacityIndex()
    for node_id, cpu, memory, used_cpu, used_memory in nodes:
        index.set(node_id, res(cpu, memory), res(used_cpu, used_memory))
    return index


def pending(
    job_id: str,
    count: int = 1,
    cpu: float = 1.0,
    memory_mb: int = 256,
    *,
    priority: int = 0,
    seq: int = 1,
    phase: str = "p",
    kind: AllocationKind = AllocationKind.TASK,
) -> PendingAsk:
    return PendingAsk(job_id, priority, seq, phase, count, res(cpu, memory_mb), kind)


def run(
    index: CapacityIndex,
    asks: Sequence[PendingAsk],
    profile: Profile | None = None,
    *,
    held: dict[AllocationKind, Resources] | None = None,
) -> Plan:
    queue = PendingAsks(PriorityFifo())
    for ask in asks:
        queue.put(ask)
    context = PassContext(now=0.0, cluster=index, held=dict(held or {}))
    return schedule_pass(iter(queue), context, profile or baseline_profile(), queue.shapes())


def placed(plan: Plan) -> list[tuple[str, str]]:
    return [(p.job_id, p.node_id) for p in plan.placements]


# ------------------------------------------------------------------------------ capacity index


def test_the_index_keeps_buckets_totals_and_the_largest_free_amounts():
    index = index_of(("a", 4, 1000, 0, 0), ("b", 8, 500, 6, 100), ("c", 2, 4000, 1, 2000))
    assert index.total_capacity == res(14, 5500)
    assert index.max_free() == res(4, 2000)  # cpu from a, memory from c
    assert [n.node_id for n in index.least_allocated_first()] == ["a", "c", "b"]  # 0, 50, 75 %
    index.take("a", res(4, 1000))
    assert index.max_free() == res(2, 2000)
    index.remove("c")
    assert index.max_free() == res(2, 400)
    assert index.total_capacity == res(12, 1500)
    assert sorted(index.capacity_shapes()) == [res(4, 1000), res(8, 500)]


def test_a_scratch_is_undone_whole():
    index = index_of(("a", 4, 1000, 0, 0), ("b", 4, 1000, 1, 0))
    before = [(n.node_id, n.allocated) for n in index.least_allocated_first()]
    with index.scratch() as scratch:
        scratch.take("a", res(3, 100))
        scratch.take("a", res(1, 100))
        scratch.remove("b")
        scratch.set("new", res(1, 1), Resources())
        assert index.max_free() == res(1, 800)  # cpu from "new", memory from a
    assert [(n.node_id, n.allocated) for n in index.least_allocated_first()] == before
    assert index.max_free() == res(4, 1000)
    assert "new" not in index


@pytest.mark.parametrize(
    ("capacity", "allocated", "level"),
    [
        (res(4, 1000), res(0, 0), 0),
        (res(4, 1000), res(1, 0), 25),
        (res(4, 1000), res(0, 500), 50),  # the dominant resource decides
        (res(4, 1000), res(4, 1000), LEVELS - 1),  # full nodes go last
        (res(4, 1000), res(5, 0), LEVELS - 1),
    ],
)
def test_allocated_level(capacity: Resources, allocated: Resources, level: int):
    assert allocated_level(capacity, allocated) == level


@given(
    st.lists(
        st.tuples(st.integers(0, 7), st.integers(0, 3), st.integers(0, 2000)),
        min_size=1,
        max_size=60,
    )
)
def test_max_free_is_always_the_true_maximum(changes: list[tuple[int, int, int]]):
    index = CapacityIndex()
    truth: dict[str, Resources] = {}
    for node, used_cpu, used_memory in changes:
        node_id = f"n{node}"
        if used_memory > 1800:
            index.remove(node_id)
            truth.pop(node_id, None)
        else:
            index.set(node_id, res(4, 2000), res(used_cpu, used_memory))
            truth[node_id] = res(4 - used_cpu, 2000 - used_memory)
    expected = Resources(
        max((f.cpu for f in truth.values()), default=0.0),
        max((f.memory_mb for f in truth.values()), default=0),
    )
    assert index.max_free() == expected


# ------------------------------------------------------------------------------ pending asks


def test_pending_asks_are_served_in_queue_order_and_replaced_by_key():
    queue = PendingAsks(PriorityFifo())
    queue.put(pending("late", seq=9))
    queue.put(pending("early", seq=3))
    queue.put(pending("high", priority=5, seq=10))
    queue.put(pending("early", count=4, seq=3))  # replaces early's ask
    assert [(a.job_id, a.count) for a in queue] == [("high", 1), ("early", 4), ("late", 1)]
    queue.put(pending("high", count=0, priority=5, seq=10))  # a count of 0 removes it
    assert [a.job_id for a in queue] == ["early", "late"]
    assert [a.job_id for a in queue.discard_job("late")] == ["late"]
    assert [a.job_id for a in queue] == ["early"]
    assert queue.shapes() == [(AllocationKind.TASK, res(1, 256))]


# ------------------------------------------------------------------------------ the pass


def test_the_baseline_serves_priority_then_fifo_and_spreads():
    index = index_of(("a", 2, 4096, 0, 0), ("b", 2, 4096, 0, 0))
    plan = run(index, [pending("low", 2, seq=1), pending("high", 2, priority=5, seq=2)])
    assert placed(plan) == [("high", "a"), ("high", "b"), ("low", "a"), ("low", "b")]
    # the pass is a plan: the index is as it was
    assert all(n.allocated == res(0, 0) for n in index.nodes())


def test_an_ask_that_fits_nowhere_does_not_block_the_ones_behind_it():
    index = index_of(("a", 2, 4096, 0, 0))
    plan = run(index, [pending("big", cpu=4, seq=1), pending("small", cpu=1, seq=2)])
    assert placed(plan) == [("small", "a")]


def test_job_masters_wait_at_the_permit_point_beyond_their_share():
    index = index_of(("a", 10, 10_000, 0, 0))  # 10 %: 1 cpu, 1000 MiB of job masters
    masters = [
        pending(f"j{i}", cpu=0.4, memory_mb=256, seq=i, phase="", kind=AllocationKind.JOB_MASTER)
        for i in range(4)
    ]
    plan = run(index, masters)
    assert [p.job_id for p in plan.placements] == ["j0", "j1"]  # 0.8 cpu; a third makes 1.2
    # j2 waits; the permit's refusal holds for j3 too, and nothing else is asked for: the pass
    # ends there.
    assert [(w.ask.job_id, w.why.plugin) for w in plan.waiting] == [("j2", "MasterShare")]
    assert plan.waiting[0].why.reason == (
        "job masters hold their share of the cluster (10%, max_master_share)"
    )


class _CountingPermit:
    """Refuses job masters; counts how often it is asked."""

    name = "Counting"

    def __init__(self, *, shape_only: bool) -> None:
        self.shape_only = shape_only
        self.asked = 0

    def admit(self, ask: PendingAsk, context: PassContext) -> Refusal | None:
        self.asked += 1
        if ask.kind is not AllocationKind.JOB_MASTER:
            return None
        return Refusal(self.name, "no job masters here")


@pytest.mark.parametrize(("shape_only", "asked"), [(True, 2), (False, 52)])
def test_a_shape_only_permit_is_not_asked_again_for_asks_it_has_refused(
    shape_only: bool, asked: int
):
    index = index_of(("a", 4, 4096, 0, 0))
    masters = [
        pending(f"m{i}", cpu=0.5, memory_mb=256, seq=i, phase="", kind=AllocationKind.JOB_MASTER)
        for i in range(50)
    ]
    bigger = pending(
        "m-big", cpu=1, memory_mb=512, seq=60, phase="", kind=AllocationKind.JOB_MASTER
    )
    task = pending("t", cpu=0.5, memory_mb=256, seq=70)  # the same size as the masters
    permit = _CountingPermit(shape_only=shape_only)
    profile = Profile(queue_order=PriorityFifo(), permits=(permit,))
    plan = run(index, [*masters, bigger, task], profile)
    assert placed(plan) == [("t", "a")]  # a refusal of job masters holds back no task
    assert len(plan.waiting) == 51
    # Remembered: one call for the masters (the bigger one is no smaller), one for the task.
    assert permit.asked == asked


def test_one_job_master_may_always_run():
    index = index_of(("a", 1, 1000, 0, 0))
    master = pending("j", cpu=0.5, memory_mb=512, phase="", kind=AllocationKind.JOB_MASTER)
    assert placed(run(index, [master])) == [("j", "a")]


class _PreemptEverything:
    name = "PreemptEverything"

    def preempt(self, ask: PendingAsk, context: PassContext) -> Sequence[Preemption]:
        return [Preemption(f"victim-of-{ask.job_id}", PreemptionAction.SUSPEND, "test")]


class _NotOnB:
    shape_only = True
    name = "NotOnB"

    def feasible(self, ask: PendingAsk, node: NodeCapacity, context: PassContext) -> bool:
        return node.node_id != "b"


def test_filter_and_post_filter_plugins_are_consulted():
    index = index_of(("a", 1, 1000, 0, 0), ("b", 4, 4000, 0, 0))
    profile = Profile(
        queue_order=PriorityFifo(),
        filters=(_NotOnB(),),
        post_filters=(_PreemptEverything(),),
    )
    plan = run(index, [pending("j", 2)], profile)
    assert placed(plan) == [("j", "a")]
    assert [p.allocation_id for p in plan.preemptions] == ["victim-of-j"]


def test_on_a_large_cluster_only_a_few_feasible_nodes_are_scored():
    nodes = [(f"n{i:04d}", 16.0, 65536, float(i % 16), 0) for i in range(2000)]
    index = index_of(*nodes)
    plan = run(index, [pending("j", 3)], baseline_profile(nodes_to_score=4))
    # the least allocated nodes (0 cpu used) come first; among the first four found, the
    # lowest node id wins each time, and a node just used moves up a bucket
    assert placed(plan) == [("j", "n0000"), ("j", "n0016"), ("j", "n0032")]


# ------------------------------------------------------------------------------ equivalence


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 8), st.integers(1, 8)), min_size=1, max_size=12),
    st.lists(
        st.tuples(st.integers(0, 3), st.integers(1, 5), st.integers(1, 4), st.integers(1, 3)),
        min_size=1,
        max_size=10,
    ),
)
def test_on_small_clusters_the_pass_places_exactly_as_the_exhaustive_baseline(
    node_shapes: list[tuple[int, int]], asks: list[tuple[int, int, int, int]]
):
    """Up to ``exhaustive_below`` nodes every feasible node is scored: the same placements as
    :func:`priority_fifo.place`, the exhaustive least-allocated reference."""
    nodes = [
        priority_fifo.NodeSlot(f"n{i:02d}", res(cpu, memory * 512), Resources())
        for i, (cpu, memory) in enumerate(node_shapes)
    ]
    reference_asks = [
        priority_fifo.Ask(f"job{seq:02d}", priority, seq, "p", count, res(cpu, 256 * cpu))
        for seq, (priority, count, cpu, _) in enumerate(asks)
    ]
    expected = [(p.job_id, p.node_id) for p in priority_fifo.place(nodes, reference_asks)]
    index = index_of(*[(n.node_id, n.capacity.cpu, n.capacity.memory_mb, 0, 0) for n in nodes])
    framework_asks = [
        PendingAsk(a.job_id, a.priority, a.submit_seq, a.phase, a.count, a.resources)
        for a in reference_asks
    ]
    profile = Profile(queue_order=PriorityFifo(), scores=baseline_profile().scores)
    assert placed(run(index, framework_asks, profile)) == expected


@settings(max_examples=80, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["ask", "ask", "release"]),
            st.integers(0, 7),
            st.sampled_from([(1, 512), (4, 1024), (2, 8192), (8, 2048), (3, 3072)]),
        ),
        min_size=1,
        max_size=60,
    )
)
def test_remembering_sizes_that_fit_nowhere_changes_no_placement(
    steps: list[tuple[str, int, tuple[int, int]]],
):
    """A size that fitted on no node is looked for, in later passes, only on the nodes that
    gained room since: the placements are exactly those of a pass that looks everywhere."""

    def cluster() -> CapacityIndex:
        return index_of(*[(f"n{i:02d}", 8, 8192, 0, 0) for i in range(8)])

    remembering, forgetting = cluster(), cluster()
    nowhere: dict[Resources, int] = {}
    profile = baseline_profile(nodes_to_score=4)
    for number, (action, node, (cpu, memory)) in enumerate(steps):
        if action == "release":  # a node's containers all end
            for index in (remembering, forgetting):
                index.set(f"n{node:02d}", Resources(8, 8192), Resources())
            continue
        asks = [pending(f"j{number}", 3, cpu, memory, seq=number)]
        plans = []
        for index, memory_of_failures in ((remembering, nowhere), (forgetting, None)):
            plan = schedule_pass(
                asks, PassContext(now=0.0, cluster=index), profile, (), memory_of_failures
            )
            for placement in plan.placements:  # the shell applies the plan
                held = index.get(placement.node_id)
                assert held is not None
                index.set(held.node_id, held.capacity, held.allocated + placement.resources)
            plans.append(placed(plan))
        assert plans[0] == plans[1]


def test_a_size_that_fitted_nowhere_is_placed_on_the_node_that_gained_room():
    index = index_of(*[(f"n{i:02d}", 8, 8192, 0, 0) for i in range(30)])
    nowhere: dict[Resources, int] = {}
    profile = baseline_profile(nodes_to_score=4)

    def place(job: str, count: int) -> list[tuple[str, str]]:
        plan = schedule_pass(
            [pending(job, count, 8, 2048)], PassContext(0.0, index), profile, (), nowhere
        )
        for placement in plan.placements:
            held = index.get(placement.node_id)
            assert held is not None
            index.set(held.node_id, held.capacity, held.allocated + placement.resources)
        return placed(plan)

    assert len(place("fill", 31)) == 30
    assert set(nowhere) == {res(8, 2048)}  # remembered: it fits on no node
    assert place("again", 1) == []  # only the nodes that gained room since are looked at
    index.set("n05", res(8, 8192), Resources())  # n05's containers end
    assert place("later", 1) == [("later", "n05")]
    assert nowhere == {}


def test_a_pass_stops_at_its_placement_limit_and_the_next_goes_on_from_the_head():
    index = index_of(("n1", 8.0, 8192, 0.0, 0), ("n2", 8.0, 8192, 0.0, 0))
    asks = [pending("high", 3, priority=5, seq=1), pending("low", 4, seq=2)]
    context = PassContext(now=0.0, cluster=index)
    first = schedule_pass(asks, context, baseline_profile(), max_placements=4)
    assert first.cut_short
    assert [p.job_id for p in first.placements] == ["high", "high", "high", "low"]
    whole = schedule_pass(asks, context, baseline_profile())
    assert not whole.cut_short and len(whole.placements) == 7
    exact = schedule_pass(asks, context, baseline_profile(), max_placements=7)
    assert exact.cut_short  # it cannot know nothing more fits: one more pass will tell


class _CountingClaims:
    """Holds every node's capacity for queue "short"; counts the nodes it is asked about."""

    def __init__(self, *, by_queue: bool) -> None:
        self.by_queue = by_queue
        self.asked = 0

    def held_for_others(self, ask: PendingAsk, node: NodeCapacity) -> Resources:
        self.asked += 1
        return node.capacity if ask.queue != "short" else Resources()

    def on_placed(self, placement: object) -> Sequence[object]:
        return ()


# (a small cluster: every feasible node is scored, so short-0's search visits all ten too)
@pytest.mark.parametrize(("by_queue", "asked"), [(True, 10 + 10), (False, 20 * 10 + 10)])
def test_a_shape_that_fits_nowhere_for_a_queue_is_searched_for_once_per_pass(
    by_queue: bool, asked: int
):
    index = index_of(*((f"n{i}", 4, 4096, 0, 0) for i in range(10)))
    claims = _CountingClaims(by_queue=by_queue)
    profile = Profile(queue_order=PriorityFifo(), reserves=(claims,))  # type: ignore[arg-type]
    long_jobs = [replace(pending(f"long-{i}", seq=i), queue="long") for i in range(20)]
    short = replace(pending("short-0", seq=99), queue="short")
    plan = run(index, [*long_jobs, short], profile)
    assert placed(plan) == [("short-0", "n0")]  # the claims are the short queue's
    assert claims.asked == asked  # every node once per search
