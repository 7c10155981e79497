"""The aggregator's side of candidate sync over MQTT (ROSE Sec. 5.2).

Two topics under a prefix (default ``sluice/v1``):

* ``<prefix>/machines``: the ``L`` full machine list, RETAINED, QoS 1, published when ``ver_m``
  changes, so a job master that subscribes later still gets it;
* ``<prefix>/candidates``: each round's ``C`` bit vector or ``D`` delta, QoS 1, not retained.

The messages themselves come from :mod:`policies.oversubscription.candidate_sync`; this module
only moves bytes, in plaintext (``mqtt://``) or over TLS (``mqtts://``, with the aggregator's
certificate).  :class:`CandidatePublisher` runs an ``aiomqtt`` client on a private event loop
in a daemon thread; the aggregator's round loop hands messages over without blocking.  The
plumbing it shares with the job master's feed is in :mod:`plumbing.mqtt`.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import threading

import aiomqtt

from plumbing.broker_tls import BrokerTls
from plumbing.mqtt import (
    DEFAULT_PREFIX,
    LoopThread,
    Reconnector,
    broker_link,
    first_completed,
    make_client,
    topics,
    until_disconnected,
)

_log = logging.getLogger("sluice.aggregator.mqtt")

# While connected every candidate message is published in order; if the broker stalls this
# many behind, the oldest are dropped (a job master recovers from the gap by resyncing).
MAX_QUEUED_CANDIDATES = 64


class CandidatePublisher:
    """Publishes the aggregator's machine list and candidate messages to an MQTT broker.

    ``publish_*`` never block and never raise: they hand the bytes to the loop thread.  While
    connected, every candidate message is published in order.  While disconnected only the
    latest machine list and the latest candidate message are kept; on (re)connecting the
    machine list is published first (re-retaining it on a broker that lost it), then the
    candidate message.  Broker outages, TLS failures among them, are retried with backoff up to
    ~10 s.

    ``tls``: the aggregator's certificate, for an ``mqtts://`` URL (ValueError without one;
    TlsError if its files cannot be used); ignored for ``mqtt://``."""

    def __init__(
        self,
        url: str,
        topic_prefix: str = DEFAULT_PREFIX,
        *,
        client_id: str | None = None,
        tls: BrokerTls | None = None,
        log: logging.Logger = _log,
    ) -> None:
        broker, self._ssl = broker_link(url, tls)
        self._broker = broker
        self._host, self._port = broker.host, broker.port
        self.machines_topic, self.candidates_topic = topics(topic_prefix)
        self._client_id = client_id
        self._log = log
        self._lock = threading.Lock()  # guards the fields below, shared with callers
        self._machine_list: bytes | None = None  # the latest, republished on every connect
        self._list_serial = 0  # bumped per handover, so a newer list is never skipped
        self._list_sent = -1  # the serial published on the current connection
        self._candidates: collections.deque[bytes] = collections.deque(maxlen=MAX_QUEUED_CANDIDATES)
        self._connected = False
        self._stopping = False
        self._wake = asyncio.Event()
        self._thread = LoopThread("mqtt-publisher", self._main)
        self.published = 0
        self.failed = 0

    @property
    def connected(self) -> bool:
        """Whether the client is connected to the broker right now."""
        return self._connected

    def start(self) -> None:
        """Connect in the background; messages handed over before this are kept."""
        self._thread.start()

    def close(self, timeout: float = 5.0) -> None:
        """Publish what is queued if connected (within ``timeout`` seconds), then disconnect."""
        self._thread.shutdown(self._request_stop, timeout, self._log)

    def publish_machine_list(self, message: bytes) -> None:
        """Hand over an ``L`` message; it replaces any list not yet published."""
        with self._lock:
            self._machine_list = bytes(message)
            self._list_serial += 1
        self._thread.call_soon(self._wake.set)

    def publish_candidates(self, message: bytes) -> None:
        """Hand over a ``C`` or ``D`` message; while disconnected it replaces any queued one."""
        with self._lock:
            if not self._connected:
                self._candidates.clear()
            self._candidates.append(bytes(message))
        self._thread.call_soon(self._wake.set)

    # ------------------------------------------------------------------ the loop thread

    def _request_stop(self) -> None:
        self._stopping = True
        if self._connected:
            self._wake.set()  # the sender drains what is queued, then ends the session
        else:
            self._thread.cancel()

    async def _main(self) -> None:
        reconnector = Reconnector(f"MQTT broker {self._broker}", self._log)
        while not self._stopping:
            try:
                async with make_client(
                    self._host, self._port, self._client_id, tls=self._ssl
                ) as client:
                    with self._lock:
                        self._connected = True
                        self._list_sent = -1  # the broker may have lost the retained list
                    reconnector.connected()
                    await first_completed(self._send(client), until_disconnected(client))
            except aiomqtt.MqttError as error:
                delay = reconnector.failed(error)
            except Exception as error:  # never let a surprise end publishing for good
                self._log.exception("MQTT publisher: unexpected error")
                delay = reconnector.failed(error)
            else:
                return  # the sender drained the queue after close()
            finally:
                with self._lock:
                    self._connected = False
                    while len(self._candidates) > 1:
                        self._candidates.popleft()
            if not self._stopping:
                await asyncio.sleep(delay)

    async def _send(self, client: aiomqtt.Client) -> None:
        """Publish what is queued, list first; return once drained after close()."""
        while True:
            self._wake.clear()
            while (item := self._next()) is not None:
                await self._publish(client, *item)
            if self._stopping:
                return
            await self._wake.wait()

    def _next(self) -> tuple[str, bytes, int | None] | None:
        """The next ``(topic, message, list serial or None)`` to publish, or None."""
        with self._lock:
            if self._machine_list is not None and self._list_sent != self._list_serial:
                return self.machines_topic, self._machine_list, self._list_serial
            if self._candidates:
                return self.candidates_topic, self._candidates.popleft(), None
            return None

    async def _publish(
        self, client: aiomqtt.Client, topic: str, message: bytes, serial: int | None
    ) -> None:
        retain = serial is not None
        try:
            await client.publish(topic, message, qos=1, retain=retain)
        except BaseException:
            # Unsent (broken connection, or cancelled by it): keep it for the next connection
            # unless something newer took its place.  A list is simply not marked as sent.
            if not retain:
                with self._lock:
                    if not self._candidates:
                        self._candidates.append(message)
            if not self._stopping:
                self.failed += 1
            raise
        with self._lock:
            if serial is not None:
                self._list_sent = serial
        self.published += 1
