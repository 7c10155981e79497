"""Algorithm 2: which containers give the amount back, in kill, graceful and immediate modes."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from policies.preemption.settings import Mode, PreemptionSettings
from policies.preemption.vectors import ResourceName
from policies.preemption.victims import ActionKind, Container, PreemptionPlan, choose_victims
from policies.scheduling.resources import Resources

R = Resources
EXACT = PreemptionSettings(minimal_footprint=R(0.0, 0), graceful_step=R(1.0, 1024))
PAPER = PreemptionSettings()


def box(
    cid: str,
    job: str,
    cpu: float,
    mem: int,
    remaining: float,
    *,
    swapping: bool = False,
    suspended: bool = False,
) -> Container:
    return Container(cid, job, "long", R(cpu, mem), remaining, swapping, suspended)


def summary(plan: PreemptionPlan) -> list[tuple[str, str, Resources]]:
    return [(a.container_id, a.kind.value, a.reclaimed) for a in plan.actions]


KILL_JOBS = [
    box("S1", "short", 1, 1024, 50),
    box("L2", "long", 2, 2048, 250),
    box("L1", "long", 4, 4096, 300),
]


KIND = {Mode.KILL: "kill", Mode.IMMEDIATE: "suspend"}


@pytest.mark.parametrize("mode", [Mode.KILL, Mode.IMMEDIATE])
@pytest.mark.parametrize(
    ("target", "limit", "expected", "satisfied"),
    [
        # longest-remaining job first, its longest container first, until CPU (dominant) is met
        (R(5, 5120), R(6, 6144), [("L1", R(4, 4096)), ("L2", R(2, 2048))], True),
        # Alg. 2 lines 4-8 take the job's next container whatever it holds: L2 takes the queue
        # past a = <5, 6 GB> in CPU, and is taken all the same (it is not skipped for S1)
        (R(5, 5120), R(5, 6144), [("L1", R(4, 4096)), ("L2", R(2, 2048))], True),
        # p clipped to a = <3, 3 GB>: L1 alone reclaims the dominant CPU, with one CPU to spare
        (R(5, 5120), R(3, 3072), [("L1", R(4, 4096))], True),
        (R(5, 5120), R(0.5, 6144), [("L1", R(4, 4096))], True),
        # the long job has no container left and p is not reclaimed: the next job (line 10)
        (
            R(6.5, 6656),
            R(7, 7168),
            [("L1", R(4, 4096)), ("L2", R(2, 2048)), ("S1", R(1, 1024))],
            True,
        ),
        # every job runs out first: everything is taken, and p is not satisfied
        (
            R(10, 10240),
            R(10, 10240),
            [("L1", R(4, 4096)), ("L2", R(2, 2048)), ("S1", R(1, 1024))],
            False,
        ),
    ],
)
def test_whole_container_modes_take_the_next_container_until_the_dominant_resource_is_met(
    mode: Mode,
    target: Resources,
    limit: Resources,
    expected: list[tuple[str, Resources]],
    satisfied: bool,
) -> None:
    # EXACT's footprint is zero, so a suspension gives back all a container holds, like a kill
    plan = choose_victims(KILL_JOBS, target, limit, mode, EXACT)
    assert summary(plan) == [(cid, KIND[mode], amount) for cid, amount in expected]
    assert plan.satisfied is satisfied
    if mode is Mode.KILL:
        assert all(a.limits == () for a in plan.actions)


@pytest.mark.parametrize("mode", [Mode.KILL, Mode.IMMEDIATE])
@pytest.mark.parametrize(
    ("dominant", "expected"), [("cpu", ["cpu-heavy"]), ("memory_mb", ["cpu-heavy", "mem-heavy"])]
)
def test_the_over_provisioned_dominant_resource_decides_when_p_is_satisfied(
    mode: Mode, dominant: ResourceName, expected: list[str]
) -> None:
    # p = a (kill and IP, Alg. 1 line 9): p_i / a_i is 1 for both resources, so which one is
    # dominant comes from Algorithm 1 (the short jobs' request against a), not from p and a
    containers = [box("cpu-heavy", "j", 4, 1024, 10), box("mem-heavy", "j", 0.5, 4096, 5)]
    plan = choose_victims(containers, R(4, 4096), R(4, 4096), mode, EXACT, dominant=dominant)
    assert [a.container_id for a in plan.actions] == expected
    assert plan.dominant == dominant
    assert plan.satisfied


def test_immediate_mode_suspends_to_the_footprint_cpu_first() -> None:
    plan = choose_victims(
        [box("c1", "j", 4, 4096, 10), box("c2", "j", 4, 4096, 5)],
        R(3, 1000),
        R(10, 10000),
        Mode.IMMEDIATE,
        PAPER,
    )
    (action,) = plan.actions
    assert action.container_id == "c1"
    assert action.kind is ActionKind.SUSPEND
    assert action.reclaimed.cpu == pytest.approx(3.99)
    assert action.reclaimed.memory_mb == 4032
    assert action.limits == (("cpu", 0.01), ("memory_mb", 64))
    assert plan.satisfied


def test_throttle_order_follows_the_settings() -> None:
    memory_first = PreemptionSettings(throttle_first="memory_mb")
    plan = choose_victims(
        [box("c1", "j", 4, 4096, 10)], R(3, 1000), R(10, 10000), Mode.IMMEDIATE, memory_first
    )
    assert plan.actions[0].limits == (("memory_mb", 64), ("cpu", 0.01))


@pytest.mark.parametrize(
    ("settings", "held", "reclaimed"),
    [
        # Sec. 4.2: the container monitor "freezes the container by setting the CPU allocation
        # to 1%": the CPU above the footprint is reclaimed, the memory is left alone
        (PAPER, R(2, 2048), R(1.99, 0)),
        (EXACT, R(2, 2048), R(2, 0)),
        # the freeze is of the CPU whichever resource shrinking throttles first
        (PreemptionSettings(throttle_first="memory_mb"), R(2, 2048), R(1.99, 0)),
        # a container already at the footprint's CPU gives back nothing
        (PAPER, R(0.01, 2048), R(0, 0)),
    ],
)
def test_a_swapping_container_is_frozen_and_gives_back_its_cpu(
    settings: PreemptionSettings, held: Resources, reclaimed: Resources
) -> None:
    swapping = [box("b", "j", held.cpu, held.memory_mb, 5, swapping=True)]
    (action,) = choose_victims(swapping, R(1, 1), R(8, 8192), Mode.GRACEFUL, settings).actions
    assert action.kind is ActionKind.FREEZE
    assert action.reclaimed.memory_mb == reclaimed.memory_mb
    assert action.reclaimed.cpu == pytest.approx(reclaimed.cpu)
    expected_limits = (("cpu", settings.minimal_footprint.cpu),) if reclaimed.cpu else ()
    assert action.limits == expected_limits


def test_the_cpu_a_freeze_frees_counts_towards_p() -> None:
    # a is reached first and gives one step; b, reached next, swaps: its freeze frees its 4
    # CPU (more than is still owed), and the plan reports the CPU the freeze actually frees
    containers = [box("a", "j", 4, 4096, 100), box("b", "j", 4, 4096, 90, swapping=True)]
    plan = choose_victims(containers, R(2, 2048), R(100, 100_000), Mode.GRACEFUL, EXACT)
    assert summary(plan) == [("b", "freeze", R(4, 0)), ("a", "shrink", R(1, 2048))]
    assert plan.reclaimed == R(5, 2048)
    assert plan.satisfied


def test_a_swapping_container_the_walk_does_not_reach_is_left_alone() -> None:
    containers = [box("a", "j", 4, 4096, 100), box("b", "j", 4, 4096, 90, swapping=True)]
    plan = choose_victims(containers, R(1, 1024), R(100, 100_000), Mode.GRACEFUL, EXACT)
    assert summary(plan) == [("a", "shrink", R(1, 1024))]


SPREAD = [box(c, "j", 4, 4096, 100) for c in ("a", "b", "c")]


@pytest.mark.parametrize(
    ("containers", "target", "expected"),
    [
        # one step r_GP from every container of the job per round: spread, not concentrated
        (
            SPREAD,
            R(3, 3072),
            [("a", "shrink", R(1, 1024)), ("b", "shrink", R(1, 1024)), ("c", "shrink", R(1, 1024))],
        ),
        # a second round goes back to the first container
        (
            SPREAD,
            R(4, 4096),
            [("a", "shrink", R(2, 2048)), ("b", "shrink", R(1, 1024)), ("c", "shrink", R(1, 1024))],
        ),
        # a swapping container is frozen (its CPU reclaimed) and left out of the rounds
        (
            [box("a", "j", 4, 4096, 100), box("b", "j", 1, 4096, 90, swapping=True)],
            R(2, 2048),
            [("b", "freeze", R(1, 0)), ("a", "shrink", R(1, 2048))],
        ),
        # empty containers leave the round; the next job is visited when one runs out
        (
            [
                box("x", "first", 1, 1024, 200),
                box("y", "second", 1, 1024, 100),
                box("z", "second", 1, 1024, 90),
            ],
            R(2, 2048),
            [("x", "shrink", R(1, 1024)), ("y", "shrink", R(1, 1024))],
        ),
        # the step is cut to what is still needed, resource by resource
        (
            SPREAD,
            R(0.5, 3000),
            [
                ("a", "shrink", R(0.5, 1024)),
                ("b", "shrink", R(0, 1024)),
                ("c", "shrink", R(0, 952)),
            ],
        ),
        # suspended containers are never candidates
        (
            [box("s", "j", 4, 4096, 500, suspended=True), *SPREAD[:1]],
            R(1, 1024),
            [("a", "shrink", R(1, 1024))],
        ),
    ],
)
def test_graceful_mode(
    containers: list[Container],
    target: Resources,
    expected: list[tuple[str, str, Resources]],
) -> None:
    plan = choose_victims(containers, target, R(100, 100_000), Mode.GRACEFUL, EXACT)
    assert summary(plan) == expected


def test_graceful_shrinks_to_the_footprint_at_most_and_freezes_cpu_first() -> None:
    plan = choose_victims(
        [box("a", "j", 1, 8192, 10, swapping=False), box("b", "j", 2, 2048, 5, swapping=True)],
        R(8, 16384),
        R(8, 16384),
        Mode.GRACEFUL,
        PAPER,
    )
    kinds = {a.container_id: a for a in plan.actions}
    assert kinds["b"].kind is ActionKind.FREEZE
    assert kinds["b"].limits == (("cpu", 0.01),)
    assert kinds["b"].reclaimed.cpu == pytest.approx(1.99)
    assert kinds["a"].limits == (("cpu", 0.01), ("memory_mb", 64))
    assert plan.reclaimed.cpu == pytest.approx(0.99 + 1.99)
    assert plan.reclaimed.memory_mb == 8128
    assert not plan.satisfied


@st.composite
def scenarios(
    draw: st.DrawFn,
) -> tuple[list[Container], Resources, Resources, Mode, PreemptionSettings]:
    count = draw(st.integers(0, 12))
    containers = [
        box(
            f"c{i}",
            f"j{draw(st.integers(0, 3))}",
            draw(st.floats(0.0, 16.0)),
            draw(st.integers(0, 65536)),
            draw(st.floats(0.0, 1e4)),
            swapping=draw(st.booleans()),
            suspended=draw(st.booleans()),
        )
        for i in range(count)
    ]
    target = R(draw(st.floats(0.0, 64.0)), draw(st.integers(0, 262144)))
    limit = R(draw(st.floats(0.0, 64.0)), draw(st.integers(0, 262144)))
    mode = draw(st.sampled_from(list(Mode)))
    settings = draw(st.sampled_from([EXACT, PAPER]))
    return containers, target, limit, mode, settings


@given(scenarios())
def test_reclaims_what_alg_2_allows_and_never_more_than_a_container_holds(
    scenario: tuple[list[Container], Resources, Resources, Mode, PreemptionSettings],
) -> None:
    containers, target, limit, mode, settings = scenario
    plan = choose_victims(containers, target, limit, mode, settings)
    held = {c.container_id: c for c in containers}
    goal = R(min(target.cpu, limit.cpu), min(target.memory_mb, limit.memory_mb))
    # memory is whole MiB throughout Algorithm 2, so these hold exactly, with no tolerance
    assert isinstance(plan.reclaimed.memory_mb, int)
    assert plan.reclaimed.memory_mb == sum(a.reclaimed.memory_mb for a in plan.actions)
    assert plan.reclaimed.cpu == pytest.approx(sum(a.reclaimed.cpu for a in plan.actions), abs=1e-6)
    if mode is Mode.GRACEFUL:
        # never beyond p nor a, except the CPU that freezing a swapping container frees
        frozen = sum(a.reclaimed.cpu for a in plan.actions if a.kind is ActionKind.FREEZE)
        assert plan.reclaimed.memory_mb <= goal.memory_mb
        assert plan.reclaimed.cpu <= goal.cpu + frozen + 1e-6
    elif plan.dominant is not None:
        # lines 4-8: the walk stops once the dominant resource is met, so only the last
        # container taken may go past p; if p is not met, every container that could help is taken
        d = plan.dominant
        before_last = sum(getattr(a.reclaimed, d) for a in plan.actions[:-1])
        assert before_last < getattr(goal, d) - 1e-9 or not plan.actions
        if not plan.satisfied:
            kept = R() if mode is Mode.KILL else settings.minimal_footprint
            helpful = {
                c.container_id
                for c in containers
                if not c.suspended
                and (c.resources.cpu > kept.cpu + 1e-9 or c.resources.memory_mb > kept.memory_mb)
            }
            assert {a.container_id for a in plan.actions} == helpful
    ids = [a.container_id for a in plan.actions]
    assert len(ids) == len(set(ids))
    for action in plan.actions:
        container = held[action.container_id]
        assert not container.suspended
        if action.kind is ActionKind.FREEZE:
            floor = R(min(container.resources.cpu, settings.minimal_footprint.cpu), 0)
            assert action.reclaimed.memory_mb == 0
            assert all(name == "cpu" for name, _ in action.limits)
        else:
            kept = R() if mode is Mode.KILL else settings.minimal_footprint
            floor = R(
                min(container.resources.cpu, kept.cpu),
                min(container.resources.memory_mb, kept.memory_mb),
            )
        assert isinstance(action.reclaimed.memory_mb, int)
        assert action.reclaimed.memory_mb <= container.resources.memory_mb - floor.memory_mb
        assert action.reclaimed.cpu <= container.resources.cpu - floor.cpu + 1e-6
        for name, value in action.limits:
            if name == "memory_mb":
                assert isinstance(value, int)
                assert value == container.resources.memory_mb - action.reclaimed.memory_mb
