"""The sprinter: per-priority timeout, sprint until the job ends or the budget is spent."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from policies.approximation.sprinting import (
    SprintConfig,
    SprinterState,
    SprintingJob,
    advance,
    dispatch,
    finish,
    initial_sprinter,
    next_change,
    sprinted_job_time,
)

CONFIG = SprintConfig(capacity=100.0, replenish_rate=0.1)
HIGH = 65.0  # the paper's limited sprinting: high priority sprints after 65 s
NEVER = math.inf  # low priority never sprints


def job_of(state: SprinterState, job_id: str = "j") -> SprintingJob:
    job = state.job(job_id)
    assert job is not None
    return job


def test_job_ending_before_its_timeout_never_sprints() -> None:
    state = dispatch(initial_sprinter(CONFIG, 0.0), CONFIG, "j", HIGH, 10.0)
    assert next_change(state, CONFIG) == 75.0
    state, record = finish(state, CONFIG, "j", 60.0)
    assert record.sprinted_time == 0.0
    assert state.budget == 100.0  # full budget stays capped at capacity
    assert state.jobs == ()


def test_sprint_starts_at_the_timeout_and_runs_to_the_end() -> None:
    state = dispatch(initial_sprinter(CONFIG, 0.0), CONFIG, "j", HIGH, 0.0)
    assert not job_of(advance(state, CONFIG, 64.9)).sprinting
    sprinting = advance(state, CONFIG, 65.0)
    assert job_of(sprinting).sprinting
    state, record = finish(sprinting, CONFIG, "j", 85.0)
    assert record.sprinted_time == pytest.approx(20.0)
    assert not record.sprinting
    # 20 s of sprint drain 20 units while 2 replenish.
    assert state.budget == pytest.approx(100.0 - 20.0 + 2.0)


def test_sprint_stops_when_the_budget_is_spent_and_does_not_restart() -> None:
    config = SprintConfig(capacity=9.0, replenish_rate=0.1)
    state = dispatch(initial_sprinter(config, 0.0), config, "j", 0.0, 0.0)
    assert job_of(state).sprinting  # T = 0: sprint from dispatch
    depletion = 9.0 / 0.9
    assert next_change(state, config) == pytest.approx(depletion)
    spent = advance(state, config, 30.0)
    assert not job_of(spent).sprinting
    assert job_of(spent).sprint_over
    assert job_of(spent).sprinted_time == pytest.approx(depletion)
    assert spent.budget == pytest.approx(0.1 * (30.0 - depletion))
    assert next_change(spent, config) == math.inf


def test_a_timer_firing_on_an_empty_budget_does_not_sprint() -> None:
    config = SprintConfig(capacity=0.0, replenish_rate=0.0)
    state = advance(dispatch(initial_sprinter(config, 0.0), config, "j", 5.0, 0.0), config, 10.0)
    assert not job_of(state).sprinting
    assert job_of(state).sprint_over


def test_budget_replenishes_between_jobs_up_to_capacity() -> None:
    config = SprintConfig(capacity=10.0, replenish_rate=0.5, drain_rate=2.0)
    state = dispatch(initial_sprinter(config, 0.0), config, "a", 0.0, 0.0)
    state, record = finish(state, config, "a", 4.0)  # net −1.5 per second for 4 s
    assert record.sprinted_time == pytest.approx(4.0)
    assert state.budget == pytest.approx(4.0)
    assert advance(state, config, 8.0).budget == pytest.approx(6.0)
    assert advance(state, config, 100.0).budget == pytest.approx(10.0)


def test_replenishing_faster_than_draining_never_runs_dry() -> None:
    config = SprintConfig(capacity=1.0, replenish_rate=2.0)
    state = dispatch(initial_sprinter(config, 0.0), config, "j", 0.0, 0.0)
    assert next_change(state, config) == math.inf
    later = advance(state, config, 1_000.0)
    assert job_of(later).sprinting
    assert later.budget == pytest.approx(1.0)


def test_never_sprinting_priority() -> None:
    state = dispatch(initial_sprinter(CONFIG, 0.0), CONFIG, "j", NEVER, 0.0)
    assert next_change(state, CONFIG) == math.inf
    assert not job_of(advance(state, CONFIG, 1e6)).sprinting


def test_bad_inputs_are_refused() -> None:
    state = initial_sprinter(CONFIG, 10.0)
    with pytest.raises(ValueError, match="timeout must be 0 or more"):
        dispatch(state, CONFIG, "j", -1.0, 10.0)
    with pytest.raises(ValueError, match="backwards"):
        advance(state, CONFIG, 9.0)
    with pytest.raises(ValueError, match="no job j"):
        finish(state, CONFIG, "j", 11.0)
    busy = dispatch(state, CONFIG, "j", NEVER, 10.0)
    with pytest.raises(ValueError, match="already in execution"):
        dispatch(busy, CONFIG, "j", NEVER, 11.0)
    for bad in (
        {"capacity": -1.0},
        {"replenish_rate": math.nan},
        {"drain_rate": 0.0},
    ):
        arguments = {"capacity": 1.0, "replenish_rate": 0.0, **bad}
        with pytest.raises(ValueError):
            SprintConfig(**arguments)


@given(
    timeout=st.floats(0.0, 50.0),
    capacity=st.floats(0.0, 40.0),
    replenish=st.floats(0.0, 2.0),
    steps=st.lists(st.floats(0.0, 30.0), min_size=1, max_size=20),
)
def test_budget_stays_within_capacity_and_sprint_within_elapsed(
    timeout: float, capacity: float, replenish: float, steps: list[float]
) -> None:
    config = SprintConfig(capacity=capacity, replenish_rate=replenish)
    state = dispatch(initial_sprinter(config, 0.0), config, "j", timeout, 0.0)
    now = 0.0
    for step in steps:
        now += step
        state = advance(state, config, now)
        assert -1e-9 <= state.budget <= capacity + 1e-9
        assert job_of(state).sprinted_time <= max(0.0, now - timeout) + 1e-9
        # Spending can never exceed the starting budget plus what was replenished meanwhile.
        assert job_of(state).sprinted_time <= capacity + replenish * now + 1e-9


def test_jobs_sprinting_together_share_the_budget_and_all_stop_when_it_runs_dry() -> None:
    config = SprintConfig(capacity=12.0, replenish_rate=0.0)
    state = initial_sprinter(config, 0.0)
    state = dispatch(state, config, "a", 0.0, 0.0)
    state = dispatch(state, config, "b", 2.0, 0.0)
    state = dispatch(state, config, "c", NEVER, 0.0)
    assert next_change(state, config) == 2.0  # b's timer
    state = advance(state, config, 2.0)
    assert state.sprinting == 2
    # 10 left at 2 s, drained twice as fast: dry at 7 s.
    assert next_change(state, config) == pytest.approx(7.0)
    state = advance(state, config, 10.0)
    assert state.sprinting == 0 and state.budget == 0.0
    assert [job_of(state, j).sprinted_time for j in "abc"] == pytest.approx([7.0, 5.0, 0.0])
    assert [job_of(state, j).sprint_over for j in "abc"] == [True, True, False]


def test_a_job_leaving_execution_stops_draining_the_budget() -> None:
    config = SprintConfig(capacity=100.0, replenish_rate=0.0)
    state = dispatch(initial_sprinter(config, 0.0), config, "a", 0.0, 0.0)
    state = dispatch(state, config, "b", 0.0, 0.0)
    state, record = finish(state, config, "a", 10.0)
    assert record.sprinted_time == pytest.approx(10.0)
    assert advance(state, config, 20.0).budget == pytest.approx(100.0 - 20.0 - 10.0)


@pytest.mark.parametrize(
    ("base", "speedup", "timeout", "expected"),
    [
        (50.0, 3.0, 65.0, 50.0),
        (95.0, 3.0, 65.0, 75.0),
        (90.0, 1.5, 0.0, 60.0),
        (0.0, 2.0, 1.0, 0.0),
    ],
)
def test_sprinted_job_time(base: float, speedup: float, timeout: float, expected: float) -> None:
    assert sprinted_job_time(base, speedup, timeout) == pytest.approx(expected)
