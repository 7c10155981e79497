"""Hand messages to one Kafka topic without ever holding up the caller.

Node agents publish their metric samples through it, job masters their task outcomes.
``offer`` puts a message in a bounded buffer and returns at once; a sender thread drains the
buffer into a kafka-python producer.  When the broker cannot be reached the messages wait in the
buffer; once it is full the oldest is dropped and counted (``dropped``): the aggregator wants the
freshest picture of a machine, not a complete history.  The sender reconnects with exponential
backoff and logs each outage once, when it starts and when it ends.

Delivery is at least once: a message leaves the buffer only once the broker acknowledged it; a
batch that failed part-way is sent again whole, and the aggregator ignores a sample that is not
newer than the one it already holds.  A broker that restarts (empty or not) is an outage like any
other: the producer is dropped and a new one sends what is buffered once the broker is back.
(Messages a broker acknowledged and then lost with its memory are gone: a Tansu with in-memory
storage keeps nothing over a restart.)  ``flush`` waits, bounded, for the buffer to empty and
meanwhile hurries the sender, which retries every ``HURRY_S`` instead of waiting out its backoff:
whoever is about to exit (a job master) gets what is buffered out as soon as the broker is back.

With a :class:`~plumbing.broker_tls.BrokerTls` the producer speaks TLS (``--kafka-tls``) with the
holder's certificate.  kafka-python keeps the reason of a failed handshake to its own log, so
when an outage starts the outbox asks the broker itself (:func:`~plumbing.broker_tls.probe`)
and says in its one warning line whether it is TLS (an untrusted broker, a refused
certificate) rather than a broker that is down.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from plumbing.broker_tls import BrokerTls, probe

DEFAULT_BUFFER = 300  # five minutes of 1 s samples
MAX_BACKOFF_S = 10.0
SEND_TIMEOUT_S = 5.0
HURRY_S = 0.25  # between delivery attempts while someone waits in flush


class Producer(Protocol):
    """The part of ``kafka.KafkaProducer`` the publisher uses."""

    def send(self, topic: str, value: bytes, key: bytes) -> Any: ...

    def flush(self, timeout: float | None = None) -> None: ...

    def close(self, timeout: float | None = None) -> None: ...


def kafka_producer(
    bootstrap: str, client_id: str = "sluice", tls: BrokerTls | None = None
) -> Producer:
    """A producer that fails fast instead of blocking when the broker is away; over TLS with
    ``tls`` (the holder's CA, certificate and key; the broker's host checked)."""
    # kafka-python is imported when the first producer is made: a node agent registers before
    # it publishes anything (it starts fast; tests/unit/node_agent/test_start_imports.py).
    from kafka import KafkaProducer

    producer: Producer = KafkaProducer(
        bootstrap_servers=bootstrap.split(","),
        client_id=client_id,
        acks=1,
        enable_idempotence=False,  # retries are ours, whole batches; see the module docstring
        linger_ms=20,
        retries=0,  # the publisher retries whole batches itself
        max_block_ms=int(SEND_TIMEOUT_S * 1000),
        request_timeout_ms=int(SEND_TIMEOUT_S * 1000),
        # kafka-python 3 waits 30 s for a first broker by default, in the constructor.
        bootstrap_timeout_ms=int(SEND_TIMEOUT_S * 1000),
        reconnect_backoff_max_ms=int(MAX_BACKOFF_S * 1000),
        **(tls.kafka_options() if tls is not None else {}),
    )
    return producer


def tls_diagnosis(bootstrap: str, tls: BrokerTls | None) -> str | None:
    """Why TLS to the first bootstrap broker fails (``"TLS: <reason>"``), or None: without TLS,
    when the handshake works, or when the broker cannot be reached at all."""
    if tls is None:
        return None
    try:
        context = tls.ssl_context()
    except ValueError as error:  # TlsError: a file of the TLS directory cannot be used
        return f"TLS: {error}"
    return probe(bootstrap.split(",", maxsplit=1)[0], context)


class KafkaOutbox:
    """A bounded, self-reconnecting queue of ``(key, value)`` messages for one Kafka topic."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        *,
        capacity: int = DEFAULT_BUFFER,
        producer_factory: Callable[[str], Producer] = kafka_producer,
        log: logging.Logger | None = None,
        what: str = "messages",
        tls: BrokerTls | None = None,
    ) -> None:
        """``tls``: the TLS the producer factory uses, for saying why a connection fails (the
        factory itself must apply it)."""
        if capacity < 1:
            raise ValueError("capacity: must be at least 1")
        self._what = what
        self.bootstrap = bootstrap
        self.topic = topic
        self._capacity = capacity
        self._factory = producer_factory
        self.tls = tls
        self._log = log or logging.getLogger("sluice.kafka")
        self._buffer: collections.deque[tuple[bytes, bytes]] = collections.deque()
        self._wakeup = threading.Condition()
        self._stopping = threading.Event()
        self._producer: Producer | None = None
        self._thread: threading.Thread | None = None
        self._dropped = 0
        self._sent = 0
        self._outage = False
        self._flushing = 0  # callers waiting in flush

    # ------------------------------------------------------------------ the agent's side

    def offer(self, key: str, value: bytes) -> None:
        """Queue one message; never blocks.  A full buffer drops its oldest message."""
        with self._wakeup:
            if len(self._buffer) >= self._capacity:
                self._buffer.popleft()
                self._dropped += 1
            self._buffer.append((key.encode(), value))
            self._wakeup.notify()

    @property
    def dropped(self) -> int:
        """Messages dropped since start because the buffer was full."""
        with self._wakeup:
            return self._dropped

    @property
    def sent(self) -> int:
        """Messages the broker acknowledged."""
        with self._wakeup:
            return self._sent

    @property
    def pending(self) -> int:
        with self._wakeup:
            return len(self._buffer)

    @property
    def connected(self) -> bool:
        return self._producer is not None and not self._outage

    @property
    def unreachable(self) -> bool:
        """The last delivery failed (an outage): nothing leaves until the sender's backoff has
        passed and a retry succeeds."""
        return self._outage

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="kafka-outbox", daemon=True)
        self._thread.start()

    def flush(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the buffer to empty; True if it did.  Meanwhile a
        sender waiting out its backoff after a failed delivery retries at once, and then every
        ``HURRY_S`` (each attempt is bounded by ``SEND_TIMEOUT_S``)."""
        deadline = time.monotonic() + timeout
        with self._wakeup:
            self._flushing += 1
            self._wakeup.notify_all()
        try:
            while self.pending and time.monotonic() < deadline:
                time.sleep(0.05)
        finally:
            with self._wakeup:
                self._flushing -= 1
        return not self.pending

    def close(self, timeout: float = 5.0) -> None:
        """Stop the sender after one last attempt to deliver what is buffered."""
        self._stopping.set()
        with self._wakeup:
            self._wakeup.notify()
        if self._thread is not None:
            self._thread.join(timeout)
        if self._producer is not None:
            try:
                self._producer.close(timeout=min(timeout, 1.0))
            except Exception:  # closing a producer whose broker is gone may complain
                self._log.debug("closing the Kafka producer failed", exc_info=True)
            self._producer = None

    # ------------------------------------------------------------------ the sender thread

    def _run(self) -> None:
        backoff = 0.5
        while True:
            with self._wakeup:
                while not self._buffer and not self._stopping.is_set():
                    self._wakeup.wait()
                batch = list(self._buffer)
            if not batch:
                return  # stopping, nothing left
            if self._deliver(batch):
                backoff = 0.5
                if self._stopping.is_set() and not self.pending:
                    return
                continue
            if self._stopping.is_set():
                return
            self._pause(backoff)
            backoff = min(backoff * 2, MAX_BACKOFF_S)

    def _pause(self, backoff: float) -> None:
        """Wait ``backoff`` seconds after a failed delivery, or ``HURRY_S`` while someone waits
        in ``flush``; end at once when stopping."""
        with self._wakeup:
            self._wakeup.wait_for(
                lambda: self._stopping.is_set() or self._flushing > 0, timeout=backoff
            )
            hurried = self._flushing > 0
        if hurried:
            self._stopping.wait(HURRY_S)

    def _deliver(self, batch: list[tuple[bytes, bytes]]) -> bool:
        """Send ``batch`` (the buffer's oldest messages); True when the broker took all of it."""
        from kafka.errors import KafkaError  # (here, not at the top: see kafka_producer)

        try:
            if self._producer is None:
                self._producer = self._factory(self.bootstrap)
            futures = [self._producer.send(self.topic, value=v, key=k) for k, v in batch]
            self._producer.flush(timeout=SEND_TIMEOUT_S)
            for future in futures:
                future.get(timeout=SEND_TIMEOUT_S)
        except (KafkaError, OSError) as error:
            self._broken(error)
            return False
        # Say the outage is over before the counters move, so whoever watches `sent` (a test,
        # a metrics scrape) never sees the batch delivered while the log still says "down".
        if self._outage:
            self._outage = False
            self._log.info(
                "Kafka at %s reachable again; publishing resumed (%d %s dropped so far)",
                self.bootstrap,
                self.dropped,
                self._what,
            )
        with self._wakeup:
            # Only what was sent leaves the buffer; samples dropped meanwhile shift the queue,
            # so remove by identity from the left.
            sent = 0
            for item in batch:
                if self._buffer and self._buffer[0] is item:
                    self._buffer.popleft()
                    sent += 1
            self._sent += sent
        return True

    def _broken(self, error: Exception) -> None:
        if not self._outage:
            self._outage = True
            self._log.warning(
                "cannot publish to Kafka at %s (%s); buffering up to %d %s, "
                "dropping the oldest beyond that, and reconnecting with backoff",
                self.bootstrap,
                tls_diagnosis(self.bootstrap, self.tls) or error,
                self._capacity,
                self._what,
            )
        if self._producer is not None:
            try:
                self._producer.close(timeout=0)
            except Exception:
                # kafka-python 3 flushes before it closes and raises while batches are pending,
                # which leaves the producer's network thread running, one more every outage:
                # stop it without sending (what it held is still in our buffer).
                force_close = getattr(getattr(self._producer, "_sender", None), "force_close", None)
                if force_close is not None:
                    force_close()
                self._log.debug("closing the broken Kafka producer failed", exc_info=True)
            self._producer = None
