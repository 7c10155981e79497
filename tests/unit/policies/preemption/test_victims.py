"""Algorithm 2: which containers give the amount back, in kill, graceful and immediate modes."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from policies.preemption.resources import Mode, PreemptionSettings
from policies.preemption.victims import ActionKind, Container, choose_victims

EXACT = PreemptionSettings(minimal_footprint=(0.0, 0.0), graceful_step=(1.0, 1024.0))
PAPER = PreemptionSettings()


def box(
    cid: str,
    job: str,
    cpu: float,
    mem: float,
    remaining: float,
    *,
    swapping: bool = False,
    suspended: bool = False,
) -> Container:
    return Container(cid, job, "long", (cpu, mem), remaining, swapping, suspended)


def summary(plan) -> list[tuple[str, str, tuple[float, ...]]]:
    return [(a.container_id, a.kind.value, a.reclaimed) for a in plan.actions]


KILL_JOBS = [
    box("S1", "short", 1, 1024, 50),
    box("L2", "long", 2, 2048, 250),
    box("L1", "long", 4, 4096, 300),
]


@pytest.mark.parametrize(
    ("limit", "expected", "satisfied"),
    [
        # longest-remaining job first, its longest container first, until CPU (dominant) is met
        ((6, 6144), [("L1", "kill", (4, 4096)), ("L2", "kill", (2, 2048))], True),
        # L2 would take the queue past a: skipped, the next job's container fits
        ((5, 6144), [("L1", "kill", (4, 4096)), ("S1", "kill", (1, 1024))], True),
        # nothing may exceed a: the target is clipped to it, L1 does not fit
        ((3, 3072), [("L2", "kill", (2, 2048)), ("S1", "kill", (1, 1024))], True),
        ((0.5, 6144), [], False),
    ],
)
def test_kill_mode(
    limit: tuple[float, float], expected: list[tuple[str, str, tuple[float, ...]]], satisfied: bool
) -> None:
    plan = choose_victims(KILL_JOBS, (5, 5120), limit, Mode.KILL, EXACT)
    assert summary(plan) == expected
    assert plan.satisfied is satisfied
    assert all(a.limits == () for a in plan.actions)


def test_immediate_mode_suspends_to_the_footprint_cpu_first() -> None:
    plan = choose_victims(
        [box("c1", "j", 4, 4096, 10), box("c2", "j", 4, 4096, 5)],
        (3, 1000),
        (10, 10000),
        Mode.IMMEDIATE,
        PAPER,
    )
    (action,) = plan.actions
    assert action.container_id == "c1"
    assert action.kind is ActionKind.SUSPEND
    assert action.reclaimed == pytest.approx((3.99, 4032.0))
    assert action.limits == (("cpu", 0.01), ("memory_mb", 64.0))
    assert plan.satisfied


def test_throttle_order_follows_the_settings() -> None:
    memory_first = PreemptionSettings(throttle_first="memory_mb")
    plan = choose_victims(
        [box("c1", "j", 4, 4096, 10)], (3, 1000), (10, 10000), Mode.IMMEDIATE, memory_first
    )
    assert plan.actions[0].limits == (("memory_mb", 64.0), ("cpu", 0.01))


SPREAD = [box(c, "j", 4, 4096, 100) for c in ("a", "b", "c")]


@pytest.mark.parametrize(
    ("containers", "target", "expected"),
    [
        # one step r_GP from every container of the job per round: spread, not concentrated
        (
            SPREAD,
            (3, 3072),
            [("a", "shrink", (1, 1024)), ("b", "shrink", (1, 1024)), ("c", "shrink", (1, 1024))],
        ),
        # a second round goes back to the first container
        (
            SPREAD,
            (4, 4096),
            [("a", "shrink", (2, 2048)), ("b", "shrink", (1, 1024)), ("c", "shrink", (1, 1024))],
        ),
        # a swapping container is frozen (reclaims nothing) and left out of the rounds
        (
            [box("a", "j", 4, 4096, 100), box("b", "j", 4, 4096, 90, swapping=True)],
            (2, 2048),
            [("b", "freeze", (0, 0)), ("a", "shrink", (2, 2048))],
        ),
        # empty containers leave the round; the next job is visited when one runs out
        (
            [
                box("x", "first", 1, 1024, 200),
                box("y", "second", 1, 1024, 100),
                box("z", "second", 1, 1024, 90),
            ],
            (2, 2048),
            [("x", "shrink", (1, 1024)), ("y", "shrink", (1, 1024))],
        ),
        # the step is cut to what is still needed, resource by resource
        (
            SPREAD,
            (0.5, 3000),
            [("a", "shrink", (0.5, 1024)), ("b", "shrink", (0, 1024)), ("c", "shrink", (0, 952))],
        ),
        # suspended containers are never candidates
        (
            [box("s", "j", 4, 4096, 500, suspended=True), *SPREAD[:1]],
            (1, 1024),
            [("a", "shrink", (1, 1024))],
        ),
    ],
)
def test_graceful_mode(
    containers: list[Container],
    target: tuple[float, float],
    expected: list[tuple[str, str, tuple[float, ...]]],
) -> None:
    plan = choose_victims(containers, target, (100, 100_000), Mode.GRACEFUL, EXACT)
    assert summary(plan) == expected


def test_graceful_shrinks_to_the_footprint_at_most_and_freezes_cpu_first() -> None:
    plan = choose_victims(
        [box("a", "j", 1, 8192, 10, swapping=False), box("b", "j", 2, 2048, 5, swapping=True)],
        (8, 16384),
        (8, 16384),
        Mode.GRACEFUL,
        PAPER,
    )
    kinds = {a.container_id: a for a in plan.actions}
    assert kinds["b"].kind is ActionKind.FREEZE
    assert kinds["b"].limits == (("cpu", 0.01),)
    assert kinds["a"].limits == (("cpu", 0.01), ("memory_mb", 64.0))
    assert plan.reclaimed == pytest.approx((0.99, 8128.0))
    assert not plan.satisfied


@st.composite
def scenarios(draw: st.DrawFn):
    count = draw(st.integers(0, 12))
    containers = [
        box(
            f"c{i}",
            f"j{draw(st.integers(0, 3))}",
            draw(st.floats(0.0, 16.0)),
            draw(st.floats(0.0, 65536.0)),
            draw(st.floats(0.0, 1e4)),
            swapping=draw(st.booleans()),
            suspended=draw(st.booleans()),
        )
        for i in range(count)
    ]
    target = (draw(st.floats(0.0, 64.0)), draw(st.floats(0.0, 262144.0)))
    limit = (draw(st.floats(0.0, 64.0)), draw(st.floats(0.0, 262144.0)))
    mode = draw(st.sampled_from(list(Mode)))
    settings = draw(st.sampled_from([EXACT, PAPER]))
    return containers, target, limit, mode, settings


@given(scenarios())
def test_never_reclaims_more_than_a(scenario) -> None:
    containers, target, limit, mode, settings = scenario
    plan = choose_victims(containers, target, limit, mode, settings)
    held = {c.container_id: c for c in containers}
    for dim in range(2):
        assert plan.reclaimed[dim] <= limit[dim] + 1e-6
        assert plan.reclaimed[dim] == pytest.approx(
            sum(a.reclaimed[dim] for a in plan.actions), abs=1e-6
        )
        if mode is Mode.GRACEFUL:
            assert plan.reclaimed[dim] <= target[dim] + 1e-6
    ids = [a.container_id for a in plan.actions]
    assert len(ids) == len(set(ids))
    for action in plan.actions:
        container = held[action.container_id]
        assert not container.suspended
        for dim in range(2):
            kept = 0.0 if mode is Mode.KILL else settings.minimal_footprint[dim]
            floor = min(container.resources[dim], kept)
            assert action.reclaimed[dim] <= container.resources[dim] - floor + 1e-6
