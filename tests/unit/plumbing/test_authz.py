"""The access check itself: who is refused, with which code and which line."""

from __future__ import annotations

import grpc
import pytest

from plumbing.authz import EVERY_HOLDER, refusal, table
from plumbing.tls import Identity, Role

ACCESS = table(
    "sluice.v1.Demo", {"Read": EVERY_HOLDER, "Write": frozenset({Role.ADMIN}), "Never": frozenset()}
)
ALICE = Identity(Role.CLIENT, "alice")


@pytest.mark.parametrize(
    ("method", "identity", "expected"),
    [
        ("/sluice.v1.Demo/Read", ALICE, None),
        ("/sluice.v1.Demo/Write", Identity(Role.ADMIN, "carol"), None),
        (
            "/sluice.v1.Demo/Write",
            ALICE,
            (grpc.StatusCode.PERMISSION_DENIED, "Write: a client may not call it (allowed: admin)"),
        ),
        (
            "/sluice.v1.Demo/Never",
            Identity(Role.ADMIN, "carol"),
            (
                grpc.StatusCode.PERMISSION_DENIED,
                "Never: an admin may not call it (allowed: no one: the RM acts on its own)",
            ),
        ),
        (
            "/sluice.v1.Demo/Unlisted",
            ALICE,
            (grpc.StatusCode.UNAUTHENTICATED, "Unlisted: no access rule; refused to everyone"),
        ),
        (
            "/sluice.v1.Demo/Read",
            None,
            (
                grpc.StatusCode.UNAUTHENTICATED,
                "Read: no sluice:// identity: present a certificate of the cluster (`sluice ca "
                "issue`) or, on a token port, a bearer token (`sluice ca token`)",
            ),
        ),
        ("/grpc.health.v1.Health/Check", ALICE, None),  # probes work for every holder
    ],
)
def test_refusals(method: str, identity: Identity | None, expected: object) -> None:
    assert refusal(ACCESS, method, identity) == expected
