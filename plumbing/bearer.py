"""Bearer tokens for people: a signed statement "this is user U (client or admin) until T".

A person who cannot hold a client certificate (a notebook, a web tool, a CI job) holds a token
instead.  ``sluice ca token`` signs one with the cluster CA's key, so only whoever holds the CA
can make one, and the RM checks it with the CA's certificate, which it has anyway: no token
database, nothing shared.  Format: ``sluice1.<claims>.<signature>``, both parts base64url; the
claims are JSON (``sub``: the sluice:// identity, ``iat``/``exp``: seconds since the epoch,
``jti``: the token's id, ``cluster``); the signature is ECDSA P-256 with SHA-256 over
``sluice1.<claims>``.

Tokens travel as ``authorization: Bearer <token>`` metadata, over TLS that authenticates the
server only: the RM's ``--token-listen`` port (gRPC cannot make a client certificate optional on
one port).  Only people's roles (client, admin) can be named by a token.  A token cannot be
taken back by the CA: it ends at ``exp`` (30 days by default), and before that the RM refuses
the ids listed in its ``--revoked-tokens`` file, re-read when the file changes.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import json
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec

from plumbing.client_tls import TOKEN_FILE, is_token_dir
from plumbing.tls import (
    CA_CERT,
    Authority,
    ClientTls,
    Identity,
    Role,
    TlsError,
    parse_identity_uri,
)

__all__ = ["TOKEN_FILE", "is_token_dir"]  # kept here too: they moved to plumbing.client_tls

PREFIX = "sluice1"
DEFAULT_DAYS = 30
PEOPLE = frozenset({Role.CLIENT, Role.ADMIN})
MAX_TOKEN = 4096
_CACHE = 4096
_REVOCATION_CHECK_S = 2.0


@dataclass(frozen=True)
class Claims:
    identity: Identity
    token_id: str
    issued_at: float
    expires_at: float
    cluster: str


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def issue_token(
    authority: Authority,
    identity: Identity,
    *,
    days: int = DEFAULT_DAYS,
    now: datetime.datetime | None = None,
) -> tuple[str, Claims]:
    """A token naming ``identity`` (a person's role only), valid for ``days``."""
    if identity.role not in PEOPLE:
        raise TlsError(
            f"--role: tokens are for people (client, admin), not {identity.role.value}; daemons "
            "hold certificates"
        )
    if days <= 0:
        raise TlsError(f"--days: must be positive, got {days}")
    issued = (now or datetime.datetime.now(datetime.UTC)).timestamp()
    claims = Claims(
        identity, secrets.token_hex(8), issued, issued + days * 86400, authority.cluster
    )
    body = {
        "sub": identity.uri,
        "iat": int(claims.issued_at),
        "exp": int(claims.expires_at),
        "jti": claims.token_id,
        "cluster": claims.cluster,
    }
    signed = f"{PREFIX}.{_b64(json.dumps(body, sort_keys=True).encode())}"
    signature = authority.key.sign(signed.encode(), ec.ECDSA(hashes.SHA256()))
    return f"{signed}.{_b64(signature)}", claims


def read_claims(token: str) -> Claims:
    """The claims of a token, unchecked (for ``sluice ca show``); TlsError if malformed."""
    parts = token.strip().split(".")
    if len(parts) != 3 or parts[0] != PREFIX:
        raise TlsError(f"token: not a Sluice token (expected {PREFIX}.<claims>.<signature>)")
    try:
        body = json.loads(_unb64(parts[1]))
        identity = parse_identity_uri(str(body["sub"]))
        fields = (str(body["jti"]), float(body["iat"]), float(body["exp"]))
        cluster = str(body.get("cluster", ""))
    except (ValueError, KeyError, TypeError, binascii.Error):
        raise TlsError("token: its claims are unreadable") from None
    if identity is None or identity.role not in PEOPLE:
        raise TlsError("token: it names no person (sluice://client/NAME or sluice://admin/NAME)")
    return Claims(identity, *fields, cluster)


class TokenVerifier:
    """Checks tokens against the cluster CA's certificate and the revocation file.  Checked
    tokens are cached (a signature check costs about 0.1 ms), expiry and revocation still
    apply to cached ones.  Not thread-safe: the RM calls it from its event loop."""

    def __init__(
        self,
        ca_pem: bytes,
        revoked_file: Path | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        ca = x509.load_pem_x509_certificate(ca_pem)
        key = ca.public_key()
        if not isinstance(key, ec.EllipticCurvePublicKey):
            raise TlsError("ca.crt: tokens need an ECDSA CA (made by `sluice ca init`)")
        self._key = key
        self._revoked_file = revoked_file
        self._revoked: frozenset[str] = frozenset()
        self._revoked_stamp: float | None = None
        self._next_revocation_check = 0.0
        self._clock = clock
        self._cache: OrderedDict[str, Claims] = OrderedDict()
        self._refresh_revocations()

    def check(self, token: str) -> Identity | str:
        """The person ``token`` names, or why it is refused (one line)."""
        if len(token) > MAX_TOKEN:
            return "authorization: the bearer token is too long"
        now = self._clock()
        claims = self._cache.get(token)
        if claims is None:
            try:
                claims = self._verified(token)
            except TlsError as error:
                return f"authorization: bearer {error}"
            self._cache[token] = claims
            if len(self._cache) > _CACHE:
                self._cache.popitem(last=False)
        if now >= claims.expires_at:
            when = datetime.datetime.fromtimestamp(claims.expires_at, datetime.UTC)
            return f"authorization: the bearer token {claims.token_id} expired on {when:%Y-%m-%d}"
        if now >= self._next_revocation_check:
            self._next_revocation_check = now + _REVOCATION_CHECK_S
            self._refresh_revocations()
        if claims.token_id in self._revoked:
            return f"authorization: the bearer token {claims.token_id} was revoked"
        return claims.identity

    def _verified(self, token: str) -> Claims:
        claims = read_claims(token)
        signed, _, signature = token.strip().rpartition(".")
        try:
            self._key.verify(_unb64(signature), signed.encode(), ec.ECDSA(hashes.SHA256()))
        except (InvalidSignature, ValueError, binascii.Error):
            raise TlsError("token: not signed by this cluster's CA") from None
        return claims

    def _refresh_revocations(self) -> None:
        """Re-read the revocation file if it changed (one token id per line, # comments)."""
        if self._revoked_file is None:
            return
        try:
            stamp = self._revoked_file.stat().st_mtime
            if stamp == self._revoked_stamp:
                return
            lines = self._revoked_file.read_text().splitlines()
        except OSError:
            return  # (checked at start: a file that vanishes later keeps the last list)
        self._revoked_stamp = stamp
        self._revoked = frozenset(
            line.split("#", 1)[0].strip() for line in lines if line.split("#", 1)[0].strip()
        )


def bearer_of(metadata: Iterable[tuple[str, str | bytes]] | None) -> str | None:
    """The token of an ``authorization: Bearer ...`` entry of a call's metadata, if any."""
    for key, value in metadata or ():
        if key == "authorization" and isinstance(value, str):
            scheme, _, token = value.partition(" ")
            if scheme.lower() == "bearer" and token:
                return token.strip()
    return None


def write_token_dir(out: Path, ca_pem: bytes, token: str) -> None:
    """A person's token directory: the cluster CA (to check the RM) and the token (0600)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / CA_CERT).write_bytes(ca_pem)
    path = out / TOKEN_FILE
    path.touch(mode=0o600)
    path.chmod(0o600)
    path.write_text(token + "\n")


def load_token_dir(directory: Path) -> ClientTls:
    """A token directory as a client's TLS: trust its CA, send its token (TlsError names the
    file if either is unusable; an expired token is refused here, before any call)."""
    try:
        ca_pem = (directory / CA_CERT).read_bytes()
        token = (directory / TOKEN_FILE).read_text().strip()
    except OSError as error:
        raise TlsError(f"--tls-dir: {error.filename}: {error.strerror}") from None
    claims = read_claims(token)
    if claims.expires_at <= time.time():
        when = datetime.datetime.fromtimestamp(claims.expires_at, datetime.UTC)
        raise TlsError(
            f"{directory / TOKEN_FILE}: the token expired on {when:%Y-%m-%d}; ask for a new one"
        )
    return ClientTls(ca_pem, token=token)
