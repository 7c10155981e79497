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

The check comes before a request is decoded: the interceptors give gRPC no deserializer for a
unary request (it hands over the bytes) and decode them once the caller is allowed, and a
streamed request is decoded only as the handler reads it, after the check.  So a caller who may
call nothing costs a refusal, never a parse, and bytes that are no message of the method answer
``INVALID_ARGUMENT`` in one line (``request: ...``), never a traceback.

Every refusal is logged through :func:`log_refusal`: one line, each echoed value cut to
:data:`MAX_ECHO` characters, and repeats rate-limited by :class:`RefusalLog` (the first of a
kind per caller and method, then one summary line per :data:`REFUSAL_WINDOW_S`).  A refusal keeps
nothing of its request: the bytes are dropped before the call is aborted, and only short strings
reach the log and the rate limiter's table.
"""

from __future__ import annotations

import inspect
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Generator, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
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


MAX_ECHO = 100
"""Characters of a caller's value (an id, a name, a message) a refusal repeats, in its answer
and in the log: enough to recognise it, and a 1 MB ``node_id`` costs no 1 MB line."""


def bounded(value: object, limit: int = MAX_ECHO) -> str:
    """``value`` as text of at most about ``limit`` characters: longer text is cut, with an
    ellipsis and its full length."""
    text = value if isinstance(value, str) else str(value)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text):,} characters)"


def quoted(value: str, limit: int = MAX_ECHO) -> str:
    """``repr(value)``, cut as :func:`bounded` cuts (for echoing an id in a refusal)."""
    if len(value) <= limit:
        return repr(value)
    return f"{value[:limit]!r}… ({len(value):,} characters)"


def foreign_node(identity: Identity | None, node_id: str) -> str | None:
    """Why an agent may not speak for ``node_id`` (not the node its certificate names), or
    None (it may, or there is no TLS)."""
    if identity is None or identity.name == node_id:
        return None
    return (
        f"node_id: agent {quoted(identity.name)} may speak only for its own node, "
        f"not {quoted(node_id)}"
    )


def foreign_job(identity: Identity | None, job_id: str) -> str | None:
    """Why a job master may not act for ``job_id`` (not the job its certificate names), or
    None (it may, it is no job master, or there is no TLS)."""
    if identity is None or identity.role is not Role.JOB_MASTER or identity.name == job_id:
        return None
    return (
        f"job_id: the job master of {bounded(identity.name)} may act only for its own job, "
        f"not {quoted(job_id)}"
    )


# ------------------------------------------------------------------ refusals in the log

REFUSAL_WINDOW_S = 60.0
"""After a refusal is logged, the same caller's refusals of the same kind on the same method
are only counted for this long, then summed up in one line."""

MAX_REFUSAL_KINDS = 1024
"""Kinds (caller, method, reason) the rate limiter follows at once; the oldest is summed up
early when a new one needs its place."""


@dataclass
class _Window:
    started: float
    more: int = 0  # refusals of the kind since ``started``, not logged


class RefusalLog:
    """Which refusals to log (pure but for its table; the clock is passed in).  The first
    refusal of a kind is logged; those of the same kind within :attr:`window_s` after it are
    counted, and once the window ends the count is given in one summary line ("N more like
    this in the last M s").  A kind is a (caller, method, reason) of short strings: nothing of
    a request is kept.  Windows end in the order they began, so ending them costs O(1) per
    refusal, and the table holds at most ``max_kinds``."""

    def __init__(
        self, window_s: float = REFUSAL_WINDOW_S, max_kinds: int = MAX_REFUSAL_KINDS
    ) -> None:
        self.window_s = window_s
        self.max_kinds = max_kinds
        self._windows: OrderedDict[tuple[str, str, str], _Window] = OrderedDict()

    def note(self, kind: tuple[str, str, str], now: float) -> tuple[bool, list[str]]:
        """Count a refusal of ``kind`` at ``now``: whether to log it, and the summary lines of
        the windows that ended (log them first)."""
        summaries = self._expire(now)
        window = self._windows.get(kind)
        if window is not None:
            window.more += 1
            return False, summaries
        while len(self._windows) >= self.max_kinds:
            old_kind, old = self._windows.popitem(last=False)
            summaries.extend(self._summary(old_kind, old, now))
        self._windows[kind] = _Window(now)
        return True, summaries

    def flush(self, now: float) -> list[str]:
        """The summary lines of the windows that ended by ``now``."""
        return self._expire(now)

    def _expire(self, now: float) -> list[str]:
        summaries: list[str] = []
        while self._windows:
            kind, window = next(iter(self._windows.items()))
            if now - window.started < self.window_s:
                break
            del self._windows[kind]
            summaries.extend(self._summary(kind, window, now))
        return summaries

    @staticmethod
    def _summary(kind: tuple[str, str, str], window: _Window, now: float) -> list[str]:
        if not window.more:
            return []
        who, method, reason = kind
        return [
            f"refused {method} to {who} {window.more:,} more times like this in the last "
            f"{max(now - window.started, 0.0):.0f} s ({reason})"
        ]


_REFUSALS = RefusalLog()
_REFUSALS_LOCK = threading.Lock()  # the thread-pool servers log from many threads


def log_refusal(
    logger: logging.Logger,
    method: str,
    identity: Identity | None,
    peer: str,
    problem: str,
    now: float | None = None,
) -> None:
    """Log a refused call in one line (every value cut to :data:`MAX_ECHO` characters), unless
    the same caller's refusal of the same kind on the same method was logged within the last
    :data:`REFUSAL_WINDOW_S`: then it is counted, and summed up later.  The kind of a refusal is
    the field its problem names (the text before the first ``:``)."""
    host = peer.rsplit(":", 1)[0] if peer else "?"
    who = bounded(str(identity) if identity is not None else f"an unknown caller at {host}")
    name = bounded(method.rsplit("/", 1)[-1], 60)
    reason = bounded(problem.split(":", 1)[0], 40)
    with _REFUSALS_LOCK:
        first, summaries = _REFUSALS.note(
            (who, name, reason), time.monotonic() if now is None else now
        )
    for summary in summaries:
        logger.warning("%s", summary)
    if first:
        logger.warning(
            "refused %s to %s at %s: %s (repeats are summed up every %.0f s)",
            name,
            who,
            bounded(peer),
            bounded(problem, 2 * MAX_ECHO),
            _REFUSALS.window_s,
        )


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


class UndecodableError(Exception):
    """Bytes that are no message of the method.  Holds its one-line problem, nothing of the
    bytes."""


def _message_name(deserializer: Callable[[bytes], Any]) -> str:
    owner = getattr(deserializer, "__self__", None)  # Message.FromString, bound to its class
    descriptor = getattr(owner, "DESCRIPTOR", None)
    return str(getattr(descriptor, "full_name", "message of this method"))


def decoder(deserializer: Callable[[bytes], Any] | None) -> Callable[[bytes], Any]:
    """``deserializer`` (None: the bytes as they are), raising :class:`UndecodableError` with one
    line for bytes it cannot decode.  The parser's own exception is dropped first: its
    traceback would hold the bytes."""
    if deserializer is None:
        return _as_is
    name = _message_name(deserializer)

    def decode(raw: bytes) -> Any:
        try:
            return deserializer(raw)
        except Exception:  # any parser's error: the bytes are the caller's mistake
            size = len(raw)
        del raw
        raise UndecodableError(f"request: does not decode as {name} ({size:,} bytes)")

    return decode


def _as_is(raw: bytes) -> bytes:
    return raw


def _decode_one(decode: Callable[[bytes], Any], raw: bytes) -> tuple[Any, str | None]:
    """(the message, None), or (None, why not)."""
    try:
        return decode(raw), None
    except UndecodableError as error:
        return None, str(error)


def _decoding(requests: Iterator[bytes], decode: Callable[[bytes], Any]) -> Iterator[Any]:
    for raw in requests:
        yield decode(raw)


class Authorizer(grpc.ServerInterceptor):  # type: ignore[misc]
    """Checks the access table before a thread-pool server's handlers run, and before their
    requests are decoded.  With ``access`` None (no TLS) nothing is checked, and requests are
    still decoded in the guard (bad bytes answer one line, not a traceback)."""

    def __init__(self, access: AccessTable | None) -> None:
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
        decode = decoder(handler.request_deserializer)

        def guard(behavior: Callable[..., Any], kind: _Kind) -> Callable[..., Any]:
            if kind.response_streaming:

                def checked_stream(request: Any, context: grpc.ServicerContext) -> Any:
                    try:
                        identity, found = _admit_sync(access, method, context)
                        if found is not None:
                            request = None
                            context.abort(*found)
                        if kind.request_streaming:
                            problem = yield from _stream_sync(
                                behavior, _decoding(request, decode), context
                            )
                        else:
                            message, problem = _decode_one(decode, request)
                            request = None
                            if problem is None:
                                yield from behavior(message, context)
                        if problem is not None:
                            _invalid_sync(method, identity, context, problem)
                    finally:
                        _RESOLVED.set(None)  # the worker thread keeps no call, nor its request

                return checked_stream

            def checked(request: Any, context: grpc.ServicerContext) -> Any:
                try:
                    identity, found = _admit_sync(access, method, context)
                    if found is not None:
                        request = None
                        context.abort(*found)
                    if kind.request_streaming:
                        try:
                            return behavior(_decoding(request, decode), context)
                        except UndecodableError as error:
                            problem = str(error)
                    else:
                        message, invalid = _decode_one(decode, request)
                        request = None
                        if invalid is None:
                            return behavior(message, context)
                        problem = invalid
                    _invalid_sync(method, identity, context, problem)
                finally:
                    _RESOLVED.set(None)

            return checked

        # The bytes come undecoded: decoded in the guard, once the caller is allowed.
        return _rewrap(handler, guard, None)


def _stream_sync(
    behavior: Callable[..., Any], requests: Iterator[Any], context: grpc.ServicerContext
) -> Generator[Any, None, str | None]:
    """Yield what ``behavior`` yields; return the problem of an undecodable request, if any."""
    try:
        yield from behavior(requests, context)
    except UndecodableError as error:
        return str(error)
    return None


class AioAuthorizer(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Checks the access table before an asyncio server's handlers run, and before their
    requests are decoded.  With ``tokens``, a caller without a certificate (on a port that asks
    for none) may name a person with a bearer token (:mod:`plumbing.bearer`).  With
    ``max_streams``, one identity holds at most that many open streams (server- or
    bidirectional-streaming calls) at once; another is refused with ``RESOURCE_EXHAUSTED``.
    With ``access`` None (no TLS) nothing is checked; requests are still decoded in the guard."""

    def __init__(
        self, access: AccessTable | None, tokens: TokenVerifier | None = None, max_streams: int = 0
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
        decode = decoder(handler.request_deserializer)
        method = handler_call_details.method

        def guard(behavior: Callable[..., Any], kind: _Kind) -> Callable[..., Any]:
            gate = _AioGate(
                self._access,
                method,
                self._tokens,
                self._streams if kind.response_streaming and self._streams.limit > 0 else None,
                None if kind.request_streaming else decode,
            )
            if inspect.isasyncgenfunction(behavior):

                async def checked_gen(request: Any, context: grpc.aio.ServicerContext) -> Any:
                    identity, admitted, problem = None, False, None
                    try:
                        identity, request = await gate.admit(request, context)
                        admitted = True
                        async for item in behavior(request, context):
                            yield item
                    except UndecodableError as error:
                        problem = str(error)
                    except grpc.aio.AbortError as error:
                        _forget(error)
                        raise
                    finally:
                        request = None
                        if admitted:
                            gate.done(identity)
                    await _invalid_aio(method, identity, context, problem)

                return checked_gen

            async def checked(request: Any, context: grpc.aio.ServicerContext) -> Any:
                identity, admitted, problem = None, False, None
                try:
                    identity, request = await gate.admit(request, context)
                    admitted = True
                    return await behavior(request, context)
                except UndecodableError as error:
                    problem = str(error)
                except grpc.aio.AbortError as error:
                    _forget(error)
                    raise
                finally:
                    request = None
                    if admitted:
                        gate.done(identity)
                return await _invalid_aio(method, identity, context, problem)

            return checked

        # A unary request comes as bytes, decoded in the guard once the caller is allowed; a
        # streamed one is decoded as the handler reads it (``decode`` is its deserializer),
        # which is after the check too.
        return _rewrap(handler, guard, decode)


@dataclass(frozen=True)
class _AioGate:
    """What an asyncio server checks of one method's calls before their handler runs."""

    access: AccessTable | None
    method: str
    tokens: TokenVerifier | None
    streams: StreamCount | None  # for a streaming response, with a limit
    decode: Callable[[bytes], Any] | None  # for a unary request

    async def admit(
        self, request: Any, context: grpc.aio.ServicerContext
    ) -> tuple[Identity | None, Any]:
        """The caller's identity and the decoded request, or the call is aborted (with the
        request dropped first; the caller forgets the abort's frames)."""
        identity, found = await _admit_aio(self.access, self.method, context, self.tokens)
        if found is not None:
            request = None
            await context.abort(*found)
        if self.decode is not None:
            request, problem = _decode_one(self.decode, request)
            if problem is not None:
                await _invalid_aio(self.method, identity, context, problem)
        if self.streams is not None:
            problem = self.streams.open(identity)
            if problem is not None:
                request = None
                log_refusal(log, self.method, identity, context.peer(), problem)
                await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, problem)
        return identity, request

    def done(self, identity: Identity | None) -> None:
        if self.streams is not None:
            self.streams.close(identity)


def _forget(error: BaseException) -> None:
    """Cut an abort from the frames it came through, which hold the request: grpc.aio keeps the
    exception in the call's state, which those frames' ``context`` points back to, a cycle
    only a full collection (rare in a tuned RM, see plumbing/gc_tuning.py) would free."""
    error.__traceback__ = None
    error.__context__ = None
    error.__cause__ = None


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


@dataclass(frozen=True)
class _Kind:
    request_streaming: bool
    response_streaming: bool


def _rewrap(
    handler: grpc.RpcMethodHandler,
    guard: Callable[[Callable[..., Any], _Kind], Callable[..., Any]],
    stream_deserializer: Callable[[bytes], Any] | None,
) -> grpc.RpcMethodHandler:
    """``handler`` with its behaviour guarded; a unary request comes undecoded (the guard
    decodes it), a streamed one through ``stream_deserializer`` (None: undecoded too)."""
    kind = _Kind(bool(handler.request_streaming), bool(handler.response_streaming))
    serializers = {
        "request_deserializer": stream_deserializer if kind.request_streaming else None,
        "response_serializer": handler.response_serializer,
    }
    if handler.unary_unary is not None:
        return grpc.unary_unary_rpc_method_handler(guard(handler.unary_unary, kind), **serializers)
    if handler.unary_stream is not None:
        return grpc.unary_stream_rpc_method_handler(
            guard(handler.unary_stream, kind), **serializers
        )
    if handler.stream_unary is not None:
        return grpc.stream_unary_rpc_method_handler(
            guard(handler.stream_unary, kind), **serializers
        )
    return grpc.stream_stream_rpc_method_handler(guard(handler.stream_stream, kind), **serializers)


def _refused(
    access: AccessTable | None, method: str, identity: Identity | None, peer: str
) -> tuple[grpc.StatusCode, str] | None:
    if access is None:  # no TLS: nothing is checked
        return None
    found = refusal(access, method, identity)
    if found is not None:
        log_refusal(log, method, identity, peer, found[1])
    return found


def _admit_sync(
    access: AccessTable | None, method: str, context: grpc.ServicerContext
) -> tuple[Identity | None, tuple[grpc.StatusCode, str] | None]:
    """The caller's identity, and why the call is refused (None: it is allowed); a refusal is
    logged."""
    identity = peer_identity(context.auth_context())
    _RESOLVED.set((context, identity))
    return identity, _refused(access, method, identity, context.peer())


def _invalid_sync(
    method: str, identity: Identity | None, context: grpc.ServicerContext, problem: str
) -> None:
    log_refusal(log, method, identity, context.peer(), problem)
    context.abort(grpc.StatusCode.INVALID_ARGUMENT, problem)


async def _invalid_aio(
    method: str, identity: Identity | None, context: grpc.aio.ServicerContext, problem: str | None
) -> Any:
    """Abort with INVALID_ARGUMENT for ``problem`` (None: the handler ended normally)."""
    if problem is None:
        return None
    log_refusal(log, method, identity, context.peer(), problem)
    await context.abort(grpc.StatusCode.INVALID_ARGUMENT, problem)


async def _admit_aio(
    access: AccessTable | None,
    method: str,
    context: grpc.aio.ServicerContext,
    tokens: TokenVerifier | None,
) -> tuple[Identity | None, tuple[grpc.StatusCode, str] | None]:
    """The caller's identity, and why the call is refused (None: it is allowed); a refusal is
    logged."""
    identity = peer_identity(context.auth_context())
    if identity is None and tokens is not None:
        token = bearer_of(context.invocation_metadata())
        if token is not None:
            checked = tokens.check(token)
            if isinstance(checked, str):
                log_refusal(log, method, None, context.peer(), checked)
                return None, (grpc.StatusCode.UNAUTHENTICATED, checked)
            identity = checked
    _RESOLVED.set((context, identity))
    return identity, _refused(access, method, identity, context.peer())
