"""What a client needs for TLS, without the cost of checking certificates.

A client's path (``sluice jobs``) needs only the bytes of three PEM files for
``grpc.ssl_channel_credentials``: gRPC's handshake refuses what is wrong anyway.  Parsing and
checking them (:func:`plumbing.tls.load_tls_dir`) needs ``cryptography``, which takes longer to
import than the call takes, so the CLI reads the files unchecked (:meth:`ClientTls.read`) and
runs the full check only when a call on the channel fails (:func:`plumbing.tls` re-exports
everything here, so ``from plumbing.tls import ClientTls`` keeps working).  This module imports
no ``cryptography``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import grpc

if TYPE_CHECKING:
    from plumbing.tls import TlsFiles

CA_CERT = "ca.crt"
CA_KEY = "ca.key"
CERT = "tls.crt"
KEY = "tls.key"
TOKEN_FILE = "token"
"""A person's token directory holds the CA's certificate and this file (plumbing/bearer.py)."""


class TlsError(ValueError):
    """A CA, a certificate or a TLS directory that cannot be used; the message says why in one
    line, naming the file or the field."""


@dataclass(frozen=True)
class ClientTls:
    """What a client needs for TLS: the CA to trust, and its own certificate (servers require
    one; a client without it is for tests of refusal)."""

    ca_pem: bytes
    cert_pem: bytes | None = None
    key_pem: bytes | None = None
    token: str | None = None  # a person's bearer token instead (plumbing/bearer.py)
    # The TLS directory the files were read from unchecked (by :meth:`read`), for
    # :func:`plumbing.tls.load_tls_dir` to say what is wrong once a call fails; None if checked.
    unchecked: Path | None = None

    @classmethod
    def of(cls, tls: TlsFiles) -> ClientTls:
        return cls(tls.ca_pem, tls.cert_pem, tls.key_pem)

    @classmethod
    def load(cls, directory: Path) -> ClientTls:
        """A TLS directory's, checked as :func:`plumbing.tls.load_tls_dir` checks it."""
        from plumbing.tls import load_tls_dir

        return cls.of(load_tls_dir(directory))

    @classmethod
    def read(cls, directory: Path) -> ClientTls:
        """A TLS directory's files, read but not checked (TlsError if one is missing or
        unreadable): a certificate that is expired, foreign or not the key's makes the
        handshake fail, and :func:`plumbing.tls.load_tls_dir` on ``unchecked`` then says why."""
        if not directory.is_dir():
            raise TlsError(f"--tls-dir: {directory} is not a directory")
        return cls(
            read_file(directory / CA_CERT),
            read_file(directory / CERT),
            read_file(directory / KEY),
            unchecked=directory,
        )


def is_token_dir(directory: Path) -> bool:
    """Whether ``directory`` holds a person's bearer token rather than a certificate."""
    return (directory / TOKEN_FILE).is_file() and not (directory / CERT).exists()


def channel_credentials(tls: ClientTls | TlsFiles) -> grpc.ChannelCredentials:
    """Credentials for a client: trust only the cluster CA, and present our certificate if we
    have one, or else our bearer token with every call."""
    secure = grpc.ssl_channel_credentials(
        root_certificates=tls.ca_pem, private_key=tls.key_pem, certificate_chain=tls.cert_pem
    )
    token = getattr(tls, "token", None)
    if token is None:
        return secure
    return grpc.composite_channel_credentials(secure, grpc.access_token_call_credentials(token))


def read_file(path: Path) -> bytes:
    """A TLS file's bytes; TlsError naming it if it is missing or unreadable."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise TlsError(f"{path}: missing") from None
    except OSError as error:
        raise TlsError(f"{path}: cannot read ({error.strerror})") from None
