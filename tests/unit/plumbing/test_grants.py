"""Grant tokens: a token verifies for exactly the grant it was made for."""

from __future__ import annotations

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
