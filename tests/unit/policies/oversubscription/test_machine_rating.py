"""Alg. 3 (task-behaviour-aware machine rating)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from policies.oversubscription.machine_rating import (
    JobReport,
    MachineRatings,
    TaskOutcome,
    penalty_scores,
    rate_machines,
    top_k_penalties,
)
from policies.oversubscription.selection import largest_k, smallest_k

S, F, C, T, K, E = (
    TaskOutcome.SUCCEEDED,
    TaskOutcome.FAILED,
    TaskOutcome.CRASHED,
    TaskOutcome.TAILED,
    TaskOutcome.KILLED,
    TaskOutcome.EVICTED,
)


def report(*tasks: tuple[int, TaskOutcome]) -> JobReport:
    return JobReport(
        hosts=np.array([h for h, _ in tasks]), outcomes=np.array([int(o) for _, o in tasks])
    )


@pytest.mark.parametrize(
    ("tasks", "expected"),
    [
        pytest.param([(0, S), (1, S)], [0, 0, 0], id="all succeeded"),
        pytest.param([(0, F), (0, C), (1, T), (2, K)], [2, 1, 1], id="each negative outcome"),
        pytest.param([(2, E), (2, E), (2, S)], [0, 0, 2], id="eviction counts (Sec. 5.1 text)"),
        pytest.param([], [0, 0, 0], id="no tasks"),
    ],
)
def test_penalty_counts_bad_endings_per_host(
    tasks: list[tuple[int, TaskOutcome]], expected: list[int]
) -> None:
    assert penalty_scores(report(*tasks), 3).tolist() == expected


@pytest.mark.parametrize(
    ("penalties", "k", "expected"),
    [
        ([3, 0, 5, 1], 2, [3, 0, 5, 0]),
        ([3, 0, 5, 1], 9, [3, 0, 5, 1]),
        ([2, 2, 2, 0], 2, [2, 2, 0, 0]),  # ties to the lower index
    ],
)
def test_only_the_top_k_penalties_count(penalties: list[int], k: int, expected: list[int]) -> None:
    assert top_k_penalties(penalties, k).tolist() == expected


def test_scores_sum_over_job_masters_and_decay() -> None:
    jobs = [report((0, F), (0, F), (1, K)), report((1, T), (2, S))]
    scores = rate_machines(jobs, 3, top_k=5)
    assert scores.tolist() == [-2.0, -2.0, 0.0]
    later = rate_machines([report((2, C))], 3, top_k=5, previous=scores, decay=0.5)
    assert later.tolist() == [-1.0, -1.0, -1.0]
    assert rate_machines([], 3, top_k=5, previous=scores).tolist() == scores.tolist()


def test_top_k_applies_per_job_master() -> None:
    jobs = [report((0, F), (0, F), (1, F)), report((1, F), (2, F), (2, F))]
    assert rate_machines(jobs, 3, top_k=1).tolist() == [-2.0, 0.0, -2.0]


@pytest.mark.parametrize(
    ("hosts", "outcomes", "message"),
    [
        ([0, 1], [0], "one outcome per task"),
        ([0], [9], "unknown task outcome"),
        ([-1], [0], "non-negative"),
    ],
)
def test_bad_reports_are_named(hosts: list[int], outcomes: list[int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        JobReport(hosts=np.array(hosts), outcomes=np.array(outcomes))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(-5, 5), min_size=0, max_size=30), st.integers(0, 35))
def test_selection_picks_k_extremes_with_index_ties(values: list[int], k: int) -> None:
    array = np.array(values, dtype=float)
    expected_small = sorted(range(len(values)), key=lambda i: (values[i], i))[:k]
    expected_large = sorted(range(len(values)), key=lambda i: (-values[i], i))[:k]
    assert smallest_k(array, k).tolist() == sorted(expected_small)
    assert largest_k(array, k).tolist() == sorted(expected_large)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.lists(st.tuples(st.integers(0, 9), st.sampled_from(list(TaskOutcome))), max_size=25),
        max_size=6,
    ),
    st.integers(1, 4),
)
def test_batched_rating_equals_report_by_report(
    jobs: list[list[tuple[int, TaskOutcome]]], k: int
) -> None:
    reports = [report(*tasks) for tasks in jobs]
    expected = np.zeros(10)
    for one in reports:
        expected = expected - top_k_penalties(penalty_scores(one, 10), k)
    np.testing.assert_array_equal(rate_machines(reports, 10, top_k=k), expected)


def test_ratings_carry_over_periods() -> None:
    ratings = MachineRatings.unrated(3).updated([report((1, F))], top_k=5)
    assert ratings.scores.tolist() == [0.0, -1.0, 0.0]
    later = ratings.updated([report((1, F)), report((2, K))], top_k=5, decay=0.5)
    assert later.scores.tolist() == [0.0, -1.5, -1.0]
    with pytest.raises(ValueError, match=r"ratings\.scores"):
        MachineRatings(np.array([0.0, np.nan]))
