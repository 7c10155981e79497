"""The baseline placement: strict priority, FIFO within a priority, work-conserving, spreading."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from policies.scheduling.priority_fifo import Ask, NodeSlot, Placement, order_asks, place
from policies.scheduling.resources import Resources
from tests.builders import ask, node_slot, res


def granted(placements: tuple[Placement, ...]) -> list[tuple[str, str, str]]:
    """(job, phase, node) per placement, in the order made."""
    return [(p.job_id, p.phase, p.node_id) for p in placements]


@pytest.mark.parametrize(
    ("asks", "expected"),
    [
        # strict priority: the later, higher-priority job is served first
        ([ask("low", priority=0, seq=1), ask("high", priority=5, seq=2)], ["high/p", "low/p"]),
        # FIFO within a priority, by submission order, not by the order given
        ([ask("late", seq=9), ask("early", seq=3)], ["early/p", "late/p"]),
        # same job: the given (phase) order is kept
        ([ask("j", phase="b"), ask("j", phase="a")], ["j/b", "j/a"]),
        # negative priorities sort below zero
        ([ask("neg", priority=-1, seq=1), ask("zero", priority=0, seq=2)], ["zero/p", "neg/p"]),
    ],
)
def test_order_asks(asks: list[Ask], expected: list[str]):
    assert [f"{a.job_id}/{a.phase}" for a in order_asks(asks)] == expected


@pytest.mark.parametrize(
    ("nodes", "asks", "expected"),
    [
        pytest.param(
            [node_slot("n1", 2.0, 1024)],
            [ask("low", seq=1, count=2), ask("high", priority=1, seq=2, count=2)],
            [("high", "p", "n1"), ("high", "p", "n1")],
            id="higher priority takes the only room",
        ),
        pytest.param(
            [node_slot("n1", 2.0, 1024)],
            [ask("second", seq=2, count=2), ask("first", seq=1, count=1)],
            [("first", "p", "n1"), ("second", "p", "n1")],
            id="fifo within a priority; the rest of an ask stops at the first miss",
        ),
        pytest.param(
            [node_slot("n1", 2.0, 1024)],
            [ask("big", priority=9, cpu=3.0), ask("small", priority=0, cpu=1.0)],
            [("small", "p", "n1")],
            id="work-conserving: an ask that fits nowhere does not block smaller ones",
        ),
        pytest.param(
            [node_slot("n1", 4.0, 1024, used_cpu=3.5, used_memory_mb=0)],
            [ask("j", count=3, cpu=0.5, memory_mb=1)],
            [("j", "p", "n1")],
            id="existing allocations count",
        ),
        pytest.param(
            [node_slot("n2"), node_slot("n1"), node_slot("n3")],
            [ask("j", count=4)],
            [("j", "p", "n1"), ("j", "p", "n2"), ("j", "p", "n3"), ("j", "p", "n1")],
            id="spread to the emptiest node, ties by node id",
        ),
        pytest.param(
            [node_slot("a", used_cpu=2.0), node_slot("b", used_memory_mb=3072)],
            [ask("j", cpu=1.0, memory_mb=256)],
            [("j", "p", "a")],
            id="emptiest by dominant share: a at 3/4 cpu beats b at 13/16 memory",
        ),
        pytest.param(
            [node_slot("small", 1.0, 1024), node_slot("big", 16.0, 16384)],
            [ask("j", count=2, cpu=1.0, memory_mb=64)],
            [("j", "p", "big"), ("j", "p", "big")],
            id="shares are relative to each node's capacity",
        ),
        pytest.param(
            [node_slot("n1", 8.0, 256)],
            [ask("j", count=2, cpu=1.0, memory_mb=200)],
            [("j", "p", "n1")],
            id="memory alone can be the limit",
        ),
        pytest.param([], [ask("j")], [], id="no nodes, no grants"),
        pytest.param([node_slot()], [ask("j", count=0)], [], id="a zero count asks nothing"),
    ],
)
def test_place(nodes: list[NodeSlot], asks: list[Ask], expected: list[tuple[str, str, str]]):
    assert granted(place(nodes, asks)) == expected


def test_placement_carries_the_asked_resources():
    (placement,) = place([node_slot()], [ask("j", phase="map", cpu=0.25, memory_mb=100)])
    assert placement == Placement("j", "map", "n1", res(0.25, 100))


def test_fractional_cpus_fill_a_node_exactly():
    # ten 0.1-cpu containers fill one cpu although 0.1 * 10 != 1.0 in floating point
    placements = place([node_slot(cpu=1.0)], [ask("j", count=11, cpu=0.1, memory_mb=1)])
    assert len(placements) == 10


# --------------------------------------------------------------------------- invariants

node_lists = st.lists(
    st.builds(
        node_slot,
        st.sampled_from(["a", "b", "c", "d"]),
        st.sampled_from([1.0, 2.0, 4.0, 8.0]),
        st.sampled_from([512, 1024, 4096]),
        used_cpu=st.sampled_from([0.0, 0.5, 1.0]),
        used_memory_mb=st.sampled_from([0, 128, 512]),
    ),
    max_size=4,
    unique_by=lambda n: n.node_id,
)


@st.composite
def ask_lists(draw: st.DrawFn) -> list[Ask]:
    """Asks of up to three jobs; each job has one priority and one submission number."""
    jobs = {
        job: (draw(st.integers(0, 2)), seq) for seq, job in enumerate(["j1", "j2", "j3"], start=1)
    }
    asks = []
    for _ in range(draw(st.integers(0, 6))):
        job = draw(st.sampled_from(sorted(jobs)))
        priority, seq = jobs[job]
        asks.append(
            ask(
                job,
                priority=priority,
                seq=seq,
                phase=draw(st.sampled_from(["x", "y"])),
                count=draw(st.integers(0, 5)),
                cpu=draw(st.sampled_from([0.1, 0.5, 1.0, 3.0])),
                memory_mb=draw(st.sampled_from([64, 256, 1024])),
            )
        )
    return asks


def _free_after(nodes: list[NodeSlot], placements: tuple[Placement, ...]) -> dict[str, Resources]:
    free = {n.node_id: n.capacity - n.allocated for n in nodes}
    for p in placements:
        free[p.node_id] = free[p.node_id] - p.resources
    return free


@given(node_lists, ask_lists())
def test_never_over_allocates_a_node(nodes: list[NodeSlot], asks: list[Ask]):
    for node_id, free in _free_after(nodes, place(nodes, asks)).items():
        start = next(n for n in nodes if n.node_id == node_id)
        # a node that started within capacity stays within it
        if (start.allocated).fits_in(start.capacity):
            assert free.cpu >= -1e-9, node_id
            assert free.memory_mb >= 0, node_id


@given(node_lists, ask_lists())
def test_grants_no_more_than_asked_and_only_what_was_asked(nodes: list[NodeSlot], asks: list[Ask]):
    placements = place(nodes, asks)
    asked: Counter[tuple[str, str, Resources]] = Counter()
    for a in asks:
        asked[(a.job_id, a.phase, a.resources)] += a.count
    got = Counter((p.job_id, p.phase, p.resources) for p in placements)
    assert got <= asked


@given(node_lists, ask_lists())
def test_an_ask_left_short_fits_on_no_node_afterwards(nodes: list[NodeSlot], asks: list[Ask]):
    # Work-conserving: placement stops for an ask only when its container fits nowhere, and free
    # room only shrinks afterwards.
    placements = place(nodes, asks)
    free = _free_after(nodes, placements)
    served = Counter((p.job_id, p.phase, p.resources) for p in placements)
    for a in order_asks(asks):
        key = (a.job_id, a.phase, a.resources)
        taken = min(served[key], a.count)
        served[key] -= taken
        if taken < a.count:
            assert not any(a.resources.fits_in(f) for f in free.values()), a


@given(node_lists, ask_lists())
def test_placements_follow_the_serving_order(nodes: list[NodeSlot], asks: list[Ask]):
    ranks = {a.job_id: (-a.priority, a.submit_seq) for a in asks}
    got = [ranks[p.job_id] for p in place(nodes, asks)]
    assert got == sorted(got)


@given(node_lists, ask_lists())
def test_deterministic_whatever_the_node_order(nodes: list[NodeSlot], asks: list[Ask]):
    assert place(nodes, asks) == place(list(reversed(nodes)), asks)
