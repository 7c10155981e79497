"""One pass of a node's speculative queue as one pure decision (node_pass.decide_pass): the
agent's order (throttle, memory reclamation, hold, core classes, admission), which the node
agent's queue and the simulator's nodes share."""

from __future__ import annotations

from dataclasses import replace

import pytest

from policies.oversubscription.config import OversubscriptionConfig, OversubscriptionMode
from policies.oversubscription.node_pass import (
    MEMORY_RECLAIMED,
    Evict,
    LiveTask,
    NodePassInput,
    NodeState,
    Repin,
    RunningTask,
    decide_pass,
)
from policies.oversubscription.node_queue import (
    CoreClasses,
    QueuedTask,
    ReclaimHold,
    Throttle,
)
from policies.scheduling.resources import Resources

# Memory quota 0.25 of 4000 MiB (the hold ends at 3000 MiB committed); thresholds never bind.
UP = OversubscriptionConfig(
    admission_thresholds=(1.0, 1.0, 1.0),
    oversubscription_quota=(1.0, 0.25, 1.0),
    reclaim_hold_s=2.0,
)
RP = replace(UP, mode=OversubscriptionMode.RESPONSIVENESS, slack_cores=1)
CAPACITY = Resources(4.0, 4000)
CPUS = (0, 1, 2, 3)
IDLE = (0.0, 0.0, 0.0)


def running(key: str, memory_mb: int, started_at: float, *, evicting: bool = False) -> RunningTask:
    return RunningTask(key, Resources(0.5, memory_mb), CPUS, started_at, evicting)


def queued(key: str, memory_mb: int = 100, cpu: float = 0.5) -> QueuedTask:
    return QueuedTask(key, Resources(cpu, memory_mb), 0.0)


def node(**fields: object) -> NodePassInput:
    base = NodePassInput(queue=(), running=(), regular=(), capacity=CAPACITY, cpu_ids=CPUS)
    return replace(base, **fields)  # type: ignore[arg-type]


def test_an_anomaly_evicts_every_running_task_latest_first_and_decides_nothing_else() -> None:
    facts = node(
        running=(running("old", 100, 1.0), running("new", 100, 5.0)),
        queue=(queued("q"),),
        utilisation=IDLE,
        anomaly="psi_cpu of service s",
    )
    decision = decide_pass(facts, 10.0, RP)
    assert decision.evictions == (
        Evict("new", "psi_cpu of service s"),
        Evict("old", "psi_cpu of service s"),
    )
    assert decision.admitted == () and decision.repins == ()
    assert decision.blocked == "throttled: psi_cpu of service s"
    assert decision.state == NodeState(Throttle("psi_cpu of service s", 10.0 + RP.throttle_hold_s))


def test_the_throttle_blocks_the_queue_until_its_hold_is_over() -> None:
    throttled = NodeState(Throttle("psi", until=15.0))
    facts = node(queue=(queued("q"),), utilisation=IDLE, state=throttled)
    assert decide_pass(facts, 12.0, RP).blocked == "throttled: psi"
    assert decide_pass(facts, 15.0, RP).admitted == ("q",)


@pytest.mark.parametrize(
    ("regular_mb", "evicted", "hold"),
    [
        (3000, (), ReclaimHold()),  # 3000 + 2 x 400 fits 4000
        (3500, ("new",), ReclaimHold(True, 10.0)),  # 4300: the latest started gives way
        (3900, ("new", "old"), ReclaimHold(True, 10.0)),
    ],
)
def test_regular_memory_reclaims_what_speculative_tasks_borrowed(
    regular_mb: int, evicted: tuple[str, ...], hold: ReclaimHold
) -> None:
    facts = node(
        running=(running("old", 400, 1.0), running("new", 400, 5.0)),
        regular=(LiveTask("r", regular_mb),),
        queue=(queued("q", 50),),
        utilisation=IDLE,
    )
    decision = decide_pass(facts, 10.0, UP)
    assert decision.evictions == tuple(Evict(key, MEMORY_RECLAIMED) for key in evicted)
    assert decision.state.hold == hold
    assert decision.reclaimed == bool(evicted)
    if evicted:  # nothing is admitted into the memory being reclaimed
        assert decision.admitted == ()
        assert decision.blocked.startswith(MEMORY_RECLAIMED)


def test_a_task_already_being_evicted_is_not_evicted_again_but_still_counts() -> None:
    facts = node(
        running=(running("going", 400, 5.0, evicting=True), running("stays", 400, 1.0)),
        regular=(LiveTask("r", 3500),),
    )
    decision = decide_pass(facts, 10.0, UP)
    assert decision.evictions == ()  # "going" frees enough once it has stopped
    assert decision.reclaimed


def test_tasks_still_starting_count_against_the_memory_and_the_quota() -> None:
    facts = node(
        regular=(LiveTask("r", 3000),),
        starting=(queued("s", 900),),
        queue=(queued("q", 200),),
        utilisation=IDLE,
    )
    decision = decide_pass(facts, 0.0, UP)
    assert decision.admitted == ()
    assert decision.blocked.startswith("memory committed 4100 MiB")


@pytest.mark.parametrize(
    ("config", "classes", "cpuset"),
    [
        (UP, CoreClasses((), CPUS), CPUS),  # no classes in UP
        # RP: the service's core and a slack core, and the regular task's, are first-class
        (RP, CoreClasses((0, 1, 3), (2,)), (2,)),
    ],
)
def test_core_classes_re_pin_running_tasks_to_the_second_class(
    config: OversubscriptionConfig, classes: CoreClasses, cpuset: tuple[int, ...]
) -> None:
    facts = node(
        running=(running("spec", 100, 1.0),),
        regular=(
            LiveTask("svc", 0, (0,)),
            LiveTask("r", 100, (3,)),
            LiveTask("m", 100, (2,), job_master=True),  # a job master makes no class
        ),
        services=frozenset({"svc"}),
        queue=(queued("q"),),
        utilisation=IDLE,
    )
    decision = decide_pass(facts, 0.0, config)
    assert decision.state.classes == classes
    assert decision.repins == (() if cpuset == CPUS else (Repin("spec", cpuset),))
    assert decision.admitted == ("q",) and decision.cpuset == cpuset
    again = decide_pass(replace(facts, state=decision.state), 1.0, config)
    assert again.repins == ()  # the classes did not change: nothing moves


def test_an_empty_queue_needs_no_reading_and_blocks_nothing() -> None:
    decision = decide_pass(node(), 0.0, UP)
    assert (decision.admitted, decision.blocked) == ((), "")
    with pytest.raises(ValueError, match="utilisation"):
        decide_pass(node(queue=(queued("q"),)), 0.0, UP)
