"""Mean response times of the M/G/1 priority queue: closed forms and a discrete-event check."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from policies.approximation.buffers import DispatchMode, Job, arrive, complete, empty_engine
from policies.approximation.priority_queues import (
    Discipline,
    PriorityWorkload,
    batch_mean_response_times,
    mean_response_times,
    non_preemptive_response_times,
    preemptive_resume_response_times,
)


def workload(rates: list[float], means: list[float], seconds: list[float]) -> PriorityWorkload:
    return PriorityWorkload(np.array(rates), np.array(means), np.array(seconds))


def exponential_workload(rates: list[float], means: list[float]) -> PriorityWorkload:
    return workload(rates, means, [2 * m**2 for m in means])


# (rates, means, second moments, non-preemptive T_k, preemptive-resume T_k), worked by hand.
# Index k = priority, so the last entry is the highest priority.
CASES = [
    # M/M/1, ρ = 0.5: T = 1/(μ − λ) = 2 under both.
    ([0.5], [1.0], [2.0], [2.0], [2.0]),
    # Two exponential classes, λ = 0.25 each, E[S] = 1: W0 = 0.5, σ_hi = 0.25, σ = 0.5.
    # NP: high 1 + 0.5/0.75, low 1 + 0.5/(0.75·0.5). PR: high = M/M/1 alone = 4/3,
    # low = 1/0.75 + 0.5/(0.75·0.5).
    ([0.25, 0.25], [1.0, 1.0], [2.0, 2.0], [1 + 0.5 / 0.375, 1 + 0.5 / 0.75], [8 / 3, 4 / 3]),
    # Deterministic services: low λ=0.2, S=2; high λ=0.1, S=1. W0 = (0.2·4 + 0.1·1)/2 = 0.45.
    (
        [0.2, 0.1],
        [2.0, 1.0],
        [4.0, 1.0],
        [2 + 0.45 / (0.9 * 0.5), 1 + 0.45 / 0.9],
        [2 / 0.9 + 0.45 / (0.9 * 0.5), 1 + 0.05 / 0.9],
    ),
]


@pytest.mark.parametrize(("rates", "means", "seconds", "np_times", "pr_times"), CASES)
def test_closed_forms(rates, means, seconds, np_times, pr_times) -> None:
    load = workload(rates, means, seconds)
    assert non_preemptive_response_times(load) == pytest.approx(np_times, rel=1e-12)
    assert preemptive_resume_response_times(load) == pytest.approx(pr_times, rel=1e-12)


def test_unstable_classes_are_infinite_and_stable_ones_see_the_saturated_throughput() -> None:
    # Low class saturates: σ_hi = 0.5, the low class is served at (1 − 0.5)/2 = 0.25 per second.
    load = workload([1.0, 0.5], [2.0, 1.0], [8.0, 2.0])
    np_times = non_preemptive_response_times(load)
    residual = (0.25 * 8.0 + 0.5 * 2.0) / 2
    assert np_times[0] == math.inf
    assert np_times[1] == pytest.approx(1.0 + residual / 0.5)
    pr_times = preemptive_resume_response_times(load)
    assert pr_times[0] == math.inf
    assert pr_times[1] == pytest.approx(2.0)  # the high class alone is M/M/1 with ρ = 0.5


def test_fully_unstable_queue() -> None:
    load = exponential_workload([1.0], [1.0])
    assert non_preemptive_response_times(load).tolist() == [math.inf]
    assert preemptive_resume_response_times(load).tolist() == [math.inf]


@pytest.mark.parametrize(
    ("rates", "means", "seconds", "message"),
    [
        ([], [], [], "at least one"),
        ([1.0], [1.0, 2.0], [1.0], "one entry per class"),
        ([-1.0], [1.0], [1.0], "non-negative"),
        ([1.0], [0.0], [1.0], "positive"),
        ([1.0], [2.0], [1.0], "squared means"),
        ([math.nan], [1.0], [1.0], "finite"),
    ],
)
def test_bad_workloads_are_refused(rates, means, seconds, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        workload(rates, means, seconds)


classes = st.lists(
    st.tuples(st.floats(0.01, 1.0), st.floats(0.1, 3.0), st.floats(1.0, 4.0)),
    min_size=1,
    max_size=5,
)


@given(classes=classes, total_load=st.floats(0.05, 0.95))
def test_kleinrock_conservation_law(classes, total_load: float) -> None:
    """Non-preemptive priority is work-conserving: Σ ρ_k W_k equals FCFS's ρ W0 / (1 − ρ)."""
    raw_rates = np.array([c[0] for c in classes])
    means = np.array([c[1] for c in classes])
    seconds = means**2 * np.array([c[2] for c in classes])
    rates = raw_rates * total_load / float(raw_rates @ means)
    load = PriorityWorkload(rates, means, seconds)
    waits = non_preemptive_response_times(load) - means
    residual = float(rates @ seconds) / 2
    assert float(load.loads @ waits) == pytest.approx(
        total_load * residual / (1 - total_load), rel=1e-9
    )


@given(classes=classes, total_load=st.floats(0.05, 0.95))
def test_preemption_favours_the_top_class_and_batch_matches(classes, total_load: float) -> None:
    raw_rates = np.array([c[0] for c in classes])
    means = np.array([c[1] for c in classes])
    seconds = means**2 * np.array([c[2] for c in classes])
    rates = raw_rates * total_load / float(raw_rates @ means)
    load = PriorityWorkload(rates, means, seconds)
    top = len(classes) - 1
    alone = means[top] + rates[top] * seconds[top] / 2 / (1 - rates[top] * means[top])
    assert preemptive_resume_response_times(load)[top] == pytest.approx(alone, rel=1e-9)
    assert non_preemptive_response_times(load)[top] >= alone - 1e-9
    for discipline in Discipline:
        batch = batch_mean_response_times(
            np.stack([rates, rates]), means, np.stack([seconds, seconds]), discipline
        )
        assert batch[1] == pytest.approx(mean_response_times(load, discipline), rel=1e-12)


# ---- discrete-event simulation of the DiAS engine (buffers.py) vs. Cobham ----


def simulate_non_preemptive(rates, service_draws, rng, jobs: int) -> np.ndarray:
    """Poisson arrivals into the priority buffers; return the mean response time per class."""
    total_rate = sum(rates)
    gaps = rng.exponential(1 / total_rate, jobs)
    priorities = rng.choice(len(rates), size=jobs, p=np.array(rates) / total_rate)
    arrivals = np.cumsum(gaps)
    services = np.array([service_draws[k](rng) for k in priorities])
    state = empty_engine(len(rates))
    finish_at, running_index = math.inf, -1
    response = np.zeros(jobs)
    next_arrival = 0

    def start(dispatched, now):
        index = int(dispatched.job_id)
        return now + services[index], index

    while next_arrival < jobs or running_index >= 0:
        if next_arrival < jobs and arrivals[next_arrival] < finish_at:
            now = float(arrivals[next_arrival])
            job = Job(str(next_arrival), int(priorities[next_arrival]), now)
            step = arrive(state, job, now, DispatchMode.NON_PREEMPTIVE)
            next_arrival += 1
        else:
            now = finish_at
            response[running_index] = now - arrivals[running_index]
            step = complete(state, now)
            finish_at, running_index = math.inf, -1
        state = step.state
        if step.dispatched is not None:
            finish_at, running_index = start(step.dispatched, now)
    warm = jobs // 10  # drop the start-up transient
    return np.array([response[warm:][priorities[warm:] == k].mean() for k in range(len(rates))])


def test_cobham_matches_a_discrete_event_simulation() -> None:
    # Low class: Erlang-2 jobs of mean 2 s; high class: exponential jobs of mean 1 s; ρ = 0.55.
    # At this load 50,000 jobs put the sampling error near 1-2 % (checked over eight seeds),
    # while FCFS (T_high ≈ 2.67 s) or preemption (T_high ≈ 1.18 s) would miss by far more than 5 %.
    rates = [0.2, 0.15]
    draws = [lambda rng: rng.gamma(2, 1.0), lambda rng: rng.exponential(1.0)]
    simulated = simulate_non_preemptive(rates, draws, np.random.default_rng(2024), 50_000)
    predicted = non_preemptive_response_times(workload(rates, [2.0, 1.0], [6.0, 2.0]))
    assert simulated == pytest.approx(predicted, rel=0.05)
