"""Algorithm 1: COMPUTEDR and the per-queue amounts, generalised to N queues, in whole MiB."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from policies.preemption.amounts import QueueState, compute_dr, preemption_amounts
from policies.preemption.settings import Mode
from policies.scheduling.resources import ZERO, Resources

R = Resources


def assert_same(got: Resources, expected: Resources) -> None:
    """Memory exactly (whole MiB), CPU up to float residue."""
    assert got.memory_mb == expected.memory_mb
    assert isinstance(got.memory_mb, int)
    assert got.cpu == pytest.approx(expected.cpu, abs=1e-9)


@pytest.mark.parametrize(
    ("request_", "available", "expected"),
    [
        # Sec. 4.3 worked example: a = <10 CPU, 15 GB>, r_s = <20 CPU, 10 GB>; CPU dominant
        # (20/10 > 10/15) -> p = <10 CPU, 10 GB x 10/20 = 5 GB>
        (R(20.0, 10240), R(10.0, 15360), R(10.0, 5120)),
        # memory dominant: <4 CPU x 6/12, 6 GB>
        (R(4.0, 12288), R(10.0, 6144), R(2.0, 6144)),
        # the request fits: granted as is (lines 5-6)
        (R(5.0, 5120), R(10.0, 15360), R(5.0, 5120)),
        (R(10.0, 15360), R(10.0, 15360), R(10.0, 15360)),
        # a resource the request does not ask for is not reclaimed
        (R(20.0, 0), R(10.0, 15360), R(10.0, 0)),
        # nothing over-provisioned of a resource the request needs: nothing fits proportionally
        (R(20.0, 10240), R(10.0, 0), R(0.0, 0)),
        (R(0.0, 0), R(10.0, 15360), R(0.0, 0)),
        # whole MiB: 10241 x 10/20 = 5120.5 MiB is rounded up, not down
        (R(20.0, 10241), R(10.0, 15360), R(10.0, 5121)),
        (R(3.0, 1000), R(1.0, 5000), R(1.0, 334)),  # 1000 / 3 = 333.3
        # memory dominant: the rounded result is still capped at what is available
        (R(1.0, 1000), R(10.0, 333), R(0.333, 333)),
    ],
)
def test_compute_dr(request_: Resources, available: Resources, expected: Resources) -> None:
    assert_same(compute_dr(request_, available), expected)


def test_compute_dr_worked_example_is_exact() -> None:
    assert compute_dr(R(20.0, 10240), R(10.0, 15360)) == R(10.0, 5120)


amounts = st.builds(R, st.floats(0.0, 1e3), st.integers(0, 10**6))


@given(request_=amounts, available=amounts)
def test_compute_dr_never_exceeds_a_and_rounds_memory_up_by_less_than_a_mib(
    request_: Resources, available: Resources
) -> None:
    p = compute_dr(request_, available)
    assert isinstance(p.memory_mb, int)
    assert p.cpu <= min(request_.cpu, available.cpu)
    assert p.memory_mb <= min(request_.memory_mb, available.memory_mb)
    # the proportional scale of COMPUTEDR, recomputed here as the oracle
    ratios = [a / r for a, r in ((available.cpu, request_.cpu),) if r > 1e-9]
    ratios += [available.memory_mb / request_.memory_mb] if request_.memory_mb else []
    scale = min([1.0, *ratios]) if ratios else 0.0
    exact = request_.memory_mb * scale
    assert exact - 1e-6 <= p.memory_mb < exact + 1
    assert p.cpu == pytest.approx(min(request_.cpu * scale, available.cpu), abs=1e-9)


def q(name: str, share: float, allocation: Resources, demand: Resources = ZERO) -> QueueState:
    return QueueState(name, share, allocation, demand)


def test_two_queue_worked_example() -> None:
    # long holds its fair <20, 30 GB> plus a = <10, 15 GB>; short asks r_s = <20 CPU, 10 GB>
    long_, short = preemption_amounts(
        R(40.0, 61440),
        [q("long", 0.5, R(30.0, 46080)), q("short", 0.5, R(), R(20.0, 10240))],
        Mode.GRACEFUL,
    )
    assert long_.over_provisioned == R(10.0, 15360)
    # 15 GB and 10 CPU are free already, so only the CPU the free pool lacks is reclaimed
    assert long_.preempt == R(10.0, 0)
    assert short.preempt == R()


def test_worked_example_with_a_full_cluster_is_exact() -> None:
    # Sec. 4.3: p = <10 CPU, 5 GB> from the long queue
    long_, short = preemption_amounts(
        R(40.0, 61440),
        [q("long", 0.5, R(30.0, 46080)), q("short", 0.5, R(10.0, 15360), R(20.0, 10240))],
        Mode.GRACEFUL,
    )
    assert (long_.over_provisioned, long_.preempt) == (R(10.0, 15360), R(10.0, 5120))
    assert (short.over_provisioned, short.preempt) == (R(), R())


@pytest.mark.parametrize(
    ("capacity", "queues", "expected"),
    [
        # c is helped only up to its fair share: headroom <5, 5 GB> caps its <20, 10 GB> to
        # <5, 2.5 GB>; 5 GB are free, so 5 CPU are reclaimed from a (uncapped, a'd lose 10 CPU)
        (
            R(30.0, 30720),
            [
                q("a", 1 / 3, R(20.0, 10240)),
                q("b", 1 / 3, R(5.0, 10240)),
                q("c", 1 / 3, R(5.0, 5120), R(20.0, 10240)),
            ],
            {"a": R(5.0, 0), "b": R(), "c": R()},
        ),
        # enough free capacity: nothing is preempted
        (
            R(100.0, 102400),
            [q("long", 0.5, R(60.0, 61440)), q("short", 0.5, R(), R(20.0, 10240))],
            {"long": R(), "short": R()},
        ),
        # two over-provisioned queues share the reclaim in proportion to their a_q
        (
            R(60.0, 61440),
            [
                q("a", 1 / 3, R(30.0, 20480)),
                q("b", 1 / 3, R(25.0, 25600)),
                q("c", 1 / 3, R(5.0, 15360), R(15.0, 5120)),
            ],
            {"a": R(10.0, 0), "b": R(5.0, 5120), "c": R()},
        ),
    ],
)
def test_preemption_amounts(
    capacity: Resources, queues: list[QueueState], expected: dict[str, Resources]
) -> None:
    got = {
        amount.queue: amount.preempt
        for amount in preemption_amounts(capacity, queues, Mode.GRACEFUL)
    }
    assert got.keys() == expected.keys()
    for name, amount in expected.items():
        assert_same(got[name], amount)


@pytest.mark.parametrize(
    ("capacity", "queues", "expected", "exact_total_mib"),
    [
        # fair memory 500.5: a = 500.5 -> 501 (at most the 1001 held); the short queue's claim
        # <10, 201> scaled into its headroom <5, 500.5> is <5, 100.5>: p = 100.5 -> 101, not 100
        (
            R(10.0, 1001),
            [q("long", 0.5, R(10.0, 1001)), q("short", 0.5, R(), R(10.0, 201))],
            {"long": (R(5.0, 501), R(5.0, 101)), "short": (R(), R())},
            100.5,
        ),
        # p = <15, 20 MiB> split over a_a = <10, 10> and a_b = <5, 20>: memory 6.67 and 13.33,
        # rounded up to 7 and 14 (Σ 21 >= 20; rounding to nearest would give b 13)
        (
            R(60.0, 600),
            [
                q("a", 1 / 3, R(30.0, 210)),
                q("b", 1 / 3, R(25.0, 220)),
                q("c", 1 / 3, R(5.0, 170), R(15.0, 20)),
            ],
            {"a": (R(10.0, 10), R(10.0, 7)), "b": (R(5.0, 20), R(5.0, 14)), "c": (R(), R())},
            20.0,
        ),
        # an a_q of 2/3 MiB still counts (rounded up to 1); b's claim <1, 1> scaled into its
        # headroom <1, 2/3> is <2/3, 2/3>, of which the memory is rounded up to a whole MiB
        (
            R(3.0, 1000),
            [q("a", 1 / 3, R(2.0, 334)), q("b", 2 / 3, R(1.0, 666), R(1.0, 1))],
            {"a": (R(1.0, 1), R(2 / 3, 1)), "b": (R(), R())},
            2 / 3,
        ),
    ],
)
def test_fractional_mib_is_rounded_up_then_capped(
    capacity: Resources,
    queues: list[QueueState],
    expected: dict[str, tuple[Resources, Resources]],
    exact_total_mib: float,
) -> None:
    got = preemption_amounts(capacity, queues, Mode.GRACEFUL)
    assert {a.queue for a in got} == expected.keys()
    for amount in got:
        over, preempt = expected[amount.queue]
        assert_same(amount.over_provisioned, over)
        assert_same(amount.preempt, preempt)
    total = sum(a.preempt.memory_mb for a in got)
    assert exact_total_mib <= total < exact_total_mib + len(queues)


@st.composite
def clusters(draw: st.DrawFn) -> tuple[Resources, list[QueueState]]:
    count = draw(st.integers(1, 5))
    capacity = R(draw(st.floats(1.0, 1e3)), draw(st.integers(1, 10**6)))
    weights = [draw(st.floats(0.01, 1.0)) for _ in range(count)]
    queues = [
        QueueState(
            f"q{i}",
            weights[i] / sum(weights),
            R(
                draw(st.floats(0.0, capacity.cpu)) / count,
                draw(st.integers(0, capacity.memory_mb // count)),
            ),
            R(draw(st.floats(0.0, 2 * capacity.cpu)), draw(st.integers(0, 2 * capacity.memory_mb))),
        )
        for i in range(count)
    ]
    return capacity, queues


@given(clusters(), st.sampled_from(list(Mode)))
def test_no_queue_loses_more_than_it_is_over_provisioned_or_holds(
    cluster: tuple[Resources, list[QueueState]], mode: Mode
) -> None:
    capacity, queues = cluster
    for amount, queue in zip(preemption_amounts(capacity, queues, mode), queues, strict=True):
        p, a, r = amount.preempt, amount.over_provisioned, queue.allocation
        assert isinstance(p.memory_mb, int)
        assert isinstance(a.memory_mb, int)
        assert 0 <= p.memory_mb <= a.memory_mb <= r.memory_mb
        assert 0 <= p.cpu <= a.cpu <= r.cpu + 1e-9
        # a_q is max(r_q - f_q, 0) rounded up: within one MiB of the exact amount, never below
        exact = max(r.memory_mb - capacity.memory_mb * queue.fair_share, 0.0)
        assert exact - 1e-6 <= a.memory_mb < exact + 1


@pytest.mark.parametrize(
    ("capacity", "queues", "field"),
    [
        (R(10.0, -1), [], "capacity"),
        (R(10.0, 10), [q("a", 1.5, R())], r"queues\[0\].fair_share"),
        (R(10.0, 10), [q("a", 0.5, R(0.0, 1.5))], r"queues\[0\].allocation"),  # type: ignore[arg-type]
        (R(10.0, 10), [q("a", 0.5, R(), R(-3.0, 0))], r"queues\[0\].demand"),
        (R(10.0, 10), [q("a", 0.5, R())] * 2, "queues"),
    ],
)
def test_bad_snapshots_name_the_field(
    capacity: Resources, queues: list[QueueState], field: str
) -> None:
    with pytest.raises(ValueError, match=f"^{field}:"):
        preemption_amounts(capacity, queues, Mode.KILL)


KILL, IMMEDIATE, GRACEFUL = Mode.KILL, Mode.IMMEDIATE, Mode.GRACEFUL
WORKED_CAPACITY = R(40.0, 61440)


def worked(demand: Resources) -> list[QueueState]:
    """Sec. 4.3: a full cluster; long holds a = <10 CPU, 15 GB> beyond its fair half."""
    return [q("long", 0.5, R(30.0, 46080)), q("short", 0.5, R(10.0, 15360), demand)]


# Three queues: a is over-provisioned in CPU only, b in memory only; c asks <30, 5 GB>, more
# than its headroom <10, 5 GB>.
SPLIT = [
    q("a", 1 / 3, R(30.0, 20480)),
    q("b", 1 / 3, R(20.0, 25600)),
    q("c", 1 / 3, R(10.0, 15360), R(30.0, 5120)),
]


@pytest.mark.parametrize(
    ("mode", "capacity", "queues", "expected"),
    [
        # Sec. 4.3: r_s = <20 CPU, 10 GB> does not fit a = <10, 15 GB>. Capacity scheduler
        # (kill) and IP: "capacity scheduler will compute p = a" (Alg. 1 line 9, before the
        # modification); GP: p = COMPUTEDR(r_s, a) = <10, 5 GB>. CPU dominant (20/10 > 10/15).
        (KILL, WORKED_CAPACITY, worked(R(20.0, 10240)), {"long": (R(10.0, 15360), "cpu")}),
        (IMMEDIATE, WORKED_CAPACITY, worked(R(20.0, 10240)), {"long": (R(10.0, 15360), "cpu")}),
        (GRACEFUL, WORKED_CAPACITY, worked(R(20.0, 10240)), {"long": (R(10.0, 5120), "cpu")}),
        # r_s fits in a: p = r_s in every mode (lines 5-6)
        (KILL, WORKED_CAPACITY, worked(R(4.0, 2048)), {"long": (R(4.0, 2048), "cpu")}),
        (IMMEDIATE, WORKED_CAPACITY, worked(R(4.0, 2048)), {"long": (R(4.0, 2048), "cpu")}),
        (GRACEFUL, WORKED_CAPACITY, worked(R(4.0, 2048)), {"long": (R(4.0, 2048), "cpu")}),
        # memory dominant (30/15 > 5/10): kill and IP take all of a, GP <5 x 15/30, 15 GB>
        (KILL, WORKED_CAPACITY, worked(R(5.0, 30720)), {"long": (R(10.0, 15360), "memory_mb")}),
        (
            IMMEDIATE,
            WORKED_CAPACITY,
            worked(R(5.0, 30720)),
            {"long": (R(10.0, 15360), "memory_mb")},
        ),
        (GRACEFUL, WORKED_CAPACITY, worked(R(5.0, 30720)), {"long": (R(2.5, 15360), "memory_mb")}),
        # N queues: kill takes every a_q; GP scales c's claim to <10, 5 GB / 3>. The dominant
        # resource is the request's (CPU), except for b, which is over-provisioned in memory only
        (
            KILL,
            R(60.0, 61440),
            SPLIT,
            {"a": (R(10.0, 0), "cpu"), "b": (R(0.0, 5120), "memory_mb"), "c": (R(), None)},
        ),
        (
            GRACEFUL,
            R(60.0, 61440),
            SPLIT,
            {"a": (R(10.0, 0), "cpu"), "b": (R(0.0, 1707), "memory_mb"), "c": (R(), None)},
        ),
    ],
)
def test_algorithm_1_per_mode(
    mode: Mode,
    capacity: Resources,
    queues: list[QueueState],
    expected: dict[str, tuple[Resources, str | None]],
) -> None:
    got = {a.queue: a for a in preemption_amounts(capacity, queues, mode)}
    for name, (preempt, dominant) in expected.items():
        assert_same(got[name].preempt, preempt)
        assert got[name].dominant == dominant
    assert all(got[name].preempt == R() for name in got.keys() - expected.keys())
