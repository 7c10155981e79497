"""Bearer tokens: signed by the cluster CA, naming a person, refused once expired or revoked."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest

from plumbing import bearer, tls
from plumbing.tls import Identity, Role, TlsError

NOW = datetime.datetime(2026, 11, 1, tzinfo=datetime.UTC)
ALICE = Identity(Role.CLIENT, "alice")


@pytest.fixture(scope="module")
def authority(tmp_path_factory: pytest.TempPathFactory) -> tls.Authority:
    return tls.init_ca(tmp_path_factory.mktemp("ca"), "lab", now=NOW)


def _ca_pem(authority: tls.Authority) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return authority.certificate.public_bytes(serialization.Encoding.PEM)


def _verifier(
    authority: tls.Authority, at: datetime.datetime, revoked: Path | None = None
) -> bearer.TokenVerifier:
    return bearer.TokenVerifier(_ca_pem(authority), revoked, clock=at.timestamp)


def test_a_token_names_its_person_until_it_expires(authority: tls.Authority) -> None:
    token, claims = bearer.issue_token(authority, ALICE, days=2, now=NOW)
    assert token.startswith("sluice1.")
    assert claims.cluster == "lab"
    assert _verifier(authority, NOW + datetime.timedelta(days=1)).check(token) == ALICE
    expired = _verifier(authority, NOW + datetime.timedelta(days=3)).check(token)
    assert expired == (f"authorization: the bearer token {claims.token_id} expired on 2026-11-03")


def test_tampered_foreign_and_garbled_tokens_are_refused(
    authority: tls.Authority, tmp_path: Path
) -> None:
    token, _ = bearer.issue_token(authority, ALICE, now=NOW)
    other = tls.init_ca(tmp_path / "other", "elsewhere", now=NOW)
    foreign, _ = bearer.issue_token(other, ALICE, now=NOW)
    head, claims, signature = token.split(".")
    admin_claims = bearer._b64(
        bearer._unb64(claims).replace(b"sluice://client/alice", b"sluice://admin/alice")
    )
    verifier = _verifier(authority, NOW)
    for bad, problem in [
        (foreign, "authorization: bearer token: not signed by this cluster's CA"),
        (f"{head}.{admin_claims}.{signature}", "authorization: bearer token: not signed by"),
        ("garbage", "authorization: bearer token: not a Sluice token"),
        (f"{head}.!!!.{signature}", "authorization: bearer token: its claims are unreadable"),
        ("x" * 5000, "authorization: the bearer token is too long"),
    ]:
        found = verifier.check(bad)
        assert isinstance(found, str) and found.startswith(problem), found


def test_a_revoked_token_is_refused_as_soon_as_the_file_says_so(
    authority: tls.Authority, tmp_path: Path
) -> None:
    token, claims = bearer.issue_token(authority, ALICE, now=NOW)
    revoked = tmp_path / "revoked"
    revoked.write_text("# none yet\n")
    clock = [NOW.timestamp()]
    verifier = bearer.TokenVerifier(_ca_pem(authority), revoked, clock=lambda: clock[0])
    assert verifier.check(token) == ALICE
    revoked.write_text(f"{claims.token_id}  # alice's laptop was stolen\n")
    clock[0] += 60
    assert verifier.check(token) == f"authorization: the bearer token {claims.token_id} was revoked"


@pytest.mark.parametrize("role", [Role.AGENT, Role.RM, Role.JOB_MASTER, Role.AGGREGATOR])
def test_only_people_get_tokens(authority: tls.Authority, role: Role) -> None:
    with pytest.raises(TlsError, match="tokens are for people"):
        bearer.issue_token(authority, Identity(role, "x"), now=NOW)


@pytest.mark.parametrize(
    ("metadata", "token"),
    [
        ([("authorization", "Bearer abc")], "abc"),
        ([("authorization", "bearer  abc ")], "abc"),
        ([("authorization", "Basic abc")], None),
        ([("x-other", "Bearer abc")], None),
        (None, None),
    ],
)
def test_bearer_of(metadata: list[tuple[str, str]] | None, token: str | None) -> None:
    assert bearer.bearer_of(metadata) == token


def test_a_token_directory_round_trips_and_an_expired_one_is_refused_at_load(
    authority: tls.Authority, tmp_path: Path
) -> None:
    token, _ = bearer.issue_token(authority, ALICE, days=1)
    bearer.write_token_dir(tmp_path / "alice", _ca_pem(authority), token)
    assert (tmp_path / "alice" / "token").stat().st_mode & 0o777 == 0o600
    assert bearer.is_token_dir(tmp_path / "alice")
    assert bearer.load_token_dir(tmp_path / "alice").token == token
    old, _ = bearer.issue_token(authority, ALICE, days=1, now=NOW)
    bearer.write_token_dir(tmp_path / "old", _ca_pem(authority), old)
    with pytest.raises(TlsError, match="the token expired on 2026-11-02"):
        bearer.load_token_dir(tmp_path / "old")
