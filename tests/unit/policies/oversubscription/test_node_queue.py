"""The node queue's pure decisions (ROSE Sec. 6.1-6.2): core classes, launches, evictions."""

from __future__ import annotations

from dataclasses import replace

import pytest

from policies.oversubscription.config import OversubscriptionConfig, OversubscriptionMode
from policies.oversubscription.node_queue import (
    CoreClasses,
    NodeLoad,
    QueuedTask,
    RunningSpeculative,
    Throttle,
    core_classes,
    evictions,
    launches,
    look_at_interference,
    memory_evictions,
    speculative_cpuset,
    throttle,
)
from policies.scheduling.resources import Resources

RP = OversubscriptionConfig(mode=OversubscriptionMode.RESPONSIVENESS, slack_cores=1)
UP = OversubscriptionConfig(mode=OversubscriptionMode.UTILIZATION)
CPUS = (0, 1, 2, 3, 4, 5)


@pytest.mark.parametrize(
    ("config", "regular", "services", "first", "second"),
    [
        (UP, [(0, 1)], [(2,)], (), CPUS),  # no classes in UP (Sec. 6.2 ties them to RP)
        (RP, [], [], (), CPUS),
        (RP, [(0, 1)], [], (0, 1), (2, 3, 4, 5)),  # no service: no slack
        (RP, [], [(2,)], (0, 2), (1, 3, 4, 5)),  # a service: its core and one slack core
        (RP, [(0,)], [(1, 2)], (0, 1, 2, 3), (4, 5)),
        (RP, [(0, 1, 2, 3, 4, 5)], [], CPUS, ()),
        (RP, [(9,)], [], (), CPUS),  # a core the node does not offer is ignored
    ],
)
def test_core_classes(
    config: OversubscriptionConfig,
    regular: list[tuple[int, ...]],
    services: list[tuple[int, ...]],
    first: tuple[int, ...],
    second: tuple[int, ...],
) -> None:
    assert core_classes(CPUS, regular, services, config) == CoreClasses(first, second)


@pytest.mark.parametrize(
    ("classes", "cpuset", "on_first"),
    [
        (CoreClasses((0,), (1, 2)), (1, 2), False),
        (CoreClasses((0, 1), ()), (0, 1), True),  # none left: shares them all, evicted first
    ],
)
def test_speculative_cpuset(classes: CoreClasses, cpuset: tuple[int, ...], on_first: bool) -> None:
    assert speculative_cpuset(classes) == (cpuset, on_first)


def queue(*cpus: float) -> list[QueuedTask]:
    return [QueuedTask(f"t{i}", Resources(cpu, 100), float(i)) for i, cpu in enumerate(cpus)]


def load(cpu_ut: float = 0.1, held_cpu: float = 0.0) -> NodeLoad:
    return NodeLoad((cpu_ut, 0.1, 0.1), Resources(held_cpu, 0), Resources(10.0, 10_000))


@pytest.mark.parametrize(
    ("tasks", "node", "throttled", "started", "blocked"),
    [
        (queue(), load(), False, (), ""),
        (queue(1, 1), load(), False, ("t0", "t1"), ""),
        # The quota (cpu 0.4 of 10 cores) counts each launch before the next.
        (queue(2, 2, 1), load(), False, ("t0", "t1"), "cpu oversubscription 0.5"),
        (queue(1), load(held_cpu=3.5), False, (), "cpu oversubscription 0.45"),
        # The head blocks the queue: a smaller task behind it waits too.
        (queue(5, 0.1), load(), False, (), "cpu oversubscription 0.5"),
        (queue(1), load(cpu_ut=0.95), False, (), "cpu utilisation 0.95 over 0.9"),
        (queue(1), load(), True, (), "throttled"),
    ],
)
def test_launches(
    tasks: list[QueuedTask],
    node: NodeLoad,
    throttled: bool,
    started: tuple[str, ...],
    blocked: str,
) -> None:
    config = RP if throttled else UP
    decision = launches(tasks, node, config, throttled=throttled)
    assert decision.keys == started
    assert decision.blocked.startswith(blocked)


def test_memory_quota_blocks_too() -> None:
    big = [QueuedTask("t0", Resources(0.1, 2_000), 0.0)]  # 0.2 of memory, quota 0.1
    decision = launches(big, load(), UP)
    assert decision.keys == ()
    assert decision.blocked == "memory oversubscription 0.2 would exceed quota 0.1"


def test_evictions_take_first_class_then_least_progressed_first() -> None:
    running = [
        RunningSpeculative("old-second", started_at=1.0, on_first_class=False),
        RunningSpeculative("new-second", started_at=5.0, on_first_class=False),
        RunningSpeculative("old-first", started_at=2.0, on_first_class=True),
        RunningSpeculative("new-first", started_at=4.0, on_first_class=True),
    ]
    assert evictions(running) == ("new-first", "old-first", "new-second", "old-second")


@pytest.mark.parametrize(
    ("live_total_mb", "evicted"),
    [
        (900, ()),  # fits: nothing goes
        (1100, ("new",)),  # the least progressed goes first, until it fits
        (1500, ("new", "old")),
    ],
)
def test_memory_evictions_free_what_regular_tasks_reclaim(
    live_total_mb: int, evicted: tuple[str, ...]
) -> None:
    running = [RunningSpeculative("old", 1.0, False), RunningSpeculative("new", 5.0, False)]
    assert memory_evictions(running, {"old": 300, "new": 200}, live_total_mb, 1000) == evicted


@pytest.mark.parametrize(
    ("previous", "anomaly", "now", "expected"),
    [
        (Throttle(), None, 5.0, Throttle()),  # quiet: nothing
        (Throttle(), "psi", 5.0, Throttle("psi", 15.0)),  # an anomaly starts it
        (Throttle("psi", 15.0), None, 14.9, Throttle("psi", 15.0)),  # held while it lasts
        (Throttle("psi", 15.0), None, 15.0, Throttle()),  # then lifted
        (Throttle("psi", 15.0), "cpi", 12.0, Throttle("cpi", 22.0)),  # a new one restarts it
    ],
)
def test_the_throttle_holds_after_the_last_anomaly(
    previous: Throttle, anomaly: str | None, now: float, expected: Throttle
) -> None:
    assert throttle(previous, anomaly, now, replace(RP, throttle_hold_s=10.0)) == expected
    assert throttle(previous, anomaly, now, UP) == Throttle()  # UP never throttles


@pytest.mark.parametrize(
    ("anomaly", "evict", "throttled"),
    [
        (None, (), False),  # quiet: nothing evicted, no throttle
        ("psi", ("b", "a"), True),  # anomalous: every running one, latest started first
    ],
)
def test_an_anomaly_evicts_every_running_speculative_task_and_throttles(
    anomaly: str | None, evict: tuple[str, ...], throttled: bool
) -> None:
    running = [RunningSpeculative("a", 1.0, False), RunningSpeculative("b", 2.0, False)]
    look = look_at_interference(Throttle(), anomaly, running, 5.0, RP)
    assert (look.evict, look.throttle.active) == (evict, throttled)
