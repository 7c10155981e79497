"""The job master's replica of the aggregator's candidate list, fed over MQTT (ROSE Sec. 5.2).

:class:`CandidateFeed` subscribes to ``<prefix>/machines`` (the retained ``L`` list) and
``<prefix>/candidates`` (``C`` bit vectors and ``D`` deltas) and applies each message with
:func:`~policies.oversubscription.candidate_sync.apply_message`.  When a message cannot be
applied, the replica is brought up to date through a :class:`Resync` — normally the
aggregator's gRPC service (:class:`AggregatorResync`): a stale machine list costs
``GetMachineList`` then ``GetCandidates``, a delta against another version ``GetCandidates``.
Without a resync the feed waits for the next bit vector.  After a lost MQTT connection it
resyncs the candidates, since it may have missed deltas.

What to fetch is decided by the pure :func:`next_need`; the I/O runs on a private event loop
in a daemon thread, and readers get immutable :class:`LocalReplica` snapshots.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import threading
from collections.abc import Callable
from typing import Protocol

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
)
from plumbing.rpc import channel
from plumbing.tls import ClientTls
from policies.oversubscription.candidate_sync import LocalReplica, SyncAction, apply_message
from sluice_pb import aggregator_pb2 as agg_pb
from sluice_pb import aggregator_pb2_grpc as agg_grpc

_log = logging.getLogger("sluice.jm.candidates")

RESYNC_TIMEOUT = 5.0
# A resync whose list and candidates disagree on ver_m (a machine joined in between) is
# retried this many times before giving up until the next message.
RESYNC_ATTEMPTS = 3


class Resync(Protocol):
    """Where a job master fetches the current state when a message cannot be applied.

    Either method may raise (the aggregator is down); the feed logs it and retries later."""

    def machine_list(self) -> bytes:
        """The current ``L`` message."""
        ...

    def candidates(self) -> bytes:
        """The ``C`` bit-vector message of the latest round."""
        ...


class AggregatorResync:
    """:class:`Resync` over the aggregator's gRPC service (``host:port``)."""

    def __init__(
        self, address: str, *, timeout: float = RESYNC_TIMEOUT, tls: ClientTls | None = None
    ) -> None:
        self._channel = channel(address, tls)
        self._stub = agg_grpc.AggregatorServiceStub(self._channel)
        self._timeout = timeout

    def machine_list(self) -> bytes:
        reply = self._stub.GetMachineList(agg_pb.GetMachineListRequest(), timeout=self._timeout)
        return bytes(reply.message)

    def candidates(self) -> bytes:
        reply = self._stub.GetCandidates(agg_pb.GetCandidatesRequest(), timeout=self._timeout)
        return bytes(reply.message)

    def close(self) -> None:
        self._channel.close()


class Need(enum.IntEnum):
    """What the replica lacks; a larger value includes the smaller."""

    NOTHING = 0
    CANDIDATES = 1
    FULL_LIST = 2  # then the candidates too


def next_need(pending: Need, kind: bytes, action: SyncAction) -> Need:
    """What the replica lacks after applying a message of ``kind`` (b"L", b"C", b"D").

    An applied ``C`` or ``D`` makes the replica current; an applied ``L`` starts the new list
    with no candidates, which the aggregator's next round fills in, so it only keeps an
    outstanding need (narrowed to the candidates).  A stale message changes nothing."""
    if action is SyncAction.NEED_FULL_LIST:
        return Need.FULL_LIST
    if action is SyncAction.NEED_CANDIDATES:
        return max(pending, Need.CANDIDATES)
    if action is SyncAction.APPLIED:
        if kind == b"L":
            return min(pending, Need.CANDIDATES)
        return Need.NOTHING
    return pending


def check_kind(topic: str, message: bytes, machines_topic: str, candidates_topic: str) -> bytes:
    """The message's kind byte, if it belongs on ``topic``; else ValueError."""
    kind = message[:1]
    if topic == machines_topic:
        expected: tuple[bytes, ...] = (b"L",)
    elif topic == candidates_topic:
        expected = (b"C", b"D")
    else:
        raise ValueError("unexpected topic")
    if kind not in expected:
        raise ValueError(f"kind {kind!r} does not belong on this topic")
    return kind


def resync_replica(replica: LocalReplica, resync: Resync, need: Need) -> LocalReplica:
    """Fetch what ``need`` says and apply it (blocking I/O through ``resync``).

    Raises what ``resync`` raises, ValueError for a malformed reply, and RuntimeError when the
    list and the candidates keep disagreeing on ``ver_m``."""
    full = need is Need.FULL_LIST
    for _ in range(RESYNC_ATTEMPTS):
        if full:
            replica = apply_message(replica, resync.machine_list()).replica
        result = apply_message(replica, resync.candidates())
        if result.action is not SyncAction.NEED_FULL_LIST:
            return result.replica
        full = True  # ver_m moved on since we last looked
    raise RuntimeError("the aggregator's machine list and candidates disagree on ver_m")


class CandidateFeed:
    """A job master's live replica of the aggregator's candidate list.

    ``start()`` connects in the background; reads are thread-safe and never block (except
    ``wait_for_version``).  Malformed messages are logged and counted, resync failures logged
    and retried on the next message, MQTT outages retried with backoff; nothing here raises
    into the caller after ``start()``.  ``on_change`` runs on the feed's thread after each
    change of the replica.

    ``tls``: the job master's certificate, for an ``mqtts://`` URL (ValueError without one;
    TlsError if its files cannot be used); ignored for ``mqtt://``.  TLS failures are logged
    as such and retried like any lost connection."""

    def __init__(
        self,
        url: str,
        topic_prefix: str = DEFAULT_PREFIX,
        resync: Resync | None = None,
        *,
        on_change: Callable[[LocalReplica], None] | None = None,
        tls: BrokerTls | None = None,
        log: logging.Logger = _log,
    ) -> None:
        broker, self._ssl = broker_link(url, tls)
        self._broker = broker
        self._host, self._port = broker.host, broker.port
        self.machines_topic, self.candidates_topic = topics(topic_prefix)
        self._resync = resync
        self._on_change = on_change
        self._log = log
        self._replica = LocalReplica()
        self._changed = threading.Condition()
        self._need = Need.NOTHING
        self._resync_failing = False
        self._connected = False
        self._stop = asyncio.Event()  # set on the feed's loop by close()
        self._thread = LoopThread("candidate-feed", self._main)
        self.applied = 0
        self.resyncs = 0
        self.malformed = 0

    @property
    def replica(self) -> LocalReplica:
        """The current replica (immutable)."""
        return self._replica

    @property
    def versions(self) -> tuple[int, int]:
        """``(ver_m, ver_c)`` of the current replica."""
        replica = self._replica
        return replica.machines.version, replica.candidate_version

    @property
    def connected(self) -> bool:
        """Whether the feed is connected and subscribed right now."""
        return self._connected

    def candidates(self) -> tuple[str, ...]:
        """The current candidates, in machine-list order."""
        return self._replica.candidates

    def wait_for_version(self, candidate_version: int, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the replica's ``ver_c`` to reach
        ``candidate_version``; whether it did.  (A new machine list restarts ``ver_c`` at 0.)"""
        with self._changed:
            return self._changed.wait_for(
                lambda: self._replica.candidate_version >= candidate_version, timeout
            )

    def start(self) -> None:
        """Connect and subscribe in the background."""
        self._thread.start()

    def close(self, timeout: float = 5.0) -> None:
        """Disconnect and stop the feed's thread (waiting up to about ``2 * timeout`` seconds).

        A connection or subscription under way is let finish (each is bounded by the MQTT
        timeouts) and then disconnected, rather than cancelled half-way: aiomqtt leaves a
        cancelled one's socket and tasks behind, and logs the late SUBACK of a cancelled
        subscription as an error.  Only past ``timeout`` is the feed cancelled wherever it is."""
        self._thread.shutdown(self._stop.set, timeout, self._log)

    # ------------------------------------------------------------------ the loop thread

    async def _main(self) -> None:
        reconnector = Reconnector(f"MQTT broker {self._broker}", self._log)
        ever_connected = False
        while not self._stop.is_set():
            delay = 0.0
            try:
                async with make_client(self._host, self._port, tls=self._ssl) as client:
                    await client.subscribe([(self.machines_topic, 1), (self.candidates_topic, 1)])
                    self._connected = True
                    reconnector.connected()
                    reconnected, ever_connected = ever_connected, True
                    # Until close() or a lost connection; leaving the block disconnects.
                    await first_completed(self._session(client, reconnected), self._stop.wait())
            except aiomqtt.MqttError as error:
                delay = reconnector.failed(error)
            except Exception as error:  # never let a surprise end the feed for good
                self._log.exception("candidate feed: unexpected error")
                delay = reconnector.failed(error)
            finally:
                self._connected = False
            await first_completed(asyncio.sleep(delay), self._stop.wait())

    async def _session(self, client: aiomqtt.Client, reconnected: bool) -> None:
        """Apply the messages of one connection; raise MqttError when it is lost."""
        if reconnected:
            # Deltas published while we were away are gone (not retained).
            self._need = max(self._need, Need.CANDIDATES)
            await self._resync_if_needed()
        async for message in client.messages:
            await self._handle(message.topic.value, message.payload)

    async def _handle(self, topic: str, payload: object) -> None:
        try:
            if not isinstance(payload, bytes | bytearray):
                raise ValueError(f"payload of type {type(payload).__name__}")
            message = bytes(payload)
            kind = check_kind(topic, message, self.machines_topic, self.candidates_topic)
            result = apply_message(self._replica, message)
        except ValueError as error:
            self.malformed += 1
            self._log.warning("malformed candidate message on %s: %s", topic, error)
            return
        if result.action is SyncAction.APPLIED:
            self.applied += 1
        self._set_replica(result.replica)
        self._need = next_need(self._need, kind, result.action)
        await self._resync_if_needed()

    async def _resync_if_needed(self) -> None:
        resync = self._resync
        if self._need is Need.NOTHING or resync is None:
            return
        try:
            # Blocking gRPC off the loop; messages queue meanwhile and are applied after.
            replica = await asyncio.to_thread(resync_replica, self._replica, resync, self._need)
        except Exception as error:
            if not self._resync_failing:
                self._log.warning(
                    "resync from the aggregator failed (%s); retrying on the next message",
                    error,
                )
            self._resync_failing = True
            return
        if self._resync_failing:
            self._log.info("resync from the aggregator works again")
        self._resync_failing = False
        self._need = Need.NOTHING
        self.resyncs += 1
        self._set_replica(replica)

    def _set_replica(self, replica: LocalReplica) -> None:
        if replica is self._replica:
            return
        with self._changed:
            self._replica = replica
            self._changed.notify_all()
        if self._on_change is not None:
            try:
                self._on_change(replica)
            except Exception:
                self._log.exception("candidate feed: on_change failed")
