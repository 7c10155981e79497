"""One cluster-wide round: Algorithm 1 per queue feeding Algorithm 2, and the settings."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from policies.preemption.amounts import QueueState
from policies.preemption.plan import plan_preemption
from policies.preemption.resources import Mode, PreemptionSettings
from policies.preemption.victims import ActionKind, Container

QUEUES = [
    QueueState("long", 0.5, (30.0, 45.0), (0.0, 0.0)),
    QueueState("short", 0.5, (10.0, 15.0), (20.0, 10.0)),
]
CONTAINERS = [
    Container(f"l{i}", f"job{i % 2}", "long", (5.0, 7.5), 100.0 * (i + 1)) for i in range(6)
] + [Container("s0", "burst", "short", (10.0, 15.0), 5.0)]
STEP = PreemptionSettings(minimal_footprint=(0.0, 0.0), graceful_step=(1.0, 1.0))


@pytest.mark.parametrize(
    ("mode", "reclaimed", "kinds"),
    [
        # p = <10 CPU, 5 GB> (the worked example); whole containers cap at a = <10, 15>
        (Mode.KILL, (10.0, 15.0), {ActionKind.KILL}),
        (Mode.GRACEFUL, (10.0, 5.0), {ActionKind.SHRINK}),
    ],
)
def test_worked_example_end_to_end(
    mode: Mode, reclaimed: tuple[float, float], kinds: set[ActionKind]
) -> None:
    plan = plan_preemption((40.0, 60.0), QUEUES, CONTAINERS, mode, STEP)
    ((name, queue_plan),) = plan.plans
    assert name == "long"
    assert queue_plan.target == pytest.approx((10.0, 5.0))
    assert queue_plan.reclaimed == pytest.approx(reclaimed)
    assert {a.kind for a in plan.actions} == kinds
    assert all(a.container_id.startswith("l") for a in plan.actions)
    # job1 holds the container with the longest remaining time (l5): it is visited first
    assert plan.actions[0].container_id == "l5"


def test_nothing_to_reclaim_gives_an_empty_plan() -> None:
    calm = [
        QueueState("long", 0.5, (20.0, 30.0), (0.0, 0.0)),
        QueueState("short", 0.5, (0.0, 0.0), (0.0, 0.0)),
    ]
    plan = plan_preemption((40.0, 60.0), calm, CONTAINERS[:4], Mode.GRACEFUL, STEP)
    assert plan.plans == ()
    assert plan.actions == ()


@pytest.mark.parametrize(
    ("capacity", "containers", "field"),
    [
        ((40.0,), [], "capacity"),
        ((40.0, 60.0), [Container("x", "j", "nowhere", (1.0, 1.0), 1.0)], r"containers\[x\].queue"),
    ],
)
def test_bad_snapshots_name_the_field(
    capacity: tuple[float, ...], containers: list[Container], field: str
) -> None:
    with pytest.raises(ValueError, match=f"^{field}:"):
        plan_preemption(capacity, QUEUES, containers, Mode.KILL, STEP)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"resource_names": ()}, "resource_names"),
        ({"resource_names": ("cpu", "cpu")}, "resource_names"),
        ({"minimal_footprint": (0.01,)}, "minimal_footprint"),
        ({"graceful_step": (0.0, 0.0)}, "graceful_step"),
        ({"graceful_step": (1.0, -1.0)}, "graceful_step"),
        ({"throttle_first": "gpu"}, "throttle_first"),
        ({"resume_after_offers": -1}, "resume_after_offers"),
    ],
)
def test_bad_settings_name_the_field(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(ValueError, match=f"^{field}:"):
        PreemptionSettings(**kwargs)  # type: ignore[arg-type]


def test_paper_defaults() -> None:
    settings = PreemptionSettings()
    assert settings.minimal_footprint == (0.01, 64.0)
    assert settings.resume_after_offers == 3
    assert settings.apply_order == (0, 1)


@st.composite
def clusters(draw: st.DrawFn) -> tuple[list[QueueState], list[Container], Mode]:
    queues = []
    containers = []
    for i in range(draw(st.integers(1, 4))):
        held = [
            (draw(st.floats(0.0, 8.0)), draw(st.floats(0.0, 12.0)))
            for _ in range(draw(st.integers(0, 5)))
        ]
        allocation = (sum(h[0] for h in held), sum(h[1] for h in held))
        demand = (draw(st.floats(0.0, 40.0)), draw(st.floats(0.0, 60.0)))
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
def test_no_queue_ever_gives_back_more_than_its_over_provisioned_share(
    cluster: tuple[list[QueueState], list[Container], Mode],
) -> None:
    queues, containers, mode = cluster
    plan = plan_preemption((80.0, 120.0), queues, containers, mode, STEP)
    over = {a.queue: a.over_provisioned for a in plan.amounts}
    for name, queue_plan in plan.plans:
        assert all(r <= a + 1e-6 for r, a in zip(queue_plan.reclaimed, over[name], strict=True))
        assert all(a.container_id.startswith(f"{name}c") for a in queue_plan.actions)
