"""Limits per person: submissions per minute, open streams, tasks of unfinished jobs."""

from __future__ import annotations

import pytest

from plumbing.authz import StreamCount
from plumbing.tls import Identity, Role
from policies.scheduling.lifecycle import JobState
from policies.scheduling.progress import PhaseProgress
from resource_manager.errors import LimitExceededError
from resource_manager.limits import SubmissionRate
from tests.unit.resource_manager.harness import add_node, new_core, spec_of


@pytest.mark.parametrize(
    ("times", "allowed"),
    [
        ([0.0] * 3, [True, True, True]),  # a burst of per_minute
        ([0.0] * 4, [True, True, True, False]),  # then refused
        ([0.0, 0.0, 0.0, 20.0], [True, True, True, True]),  # one refilled after 60/3 s
        ([0.0, 0.0, 0.0, 19.0], [True, True, True, False]),
    ],
)
def test_submissions_per_minute(times: list[float], allowed: list[bool]) -> None:
    rate = SubmissionRate(per_minute=3)
    assert [rate.take("alice", t) is None for t in times] == allowed


def test_each_user_has_their_own_bucket_and_the_refusal_says_when() -> None:
    rate = SubmissionRate(per_minute=1)
    assert rate.take("mallory", 0.0) is None
    assert rate.take("mallory", 30.0) == (
        "submissions: mallory submitted more than 1 jobs a minute, the limit per user "
        "(--submissions-per-minute); try again in 30.0 s"
    )
    assert rate.take("alice", 30.0) is None
    assert SubmissionRate(0).take("x", 0.0) is None  # no limit


def test_streams_per_identity() -> None:
    streams = StreamCount(2)
    bob, carol = Identity(Role.CLIENT, "bob"), Identity(Role.CLIENT, "carol")
    assert streams.open(bob) is None and streams.open(bob) is None
    assert streams.open(bob) is not None
    assert streams.open(carol) is None
    streams.close(bob)
    assert streams.open(bob) is None
    assert streams.open(None) is None  # no TLS: no identity to count


def test_open_tasks_per_user_are_counted_as_jobs_progress_and_end() -> None:
    core = new_core(max_open_tasks_per_user=10)
    add_node(core, "n1")
    first = core.submit(spec_of(6), client_mode=True, now=1.0, owner="alice")
    with pytest.raises(LimitExceededError, match=r"tasks: alice has 6 tasks of unfinished jobs"):
        core.submit(spec_of(5), client_mode=True, now=1.0, owner="alice")
    core.submit(spec_of(5), client_mode=True, now=1.0, owner="bob")  # bob's own count
    core.register_master(first.job_id, attempt=1, now=1.0)
    progress = [PhaseProgress("p", 6, running=1, succeeded=5)]
    core.allocate(first.job_id, [], [], progress, 0, now=2.0)
    assert core.core.tables.open_tasks_by_owner["alice"] == 1
    core.submit(spec_of(5), client_mode=True, now=3.0, owner="alice")
    core.finish_job(first.job_id, JobState.SUCCEEDED, "", [], now=4.0)
    assert core.core.tables.open_tasks_by_owner["alice"] == 5
