"""Read every partition of some Kafka topics without a consumer group.

The aggregator is the only reader of its topics and keeps no offsets: on start it either replays
from a point in time (``offsets_for_times``) or reads only what is new.  Assigning partitions
directly avoids the group join, which against some Kafka-protocol brokers (Tansu) takes about
20 s, against milliseconds for assignment — and a rebalance would blind the aggregator again on
every restart.

Broker trouble never raises out of ``poll``: the reader logs the outage once, drops its consumer,
and builds a new one with backoff; once back it resumes each partition at the messages produced
since the outage began (``offsets_for_times``), so an outage loses nothing the broker kept.
Topics that do not exist yet (no agent has published) are looked up again every few seconds, as
are new partitions.

With ``tls`` (``--kafka-tls``) the consumer speaks TLS with the aggregator's certificate; an
outage whose cause is TLS (an untrusted broker, a refused certificate) is logged as such
(:func:`~plumbing.kafka_outbox.tls_diagnosis`) and retried like any other.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kafka import KafkaConsumer, TopicPartition
from kafka.errors import KafkaError

from plumbing.broker_tls import BrokerTls
from plumbing.kafka_outbox import tls_diagnosis

REFRESH_S = 3.0  # how often partitions are looked up again
MAX_BACKOFF_S = 10.0


@dataclass(frozen=True)
class Record:
    topic: str
    key: bytes
    value: bytes


def kafka_consumer(bootstrap: str, tls: BrokerTls | None = None) -> Any:
    """A consumer without a group; over TLS with ``tls`` (the broker's host checked)."""
    return KafkaConsumer(
        bootstrap_servers=bootstrap.split(","),
        client_id="sluice-aggregator",
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="latest",
        request_timeout_ms=10_000,
        bootstrap_timeout_ms=10_000,  # kafka-python 3's default, 30 s, blinds a restart longer
        reconnect_backoff_max_ms=int(MAX_BACKOFF_S * 1000),
        max_partition_fetch_bytes=4 * 1024 * 1024,
        **(tls.kafka_options() if tls is not None else {}),
    )


class TopicReader:
    """Polls ``topics`` from ``bootstrap``.  Not thread-safe: one thread polls."""

    def __init__(
        self,
        bootstrap: str,
        topics: Sequence[str],
        *,
        replay_from: float | None = None,
        consumer_factory: Callable[[str], Any] | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        log: logging.Logger | None = None,
        tls: BrokerTls | None = None,
    ) -> None:
        """``replay_from``: wall-clock seconds to start reading at (None: only messages produced
        from now on).  ``tls``: the aggregator's, for ``--kafka-tls`` (the default consumer
        uses it; a given ``consumer_factory`` must apply it itself)."""
        self.bootstrap = bootstrap
        self.topics = tuple(topics)
        self._resume_from = replay_from
        self._wall_clock = wall_clock
        self._factory = consumer_factory or functools.partial(kafka_consumer, tls=tls)
        self.tls = tls
        self._clock = clock
        self._log = log or logging.getLogger("sluice.aggregator.kafka")
        self._consumer: Any = None
        self._assigned: set[Any] = set()
        self._next_refresh = 0.0
        self._retry_at = 0.0
        self._backoff = 0.5
        self._outage = False
        self.records_read = 0

    @property
    def connected(self) -> bool:
        return self._consumer is not None and not self._outage

    def poll(self, timeout_s: float) -> list[Record]:
        """Records that arrived within ``timeout_s``; [] while the broker is away."""
        now = self._clock()
        if now < self._retry_at:
            time.sleep(min(timeout_s, self._retry_at - now))
            return []
        try:
            if self._consumer is None:
                self._consumer = self._factory(self.bootstrap)
            if now >= self._next_refresh:
                self._refresh_assignment()
                self._next_refresh = now + REFRESH_S
            if not self._assigned:
                time.sleep(min(timeout_s, 0.2))
                return []
            batches = self._consumer.poll(timeout_ms=int(timeout_s * 1000), max_records=5000)
        except (KafkaError, OSError) as error:
            self._broken(error)
            return []
        if self._outage:
            self._outage = False
            self._log.info("Kafka at %s reachable again", self.bootstrap)
        self._backoff = 0.5
        records = [
            Record(tp.topic, message.key or b"", message.value or b"")
            for tp, messages in batches.items()
            for message in messages
        ]
        self.records_read += len(records)
        return records

    def close(self) -> None:
        if self._consumer is not None:
            try:
                self._consumer.close()
            except Exception:
                self._log.debug("closing the Kafka consumer failed", exc_info=True)
            self._consumer = None

    def _refresh_assignment(self) -> None:
        wanted: set[Any] = set()
        for topic in self.topics:
            partitions = self._consumer.partitions_for_topic(topic)
            wanted.update(TopicPartition(topic, p) for p in partitions or ())
        if wanted == self._assigned:
            return
        self._consumer.assign(sorted(wanted, key=lambda tp: (tp.topic, tp.partition)))
        new = wanted - self._assigned
        self._assigned = wanted
        self._position(new)
        self._log.info(
            "reading %d partitions of %s from Kafka at %s",
            len(wanted),
            ", ".join(self.topics),
            self.bootstrap,
        )

    def _position(self, partitions: set[Any]) -> None:
        """Newly assigned partitions start at the first message produced at or after the resume
        time, or at the end when there is none (or no resume time)."""
        at_end = list(partitions)
        if self._resume_from is not None and partitions:
            offsets = self._consumer.offsets_for_times(
                {tp: int(self._resume_from * 1000) for tp in partitions}
            )
            at_end = []
            for tp in partitions:
                found = offsets.get(tp)
                if found is None:
                    at_end.append(tp)
                else:
                    self._consumer.seek(tp, found.offset)
        if at_end:
            self._consumer.seek_to_end(*at_end)

    def _broken(self, error: Exception) -> None:
        if not self._outage:
            self._outage = True
            if self._assigned:  # we were reading: resume where the outage began
                self._resume_from = self._wall_clock()
            self._log.warning(
                "cannot read from Kafka at %s (%s); retrying with backoff",
                self.bootstrap,
                tls_diagnosis(self.bootstrap, self.tls) or error,
            )
        self.close()
        self._assigned = set()
        self._next_refresh = 0.0
        self._retry_at = self._clock() + self._backoff
        self._backoff = min(self._backoff * 2, MAX_BACKOFF_S)
