"""gRPC plumbing shared by every Sluice server and client.

Every server also serves the standard health-checking and server-reflection services, so
generic probes (grpc_health_probe, grpcurl) work against the RM and the agents alike.

Servers and channels take the holder's TLS (:mod:`plumbing.tls`): with it, a server presents
its certificate and requires a client certificate the cluster CA signed (mutual TLS: a caller
without one cannot even connect), and a channel trusts only that CA and presents its own
certificate; every call is then checked against the server's access table
(:mod:`plumbing.authz`), before its request is decoded.  Without TLS everything is plaintext
and unchecked, which only ``--insecure`` asks for.

Each server reads at most its largest legitimate request (:data:`RM_MAX_RECEIVE`,
:data:`AGENT_MAX_RECEIVE`, :data:`AGGREGATOR_MAX_RECEIVE`); gRPC refuses more, unread.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from concurrent import futures
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import grpc

from plumbing.client_tls import ClientTls, channel_credentials

# What only a server uses (health, reflection, the access guard) is imported when one starts:
# a client's command (`sluice jobs`) imports this module for its channel alone.
if TYPE_CHECKING:
    from grpc_health.v1 import _async as health_aio
    from grpc_health.v1 import health

    from plumbing.authz import AccessTable
    from plumbing.bearer import TokenVerifier
    from plumbing.tls import TlsFiles

log = logging.getLogger(__name__)

# Keepalives let a client notice a vanished server (and a server a vanished client) within
# seconds instead of waiting for TCP timeouts.
CHANNEL_OPTIONS = [
    ("grpc.keepalive_time_ms", 10_000),
    ("grpc.keepalive_timeout_ms", 5_000),
    ("grpc.max_receive_message_length", 64 * 1024 * 1024),
    ("grpc.max_send_message_length", 64 * 1024 * 1024),
]

# What each server reads of one request.  gRPC refuses a larger message with
# RESOURCE_EXHAUSTED as soon as its length prefix arrives, before reading or decoding it, so a
# caller can make a server hold at most this much per call; 64 MB let 30 refused submissions
# grow an RM by 3.8 GB (issue 27).  Each limit is the server's largest legitimate request with
# room to spare (replies and channels keep 64 MB: a job's detail can be large).

RM_MAX_RECEIVE = 4 * 1024 * 1024
"""4 MiB, gRPC's own default.  The RM's largest requests: a ``SubmitJob`` (a spec is at most
``MAX_SPEC_BYTES``, 1 MiB, of YAML; a structured spec's strings count against the same 1 MiB
with one byte each more, and take at most twice their count on the wire (an empty string: a tag
and a length byte), so with its numbers, about 40 bytes a phase for at most 1,000 phases, it
stays under 2.1 MiB); an agent's heartbeat or registration, which lists every task it holds (a
task's report is about 150 bytes: over 25,000 tasks on one node); a job master's ``Allocate``
(an ask names at most 4,096 preferred nodes, about 80 KiB with short names).
``tests/unit/plumbing/test_receive_limits.py`` builds the largest of each and checks it fits."""

AGENT_MAX_RECEIVE = 1024 * 1024
"""1 MiB.  An agent's largest request is ``StartTask`` (or ``EnqueueSpeculative``, which
carries one): a command of at most ``MAX_COMMAND_BYTES`` (256 KiB, 4,096 arguments, under
270 KiB on the wire), three environment variables, ids and a grant token."""

AGGREGATOR_MAX_RECEIVE = 64 * 1024
"""64 KiB.  Every request of the aggregator's own service is empty; the rest are health checks
and reflection queries (a symbol or a file name)."""


LARGE_BUFFER = 1024 * 1024
"""Allocations of at least this many bytes are mapped on their own (glibc's ``mmap``
threshold), so freeing one returns its memory to the system at once.  glibc raises the
threshold by itself after it frees a large block (up to 32 MiB), after which request-sized
buffers come from the heap, fragment it, and a server's resident memory only grows with the
large requests it has read and dropped; a fixed threshold keeps it where it was."""

_M_MMAP_THRESHOLD = -3  # mallopt's parameter, from glibc's malloc.h


TRIM_PERIOD_S = 10.0
"""How often a server hands the free memory inside glibc's heaps back to the system: gRPC reads
a refused request's bytes in flight (up to its flow-control window) into small buffers, which
free leaves scattered, so a burst of oversized requests would otherwise keep the resident
memory up.  ``malloc_trim`` takes a few milliseconds on a thread of its own."""

_trimming = threading.Lock()  # one trimmer per process


def return_large_buffers() -> None:
    """Pin glibc's ``mmap`` threshold at :data:`LARGE_BUFFER` for this process and start its
    trimmer (:data:`TRIM_PERIOD_S`); a no-op elsewhere (musl and others map large blocks on
    their own already) and when done before."""
    if not _trimming.acquire(blocking=False):
        return
    try:
        import ctypes  # only servers need it

        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(_M_MMAP_THRESHOLD, LARGE_BUFFER)
        trim = libc.malloc_trim
    except (OSError, AttributeError):  # not glibc
        return

    def trimmer() -> None:
        while True:
            time.sleep(TRIM_PERIOD_S)
            trim(0)

    threading.Thread(target=trimmer, name="malloc-trim", daemon=True).start()


def _server_options(max_receive_bytes: int) -> list[tuple[str, int]]:
    return_large_buffers()  # a server reads and drops requests of up to that size
    return [
        *(o for o in CHANNEL_OPTIONS if o[0] != "grpc.max_receive_message_length"),
        ("grpc.max_receive_message_length", max_receive_bytes),
    ]


def start_server(
    registrations: Iterable[tuple[Callable[[Any, grpc.Server], None], object, str]],
    address: str,
    *,
    max_workers: int = 32,
    tls: TlsFiles | None = None,
    access: AccessTable | None = None,
    max_receive_bytes: int = RM_MAX_RECEIVE,
) -> tuple[grpc.Server, int, health.HealthServicer]:
    """Start a server with the given (add_X_to_server, servicer, full service name) triples.

    ``address`` is host:port; port 0 picks a free port.  ``max_receive_bytes`` bounds one
    request (a larger one is refused with RESOURCE_EXHAUSTED unread).  Returns the server, the
    bound port and the health servicer (already SERVING for every service and for "")."""
    from grpc_health.v1 import health, health_pb2

    from plumbing.authz import Authorizer

    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="grpc"),
        options=_server_options(max_receive_bytes),
        # Without TLS nothing is checked, but requests are still decoded in the guard.
        interceptors=[Authorizer(_access(tls, access) if tls is not None else None)],
    )
    health_servicer = health.HealthServicer(experimental_non_blocking=True)
    names = _register(server, registrations, health_servicer)
    for name in [*names, ""]:
        health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    port = _bind(server, address, tls)
    server.start()
    return server, port, health_servicer


def _register(
    server: Any,
    registrations: Iterable[tuple[Callable[[Any, Any], None], object, str]],
    health: Any,
) -> list[str]:
    """Add the servicers, the health service and reflection; the services' full names."""
    from grpc_health.v1 import health_pb2, health_pb2_grpc
    from grpc_reflection.v1alpha import reflection

    names = []
    for add, servicer, name in registrations:
        add(servicer, server)
        names.append(name)
    health_pb2_grpc.add_HealthServicer_to_server(health, server)
    reflection.enable_server_reflection(
        [
            *names,
            health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
            reflection.SERVICE_NAME,
        ],
        server,
    )
    return names


def _access(tls: TlsFiles | None, access: AccessTable | None) -> AccessTable:
    """With TLS every call is checked, so a server must say who may call what."""
    if tls is not None and access is None:
        raise ValueError("a server with TLS needs its access table")
    return access or {}


def _bind(server: Any, address: str, tls: TlsFiles | None) -> int:
    if tls is None:
        port = int(server.add_insecure_port(address))
    else:
        from plumbing.tls import server_credentials  # a server's path: cryptography is loaded

        credentials = server_credentials(tls, require_client_cert=True)
        port = int(server.add_secure_port(address, credentials))
    if port == 0:
        raise OSError(f"cannot listen on {address}")
    return port


def channel(address: str, tls: ClientTls | None = None) -> grpc.Channel:
    """A channel to ``address``: TLS trusting the cluster CA when ``tls`` is given."""
    if tls is None:
        return grpc.insecure_channel(address, options=CHANNEL_OPTIONS)
    return grpc.secure_channel(address, channel_credentials(tls), options=CHANNEL_OPTIONS)


def describe_rpc_error(error: grpc.RpcError, target: str) -> str:
    """One line for a user: what failed and why, without a traceback."""
    code = error.code() if isinstance(error, grpc.Call) else None
    details = error.details() if isinstance(error, grpc.Call) else str(error)
    if code is grpc.StatusCode.UNAVAILABLE:
        if "handshake failed" in (details or "").lower():
            return (
                f"cannot reach {target} over TLS: the handshake failed (does it run with TLS, "
                f"and was its certificate issued by your cluster's CA?) ({details})"
            )
        if "Socket closed" in (details or ""):
            return (
                f"cannot reach {target}: it closed the connection (if it runs with TLS, give "
                f"--tls-dir or $SLUICE_TLS_DIR) ({details})"
            )
        return f"cannot reach {target}: is it running? ({details})"
    if code is grpc.StatusCode.DEADLINE_EXCEEDED:
        return f"{target} did not answer in time"
    return str(details)


async def start_aio_server(
    registrations: Iterable[tuple[Callable[[Any, grpc.aio.Server], None], object, str]],
    address: str,
    *,
    tls: TlsFiles | None = None,
    access: AccessTable | None = None,
    tokens: TokenPort | None = None,
    max_streams_per_caller: int = 0,
    max_receive_bytes: int = RM_MAX_RECEIVE,
) -> tuple[grpc.aio.Server, int, health_aio.HealthServicer]:
    """Like :func:`start_server`, for servicers written with ``async def``: one event loop
    serves every call, so a stream that waits (a watcher) holds no thread and no number of them
    can starve the others.  Call from inside the loop that will run the server.

    ``tokens`` (with TLS) also serves the same services on a second port that asks for no
    client certificate, where people name themselves with bearer tokens
    (:mod:`plumbing.bearer`); its bound port is set on ``tokens.port``.
    ``max_streams_per_caller`` (with TLS) bounds the open streams of one identity."""
    from grpc_health.v1 import _async as health_aio
    from grpc_health.v1 import health_pb2

    from plumbing.authz import AioAuthorizer

    if tokens is not None and tls is None:
        raise ValueError("bearer tokens need TLS")
    server = grpc.aio.server(
        options=_server_options(max_receive_bytes),
        interceptors=[
            AioAuthorizer(
                _access(tls, access) if tls is not None else None,
                tokens.verifier if tokens else None,
                max_streams_per_caller if tls is not None else 0,
            )
        ],
    )
    health_servicer = health_aio.HealthServicer()
    names = _register(server, registrations, health_servicer)
    for name in [*names, ""]:
        await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    port = _bind(server, address, tls)
    if tokens is not None and tls is not None:
        from plumbing.tls import server_credentials

        bound = server.add_secure_port(
            tokens.address, server_credentials(tls, require_client_cert=False)
        )
        if bound == 0:
            raise OSError(f"cannot listen on {tokens.address}")
        tokens.port = int(bound)
    await server.start()
    return server, port, health_servicer


@dataclass
class TokenPort:
    """Where a server takes bearer tokens, and how it checks them."""

    address: str
    verifier: TokenVerifier
    port: int = 0  # bound, once the server started
