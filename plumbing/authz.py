"""Who may call what: every RPC of every Sluice service names the roles allowed to call it.

Each service keeps its table next to its servicer (``ACCESS`` in ``resource_manager/access.py``,
``node_agent/access.py``, ``aggregator/access.py``); a test checks that every method of every
service in the protos has an entry, so a new RPC cannot be added without saying who may call it.
The server checks the caller's certificate (:func:`plumbing.tls.peer_identity`) against the
table before the handler runs:

* a method with no entry is refused (deny by default), and so is a caller whose certificate
  names no Sluice identity: ``UNAUTHENTICATED``;
* a caller whose role is not allowed: ``PERMISSION_DENIED``, with one line saying which roles
  are, and a log line naming the caller.

The standard health and reflection services are open to every holder of a certificate of the
cluster.  Checks that depend on the request (an agent heartbeats only as its own node) are made
by the handlers, with :func:`caller`.  Without TLS (``--insecure``) nothing is checked.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable, Mapping
from contextvars import ContextVar
from typing import Any

import grpc

from plumbing.bearer import TokenVerifier, bearer_of
from plumbing.tls import Identity, Role, peer_identity

log = logging.getLogger(__name__)

AccessTable = Mapping[str, frozenset[Role]]
"""Full method name (``/sluice.v1.JobService/SubmitJob``) -> the roles that may call it."""

EVERY_HOLDER = frozenset(Role)
OPEN_SERVICES = ("/grpc.health.v1.Health/", "/grpc.reflection.v1alpha.ServerReflection/")


def table(service: str, rules: Mapping[str, frozenset[Role]]) -> dict[str, frozenset[Role]]:
    """An access table for ``service`` (its full name) from method name -> roles."""
    return {f"/{service}/{method}": roles for method, roles in rules.items()}


# The identity the authorizer found for the call being served, with that call's context: a
# bearer token is checked once per call, and a value left in a reused thread by an earlier
# call is never mistaken for this one's.
_RESOLVED: ContextVar[tuple[object, Identity | None] | None] = ContextVar(
    "sluice_caller", default=None
)


def caller(context: grpc.ServicerContext | grpc.aio.ServicerContext) -> Identity | None:
    """The identity of the caller of a call (its certificate's, or its bearer token's), or
    None without TLS."""
    resolved = _RESOLVED.get()
    if resolved is not None and resolved[0] is context:
        return resolved[1]
    return peer_identity(context.auth_context())


def foreign_node(identity: Identity | None, node_id: str) -> str | None:
    """Why an agent may not speak for ``node_id`` (not the node its certificate names), or
    None (it may, or there is no TLS)."""
    if identity is None or identity.name == node_id:
        return None
    return f"node_id: agent {identity.name!r} may speak only for its own node, not {node_id!r}"


def foreign_job(identity: Identity | None, job_id: str) -> str | None:
    """Why a job master may not act for ``job_id`` (not the job its certificate names), or
    None (it may, it is no job master, or there is no TLS)."""
    if identity is None or identity.role is not Role.JOB_MASTER or identity.name == job_id:
        return None
    return f"job_id: the job master of {identity.name} may act only for its own job, not {job_id!r}"


def with_article(noun: str) -> str:
    return f"an {noun}" if noun[0] in "aeiou" else f"a {noun}"


def refusal(
    access: AccessTable, method: str, identity: Identity | None
) -> tuple[grpc.StatusCode, str] | None:
    """Why ``identity`` may not call ``method``, or None if it may."""
    if method.startswith(OPEN_SERVICES):
        allowed: frozenset[Role] | None = EVERY_HOLDER
    else:
        allowed = access.get(method)
    name = method.rsplit("/", 1)[-1]
    if identity is None:
        return (
            grpc.StatusCode.UNAUTHENTICATED,
            f"{name}: no sluice:// identity: present a certificate of the cluster (`sluice ca "
            "issue`) or, on a token port, a bearer token (`sluice ca token`)",
        )
    if allowed is None:
        return grpc.StatusCode.UNAUTHENTICATED, f"{name}: no access rule; refused to everyone"
    if identity.role not in allowed:
        roles = ", ".join(sorted(r.value for r in allowed)) or "no one: the RM acts on its own"
        return (
            grpc.StatusCode.PERMISSION_DENIED,
            f"{name}: {with_article(identity.role.value)} may not call it (allowed: {roles})",
        )
    return None


class Authorizer(grpc.ServerInterceptor):  # type: ignore[misc]
    """Checks the access table before a thread-pool server's handlers run."""

    def __init__(self, access: AccessTable) -> None:
        self._access = access

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        handler = continuation(handler_call_details)
        if handler is None:
            return None
        method = handler_call_details.method
        access = self._access

        def guard(behavior: Callable[..., Any], streaming: bool) -> Callable[..., Any]:
            if streaming:

                def checked_stream(request: Any, context: grpc.ServicerContext) -> Any:
                    _check_sync(access, method, context)
                    yield from behavior(request, context)

                return checked_stream

            def checked(request: Any, context: grpc.ServicerContext) -> Any:
                _check_sync(access, method, context)
                return behavior(request, context)

            return checked

        return _rewrap(handler, guard)


class AioAuthorizer(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Checks the access table before an asyncio server's handlers run.  With ``tokens``, a
    caller without a certificate (on a port that asks for none) may name a person with a bearer
    token (:mod:`plumbing.bearer`).  With ``max_streams``, one identity holds at most that many
    open streams (server- or bidirectional-streaming calls) at once; another is refused with
    ``RESOURCE_EXHAUSTED``."""

    def __init__(
        self, access: AccessTable, tokens: TokenVerifier | None = None, max_streams: int = 0
    ) -> None:
        self._access = access
        self._tokens = tokens
        self._streams = StreamCount(max_streams)

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if handler is None:
            return handler
        method = handler_call_details.method
        access = self._access
        tokens = self._tokens
        streams = self._streams

        def guard(behavior: Callable[..., Any], streaming: bool) -> Callable[..., Any]:
            counted = streaming and streams.limit > 0
            if inspect.isasyncgenfunction(behavior):

                async def checked_gen(request: Any, context: grpc.aio.ServicerContext) -> Any:
                    identity = await _check_aio(access, method, context, tokens)
                    if counted:
                        await _open_stream(streams, identity, method, context)
                    try:
                        async for item in behavior(request, context):
                            yield item
                    finally:
                        if counted:
                            streams.close(identity)

                return checked_gen

            async def checked(request: Any, context: grpc.aio.ServicerContext) -> Any:
                identity = await _check_aio(access, method, context, tokens)
                if counted:
                    await _open_stream(streams, identity, method, context)
                try:
                    return await behavior(request, context)
                finally:
                    if counted:
                        streams.close(identity)

            return checked

        return _rewrap(handler, guard)


class StreamCount:
    """Open streams per identity, against a limit (0: none).  Callers without an identity (no
    TLS) are not counted."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._open: dict[Identity, int] = {}

    def open(self, identity: Identity | None) -> str | None:
        """Count one more stream of ``identity``, or say why not (one line)."""
        if identity is None or not self.limit:
            return None
        held = self._open.get(identity, 0)
        if held >= self.limit:
            return (
                f"streams: {identity} already holds {held} open streams, the limit per caller "
                "(--max-streams-per-caller); close some first"
            )
        self._open[identity] = held + 1
        return None

    def close(self, identity: Identity | None) -> None:
        if identity is None or not self.limit:
            return
        held = self._open.get(identity, 0) - 1
        if held > 0:
            self._open[identity] = held
        else:
            self._open.pop(identity, None)


async def _open_stream(
    streams: StreamCount, identity: Identity | None, method: str, context: grpc.aio.ServicerContext
) -> None:
    problem = streams.open(identity)
    if problem is not None:
        log.warning("refused %s to %s at %s: %s", method, identity, context.peer(), problem)
        await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, problem)


def _rewrap(
    handler: grpc.RpcMethodHandler, guard: Callable[[Callable[..., Any], bool], Callable[..., Any]]
) -> grpc.RpcMethodHandler:
    serializers = {
        "request_deserializer": handler.request_deserializer,
        "response_serializer": handler.response_serializer,
    }
    if handler.unary_unary is not None:
        return grpc.unary_unary_rpc_method_handler(guard(handler.unary_unary, False), **serializers)
    if handler.unary_stream is not None:
        return grpc.unary_stream_rpc_method_handler(
            guard(handler.unary_stream, True), **serializers
        )
    if handler.stream_unary is not None:
        return grpc.stream_unary_rpc_method_handler(
            guard(handler.stream_unary, False), **serializers
        )
    return grpc.stream_stream_rpc_method_handler(guard(handler.stream_stream, True), **serializers)


def _refused(access: AccessTable, method: str, identity: Identity | None, peer: str) -> Any:
    found = refusal(access, method, identity)
    if found is not None:
        log.warning(
            "refused %s to %s at %s: %s", method, identity or "an unknown caller", peer, found[1]
        )
    return found


def _check_sync(access: AccessTable, method: str, context: grpc.ServicerContext) -> None:
    identity = peer_identity(context.auth_context())
    _RESOLVED.set((context, identity))
    found = _refused(access, method, identity, context.peer())
    if found is not None:
        context.abort(*found)


async def _check_aio(
    access: AccessTable,
    method: str,
    context: grpc.aio.ServicerContext,
    tokens: TokenVerifier | None,
) -> Identity | None:
    """The caller's identity, once the call is allowed (else the call is aborted)."""
    identity = peer_identity(context.auth_context())
    if identity is None and tokens is not None:
        token = bearer_of(context.invocation_metadata())
        if token is not None:
            checked = tokens.check(token)
            if isinstance(checked, str):
                log.warning("refused %s at %s: %s", method, context.peer(), checked)
                await context.abort(grpc.StatusCode.UNAUTHENTICATED, checked)
            else:
                identity = checked
    _RESOLVED.set((context, identity))
    found = _refused(access, method, identity, context.peer())
    if found is not None:
        await context.abort(*found)
    return identity
