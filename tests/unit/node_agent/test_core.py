"""The node's pure core: event sequences in, instructions out (no runtime, no clock).

Each case feeds a fresh :class:`NodeCore` the tasks it sees, then a sequence of events, and
checks the instructions each event answers with."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import pytest

from node_agent.core import (
    SWAP_GROWTH_BYTES,
    Event,
    Freeze,
    Gone,
    Instruction,
    Kill,
    NodeCore,
    Observed,
    Purpose,
    RaiseClock,
    Refused,
    RestoreClock,
    SetLimits,
    Snapshot,
    Started,
    Stepped,
    SwapPresence,
    TaskView,
    Thaw,
    Tick,
    reported_state,
)
from node_agent.sprint import Mechanism
from plumbing.node_protocol import (
    ResizeAllocation,
    ResumeAllocation,
    SprintAllocation,
    StopAllocation,
    SuspendAllocation,
)
from policies.scheduling.lifecycle import TaskState
from tests.builders import res


def task(
    cpu: float = 4.0,
    memory_mb: int = 4096,
    *,
    key: str = "t",
    allocation_id: str = "a1",
    frozen: bool = False,
    speculative: bool = False,
    resident_mb: int | None = None,
) -> TaskView:
    return TaskView(key, "j", allocation_id, res(cpu, memory_mb), frozen, speculative, resident_mb)


def run(core: NodeCore, events: Sequence[Event]) -> list[list[Instruction]]:
    return [core.handle(event, 100.0 + i) for i, event in enumerate(events)]


def core_with(
    *tasks: TaskView,
    has_swap: bool = True,
    mechanism: Mechanism = Mechanism.CPU_QUOTA,
    capacity: float = 8.0,
) -> NodeCore:
    core = NodeCore(capacity, has_swap=has_swap, mechanism=mechanism)
    core.handle(Snapshot(tasks), 0.0)
    return core


def cut(cpu: float, memory_mb: int, note: str = "") -> SetLimits:
    return SetLimits("t", res(cpu, memory_mb), Purpose.CUT, note)


def step(cpu: float, memory_mb: int) -> SetLimits:
    return SetLimits("t", res(cpu, memory_mb), Purpose.STEP)


# --------------------------------------------------------------------------- immediate


NO_SWAP_NOTE = (
    "not cutting its memory to 256 MiB: this machine has no swap, so it keeps 4096 MiB "
    "(the RM counts it as held)"
)


@pytest.mark.parametrize(
    ("seen", "has_swap", "expected"),
    [
        # Freeze, then CPU and memory to the footprint: its pages go to swap.
        (task(), True, [Freeze("t", "preempted"), cut(0.1, 256)]),
        # Frozen already (a re-sent command): only the cut.
        (task(frozen=True), True, [cut(0.1, 256)]),
        # At the footprint already: nothing.
        (task(0.1, 256, frozen=True), True, []),
        # No swap, resident memory unknown (the agent): the memory stays, with a warning.
        (task(), False, [Freeze("t", "preempted"), cut(0.1, 4096, NO_SWAP_NOTE)]),
        # No swap, resident known (the simulator): down to what it has resident, no lower.
        (task(resident_mb=2867), False, [Freeze("t", "preempted"), cut(0.1, 2867)]),
        # A cut never raises a limit: memory below the footprint stays.
        (task(2.0, 128), True, [Freeze("t", "preempted"), cut(0.1, 128)]),
    ],
)
def test_an_immediate_preemption_freezes_then_cuts_to_the_footprint(
    seen: TaskView, has_swap: bool, expected: list[Instruction]
) -> None:
    core = core_with(seen, has_swap=has_swap)
    (answer,) = run(core, [SuspendAllocation("j", "a1", "preempted", res(0.1, 256))])
    assert answer == expected


def test_a_suspend_without_a_footprint_only_freezes_and_ends_a_graceful_shrink() -> None:
    core = core_with(task())
    run(core, [ResizeAllocation("j", "a1", res(1.0, 1024), res(1.0, 1024))])
    assert core.shrinking("t")
    assert run(core, [SuspendAllocation("j", "a1", "why")]) == [[Freeze("t", "why")]]
    assert not core.shrinking("t")


def test_a_command_for_another_allocation_or_a_gone_task_does_nothing() -> None:
    core = core_with(task())
    assert run(
        core, [SuspendAllocation("j", "other", "x"), Gone("t"), SuspendAllocation("j", "a1", "x")]
    ) == [
        [],
        [],
        [],
    ]


# --------------------------------------------------------------------------- graceful


@pytest.mark.parametrize(
    ("seen", "has_swap", "growth", "expected"),
    [
        # Down by one step per round to the footprint (CPU and memory at most a step each).
        (
            task(),
            True,
            0,
            [[step(3.0, 3072)], [], [step(2.0, 2048)], [], [step(1.0, 1024)], [], []],
        ),
        # Swapping after the first step: frozen there.
        (task(), True, 2 * SWAP_GROWTH_BYTES, [[step(3.0, 3072)], [Freeze("t", "swapping")], []]),
        # Without swap (resident unknown): only CPU goes, the memory stays where it is.
        (
            task(),
            False,
            0,
            [[step(3.0, 4096)], [], [step(2.0, 4096)], [], [step(1.0, 4096)], [], []],
        ),
        # Resident known (the simulator): the second step goes below the 2600 MiB it uses,
        # so it would swap: frozen and cut to that step (its pages go to swap).
        (
            task(resident_mb=2600),
            True,
            0,
            [[step(3.0, 3072)], [], [Freeze("t", "its"), cut(2.0, 2048)], []],
        ),
        # ... and without swap, resident known: down to the working set, never frozen.
        (
            task(resident_mb=2600),
            False,
            0,
            [[step(3.0, 3072)], [], [step(2.0, 2600)], [], [step(1.0, 2600)], [], []],
        ),
    ],
)
def test_a_graceful_preemption_steps_down_to_its_target_once_per_round(
    seen: TaskView, has_swap: bool, growth: int, expected: list[list[Instruction]]
) -> None:
    core = core_with(seen, has_swap=has_swap)
    assert run(core, [ResizeAllocation("j", "a1", res(1.0, 1024), res(1.0, 1024), True)]) == [[]]
    answers: list[list[Instruction]] = []
    while core.shrinking("t") and len(answers) < 20:
        (instructions,) = run(core, [Tick()])
        answers.append(instructions)
        for instruction in instructions:
            if isinstance(instruction, SetLimits):  # the shell carries it out and says so
                now = core.task("t")
                assert now is not None
                core.handle(Observed(replace(now, limits=instruction.limits)), 0)
            if isinstance(instruction, SetLimits) and instruction.purpose is Purpose.STEP:
                answers.append(core.handle(Stepped("t", growth), 0))
    answers.append(run(core, [Tick()])[0])
    assert [[_loose(i) for i in a] for a in answers] == [[_loose(i) for i in a] for a in expected]


def _loose(instruction: Instruction) -> Instruction:
    """A freeze's reason is for the log: compared by its first word."""
    if isinstance(instruction, Freeze):
        return Freeze(instruction.key, instruction.why.split()[0].rstrip(":"))
    return instruction


def test_a_graceful_step_the_kernel_refuses_freezes_the_task_when_asked() -> None:
    core = core_with(task())
    run(core, [ResizeAllocation("j", "a1", res(1.0, 1024), res(1.0, 1024), True)])
    (instructions,) = run(core, [Tick()])
    (frozen,) = run(core, [Refused(instructions[0], "EBUSY")])
    assert [_loose(i) for i in frozen] == [Freeze("t", "its")] and not core.shrinking("t")


@pytest.mark.parametrize(
    ("limits", "step", "expected", "shrinking"),
    [
        (res(1.0, 1024), res(1.0, 1024), [], True),  # graceful: rounds take it down
        (res(4.0, 4096), res(1.0, 1024), [SetLimits("t", res(4.0, 4096), Purpose.RESIZE)], False),
        (res(2.0, 4096), None, [SetLimits("t", res(2.0, 4096), Purpose.RESIZE)], False),
    ],
)
def test_a_resize_with_a_step_that_lowers_something_is_graceful_else_plain(
    limits, step, expected, shrinking
) -> None:
    core = core_with(task())
    assert run(core, [ResizeAllocation("j", "a1", limits, step)]) == [expected]
    assert core.shrinking("t") is shrinking


def test_a_repeated_graceful_command_changes_nothing_and_a_frozen_task_stays_frozen() -> None:
    core = core_with(task())
    command = ResizeAllocation("j", "a1", res(1.0, 1024), res(1.0, 1024), True)
    run(core, [command, Tick()])
    assert run(core, [command]) == [[]] and core.shrinking("t")
    frozen = core_with(task(frozen=True))
    assert run(frozen, [command]) == [[]] and not frozen.shrinking("t")


def test_swap_turned_off_keeps_the_memory_of_the_next_steps() -> None:
    core = core_with(task())
    run(core, [ResizeAllocation("j", "a1", res(1.0, 1024), res(1.0, 1024)), SwapPresence(False)])
    assert run(core, [Tick()]) == [[step(3.0, 4096)]]


def test_a_task_gone_in_a_monitor_pass_ends_its_shrink() -> None:
    core = core_with(task())
    run(core, [ResizeAllocation("j", "a1", res(1.0, 1024), res(1.0, 1024)), Snapshot(())])
    assert not core.shrinking("t") and run(core, [Tick()]) == [[]]


# --------------------------------------------------------------------------- resume, stop


@pytest.mark.parametrize(
    ("limits", "expected"),
    [
        (res(4.0, 4096), [SetLimits("t", res(4.0, 4096), Purpose.RESTORE), Thaw("t")]),
        (res(0.1, 256), [Thaw("t")]),  # the limits it has: only the thaw
        (None, [Thaw("t")]),
    ],
)
def test_a_resume_restores_the_limits_then_thaws(limits, expected) -> None:
    core = core_with(task(0.1, 256, frozen=True))
    assert run(core, [ResumeAllocation("j", "a1", limits)]) == [expected]


def test_a_stop_kills_the_allocations_tasks_or_the_jobs() -> None:
    core = core_with(task(key="a"), task(key="b", allocation_id="a2"))
    assert run(core, [StopAllocation("j", "a2", "done"), StopAllocation("j", "", "gone")]) == [
        [Kill("b", "done")],
        [Kill("a", "gone"), Kill("b", "gone")],
    ]


# --------------------------------------------------------------------------- sprints


def test_a_quota_sprint_takes_idle_cpu_and_is_undone() -> None:
    core = core_with(
        task(1.0, 64, key="t"), task(2.5, 64, key="other", allocation_id="a2"), capacity=4.0
    )
    sprint, again, end = run(
        core,
        [
            SprintAllocation("j", "a1", 2.0),
            SprintAllocation("j", "a1", 2.0),
            SprintAllocation("j", "a1", 1.0),
        ],
    )
    assert sprint == [SetLimits("t", res(1.5, 64), Purpose.SPRINT)]  # 0.5 idle
    assert again == []
    assert end == [SetLimits("t", res(1.0, 64), Purpose.SPRINT_END)]
    assert core.factor_of("t") == 1.0 and core.base_of("t") is None


def test_a_sprinting_task_reports_its_factor_and_its_unsprinted_limits() -> None:
    core = core_with(task(1.0, 64, key="t"), capacity=4.0)
    run(core, [SprintAllocation("j", "a1", 2.0)])
    core.handle(Observed(task(2.0, 64, key="t")), 0)  # the shell resized it
    assert (core.factor_of("t"), core.base_of("t")) == (2.0, res(1.0, 64))


def test_a_task_started_beside_a_sprint_gets_its_grant_back() -> None:
    core = core_with(
        task(1.0, 64, key="t"), task(1.0, 64, key="other", allocation_id="a2"), capacity=4.0
    )
    assert run(core, [SprintAllocation("j", "a1", 2.0)]) == [
        [SetLimits("t", res(2.0, 64), Purpose.SPRINT)]
    ]
    core.handle(Observed(task(2.0, 64, key="t")), 0)
    new = task(1.5, 64, key="new", allocation_id="a3")
    assert run(core, [Started(new)]) == [[SetLimits("t", res(1.5, 64), Purpose.REFIT)]]
    core.handle(Observed(task(1.5, 64, key="t")), 0)
    speculative = task(0.5, 64, key="spec", allocation_id="a4", speculative=True)
    assert run(core, [Started(speculative)]) == [[]]  # it holds no grant: no refit


def test_a_refused_sprint_is_not_reported_and_is_carried_out_when_asked_again() -> None:
    core = core_with(task(1.0, 64, key="t"), capacity=4.0)
    (sprint,) = run(core, [SprintAllocation("j", "a1", 2.0)])
    run(core, [Refused(sprint[0], "busy")])
    assert core.factor_of("t") == 1.0
    assert run(core, [SprintAllocation("j", "a1", 2.0)]) == [sprint]


def test_dvfs_runs_the_clock_fast_while_any_task_sprints() -> None:
    core = core_with(task(key="a"), task(key="b", allocation_id="a2"), mechanism=Mechanism.DVFS)
    answers = run(
        core,
        [
            SprintAllocation("j", "a1", 2.0),
            SprintAllocation("j", "a2", 2.0),
            SprintAllocation("j", "a1", 1.0),
            Gone("b"),
        ],
    )
    assert answers == [[RaiseClock()], [RaiseClock()], [], [RestoreClock()]]
    assert core.factor_of("a") == core.factor_of("b") == 1.0


# --------------------------------------------------------------------------- lifecycle


@pytest.mark.parametrize(
    ("seen", "expected"),
    [
        ({"exited": False, "frozen": False}, (TaskState.RUNNING, "")),
        ({"exited": False, "frozen": True}, (TaskState.SUSPENDED, "")),
        ({"exited": True, "exit_code": 0}, (TaskState.SUCCEEDED, "")),
        ({"exited": True, "exit_code": 2}, (TaskState.FAILED, "exit code 2")),
        ({"exited": True, "exit_code": 137}, (TaskState.FAILED, "killed by signal 9")),
        (
            {"exited": True, "exit_code": 143, "stop_requested": True},
            (TaskState.KILLED, "stopped (exit code 143)"),
        ),
        (
            {"exited": True, "exit_code": 143, "fenced": "fenced: lost", "stop_requested": True},
            (TaskState.KILLED, "fenced: lost"),
        ),
        (
            {"exited": True, "exit_code": 143, "evicted": "psi", "fenced": "fenced: lost"},
            (TaskState.KILLED, "evicted: psi"),
        ),
    ],
)
def test_what_the_node_reports_of_a_task(
    seen: dict[str, object], expected: tuple[TaskState, str]
) -> None:
    arguments = {"exited": False, "frozen": False, "exit_code": 0, **seen}
    assert reported_state(**arguments) == expected  # type: ignore[arg-type]
