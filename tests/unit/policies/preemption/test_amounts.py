"""Algorithm 1: COMPUTEDR and the per-queue amounts, generalised to N queues and resources."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from policies.preemption.amounts import QueueState, compute_dr, preemption_amounts


@pytest.mark.parametrize(
    ("request_", "available", "expected"),
    [
        # Sec. 4.3 worked example: CPU dominant (20/10 > 10/15) -> <10 CPU, 10 x 10/20 GB>
        ((20.0, 10.0), (10.0, 15.0), (10.0, 5.0)),
        # memory dominant: <4 CPU x 6/12, 6 GB>
        ((4.0, 12.0), (10.0, 6.0), (2.0, 6.0)),
        # the request fits: granted as is (lines 5-6)
        ((5.0, 5.0), (10.0, 15.0), (5.0, 5.0)),
        ((10.0, 15.0), (10.0, 15.0), (10.0, 15.0)),
        # three resources, the third (GPU) dominant
        ((8.0, 16.0, 4.0), (8.0, 16.0, 1.0), (2.0, 4.0, 1.0)),
        # a resource the request does not ask for is not reclaimed
        ((20.0, 0.0), (10.0, 15.0), (10.0, 0.0)),
        # nothing over-provisioned of a resource the request needs: nothing fits proportionally
        ((20.0, 10.0), (10.0, 0.0), (0.0, 0.0)),
        ((0.0, 0.0), (10.0, 15.0), (0.0, 0.0)),
    ],
)
def test_compute_dr(
    request_: tuple[float, ...], available: tuple[float, ...], expected: tuple[float, ...]
) -> None:
    got = compute_dr(np.array(request_), np.array(available))
    assert got.tolist() == pytest.approx(expected)


vectors = st.lists(st.floats(0.0, 1e4), min_size=3, max_size=3)


@given(request_=vectors, available=vectors)
def test_compute_dr_never_exceeds_a_and_keeps_the_request_proportions(
    request_: list[float], available: list[float]
) -> None:
    r = np.array(request_)
    a = np.array(available)
    p = compute_dr(r, a)
    assert (p <= a + 1e-9).all()
    assert (p <= r + 1e-9).all()
    asked = r > 1e-6
    if asked.any() and p.any():
        scales = p[asked] / r[asked]
        assert scales.max() - scales.min() <= 1e-9 * max(1.0, scales.max())


def q(
    name: str, share: float, allocation: tuple[float, ...], demand: tuple[float, ...]
) -> QueueState:
    return QueueState(name, share, allocation, demand)


def test_two_queue_worked_example() -> None:
    # long holds its fair <20, 30> plus a = <10, 15>; short asks r_s = <20 CPU, 10 GB>
    long_, short = preemption_amounts(
        (40.0, 60.0),
        [q("long", 0.5, (30.0, 45.0), (0.0, 0.0)), q("short", 0.5, (0.0, 0.0), (20.0, 10.0))],
    )
    assert long_.over_provisioned == (10.0, 15.0)
    # 15 GB and 10 CPU are free already, so only the CPU the free pool lacks is reclaimed
    assert long_.preempt == pytest.approx((10.0, 0.0))
    assert short.preempt == (0.0, 0.0)


@pytest.mark.parametrize(
    ("capacity", "queues", "expected"),
    [
        # Sec. 4.3 with a full cluster: p = <10 CPU, 5 GB> from the long queue
        (
            (40.0, 60.0),
            [q("long", 0.5, (30.0, 45.0), (0.0, 0.0)), q("short", 0.5, (10.0, 15.0), (20.0, 10.0))],
            {"long": (10.0, 5.0), "short": (0.0, 0.0)},
        ),
        # c is helped only up to its fair share: headroom <5, 5> caps its <20, 10> to <5, 2.5>;
        # 5 GB are free, so 5 CPU are reclaimed from a (uncapped, a would lose 10 CPU)
        (
            (30.0, 30.0),
            [
                q("a", 1 / 3, (20.0, 10.0), (0.0, 0.0)),
                q("b", 1 / 3, (5.0, 10.0), (0.0, 0.0)),
                q("c", 1 / 3, (5.0, 5.0), (20.0, 10.0)),
            ],
            {"a": (5.0, 0.0), "b": (0.0, 0.0), "c": (0.0, 0.0)},
        ),
        # enough free capacity: nothing is preempted
        (
            (100.0, 100.0),
            [q("long", 0.5, (60.0, 60.0), (0.0, 0.0)), q("short", 0.5, (0.0, 0.0), (20.0, 10.0))],
            {"long": (0.0, 0.0), "short": (0.0, 0.0)},
        ),
        # two over-provisioned queues share the reclaim in proportion to their a_q
        (
            (60.0, 60.0),
            [
                q("a", 1 / 3, (30.0, 20.0), (0.0, 0.0)),
                q("b", 1 / 3, (25.0, 25.0), (0.0, 0.0)),
                q("c", 1 / 3, (5.0, 15.0), (15.0, 5.0)),
            ],
            {"a": (10.0, 0.0), "b": (5.0, 5.0), "c": (0.0, 0.0)},
        ),
    ],
)
def test_preemption_amounts(
    capacity: tuple[float, ...], queues: list[QueueState], expected: dict[str, tuple[float, ...]]
) -> None:
    got = {amount.queue: amount.preempt for amount in preemption_amounts(capacity, queues)}
    assert got.keys() == expected.keys()
    for name, amount in expected.items():
        assert got[name] == pytest.approx(amount, abs=1e-9)


@st.composite
def clusters(draw: st.DrawFn) -> tuple[tuple[float, ...], list[QueueState]]:
    dims = draw(st.integers(1, 3))
    count = draw(st.integers(1, 5))
    capacity = tuple(draw(st.floats(1.0, 1e3)) for _ in range(dims))
    weights = [draw(st.floats(0.01, 1.0)) for _ in range(count)]
    queues = [
        QueueState(
            f"q{i}",
            weights[i] / sum(weights),
            tuple(draw(st.floats(0.0, capacity[d])) / count for d in range(dims)),
            tuple(draw(st.floats(0.0, 2 * capacity[d])) for d in range(dims)),
        )
        for i in range(count)
    ]
    return capacity, queues


@given(clusters())
def test_no_queue_loses_more_than_it_is_over_provisioned(
    cluster: tuple[tuple[float, ...], list[QueueState]],
) -> None:
    capacity, queues = cluster
    for amount in preemption_amounts(capacity, queues):
        assert all(
            p <= a + 1e-9 and p >= 0
            for p, a in zip(amount.preempt, amount.over_provisioned, strict=True)
        )


@pytest.mark.parametrize(
    ("capacity", "queues", "field"),
    [
        ((10.0, -1.0), [], "capacity"),
        ((10.0, 10.0), [q("a", 1.5, (0.0, 0.0), (0.0, 0.0))], r"queues\[0\].fair_share"),
        ((10.0, 10.0), [q("a", 0.5, (0.0,), (0.0, 0.0))], r"queues\[0\].allocation"),
        ((10.0, 10.0), [q("a", 0.5, (0.0, 0.0), (0.0, -3.0))], r"queues\[0\].demand"),
        ((10.0, 10.0), [q("a", 0.5, (0.0, 0.0), (0.0, 0.0))] * 2, "queues"),
    ],
)
def test_bad_snapshots_name_the_field(
    capacity: tuple[float, ...], queues: list[QueueState], field: str
) -> None:
    with pytest.raises(ValueError, match=f"^{field}:"):
        preemption_amounts(capacity, queues)
