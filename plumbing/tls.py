"""Cluster certificates: a CA, certificates that name a role and an identity, gRPC credentials.

Every Sluice link is mutual TLS (issue 10).  A cluster has one CA (``sluice ca init``); every
daemon and every person holds a certificate it signed (``sluice ca issue``) that says *who* the
holder is and *what role* it plays, in a URI subject alternative name::

    sluice://<role>/<name>          e.g. sluice://agent/node-3, sluice://client/alice

The subject's common name repeats the name and its organisational unit the role, for people
reading ``openssl x509 -text``; only the URI is trusted.  Certificates carry both the server and
the client extended key usage: an agent is a server to job masters and a client of the RM.

A TLS directory (each daemon's ``--tls-dir``) holds three files:

=============  ======================================================================
``ca.crt``     the cluster CA's certificate: peers are trusted if it signed theirs
``tls.crt``    the holder's certificate
``tls.key``    the holder's private key (mode 0600)
=============  ======================================================================

The CA's own directory holds ``ca.crt`` and ``ca.key`` (0600); keep it off the cluster's
machines once certificates are issued.  Keys are ECDSA P-256: small, and fast to handshake.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from functools import lru_cache
from pathlib import Path

import grpc
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

# What a client needs lives in a module without cryptography (the CLI's path); re-exported here.
from plumbing.client_tls import (
    CA_CERT,
    CA_KEY,
    CERT,
    KEY,
    ClientTls,
    TlsError,
    channel_credentials,
)
from plumbing.client_tls import read_file as _read

__all__ = ["CA_CERT", "CA_KEY", "CERT", "KEY", "ClientTls", "TlsError", "channel_credentials"]

URI_SCHEME = "sluice"
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
"""Names are node ids, user names, service names: no slashes, nothing a URI must escape."""

CA_DAYS = 3650
DEFAULT_DAYS = 365


_CA_KEY_USAGE = x509.KeyUsage(
    digital_signature=True,
    content_commitment=False,
    key_encipherment=False,
    data_encipherment=False,
    key_agreement=False,
    key_cert_sign=True,
    crl_sign=True,
    encipher_only=False,
    decipher_only=False,
)
"""What a CA's key is for: signing certificates (and revocation lists)."""


class Role(Enum):
    """What a certificate's holder may be (see docs/security.md for what each may do)."""

    RM = "rm"
    AGENT = "agent"
    AGGREGATOR = "aggregator"
    CLIENT = "client"  # a person (or a script) submitting and watching their own jobs
    ADMIN = "admin"  # a person who may act on every job and node
    JOB_MASTER = "jobmaster"  # one job's job master; issued by the RM, never by `sluice ca`
    # A Kafka or MQTT broker's certificate (--host names where clients dial it): it proves the
    # broker to the daemons, which trust only the cluster's CA, and gives no right on any gRPC
    # service (docs/security.md, "The data plane's links").
    BROKER = "broker"


JOB_MASTER_CA_UNIT = "jobmaster-ca"
"""The organisational unit of the RM's job master CA: what a job master certificate's issuer
says, and what no other certificate's issuer may say."""
JOB_MASTER_CA_CERT = "jm-ca.crt"
JOB_MASTER_CA_KEY = "jm-ca.key"


@dataclass(frozen=True)
class Identity:
    """Who a peer is, as its certificate says."""

    role: Role
    name: str

    @property
    def uri(self) -> str:
        return f"{URI_SCHEME}://{self.role.value}/{self.name}"

    def __str__(self) -> str:
        return f"{self.role.value} {self.name!r}"


def parse_identity_uri(uri: str) -> Identity | None:
    """The identity a ``sluice://role/name`` URI names, or None if it is not one."""
    prefix = f"{URI_SCHEME}://"
    if not uri.startswith(prefix):
        return None
    role_text, _, name = uri[len(prefix) :].partition("/")
    try:
        role = Role(role_text)
    except ValueError:
        return None
    if not NAME_PATTERN.match(name):
        return None
    return Identity(role, name)


def check_name(name: str, field: str = "name") -> str:
    if not NAME_PATTERN.match(name):
        raise TlsError(
            f"{field}: {name!r} must be 1-63 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )
    return name


# ------------------------------------------------------------------------------ the CA


@dataclass(frozen=True)
class Authority:
    """A cluster CA: its certificate and key."""

    certificate: x509.Certificate
    key: ec.EllipticCurvePrivateKey

    @property
    def cluster(self) -> str:
        names = self.certificate.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)
        return str(names[0].value) if names else ""


def init_ca(directory: Path, cluster: str, *, now: datetime.datetime | None = None) -> Authority:
    """Create a CA for ``cluster`` in ``directory`` (ca.crt, ca.key).  Refuses to overwrite an
    existing CA: every certificate it issued would stop being trusted."""
    check_name(cluster, "cluster")
    cert_path, key_path = directory / CA_CERT, directory / CA_KEY
    for path in (cert_path, key_path):
        if path.exists():
            raise TlsError(f"{path}: a CA exists already (remove it first to start over)")
    now = now or _now()
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, cluster),
            x509.NameAttribute(NameOID.COMMON_NAME, f"Sluice CA for {cluster}"),
        ]
    )
    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=CA_DAYS))
        # One level below: the RM's job master CA (issues nothing but job master certificates).
        .add_extension(x509.BasicConstraints(ca=True, path_length=1), critical=True)
        .add_extension(
            _CA_KEY_USAGE,
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    directory.mkdir(parents=True, exist_ok=True)
    _write_private(key_path, _key_pem(key))
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    return Authority(certificate, key)


def load_ca(directory: Path) -> Authority:
    return _load_authority(directory / CA_CERT, directory / CA_KEY)


def _load_authority(cert_path: Path, key_path: Path) -> Authority:
    certificate = _read_certificate(cert_path)
    key_pem = _read(key_path)
    try:
        key = serialization.load_pem_private_key(key_pem, password=None)
    except ValueError as error:
        raise TlsError(f"{key_path}: not a PEM private key ({error})") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise TlsError(f"{key_path}: not an ECDSA key")
    if not _same_public_key(key, certificate):
        raise TlsError(f"{key_path}: does not match {cert_path}")
    return Authority(certificate, key)


@dataclass(frozen=True)
class Issued:
    """What :func:`issue` wrote."""

    directory: Path
    identity: Identity
    not_after: datetime.datetime


def issue(
    authority: Authority,
    identity: Identity,
    out: Path,
    *,
    hosts: Sequence[str] = (),
    days: int = DEFAULT_DAYS,
    now: datetime.datetime | None = None,
) -> Issued:
    """Issue a certificate for ``identity`` into the TLS directory ``out`` (ca.crt, tls.crt,
    tls.key).  ``hosts`` are the DNS names and IP addresses a server is reached at (a server's
    certificate must name the address its clients dial); ``localhost`` and ``127.0.0.1`` are
    always included, so a local cluster needs none.  An RM's directory also gets the RM's job
    master CA (jm-ca.crt, jm-ca.key), from which it issues each job master its own certificate.
    Refuses to overwrite a certificate (rotate into a new directory, then swap; see
    docs/security.md)."""
    check_name(identity.name)
    if identity.role is Role.JOB_MASTER:
        raise TlsError("role: job master certificates are issued by the RM, one per job")
    if days <= 0:
        raise TlsError(f"days: must be positive, got {days}")
    for path in (out / CERT, out / KEY):
        if path.exists():
            raise TlsError(f"{path}: exists already (issue into a new directory to rotate)")
    now = now or _now()
    not_after = min(now + datetime.timedelta(days=days), authority.certificate.not_valid_after_utc)
    key = ec.generate_private_key(ec.SECP256R1())
    certificate = sign_leaf(authority, identity, key.public_key(), hosts, not_after, now)
    job_master_ca = (
        _sign_job_master_ca(authority, identity, not_after, now)
        if identity.role is Role.RM
        else None
    )
    out.mkdir(parents=True, exist_ok=True)
    _write_private(out / KEY, _key_pem(key))
    (out / CERT).write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    (out / CA_CERT).write_bytes(authority.certificate.public_bytes(serialization.Encoding.PEM))
    if job_master_ca is not None:
        _write_private(out / JOB_MASTER_CA_KEY, _key_pem(job_master_ca.key))
        (out / JOB_MASTER_CA_CERT).write_bytes(
            job_master_ca.certificate.public_bytes(serialization.Encoding.PEM)
        )
    return Issued(out, identity, not_after)


def sign_leaf(
    issuer: Authority,
    identity: Identity,
    public_key: ec.EllipticCurvePublicKey,
    hosts: Sequence[str],
    not_after: datetime.datetime,
    now: datetime.datetime,
) -> x509.Certificate:
    """A certificate for ``identity``'s key, signed by ``issuer`` (the cluster CA, or the RM's
    job master CA for a job master)."""
    names: list[x509.GeneralName] = [x509.UniformResourceIdentifier(identity.uri)]
    for host in dict.fromkeys([*hosts, "localhost", "127.0.0.1"]):
        names.append(_host_name(host))
    return (
        x509.CertificateBuilder()
        .subject_name(
            x509.Name(
                [
                    x509.NameAttribute(NameOID.ORGANIZATION_NAME, issuer.cluster or "sluice"),
                    x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, identity.role.value),
                    x509.NameAttribute(NameOID.COMMON_NAME, identity.name),
                ]
            )
        )
        .issuer_name(issuer.certificate.subject)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(min(not_after, issuer.certificate.not_valid_after_utc))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer.key.public_key()),
            critical=False,
        )
        .sign(issuer.key, hashes.SHA256())
    )


def _sign_job_master_ca(
    authority: Authority, rm: Identity, not_after: datetime.datetime, now: datetime.datetime
) -> Authority:
    key = ec.generate_private_key(ec.SECP256R1())
    certificate = (
        x509.CertificateBuilder()
        .subject_name(
            x509.Name(
                [
                    x509.NameAttribute(NameOID.ORGANIZATION_NAME, authority.cluster or "sluice"),
                    x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, JOB_MASTER_CA_UNIT),
                    x509.NameAttribute(NameOID.COMMON_NAME, f"job masters of {rm.name}"),
                ]
            )
        )
        .issuer_name(authority.certificate.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            _CA_KEY_USAGE,
            critical=True,
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(authority.key.public_key()),
            critical=False,
        )
        .sign(authority.key, hashes.SHA256())
    )
    return Authority(certificate, key)


JOB_MASTER_DAYS = 30
"""How long a job master's certificate lasts: longer than any job should run; a new attempt
gets a new one."""


def issue_job_master(
    job_master_ca: Authority, job_id: str, now: datetime.datetime | None = None
) -> tuple[bytes, bytes]:
    """A certificate for the job master of ``job_id`` (``sluice://jobmaster/JOB_ID``), signed
    by the RM's job master CA: its chain (the certificate, then the job master CA's) and its
    key, as PEM, for the RM to hand to the agent that launches it."""
    check_name(job_id, "job_id")
    now = now or _now()
    key = ec.generate_private_key(ec.SECP256R1())
    certificate = sign_leaf(
        job_master_ca,
        Identity(Role.JOB_MASTER, job_id),
        key.public_key(),
        (),
        now + datetime.timedelta(days=JOB_MASTER_DAYS),
        now,
    )
    chain = b"".join(
        c.public_bytes(serialization.Encoding.PEM) for c in (certificate, job_master_ca.certificate)
    )
    return chain, _key_pem(key)


def write_tls_dir(out: Path, ca_pem: bytes, cert_chain_pem: bytes, key_pem: bytes) -> None:
    """Write a TLS directory from PEM (an agent writes its job masters' this way); the key is
    the holder's alone from the first byte.  Replaces what was there."""
    out.mkdir(parents=True, exist_ok=True)
    (out / KEY).unlink(missing_ok=True)
    _write_private(out / KEY, key_pem)
    (out / CERT).write_bytes(cert_chain_pem)
    (out / CA_CERT).write_bytes(ca_pem)


def load_job_master_ca(directory: Path) -> Authority:
    """The RM's job master CA, from the RM's TLS directory."""
    return _load_authority(directory / JOB_MASTER_CA_CERT, directory / JOB_MASTER_CA_KEY)


# ------------------------------------------------------------------------------ TLS directories


@dataclass(frozen=True)
class TlsFiles:
    """A loaded TLS directory: PEM bytes for gRPC, and who its certificate says we are."""

    directory: Path
    ca_pem: bytes
    cert_pem: bytes
    key_pem: bytes
    identity: Identity
    not_after: datetime.datetime


def load_tls_dir(directory: Path, *, now: datetime.datetime | None = None) -> TlsFiles:
    """Read and check a TLS directory: the three files exist, the certificate names a Sluice
    identity, was signed by the CA, matches the key and is valid now."""
    if not directory.is_dir():
        raise TlsError(f"--tls-dir: {directory} is not a directory")
    ca = _read_certificate(directory / CA_CERT)
    cert_path = directory / CERT
    certificate, *intermediates = _read_certificates(cert_path)
    key_pem = _read(directory / KEY)
    try:
        key = serialization.load_pem_private_key(key_pem, password=None)
    except ValueError as error:
        raise TlsError(f"{directory / KEY}: not a PEM private key ({error})") from None
    if not _same_public_key(key, certificate):
        raise TlsError(f"{directory / KEY}: does not match {cert_path}")
    try:
        for subject, issuer in zip(
            [certificate, *intermediates], [*intermediates, ca], strict=True
        ):
            subject.verify_directly_issued_by(issuer)
    except (ValueError, TypeError, InvalidSignature) as error:
        raise TlsError(f"{cert_path}: not issued by {directory / CA_CERT} ({error})") from None
    identity = identity_of(certificate)
    if identity is None:
        raise TlsError(
            f"{cert_path}: names no sluice:// identity (issue it with `sluice ca issue`)"
        )
    now = now or _now()
    if now < certificate.not_valid_before_utc:
        raise TlsError(
            f"{cert_path}: not valid before {certificate.not_valid_before_utc:%Y-%m-%d %H:%M} UTC"
        )
    if now > certificate.not_valid_after_utc:
        raise TlsError(
            f"{cert_path}: expired on {certificate.not_valid_after_utc:%Y-%m-%d %H:%M} UTC"
        )
    return TlsFiles(
        directory,
        ca.public_bytes(serialization.Encoding.PEM),
        b"".join(c.public_bytes(serialization.Encoding.PEM) for c in [certificate, *intermediates]),
        key_pem,
        identity,
        certificate.not_valid_after_utc,
    )


def identity_of(certificate: x509.Certificate) -> Identity | None:
    """The sluice:// identity in a certificate's subject alternative names, if exactly one."""
    try:
        names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    except x509.ExtensionNotFound:
        return None
    found = {
        identity
        for uri in names.value.get_values_for_type(x509.UniformResourceIdentifier)
        if (identity := parse_identity_uri(uri)) is not None
    }
    if len(found) != 1:
        return None
    identity = found.pop()
    # Only the RM's job master CA issues job masters, and it issues nothing else: an RM cannot
    # mint an admin, nor anyone but the RM a job master.
    by_job_master_ca = any(
        a.value == JOB_MASTER_CA_UNIT
        for a in certificate.issuer.get_attributes_for_oid(NameOID.ORGANIZATIONAL_UNIT_NAME)
    )
    if by_job_master_ca != (identity.role is Role.JOB_MASTER):
        return None
    return identity


@lru_cache(maxsize=4096)
def identity_of_pem(pem: bytes) -> Identity | None:
    """:func:`identity_of` a PEM certificate; cached, since every call of a peer shows the same
    certificate again."""
    try:
        return identity_of(x509.load_pem_x509_certificate(pem))
    except ValueError:
        return None


def peer_identity(auth_context: Mapping[str, Sequence[bytes]]) -> Identity | None:
    """Who the peer of a gRPC call is, from ``context.auth_context()``: the identity its
    verified client certificate names, or None (no certificate, or not a Sluice one).  gRPC has
    verified the chain against the CA before the call reaches a handler."""
    pems = auth_context.get("x509_pem_cert")
    if not pems:
        return None
    return identity_of_pem(bytes(pems[0]))


# ------------------------------------------------------------------------------ gRPC credentials


def server_credentials(tls: TlsFiles, *, require_client_cert: bool) -> grpc.ServerCredentials:
    """Credentials for a server: its certificate, and the CA that client certificates must
    chain to.  gRPC offers two modes only: ``require_client_cert`` True verifies a client
    certificate and refuses the handshake without one; False does not even ask for one (so no
    caller has an identity).  Sluice's servers require one."""
    return grpc.ssl_server_credentials(
        [(tls.key_pem, tls.cert_pem)],
        root_certificates=tls.ca_pem,
        require_client_auth=require_client_cert,
    )


# ------------------------------------------------------------------------------ internals


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _host_name(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        pass
    if not re.match(r"^[A-Za-z0-9*]([A-Za-z0-9.-]{0,252})$", host):
        raise TlsError(f"host: {host!r} is neither an IP address nor a DNS name")
    return x509.DNSName(host)


def _same_public_key(key: object, certificate: x509.Certificate) -> bool:
    public = getattr(key, "public_key", None)
    if public is None:
        return False
    spki = serialization.PublicFormat.SubjectPublicKeyInfo
    der = serialization.Encoding.DER
    return bool(
        public().public_bytes(der, spki) == certificate.public_key().public_bytes(der, spki)
    )


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _write_private(path: Path, data: bytes) -> None:
    """Write a key readable by its owner only, from the first byte (never world-readable)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as file:
        file.write(data)


def _read_certificates(path: Path) -> list[x509.Certificate]:
    """A certificate and the intermediates after it (a job master's chain)."""
    data = _read(path)
    try:
        found = x509.load_pem_x509_certificates(data)
    except ValueError as error:
        raise TlsError(f"{path}: not a PEM certificate ({error})") from None
    return found


def _read_certificate(path: Path) -> x509.Certificate:
    data = _read(path)
    try:
        return x509.load_pem_x509_certificate(data)
    except ValueError as error:
        raise TlsError(f"{path}: not a PEM certificate ({error})") from None
