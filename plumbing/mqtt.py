"""MQTT plumbing shared by the aggregator's publisher and the job master's candidate feed:
URL and topic names, an ``aiomqtt`` client on a private event loop in a daemon thread, and
reconnection with backoff that logs each outage once and each recovery once.

Teardown is where aiomqtt needs help.  Its connection attempt (``async with client``) opens
paho's socket from an executor thread, which also starts a keepalive task (``_misc_loop``) on the
loop; if the attempt is cancelled or fails, nothing closes them, because ``__aexit__`` runs only
for an attempt that succeeded.  A loop closed after that leaves the task pending ("Task was
destroyed but it is pending!"), and when the abandoned paho client is collected its socket
callback schedules onto the closed loop ("RuntimeError: Event loop is closed").  So
:class:`Client` closes the socket of an attempt that failed or was cancelled waiting for its
CONNACK, and :class:`LoopThread` ends its loop as ``asyncio.run`` does: executor work first
(an attempt cancelled while paho was still connecting), then every task left, then the loop.
Callers that can, stop between attempts rather than cancel one (``CandidateFeed.close``).

TLS: ``mqtts://host[:port]`` (port 8883 by default) is MQTT over TLS, ``mqtt://`` plaintext;
over TLS the client checks the broker's certificate against the cluster CA and the host dialled,
and presents its own (:mod:`plumbing.broker_tls`).  A broker that refuses our certificate (TLS
1.3) says so only after the handshake, in an alert that paho logs and aiomqtt then reports as a
timeout waiting for CONNACK; :class:`Client` keeps that alert and raises it instead, so the log
says TLS rather than "timed out".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import threading
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Self
from urllib.parse import urlsplit

import aiomqtt
from aiomqtt.exceptions import MqttConnectError
from paho.mqtt.client import MQTT_LOG_ERR

from plumbing.broker_tls import BrokerTls, probe, tls_problem

_log = logging.getLogger("sluice.mqtt")

DEFAULT_PORT = 1883
DEFAULT_TLS_PORT = 8883
SCHEMES = {"mqtt": False, "mqtts": True}  # scheme -> TLS
DEFAULT_PREFIX = "sluice/v1"
# Seconds between PINGREQs: a broker that vanished without closing the socket is noticed
# within about two of these.
KEEPALIVE = 10
# Seconds to wait for CONNACK, SUBACK or PUBACK before declaring the connection broken.
MQTT_TIMEOUT = 5.0
BACKOFF_INITIAL = 0.2
BACKOFF_MAX = 10.0


@dataclass(frozen=True)
class MqttBroker:
    """Where an MQTT broker is, and whether its link is TLS."""

    host: str
    port: int
    tls: bool = False

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}{' (TLS)' if self.tls else ''}"


def parse_mqtt_broker(url: str) -> MqttBroker:
    """``mqtt://host[:port]`` (port 1883 by default) or ``mqtts://host[:port]`` (TLS, port 8883
    by default) → :class:`MqttBroker`.

    Anything else (another scheme, credentials, a path, a bad port) raises
    ``ValueError("--mqtt: <problem>")``, worded for the command-line flag."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as error:
        raise ValueError(f"--mqtt: {error} in {url!r}") from None
    if parts.scheme not in SCHEMES:
        raise ValueError(
            f"--mqtt: expected mqtt://HOST[:PORT] or mqtts://HOST[:PORT] (TLS), got {url!r}"
        )
    if not parts.hostname:
        raise ValueError(f"--mqtt: no host in {url!r}")
    if parts.username is not None or parts.password is not None:
        raise ValueError(f"--mqtt: credentials are not supported in {url!r}")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ValueError(f"--mqtt: unexpected path or query in {url!r}")
    if parts.netloc.endswith(":"):
        raise ValueError(f"--mqtt: empty port in {url!r}")
    if port == 0:
        raise ValueError(f"--mqtt: port 0 in {url!r}")
    tls = SCHEMES[parts.scheme]
    if port is None:
        port = DEFAULT_TLS_PORT if tls else DEFAULT_PORT
    return MqttBroker(parts.hostname, port, tls)


def broker_link(url: str, tls: BrokerTls | None) -> tuple[MqttBroker, ssl.SSLContext | None]:
    """The broker ``url`` names and, for ``mqtts://``, the TLS context of the holder's
    certificate; ``ValueError("--mqtt: ...")`` for a TLS broker without a certificate."""
    broker = parse_mqtt_broker(url)
    if not broker.tls:
        return broker, None
    if tls is None:
        raise ValueError(f"--mqtt: {url} is MQTT over TLS: a certificate is needed")
    return broker, tls.ssl_context()


def parse_mqtt_url(url: str) -> tuple[str, int]:
    """``(host, port)`` of an ``mqtt://`` or ``mqtts://`` URL (see :func:`parse_mqtt_broker`,
    which also says whether it is TLS)."""
    broker = parse_mqtt_broker(url)
    return broker.host, broker.port


def topics(prefix: str) -> tuple[str, str]:
    """The ``(machines, candidates)`` topics under ``prefix``; ValueError for a prefix that is
    empty or holds a wildcard."""
    prefix = prefix.rstrip("/")
    if not prefix or "+" in prefix or "#" in prefix:
        raise ValueError(f"topic prefix: expected a topic without wildcards, got {prefix!r}")
    return f"{prefix}/machines", f"{prefix}/candidates"


class Client(aiomqtt.Client):
    """``aiomqtt.Client`` whose failed or cancelled connection attempt closes the socket it
    opened, and whose failed attempt says why when the broker refused it over TLS (see the
    module docstring).  paho's own log lines go to ``sluice.mqtt.paho`` at debug level: the
    callers report every lost connection themselves, once per outage."""

    def __init__(
        self, hostname: str, port: int, *, tls_context: ssl.SSLContext | None = None, **kwargs: Any
    ) -> None:
        super().__init__(hostname, port, tls_context=tls_context, **kwargs)
        self._address = f"{hostname}:{port}"
        self._tls_context = tls_context
        self._socket_error: str | None = None
        # Neither aiomqtt nor paho hand a socket error of the CONNACK wait to the caller; paho
        # tells its log callback (public API), so listen there instead of in its logger.
        self._client.disable_logger()
        self._client.on_log = self._on_paho_log

    def _on_paho_log(self, _client: object, _userdata: object, level: int, line: str) -> None:
        if level == MQTT_LOG_ERR:
            self._socket_error = line
        _paho_log.debug("%s", line)

    async def __aenter__(self) -> Self:
        self._socket_error = None
        try:
            return await super().__aenter__()
        except asyncio.CancelledError:
            # Cancelled while waiting for CONNACK (aiomqtt's wait cancelled its connection
            # future): close the socket.  Cancelled earlier, paho is still opening it on an
            # executor thread, whose callbacks are still to come: LoopThread ends that.
            if self._connected.cancelled():
                self._close_socket()
            raise
        except aiomqtt.MqttReentrantError:
            raise  # entered twice: the connection is the first entry's
        except aiomqtt.MqttError as error:
            self._close_socket()  # e.g. no CONNACK within MQTT_TIMEOUT
            refused = await self._refused_over_tls(error)
            if refused is not None:
                raise aiomqtt.MqttError(refused) from error
            raise

    async def _refused_over_tls(self, error: aiomqtt.MqttError) -> str | None:
        """Why a TLS broker refused us, when ``error`` does not say: the TLS alert paho saw, or
        else the broker's answer to a fresh handshake (a broker that drops a client certificate
        it does not accept may send no alert at all).  None for a broker that answered CONNECT
        (it refused the session, not TLS) and for one that cannot be reached at all."""
        if self._tls_context is None or isinstance(error, MqttConnectError):
            return None
        if tls_problem(error) is not None:
            return None
        seen = tls_problem(Exception(self._socket_error)) if self._socket_error else None
        if seen is not None:
            return seen
        return await asyncio.to_thread(probe, self._address, self._tls_context)

    def _close_socket(self) -> None:
        """Close paho's socket now, if open; paho's socket-close callback removes aiomqtt's
        reader and writer and stops its keepalive task.  No DISCONNECT: the session never
        started, and aiomqtt's disconnect callback fails on a cancelled connection future."""
        # Neither aiomqtt (its paho client) nor paho (closing the socket) offers this publicly.
        self._client._sock_close()


_paho_log = logging.getLogger("sluice.mqtt.paho")


def make_client(
    host: str, port: int, client_id: str | None = None, *, tls: ssl.SSLContext | None = None
) -> Client:
    """An MQTT 3.1.1 client with Sluice's keepalive and timeouts (call on the loop); over TLS
    with ``tls`` (:meth:`plumbing.broker_tls.BrokerTls.ssl_context`), plaintext without."""
    return Client(
        host,
        port,
        identifier=client_id,
        keepalive=KEEPALIVE,
        timeout=MQTT_TIMEOUT,
        tls_context=tls,
    )


async def until_disconnected(client: aiomqtt.Client) -> None:
    """Return never; raise ``MqttError`` once the connection is lost.

    For a client with no subscriptions the message iterator yields nothing, but it is aiomqtt's
    public way to learn of a broken connection without publishing."""
    async for _ in client.messages:
        pass


async def first_completed(*coroutines: Coroutine[Any, Any, object]) -> None:
    """Run the coroutines until one ends; cancel the rest; re-raise what the first raised."""
    tasks = [asyncio.ensure_future(coroutine) for coroutine in coroutines]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    for task in done:
        task.result()


def describe(error: BaseException) -> str:
    """One line for a log: a TLS failure as such (``TLS: <reason>``), else aiomqtt's error
    and, if it wraps one, the underlying cause."""
    problem = tls_problem(error)
    if problem is not None:
        return problem
    cause = error.__cause__
    return f"{error}: {cause}" if cause is not None else str(error) or type(error).__name__


class Reconnector:
    """Backoff between connection attempts, logging an outage once and its end once.

    Not thread-safe: used by one loop.  ``clock`` is monotonic seconds."""

    def __init__(
        self,
        what: str,
        log: logging.Logger,
        *,
        initial: float = BACKOFF_INITIAL,
        maximum: float = BACKOFF_MAX,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._what = what
        self._log = log
        self._initial = initial
        self._maximum = maximum
        self._clock = clock
        self._delay = initial
        self._down_since: float | None = None

    def connected(self) -> None:
        """A connection succeeded: reset the backoff; log the recovery if there was an outage."""
        if self._down_since is not None:
            self._log.info(
                "%s: connected again after %.1f s", self._what, self._clock() - self._down_since
            )
        else:
            self._log.debug("%s: connected", self._what)
        self._down_since = None
        self._delay = self._initial

    def failed(self, error: BaseException) -> float:
        """A connection failed or broke: log it if this starts an outage; the seconds to wait."""
        if self._down_since is None:
            self._down_since = self._clock()
            self._log.warning(
                "%s: %s; retrying with backoff up to %.0f s",
                self._what,
                describe(error),
                self._maximum,
            )
        else:
            self._log.debug("%s: still unreachable: %s", self._what, describe(error))
        delay = self._delay
        self._delay = min(self._delay * 2, self._maximum)
        return delay


class LoopThread:
    """One coroutine on a private event loop in a daemon thread."""

    def __init__(self, name: str, main: Callable[[], Coroutine[Any, Any, None]]) -> None:
        self._name = name
        self._main = main
        self._loop = asyncio.new_event_loop()
        self._task: asyncio.Task[None] | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start the thread; a second call does nothing."""
        if self._thread is not None:
            return
        # The loop is not running yet, so creating the task from this thread is safe.
        self._task = self._loop.create_task(self._main())
        self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
        self._thread.start()

    def call_soon(self, callback: Callable[[], object]) -> bool:
        """Run ``callback`` on the loop; False once the loop has closed."""
        try:
            self._loop.call_soon_threadsafe(callback)
        except RuntimeError:  # the loop is closed
            return False
        return True

    def cancel(self) -> None:
        """Cancel the coroutine (from any thread)."""
        task = self._task
        if task is not None:
            self.call_soon(task.cancel)

    def shutdown(
        self, request_stop: Callable[[], None], timeout: float, log: logging.Logger
    ) -> None:
        """Run ``request_stop`` on the loop and wait up to ``timeout`` seconds for the coroutine
        to end; then cancel it and wait as long again.  Idempotent; also for a thread never
        started."""
        thread = self._thread
        if thread is None:
            if not self._loop.is_closed():
                self._loop.close()
            return
        if self.call_soon(request_stop):
            thread.join(timeout)
        if thread.is_alive():
            self.cancel()
            thread.join(timeout)
        if thread.is_alive():
            log.warning("%s: thread did not stop within %.1f s", self._name, 2 * timeout)

    def _run(self) -> None:
        assert self._task is not None
        loop = self._loop
        asyncio.set_event_loop(loop)
        try:
            with contextlib.suppress(asyncio.CancelledError):
                loop.run_until_complete(self._task)
        finally:
            try:
                # Work handed to threads first (a connection attempt there still schedules
                # callbacks and tasks on this loop), then every task still pending, such as
                # aiomqtt's keepalive task: nothing may be scheduled on the loop once closed.
                loop.run_until_complete(loop.shutdown_default_executor())
                _cancel_remaining_tasks(loop, self._name)
                loop.run_until_complete(loop.shutdown_asyncgens())
            finally:
                asyncio.set_event_loop(None)
                loop.close()


def _cancel_remaining_tasks(loop: asyncio.AbstractEventLoop, name: str) -> None:
    """Cancel the loop's pending tasks and run it until they have ended (as ``asyncio.run``)."""
    tasks = [task for task in asyncio.all_tasks(loop) if not task.done()]
    if not tasks:
        return
    for task in tasks:
        task.cancel()
    loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
    for task in tasks:
        if not task.cancelled() and task.exception() is not None:
            _log.debug("%s: a task ended with an error", name, exc_info=task.exception())
