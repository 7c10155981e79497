"""One cluster-wide round: Algorithm 1 per queue feeding Algorithm 2, and the settings."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from policies.preemption.amounts import QueueState
from policies.preemption.plan import plan_preemption
from policies.preemption.settings import Mode, PreemptionSettings
from policies.preemption.victims import ActionKind, Container
from policies.scheduling.resources import Resources

R = Resources
CAPACITY = R(40.0, 61440)
# Sec. 4.3: long holds a = <10 CPU, 15 GB> beyond its fair half, short asks r_s = <20, 10 GB>
QUEUES = [
    QueueState("long", 0.5, R(30.0, 46080), R()),
    QueueState("short", 0.5, R(10.0, 15360), R(20.0, 10240)),
]
CONTAINERS = [
    Container(f"l{i}", f"job{i % 2}", "long", R(5.0, 7680), 100.0 * (i + 1)) for i in range(6)
] + [Container("s0", "burst", "short", R(10.0, 15360), 5.0)]
STEP = PreemptionSettings(minimal_footprint=R(0.0, 0), graceful_step=R(1.0, 1024))


@pytest.mark.parametrize(
    ("mode", "target", "reclaimed", "kinds"),
    [
        # the worked example: kill and IP reclaim p = a = <10 CPU, 15 GB> (Alg. 1 line 9 of the
        # capacity scheduler), GP p = COMPUTEDR(r_s, a) = <10 CPU, 5 GB>
        (Mode.KILL, R(10.0, 15360), R(10.0, 15360), {ActionKind.KILL}),
        (Mode.IMMEDIATE, R(10.0, 15360), R(10.0, 15360), {ActionKind.SUSPEND}),
        (Mode.GRACEFUL, R(10.0, 5120), R(10.0, 5120), {ActionKind.SHRINK}),
    ],
)
def test_worked_example_end_to_end(
    mode: Mode, target: Resources, reclaimed: Resources, kinds: set[ActionKind]
) -> None:
    plan = plan_preemption(CAPACITY, QUEUES, CONTAINERS, mode, STEP)
    ((name, queue_plan),) = plan.plans
    assert name == "long"
    assert queue_plan.target == target
    assert queue_plan.dominant == "cpu"
    assert queue_plan.limit == R(10.0, 15360)
    assert queue_plan.reclaimed == reclaimed
    assert {a.kind for a in plan.actions} == kinds
    assert all(a.container_id.startswith("l") for a in plan.actions)
    # job1 holds the container with the longest remaining time (l5): it is visited first
    assert plan.actions[0].container_id == "l5"


def test_fractional_mib_reaches_algorithm_2_rounded_up() -> None:
    # fair memory 500.5 MiB: p = 100.5 MiB is reclaimed as 101 and a = 500.5 as 501
    queues = [
        QueueState("long", 0.5, R(10.0, 1001), R()),
        QueueState("short", 0.5, R(), R(10.0, 201)),
    ]
    containers = [Container("c", "j", "long", R(10.0, 1001), 60.0)]
    plan = plan_preemption(R(10.0, 1001), queues, containers, Mode.GRACEFUL, STEP)
    ((_, queue_plan),) = plan.plans
    assert (queue_plan.target, queue_plan.limit) == (R(5.0, 101), R(5.0, 501))
    assert queue_plan.reclaimed == R(5.0, 101)
    assert plan.actions[0].limits == (("cpu", 5.0), ("memory_mb", 900))


def test_nothing_to_reclaim_gives_an_empty_plan() -> None:
    calm = [
        QueueState("long", 0.5, R(20.0, 30720), R()),
        QueueState("short", 0.5, R(), R()),
    ]
    plan = plan_preemption(CAPACITY, calm, CONTAINERS[:4], Mode.GRACEFUL, STEP)
    assert plan.plans == ()
    assert plan.actions == ()


@pytest.mark.parametrize(
    ("capacity", "containers", "field"),
    [
        (R(-40.0, 61440), [], "capacity"),
        (R(40.0, 61440.5), [], "capacity"),  # type: ignore[arg-type]
        (CAPACITY, [Container("x", "j", "nowhere", R(1.0, 1), 1.0)], r"containers\[x\].queue"),
        (
            CAPACITY,
            [Container("x", "j", "long", R(1.0, -1), 1.0)],
            r"containers\[x\].resources",
        ),
    ],
)
def test_bad_snapshots_name_the_field(
    capacity: Resources, containers: list[Container], field: str
) -> None:
    with pytest.raises(ValueError, match=f"^{field}:"):
        plan_preemption(capacity, QUEUES, containers, Mode.KILL, STEP)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"minimal_footprint": R(-0.01, 64)}, "minimal_footprint"),
        ({"minimal_footprint": R(0.01, 64.5)}, "minimal_footprint"),  # type: ignore[arg-type]
        ({"graceful_step": R(0.0, 0)}, "graceful_step"),
        ({"graceful_step": R(1.0, -1)}, "graceful_step"),
        ({"throttle_first": "gpu"}, "throttle_first"),
        ({"resume_after_offers": -1}, "resume_after_offers"),
    ],
)
def test_bad_settings_name_the_field(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(ValueError, match=f"^{field}:"):
        PreemptionSettings(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("throttle_first", "order"),
    [("cpu", ("cpu", "memory_mb")), ("memory_mb", ("memory_mb", "cpu"))],
)
def test_throttle_first_chooses_the_apply_order(
    throttle_first: str, order: tuple[str, str]
) -> None:
    settings = PreemptionSettings(throttle_first=throttle_first)  # type: ignore[arg-type]
    assert settings.apply_order == order


def test_paper_defaults() -> None:
    settings = PreemptionSettings()
    assert settings.minimal_footprint == R(0.01, 64)  # Sec. 3.2: 1% CPU, 64 MB
    assert settings.graceful_step == R(2.0, 4096)  # Sec. 5.3: <2 CPU, 4 GB>
    assert settings.throttle_first == "cpu"
    assert settings.resume_after_offers == 3


@st.composite
def clusters(draw: st.DrawFn) -> tuple[list[QueueState], list[Container], Mode]:
    queues = []
    containers = []
    for i in range(draw(st.integers(1, 4))):
        held = [
            R(draw(st.floats(0.0, 8.0)), draw(st.integers(0, 12288)))
            for _ in range(draw(st.integers(0, 5)))
        ]
        allocation = R(sum(h.cpu for h in held), sum(h.memory_mb for h in held))
        demand = R(draw(st.floats(0.0, 40.0)), draw(st.integers(0, 61440)))
        queues.append(QueueState(f"q{i}", draw(st.floats(0.0, 0.5)), allocation, demand))
        containers += [
            Container(
                f"q{i}c{k}",
                f"q{i}j{k % 2}",
                f"q{i}",
                h,
                draw(st.floats(0.0, 100.0)),
                draw(st.booleans()),
            )
            for k, h in enumerate(held)
        ]
    return queues, containers, draw(st.sampled_from(list(Mode)))


@given(clusters())
def test_a_queue_gives_back_beyond_its_share_only_what_alg_2_allows(
    cluster: tuple[list[QueueState], list[Container], Mode],
) -> None:
    queues, containers, mode = cluster
    plan = plan_preemption(R(80.0, 122880), queues, containers, mode, STEP)
    amounts = {a.queue: a for a in plan.amounts}
    for name, queue_plan in plan.plans:
        amount = amounts[name]
        assert all(a.container_id.startswith(f"{name}c") for a in queue_plan.actions)
        assert queue_plan.dominant == amount.dominant
        if mode is Mode.GRACEFUL:
            # graceful shrinking stays within a_q, except the CPU of frozen containers
            frozen = sum(a.reclaimed.cpu for a in queue_plan.actions if a.kind is ActionKind.FREEZE)
            assert queue_plan.reclaimed.memory_mb <= amount.over_provisioned.memory_mb
            assert queue_plan.reclaimed.cpu <= amount.over_provisioned.cpu + frozen + 1e-6
        elif amount.dominant is not None and queue_plan.actions:
            # whole containers: only the last one taken may go past p_q (and a_q)
            d = amount.dominant
            before_last = sum(getattr(a.reclaimed, d) for a in queue_plan.actions[:-1])
            assert before_last < getattr(amount.preempt, d) - 1e-9
