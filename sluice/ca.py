"""``sluice ca``: the cluster's certificate authority.

``sluice ca init`` creates the CA; ``sluice ca issue`` gives a daemon or a person a TLS
directory (``--tls-dir``) whose certificate names its role and identity; ``sluice ca token``
gives a person a bearer token instead, for the RM's ``--token-listen`` port; ``sluice ca show``
says what a TLS or token directory holds and until when.  See docs/security.md.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization

from plumbing import bearer, tls
from plumbing.errors import UserError

CA_DIR_HELP = "the CA's directory (default: $SLUICE_CA_DIR, then ~/.sluice/ca)"


def default_ca_dir() -> Path:
    env = os.environ.get("SLUICE_CA_DIR")
    return Path(env) if env else Path.home() / ".sluice" / "ca"


def register(subparsers: Any) -> None:
    """Add ``ca`` and its actions to the ``sluice`` command."""
    ca = subparsers.add_parser("ca", help="the cluster's certificate authority (mutual TLS)")
    actions = ca.add_subparsers(dest="ca_command", required=True, metavar="ACTION")

    p = actions.add_parser("init", help="create the cluster's CA")
    p.add_argument("--ca-dir", type=Path, default=None, help=CA_DIR_HELP)
    p.add_argument("--cluster", default="sluice", help="the cluster's name (default: sluice)")
    p.set_defaults(handler=cmd_init)

    p = actions.add_parser(
        "issue", help="issue a certificate naming a role and an identity, into a TLS directory"
    )
    p.add_argument("--ca-dir", type=Path, default=None, help=CA_DIR_HELP)
    p.add_argument("--role", required=True, choices=[r.value for r in tls.Role])
    p.add_argument(
        "--name",
        required=True,
        help="who: the node id of an agent, a user's name, 'rm', a broker's name",
    )
    p.add_argument(
        "--host",
        action="append",
        default=[],
        help="a DNS name or IP address the holder serves at (repeat; localhost is always in)",
    )
    p.add_argument("--days", type=int, default=tls.DEFAULT_DAYS, help="validity (default: 365)")
    p.add_argument(
        "--out", type=Path, help="the TLS directory to write (default: CA_DIR/ROLE-NAME)"
    )
    p.set_defaults(handler=cmd_issue)

    p = actions.add_parser(
        "token", help="give a person a bearer token (for the RM's --token-listen port)"
    )
    p.add_argument("--ca-dir", type=Path, default=None, help=CA_DIR_HELP)
    p.add_argument("--role", choices=["client", "admin"], default="client")
    p.add_argument("--name", required=True, help="the user's name")
    p.add_argument(
        "--days", type=int, default=bearer.DEFAULT_DAYS, help="validity (default: %(default)s)"
    )
    p.add_argument(
        "--out", type=Path, help="the directory to write (default: CA_DIR/token-ROLE-NAME)"
    )
    p.set_defaults(handler=cmd_token)

    p = actions.add_parser("show", help="check a TLS directory and say whose it is")
    p.add_argument("tls_dir", type=Path)
    p.set_defaults(handler=cmd_show)


def cmd_init(args: argparse.Namespace) -> int:
    directory = args.ca_dir or default_ca_dir()
    try:
        authority = tls.init_ca(directory, args.cluster)
    except tls.TlsError as error:
        raise UserError(str(error)) from None
    except OSError as error:
        raise UserError(f"{directory}: {error.strerror}") from None
    print(
        f"created the CA of cluster {authority.cluster!r} in {directory} "
        f"(keep {directory / tls.CA_KEY} off the cluster's machines)"
    )
    return 0


@contextlib.contextmanager
def _user_errors(out: Path) -> Iterator[None]:
    """A CA's or a directory's problem as one line."""
    try:
        yield
    except tls.TlsError as error:
        raise UserError(str(error)) from None
    except OSError as error:
        raise UserError(f"{out}: {error.strerror}") from None


def _for_whom(args: argparse.Namespace, prefix: str) -> tuple[tls.Authority, tls.Identity, Path]:
    """The CA, the identity and the output directory an ``issue`` or ``token`` asks for."""
    directory = args.ca_dir or default_ca_dir()
    out = args.out or directory / f"{prefix}{args.role}-{args.name}"
    with _user_errors(directory):
        tls.check_name(args.name)
        return tls.load_ca(directory), tls.Identity(tls.Role(args.role), args.name), out


def cmd_issue(args: argparse.Namespace) -> int:
    authority, identity, out = _for_whom(args, "")
    with _user_errors(out):
        issued = tls.issue(authority, identity, out, hosts=args.host, days=args.days)
    print(f"issued {identity} until {issued.not_after:%Y-%m-%d} into {out}")
    return 0


def cmd_token(args: argparse.Namespace) -> int:
    authority, identity, out = _for_whom(args, "token-")
    with _user_errors(out):
        token, claims = bearer.issue_token(authority, identity, days=args.days)
        ca_pem = authority.certificate.public_bytes(serialization.Encoding.PEM)
        bearer.write_token_dir(out, ca_pem, token)
    until = datetime.datetime.fromtimestamp(claims.expires_at, datetime.UTC)
    print(
        f"issued a bearer token for {identity} until {until:%Y-%m-%d} into {out} "
        f"(token id {claims.token_id}: list it in the RM's --revoked-tokens file to revoke it)"
    )
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    try:
        if bearer.is_token_dir(args.tls_dir):
            claims = bearer.read_claims((args.tls_dir / bearer.TOKEN_FILE).read_text())
            until = datetime.datetime.fromtimestamp(claims.expires_at, datetime.UTC)
            print(
                f"{claims.identity} ({claims.identity.uri}), bearer token {claims.token_id}, "
                f"valid until {until:%Y-%m-%d}"
            )
            return 0
        loaded = tls.load_tls_dir(args.tls_dir)
    except tls.TlsError as error:
        raise UserError(str(error)) from None
    except OSError as error:
        raise UserError(f"{args.tls_dir}: {error.strerror}") from None
    print(f"{loaded.identity} ({loaded.identity.uri}), valid until {loaded.not_after:%Y-%m-%d}")
    return 0
