"""The agent's gate: with TLS, starts need the RM's grant and a person's stops the token."""

from __future__ import annotations

import pytest

from node_agent.grant_gate import GrantGate
from plumbing import grants
from plumbing.tls import Identity, Role
from policies.scheduling.resources import Resources

KEY = grants.node_key(grants.grant_secret(b"rm key"), "node-1")
SIZE = Resources(1.0, 256)
TOKEN = grants.sign(KEY, "job-1", "alloc-1", SIZE)
BOB = Identity(Role.CLIENT, "bob")


def _gate(key: bytes | None = KEY) -> GrantGate:
    gate = GrantGate(enforced=True)
    if key is not None:
        gate.set_key(key)
    return gate


@pytest.mark.parametrize(
    ("key", "token", "refusal"),
    [
        (KEY, TOKEN, None),
        (KEY, b"", "grant_token: missing"),
        (
            KEY,
            TOKEN[:-1] + b"x",
            "grant_token: not the resource manager's grant of container "
            "alloc-1 (1 cpu, 256 MiB) on this node to job job-1",
        ),
        (None, TOKEN, "grant_token: this agent has not registered"),
    ],
)
def test_start(key: bytes | None, token: bytes, refusal: str | None) -> None:
    problem = _gate(key).start_problem("job-1", "alloc-1", SIZE, token)
    if refusal is None:
        assert problem is None
    else:
        assert problem is not None and problem.startswith(refusal)


def test_without_tls_the_gate_is_open() -> None:
    gate = GrantGate(enforced=False)
    assert gate.start_problem("job-1", "alloc-1", SIZE, b"") is None
    assert gate.stop_problem(BOB, "job-1", "alloc-1", b"") is None


@pytest.mark.parametrize(
    ("who", "token", "allowed"),
    [
        (BOB, TOKEN, True),
        (BOB, b"", False),
        (BOB, b"x" * 32, False),
        (Identity(Role.JOB_MASTER, "job-1"), b"", True),  # its own job, checked by the rules
        (Identity(Role.ADMIN, "carol"), b"", True),
    ],
)
def test_stop(who: Identity, token: bytes, allowed: bool) -> None:
    gate = _gate()
    assert gate.start_problem("job-1", "alloc-1", SIZE, TOKEN) is None
    assert (gate.stop_problem(who, "job-1", "alloc-1", token) is None) is allowed


def test_a_person_cannot_stop_a_task_the_gate_never_saw_start() -> None:
    assert _gate().stop_problem(BOB, "job-1", "alloc-1", TOKEN) is not None


SPECULATIVE = grants.Purpose.SPECULATIVE
PASS = grants.sign_pass(KEY, SPECULATIVE, "job-1")


@pytest.mark.parametrize(
    ("key", "purpose", "token", "refusal"),
    [
        (KEY, SPECULATIVE, PASS, None),
        (KEY, SPECULATIVE, b"", "speculative_pass: missing; a speculative task is queued"),
        (
            KEY,
            SPECULATIVE,
            grants.sign_pass(KEY, SPECULATIVE, "job-2"),
            "speculative_pass: not the resource manager's speculative pass for job job-1 on this",
        ),
        (
            KEY,
            SPECULATIVE,
            grants.sign_pass(
                grants.node_key(grants.grant_secret(b"rm key"), "node-2"), SPECULATIVE, "job-1"
            ),
            "speculative_pass: not the resource manager's speculative pass",
        ),
        (KEY, SPECULATIVE, TOKEN, "speculative_pass: not the resource manager's"),  # a grant
        (KEY, grants.Purpose.LOGS, PASS, "speculative_pass: not the resource manager's logs pass"),
        (None, SPECULATIVE, PASS, "speculative_pass: this agent has not registered"),
    ],
)
def test_pass(
    key: bytes | None, purpose: grants.Purpose, token: bytes, refusal: str | None
) -> None:
    problem = _gate(key).pass_problem(purpose, "job-1", token, "speculative_pass")
    if refusal is None:
        assert problem is None
    else:
        assert problem is not None and problem.startswith(refusal)


def test_without_tls_no_pass_is_asked() -> None:
    assert GrantGate(enforced=False).pass_problem(SPECULATIVE, "job-1", b"", "x") is None


@pytest.mark.parametrize(
    ("who", "speculative_pass", "allowed"),
    [
        (BOB, PASS, True),
        (BOB, b"", False),
        (BOB, TOKEN, False),
        (BOB, grants.sign_pass(KEY, SPECULATIVE, "job-2"), False),
        (Identity(Role.JOB_MASTER, "job-1"), b"", True),  # its own job, checked by the rules
        (Identity(Role.ADMIN, "carol"), b"", True),
    ],
)
def test_stop_a_speculative_task(who: Identity, speculative_pass: bytes, allowed: bool) -> None:
    """A speculative task has no container: a person stops it with the job's pass."""
    problem = _gate().stop_problem(who, "job-1", "speculative-job-1.t-0.1", b"", speculative_pass)
    assert (problem is None) is allowed
