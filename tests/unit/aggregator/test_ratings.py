"""RatingBook: outcomes count once the job ends (or is abandoned), top-K per job, decay, lookups,
and agreement with ``rate_machines`` over the same reports."""

from __future__ import annotations

import numpy as np
import pytest

from aggregator.ratings import RatingBook
from policies.oversubscription.machine_rating import JobReport, TaskOutcome, rate_machines

OK, FAIL, KILL = TaskOutcome.SUCCEEDED, TaskOutcome.FAILED, TaskOutcome.KILLED

# One job's task outcomes as (node, outcome) pairs.
Tasks = list[tuple[str, TaskOutcome]]


def book_with(jobs: dict[str, Tasks], *, top_k: int = 10, decay: float = 1.0) -> RatingBook:
    """A book that recorded ``jobs`` at time 0 and saw every one of them end."""
    book = RatingBook(top_k=top_k, decay=decay)
    for job_id, tasks in jobs.items():
        for node, outcome in tasks:
            book.record(job_id, node, outcome, now=0.0)
        book.end_job(job_id)
    return book


def test_outcomes_count_only_once_the_job_has_ended() -> None:
    book = RatingBook(top_k=10)
    book.record("j", "n1", FAIL, now=0.0)
    book.record("j", "n1", FAIL, now=1.0)
    book.rate(now=2.0)
    assert book.score("n1") == 0.0
    assert (book.open_jobs, book.jobs_rated) == (1, 0)
    book.end_job("j")
    assert book.score("n1") == 0.0  # rated at the next period, not at once
    book.rate(now=3.0)
    assert book.score("n1") == -2.0
    assert (book.open_jobs, book.jobs_rated) == (0, 1)


def test_a_job_is_rated_once_however_many_periods_follow() -> None:
    book = book_with({"j": [("n1", FAIL)]})
    for now in (1.0, 2.0, 3.0):
        book.rate(now)
    assert book.score("n1") == -1.0
    assert book.jobs_rated == 1


def test_ending_an_unknown_or_already_ended_job_changes_nothing() -> None:
    book = book_with({"j": [("n1", FAIL)]})
    book.end_job("j")
    book.end_job("never-seen")
    book.rate(1.0)
    assert book.score("n1") == -1.0
    assert book.jobs_rated == 1


@pytest.mark.parametrize(
    ("last_outcome_at", "rated_at", "abandoned"),
    [
        (0.0, 100.0, False),
        (0.0, 100.5, True),
        (50.0, 149.0, False),  # a later outcome keeps the job open
        (50.0, 151.0, True),
    ],
)
def test_a_silent_job_is_rated_as_abandoned_after_abandon_after(
    last_outcome_at: float, rated_at: float, abandoned: bool
) -> None:
    book = RatingBook(top_k=10, abandon_after=100.0)
    book.record("j", "n1", FAIL, now=0.0)
    book.record("j", "n2", FAIL, now=last_outcome_at)
    book.rate(rated_at)
    expected = -1.0 if abandoned else 0.0
    assert (book.score("n1"), book.score("n2")) == (expected, expected)
    assert book.open_jobs == (0 if abandoned else 1)


@pytest.mark.parametrize(
    ("top_k", "expected"),
    [
        (1, {"n1": -3.0, "n2": 0.0, "n3": 0.0, "n4": 0.0}),
        (2, {"n1": -3.0, "n2": -2.0, "n3": 0.0, "n4": 0.0}),
        # n3 and n4 tie at 1: the lower machine index (node ids sorted) wins the last place.
        (3, {"n1": -3.0, "n2": -2.0, "n3": -1.0, "n4": 0.0}),
        (4, {"n1": -3.0, "n2": -2.0, "n3": -1.0, "n4": -1.0}),
    ],
)
def test_only_each_jobs_top_k_penalised_machines_lose_score(
    top_k: int, expected: dict[str, float]
) -> None:
    tasks: Tasks = [("n4", FAIL), ("n2", FAIL), ("n1", FAIL), ("n2", KILL)]
    tasks += [("n1", FAIL), ("n3", FAIL), ("n1", KILL), ("n5", OK), ("n5", OK)]
    book = book_with({"j": tasks}, top_k=top_k)
    book.rate(1.0)
    assert {n: book.score(n) for n in expected} == expected
    assert book.score("n5") == 0.0  # successes never penalise


def test_top_k_applies_per_job_not_per_period() -> None:
    book = book_with({"a": [("n1", FAIL), ("n1", FAIL)], "b": [("n2", FAIL)]}, top_k=1)
    book.rate(1.0)
    assert (book.score("n1"), book.score("n2")) == (-2.0, -1.0)


def test_decay_shrinks_old_penalties_every_period() -> None:
    book = book_with({"j": [("n1", FAIL)] * 8}, decay=0.5)
    scores = []
    for now in range(1, 5):
        book.rate(float(now))
        scores.append(book.score("n1"))
    # Alg. 3 with decay: previous * decay - penalties, every period.
    assert scores == [-8.0, -4.0, -2.0, -1.0]


def test_decay_applies_before_the_new_penalties() -> None:
    book = book_with({"a": [("n1", FAIL)] * 4}, decay=0.5)
    book.rate(1.0)
    book.record("b", "n1", FAIL, now=1.0)
    book.end_job("b")
    book.rate(2.0)
    assert book.score("n1") == -4.0 * 0.5 - 1.0


def test_unknown_nodes_score_zero_and_ratings_follow_the_order_asked() -> None:
    book = book_with({"j": [("b", FAIL), ("a", FAIL), ("a", FAIL)]})
    book.rate(1.0)
    assert book.score("zzz") == 0.0
    assert book.ratings(("zzz", "a", "b")).scores.tolist() == [0.0, -2.0, -1.0]
    assert book.ratings(("b", "a")).scores.tolist() == [-1.0, -2.0]
    assert book.ratings(()).scores.shape == (0,)


def test_rating_with_nothing_known_is_a_no_op() -> None:
    book = RatingBook(top_k=3)
    book.rate(1.0)
    assert book.ratings(("a",)).scores.tolist() == [0.0]


def test_top_k_must_be_positive() -> None:
    with pytest.raises(ValueError, match=r"^top_k: must be a positive integer$"):
        RatingBook(top_k=0)


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize(("top_k", "decay"), [(1, 1.0), (2, 0.9), (50, 0.5)])
def test_agrees_with_rate_machines_on_the_same_reports(seed: int, top_k: int, decay: float) -> None:
    rng = np.random.default_rng(seed)
    nodes = [f"node-{i}" for i in range(6)]
    periods: list[dict[str, Tasks]] = []
    for period in range(3):
        jobs: dict[str, Tasks] = {}
        for job in range(int(rng.integers(0, 4))):
            size = int(rng.integers(1, 12))
            jobs[f"p{period}-j{job}"] = [
                (nodes[int(rng.integers(0, 6))], TaskOutcome(int(rng.integers(0, 6))))
                for _ in range(size)
            ]
        periods.append(jobs)

    book = RatingBook(top_k=top_k, decay=decay)
    reference = np.zeros(len(nodes))
    for period, jobs in enumerate(periods):
        for job_id, tasks in jobs.items():
            for node, outcome in tasks:
                book.record(job_id, node, outcome, now=float(period))
            book.end_job(job_id)
        book.rate(float(period))
        reports = [
            JobReport(
                hosts=np.array([nodes.index(n) for n, _ in tasks]),
                outcomes=np.array([int(o) for _, o in tasks]),
            )
            for tasks in jobs.values()
        ]
        reference = rate_machines(reports, len(nodes), top_k=top_k, previous=reference, decay=decay)
    np.testing.assert_allclose(book.ratings(tuple(nodes)).scores, reference)
