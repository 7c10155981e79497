"""Grant tokens and job passes: each verifies for exactly what it was made for."""

from __future__ import annotations

import hashlib
import hmac

import pytest

from plumbing import grants
from policies.scheduling.resources import Resources

SECRET = grants.grant_secret(b"-----BEGIN PRIVATE KEY-----\nnot a real key\n")
KEY = grants.node_key(SECRET, "node-1")
TOKEN = grants.sign(KEY, "job-1", "alloc-1", Resources(1.5, 512))


def test_a_token_verifies_for_its_grant() -> None:
    assert grants.verify(KEY, TOKEN, "job-1", "alloc-1", Resources(1.5, 512))


@pytest.mark.parametrize(
    ("key", "job", "allocation", "resources"),
    [
        pytest.param(
            grants.node_key(SECRET, "node-2"),
            "job-1",
            "alloc-1",
            Resources(1.5, 512),
            id="another node",
        ),
        pytest.param(
            grants.node_key(grants.grant_secret(b"other"), "node-1"),
            "job-1",
            "alloc-1",
            Resources(1.5, 512),
            id="another RM",
        ),
        pytest.param(KEY, "job-2", "alloc-1", Resources(1.5, 512), id="another job"),
        pytest.param(KEY, "job-1", "alloc-2", Resources(1.5, 512), id="another container"),
        pytest.param(KEY, "job-1", "alloc-1", Resources(1.6, 512), id="more cpu"),
        pytest.param(KEY, "job-1", "alloc-1", Resources(1.5, 513), id="more memory"),
        pytest.param(KEY, "job-1\0alloc-1", "", Resources(1.5, 512), id="fields shifted"),
    ],
)
def test_a_token_verifies_for_nothing_else(
    key: bytes, job: str, allocation: str, resources: Resources
) -> None:
    assert not grants.verify(key, TOKEN, job, allocation, resources)


def test_keys_are_stable_and_distinct_per_node() -> None:
    assert grants.node_key(SECRET, "node-1") == KEY
    assert grants.node_key(SECRET, "node-10") != KEY


# Job passes (issue 27): the RM's proof for a job's work on one node where no container names it.
SPECULATIVE = grants.Purpose.SPECULATIVE
PASS = grants.sign_pass(KEY, SPECULATIVE, "job-1")


def test_a_pass_verifies_for_its_job_node_and_purpose() -> None:
    assert grants.verify_pass(KEY, PASS, SPECULATIVE, "job-1")
    assert grants.sign_pass(KEY, SPECULATIVE, "job-1") == PASS  # stable: RM restarts keep it


@pytest.mark.parametrize(
    ("key", "purpose", "job"),
    [
        pytest.param(grants.node_key(SECRET, "node-2"), SPECULATIVE, "job-1", id="another node"),
        pytest.param(
            grants.node_key(grants.grant_secret(b"other"), "node-1"),
            SPECULATIVE,
            "job-1",
            id="another RM",
        ),
        pytest.param(KEY, SPECULATIVE, "job-2", id="another job"),
        pytest.param(KEY, SPECULATIVE, "job-10", id="a job named longer"),
        pytest.param(KEY, grants.Purpose.LOGS, "job-1", id="another purpose"),
    ],
)
def test_a_pass_verifies_for_nothing_else(key: bytes, purpose: grants.Purpose, job: str) -> None:
    assert not grants.verify_pass(key, PASS, purpose, job)


def test_passes_and_grant_tokens_are_never_one_another() -> None:
    """Each purpose signs under a key of its own, so no pass is a grant token or another pass,
    whatever the ids (a grant's message starts with its job id)."""
    made = {
        grants.sign(KEY, "job-1", "", Resources(0, 0)),
        grants.sign_pass(KEY, SPECULATIVE, "job-1"),
        grants.sign_pass(KEY, grants.Purpose.LOGS, "job-1"),
        hmac.new(KEY, b"job-1", hashlib.sha256).digest(),  # the job signed with the node's key
    }
    assert len(made) == 4
    assert not grants.verify(KEY, PASS, "job-1", "", Resources(0, 0))
