"""Priority buffers: non-preemptive dispatch and the preemptive evict-to-head baseline."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from policies.approximation.buffers import (
    DispatchMode,
    EngineState,
    Job,
    arrive,
    complete,
    empty_engine,
    highest_waiting,
    resource_waste,
)

NP, P = DispatchMode.NON_PREEMPTIVE, DispatchMode.PREEMPTIVE


def run(events: list[tuple[str, float, str, int]], mode: DispatchMode, levels: int = 3):
    """Replay ``("arrive", t, id, priority)`` / ``("done", t, "", 0)`` events.

    Returns the final state and the log of ``(time, "start"|"evict", id)`` actions.
    """
    state = empty_engine(levels)
    log: list[tuple[float, str, str]] = []
    for kind, now, job_id, priority in events:
        if kind == "arrive":
            step = arrive(state, Job(job_id, priority, now), now, mode)
        else:
            step = complete(state, now)
        if step.evicted is not None:
            log.append((now, "evict", step.evicted.job_id))
        if step.dispatched is not None:
            log.append((now, "start", step.dispatched.job_id))
        state = step.state
    return state, log


SCENARIOS = [
    (
        "idle engine starts the arrival at once",
        [("arrive", 0.0, "a", 0)],
        NP,
        [(0.0, "start", "a")],
    ),
    (
        "a high arrival waits for the running low job; then highest buffer first",
        [
            ("arrive", 0.0, "low1", 0),
            ("arrive", 1.0, "low2", 0),
            ("arrive", 2.0, "mid", 1),
            ("arrive", 3.0, "high", 2),
            ("done", 5.0, "", 0),
            ("done", 6.0, "", 0),
            ("done", 7.0, "", 0),
            ("done", 8.0, "", 0),
        ],
        NP,
        [
            (0.0, "start", "low1"),
            (5.0, "start", "high"),
            (6.0, "start", "mid"),
            (7.0, "start", "low2"),
        ],
    ),
    (
        "FCFS within a priority",
        [
            ("arrive", 0.0, "x", 1),
            ("arrive", 1.0, "y", 1),
            ("arrive", 2.0, "z", 1),
            ("done", 3.0, "", 0),
            ("done", 4.0, "", 0),
        ],
        NP,
        [(0.0, "start", "x"), (3.0, "start", "y"), (4.0, "start", "z")],
    ),
    (
        "preemptive: a higher arrival evicts the running job to the head of its buffer",
        [
            ("arrive", 0.0, "low1", 0),
            ("arrive", 1.0, "low2", 0),
            ("arrive", 4.0, "high", 2),
            ("done", 6.0, "", 0),
            ("done", 9.0, "", 0),
        ],
        P,
        [
            (0.0, "start", "low1"),
            (4.0, "evict", "low1"),
            (4.0, "start", "high"),
            (6.0, "start", "low1"),
            (9.0, "start", "low2"),
        ],
    ),
    (
        "preemptive: an equal priority does not evict",
        [("arrive", 0.0, "a", 1), ("arrive", 1.0, "b", 1), ("done", 2.0, "", 0)],
        P,
        [(0.0, "start", "a"), (2.0, "start", "b")],
    ),
]


@pytest.mark.parametrize(
    ("events", "mode", "expected"),
    [pytest.param(e, m, x, id=name) for name, e, m, x in SCENARIOS],
)
def test_dispatch_order(events, mode: DispatchMode, expected) -> None:
    _, log = run(events, mode)
    assert log == expected


def test_wasted_work_accounting() -> None:
    events = [
        ("arrive", 0.0, "low", 0),
        ("arrive", 4.0, "mid", 1),  # low ran 4 s: wasted
        ("arrive", 5.0, "high", 2),  # mid ran 1 s: wasted
        ("done", 7.0, "", 0),  # high: 2 s useful
        ("done", 10.0, "", 0),  # mid restarts and runs 3 s
        ("done", 16.0, "", 0),  # low restarts and runs 6 s
    ]
    state, _ = run(events, P)
    assert state.wasted_time == pytest.approx(5.0)
    assert state.completed_time == pytest.approx(11.0)
    assert resource_waste(state) == pytest.approx(5.0 / 16.0)
    assert state.running is None
    assert state.queued == 0


def test_non_preemptive_never_wastes() -> None:
    events = [("arrive", 0.0, "low", 0), ("arrive", 1.0, "high", 2), ("done", 3.0, "", 0)]
    state, _ = run(events, NP)
    assert state.wasted_time == 0.0
    assert resource_waste(state) == 0.0
    assert resource_waste(empty_engine(1)) == 0.0


def test_highest_waiting() -> None:
    state = EngineState(buffers=((Job("l", 0, 0.0),), (), (Job("h1", 2, 1.0), Job("h2", 2, 2.0))))
    assert highest_waiting(state) == Job("h1", 2, 1.0)
    assert highest_waiting(empty_engine(2)) is None


def test_bad_inputs_are_refused() -> None:
    with pytest.raises(ValueError, match="at least one priority level"):
        empty_engine(0)
    with pytest.raises(ValueError, match=r"priority 3 is outside 0\.\.2"):
        arrive(empty_engine(3), Job("x", 3, 0.0), 0.0, NP)
    with pytest.raises(ValueError, match="no job is running"):
        complete(empty_engine(3), 1.0)
    running = arrive(empty_engine(1), Job("x", 0, 5.0), 5.0, NP).state
    with pytest.raises(ValueError, match="backwards"):
        complete(running, 4.0)


@given(
    arrivals=st.lists(
        st.tuples(st.integers(0, 3), st.booleans()),  # (priority, complete one job afterwards)
        min_size=1,
        max_size=40,
    ),
    preemptive=st.booleans(),
)
def test_dispatch_invariants(arrivals: list[tuple[int, bool]], preemptive: bool) -> None:
    """The engine is never idle while jobs wait; no job is lost or duplicated; under
    non-preemptive dispatch a started job is the head of the highest buffer at that moment."""
    mode = P if preemptive else NP
    state = empty_engine(4)
    now, seen = 0.0, 0
    for index, (priority, finish) in enumerate(arrivals):
        now += 1.0
        step = arrive(state, Job(str(index), priority, now), now, mode)
        if mode is NP and state.running is not None:
            assert step.dispatched is None  # a busy engine is never interrupted
        if mode is P and state.running is not None and priority > state.running.job.priority:
            assert step.evicted == state.running.job
            assert step.state.buffers[step.evicted.priority][0] == step.evicted
        state = step.state
        seen += 1
        if finish and state.running is not None:
            now += 0.5
            expected = highest_waiting(state)
            step = complete(state, now)
            assert step.dispatched == expected
            state = step.state
            seen -= 1
        assert state.running is not None or state.queued == 0
        assert state.queued + (state.running is not None) == seen
        if mode is NP and state.running is not None:
            waiting = [job for buffer in state.buffers for job in buffer]
            assert all(job.job_id != state.running.job.job_id for job in waiting)
