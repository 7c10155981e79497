"""The daemons' ``--tls-dir`` and ``--insecure`` flags: how a daemon secures its links.

``--tls-dir DIR`` (or ``$SLUICE_TLS_DIR``) names the daemon's TLS directory, whose certificate
must be issued for the daemon's role (:mod:`plumbing.tls`).  ``--insecure`` runs without TLS:
every link in plaintext, and no caller authenticated.  The log says so loudly at start, because
anyone who can reach a port then owns the cluster.  A daemon given neither refuses to start:
running without TLS is a decision, never a default.
"""

from __future__ import annotations

import argparse
import logging
import os
from pathlib import Path

from plumbing.authz import with_article
from plumbing.tls import Role, TlsError, TlsFiles, load_tls_dir

log = logging.getLogger(__name__)

TLS_DIR_ENV = "SLUICE_TLS_DIR"

INSECURE_WARNING = (
    "running WITHOUT TLS: every link is plaintext and no caller is authenticated; anyone who "
    "can reach this port can act as any node, job master or user"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--tls-dir",
        type=Path,
        default=None,
        help=f"this daemon's TLS directory: ca.crt, tls.crt, tls.key (default: ${TLS_DIR_ENV}); "
        "this or --insecure is required",
    )
    group.add_argument(
        "--insecure",
        action="store_true",
        help="no TLS and no authentication (for a machine of your own only); this or --tls-dir "
        "is required",
    )


def no_decision(role: Role) -> str:
    """The refusal of a daemon given neither ``--tls-dir`` (nor ``$SLUICE_TLS_DIR``) nor
    ``--insecure``: one line naming both flags."""
    return (
        f"--tls-dir or --insecure: one is required (--tls-dir DIR or ${TLS_DIR_ENV}: a TLS "
        f"directory from `sluice ca issue --role {role.value}`; --insecure: no TLS and no "
        "authentication)"
    )


def from_arguments(args: argparse.Namespace, role: Role) -> TlsFiles | None:
    """The daemon's TLS, or None when it runs insecure (``--insecure``, logged as a warning).
    Raises :class:`TlsError` (one line, naming the flag or the file) when neither flag nor
    ``$SLUICE_TLS_DIR`` is given, for a directory that cannot be used, and for a certificate
    issued to another role."""
    if args.insecure:
        log.warning("%s (--insecure)", INSECURE_WARNING)
        return None
    directory: Path | None = args.tls_dir
    if directory is None and os.environ.get(TLS_DIR_ENV):
        directory = Path(os.environ[TLS_DIR_ENV])
    if directory is None:
        raise TlsError(no_decision(role))
    tls = load_tls_dir(directory)
    if tls.identity.role is not role:
        raise TlsError(
            f"--tls-dir: {directory / 'tls.crt'} is issued to {tls.identity}, not to "
            f"{with_article(role.value)} (issue one with `sluice ca issue --role {role.value}`)"
        )
    log.info(
        "TLS on: this %s is %s, certificate valid until %s",
        role.value,
        tls.identity.uri,
        f"{tls.not_after:%Y-%m-%d}",
    )
    return tls
