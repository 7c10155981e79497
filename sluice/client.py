"""Finding the cluster and talking to it, for the CLI.

The RM address comes from ``--rm``, then ``$SLUICE_RM``, then the local cluster's
``cluster.json`` (in ``--dir``, ``$SLUICE_DIR`` or ``~/.sluice``).  The caller's TLS directory
comes from ``--tls-dir``, then ``$SLUICE_TLS_DIR``, then the client certificate the local
cluster made (``client_tls`` in ``cluster.json``); without any, the CLI speaks plaintext, which
only an ``--insecure`` cluster accepts.

A command reads the TLS directory's files without checking them: checking needs
``cryptography``, which costs more to import than a call takes.  A certificate that is expired,
foreign or not the key's makes the handshake fail; :func:`tls_problem` then checks the directory
and says what is wrong (``sluice.cli`` asks it when a call fails).
"""

from __future__ import annotations

import json
import os
import ssl
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import grpc

from plumbing.client_tls import CA_CERT, CERT, KEY, ClientTls, TlsError, is_token_dir
from plumbing.errors import UserError
from plumbing.rpc import channel
from sluice_pb import resource_manager_pb2 as rm_pb
from sluice_pb import resource_manager_pb2_grpc as rm_grpc

if TYPE_CHECKING:
    from sluice_pb import node_agent_pb2_grpc as agent_grpc

SUBMIT_TIMEOUT = 30.0  # one attempt
SUBMIT_PATIENCE = 60.0  # all attempts
_RETRIED = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)


def cluster_file(directory: Path) -> Path:
    return directory / "cluster.json"


def read_cluster(directory: Path) -> dict[str, object]:
    path = cluster_file(directory)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise UserError(
            f"no local cluster in {directory} (start one with `sluice local up`)"
        ) from None
    except (OSError, ValueError) as error:
        raise UserError(f"{path}: unreadable ({error})") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: not a cluster description")
    return data


def resolve_rm(flag: str | None, directory: Path) -> str:
    if flag:
        return flag
    env = os.environ.get("SLUICE_RM")
    if env:
        return env
    address = read_cluster(directory).get("rm")
    if not isinstance(address, str):
        raise UserError(f"{cluster_file(directory)}: has no 'rm' address")
    return address


def chosen_tls_dir(flag: Path | None, directory: Path) -> Path | None:
    """The caller's TLS directory (see the module docstring), or None for plaintext."""
    chosen = flag or (
        Path(os.environ["SLUICE_TLS_DIR"]) if os.environ.get("SLUICE_TLS_DIR") else None
    )
    if chosen is None and cluster_file(directory).exists():
        return _client_tls_dir(read_cluster(directory))
    return chosen


def resolve_tls(flag: Path | None, directory: Path) -> ClientTls | None:
    """The caller's TLS (see the module docstring), or None for plaintext: a certificate's files
    read unchecked (:func:`tls_problem` checks them if a call fails), or a bearer token."""
    chosen = chosen_tls_dir(flag, directory)
    if chosen is None:
        return None
    try:
        if is_token_dir(chosen):
            from plumbing import bearer  # imports cryptography: only for a token's directory

            return bearer.load_token_dir(chosen)
        read = ClientTls.read(chosen)
    except TlsError as error:
        raise UserError(str(error)) from None
    # OpenSSL (loaded with gRPC anyway) tells in about a millisecond whether the files parse and
    # the key is the certificate's, which gRPC would only log as C-level errors.
    try:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.load_verify_locations(chosen / CA_CERT)
        context.load_cert_chain(chosen / CERT, chosen / KEY)
    except (ssl.SSLError, OSError):
        problem = tls_problem(chosen, directory)
        if problem is not None:
            raise UserError(problem) from None
    return read


def tls_problem(flag: Path | None, directory: Path) -> str | None:
    """After a call failed as unreachable: what is wrong with the caller's TLS directory, in
    one line (expired, not issued by its CA, not the key's ...), or None if nothing is (or it
    is plaintext or a token's, which :func:`resolve_tls` checked already)."""
    try:
        chosen = chosen_tls_dir(flag, directory)
    except UserError:
        return None
    if chosen is None or is_token_dir(chosen):
        return None
    from plumbing.tls import load_tls_dir

    try:
        load_tls_dir(chosen)
    except TlsError as error:
        return str(error)
    return None


def _client_tls_dir(cluster: dict[str, object]) -> Path | None:
    path = cluster.get("client_tls")
    return Path(path) if isinstance(path, str) and path else None


def cluster_client_tls(cluster: dict[str, object]) -> ClientTls | None:
    """The client TLS a local cluster made (None for an --insecure one), checked."""
    path = _client_tls_dir(cluster)
    if path is None:
        return None
    try:
        return ClientTls.load(path)
    except TlsError as error:
        raise UserError(str(error)) from None


@dataclass
class RMClient:
    """Stubs for the RM's client-facing service over one channel."""

    address: str
    channel: grpc.Channel
    jobs: rm_grpc.JobServiceStub
    tls: ClientTls | None = None  # for the other daemons this client talks to (agents, aggregator)

    @classmethod
    def connect(cls, address: str, tls: ClientTls | None = None) -> RMClient:
        ch = channel(address, tls)
        return cls(address, ch, rm_grpc.JobServiceStub(ch), tls)

    def submit(self, spec_yaml: str, *, client_mode: bool = False) -> rm_pb.JobSummary:
        """Submit a job exactly once.

        The request carries a fresh idempotency key and is retried with the same key while the
        RM is unreachable or slow to answer, so a retry never creates a second job; a refusal
        (a bad spec) is final and created nothing.  If no attempt got an answer, the job may or
        may not exist: the error says so and names the key."""
        key = os.urandom(16).hex()  # as random as uuid4().hex, without importing uuid
        request = rm_pb.SubmitJobRequest(
            spec_yaml=spec_yaml, client_mode=client_mode, idempotency_key=key
        )
        deadline = time.monotonic() + SUBMIT_PATIENCE
        delay = 0.5
        while True:
            try:
                response: rm_pb.SubmitJobResponse = self.jobs.SubmitJob(
                    request, timeout=SUBMIT_TIMEOUT
                )
                return response.job
            except grpc.RpcError as error:
                code = error.code() if isinstance(error, grpc.Call) else None
                if code not in _RETRIED or time.monotonic() + delay > deadline:
                    if code in _RETRIED:
                        raise UserError(
                            f"the resource manager at {self.address} did not confirm the "
                            f"submission within {SUBMIT_PATIENCE:.0f} s; the job may have been "
                            f"created (idempotency key {key}): check `sluice jobs`"
                        ) from None
                    raise
            time.sleep(delay)
            delay = min(delay * 2, 5.0)

    def close(self) -> None:
        self.channel.close()


def agent_stub(
    address: str, tls: ClientTls | None = None
) -> tuple[grpc.Channel, agent_grpc.AgentServiceStub]:
    from sluice_pb import node_agent_pb2_grpc as agent_grpc  # the RM's commands need none

    ch = channel(address, tls)
    return ch, agent_grpc.AgentServiceStub(ch)
