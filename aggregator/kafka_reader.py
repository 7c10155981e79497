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

A broker can also come back *empty* (Tansu's in-memory storage, a Kafka given a new data
directory): its logs start again at offset 0 while the consumer's positions stay where the old
logs ended, and a fetch beyond a Tansu log's end returns nothing, without an error, until the new
log grows past the old position.  So every few seconds the reader also looks at its positions,
the logs' end offsets, the cluster id and the topics' ids (a :class:`LogView`; a look that times
out is an outage like any other), and :func:`restarted_partitions` decides which partitions are
on a new log.  Those are read again from the *beginning* of the new log, said once in one line:
a new log holds only what was published since the broker came back (the samples and task
outcomes agents and job masters kept while it was away, then new ones), none of it read yet;
starting at its end would lose exactly those, and reading a few seconds' worth is cheap (a sample
not newer than one held is ignored).

With ``tls`` (``--kafka-tls``) the consumer speaks TLS with the aggregator's certificate; an
outage whose cause is TLS (an untrusted broker, a refused certificate) is logged as such
(:func:`~plumbing.kafka_outbox.tls_diagnosis`) and retried like any other.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from kafka import KafkaConsumer, TopicPartition
from kafka.errors import KafkaError

from plumbing.broker_tls import BrokerTls
from plumbing.kafka_outbox import tls_diagnosis

REFRESH_S = 3.0  # how often partitions are looked up again, and the logs looked at
MAX_BACKOFF_S = 10.0
LOOK_TIMEOUT_MS = 5_000  # a look at the logs that takes longer is an outage
LOGGED_PARTITIONS = 8  # partitions named in the one line that says the broker came back empty


@dataclass(frozen=True)
class Record:
    topic: str
    key: bytes
    value: bytes


@dataclass(frozen=True)
class LogView:
    """What one look at the broker saw: the consumer's ``positions`` and the logs' ``ends`` (next
    offsets) by partition, the ``cluster_id`` and the ids of ``topic_ids`` (None or absent:
    unknown, as from a broker too old to say)."""

    positions: Mapping[TopicPartition, int] = field(default_factory=dict)
    ends: Mapping[TopicPartition, int] = field(default_factory=dict)
    cluster_id: str | None = None
    topic_ids: Mapping[str, str] = field(default_factory=dict)

    def remembered(self, before: LogView | None) -> LogView:
        """This view, keeping the log ends ``before`` knew of partitions it does not show (a
        topic that went away with the broker and comes back later is still compared)."""
        if before is None:
            return self
        return replace(self, ends={**before.ends, **self.ends})

    def forgetting_identity(self) -> LogView:
        """This view without its ids, kept after a reset: the consumer's metadata may still show
        the old ids at this look and the new ones at the next, which is the same restart."""
        return replace(self, cluster_id=None, topic_ids={})


SETTLE_S = 30.0
"""After a partition was read again from the beginning, its log end alone is no evidence of
another restart for this long: a Tansu that just came back reports ends that jump back and forth
while producers resend, even below what the reset consumer has read since (seen in CI: one
restart logged twice).  A new cluster id, a topic created again or an empty log still count."""


def restarted_partitions(
    before: LogView | None, now: LogView, settling: Collection[TopicPartition] = ()
) -> dict[TopicPartition, str]:
    """The partitions of ``now`` that are on a new log since ``before`` (the previous look; None
    at the first), each with why.

    A partition is on a new log when the cluster id changed, when its topic's id changed (the
    topic was created again), when its log end went back below a position that had read up to
    the old end, when its log is empty while the position is past 0, or when the position is
    past the log end and stayed there while the log grew (nothing read although the broker took
    new messages).  A position merely past the end is no evidence: Tansu reports the end of a
    log as its last batch's first offset + 1, behind a consumer that read that whole batch; but
    every new batch moves that end past the position of a consumer that is on the same log.
    Nor is an end that went back while the position was behind the old end: a Tansu that just
    came back reports ends that jump back and forth for a few seconds while producers resend.
    A partition at position 0 is never on a new log: it reads whatever log from the start.
    A partition in ``settling`` (reset less than :data:`SETTLE_S` ago) is judged by the ids and
    an empty log only."""
    was = before if before is not None else LogView()
    new_cluster = None
    if None not in (was.cluster_id, now.cluster_id) and was.cluster_id != now.cluster_id:
        new_cluster = f"cluster id {now.cluster_id}, was {was.cluster_id}"
    found: dict[TopicPartition, str] = {}
    for tp, position in now.positions.items():
        if position <= 0:  # reads from the beginning already, whichever log it is on
            continue
        end = now.ends.get(tp)
        was_end = was.ends.get(tp)
        was_position = was.positions.get(tp)
        was_id = was.topic_ids.get(tp.topic)
        topic_id = now.topic_ids.get(tp.topic)
        if new_cluster is not None:
            found[tp] = new_cluster
        elif was_id is not None and topic_id is not None and was_id != topic_id:
            found[tp] = "topic created again"
        elif end is None:
            continue
        elif tp not in settling and was_end is not None and end < was_end <= position:
            found[tp] = f"log end went back from {was_end}"
        elif end == 0 and position > 0:
            found[tp] = "log empty"
        elif tp in settling:
            continue
        elif position > end and was_end is not None and end > was_end and was_position == position:
            found[tp] = "log grew below the position"
    return found


def kafka_consumer(bootstrap: str, tls: BrokerTls | None = None) -> Any:
    """A consumer without a group; over TLS with ``tls`` (the broker's host checked).

    A position the broker calls out of range (a Kafka that came back empty, or that deleted the
    segment) is reset to the log's beginning, for the reason :func:`restarted_partitions`' resets
    are."""
    return KafkaConsumer(
        bootstrap_servers=bootstrap.split(","),
        client_id="sluice-aggregator",
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
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
        self._view: LogView | None = None
        self._reset_at: dict[TopicPartition, float] = {}  # when each was last reset (monotonic)
        self.records_read = 0
        self.resets = 0  # times the broker was found to have come back empty

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
                if self._assigned:
                    self._check_for_new_logs()
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

    def _look(self) -> LogView:
        """Positions first, then ends: a look never sees a position read past an end it saw."""
        partitions = sorted(self._assigned, key=lambda tp: (tp.topic, tp.partition))
        positions = {
            tp: self._consumer.position(tp, timeout_ms=LOOK_TIMEOUT_MS) for tp in partitions
        }
        ends = self._consumer.end_offsets(partitions, timeout_ms=LOOK_TIMEOUT_MS)
        # kafka-python keeps the ids of the metadata it holds to itself (KafkaConsumer._cluster).
        cluster = getattr(self._consumer, "_cluster", None)
        cluster_id = getattr(cluster, "cluster_id", None)
        topic_ids: dict[str, str] = {}
        if cluster is not None:
            for topic in self.topics:
                found = cluster.topic_id(topic)
                if found is not None:
                    topic_ids[topic] = str(found)
        return LogView(
            positions={tp: p for tp, p in positions.items() if p is not None},
            ends={tp: int(e) for tp, e in ends.items() if e is not None},
            cluster_id=str(cluster_id) if cluster_id is not None else None,
            topic_ids=topic_ids,
        )

    def _check_for_new_logs(self) -> None:
        view = self._look().remembered(self._view)
        now = time.monotonic()
        settling = {tp for tp, at in self._reset_at.items() if now - at < SETTLE_S}
        restarted = restarted_partitions(self._view, view, settling)
        if not restarted:
            self._view = view
            return
        partitions = sorted(restarted, key=lambda tp: (tp.topic, tp.partition))
        self._consumer.seek_to_beginning(*partitions)
        self._reset_at.update((tp, now) for tp in partitions)
        self.resets += 1
        named = [
            f"{tp.topic}[{tp.partition}] at {view.positions[tp]}, log end {view.ends.get(tp)} "
            f"({restarted[tp]})"
            for tp in partitions[:LOGGED_PARTITIONS]
        ]
        if len(partitions) > LOGGED_PARTITIONS:
            named.append(f"and {len(partitions) - LOGGED_PARTITIONS} more")
        self._log.warning(
            "Kafka at %s came back with new logs; reading %d partitions again from the "
            "beginning: %s",
            self.bootstrap,
            len(partitions),
            "; ".join(named),
        )
        # The positions are now the beginnings; the ends stay to compare the next look with.
        self._view = replace(
            view.forgetting_identity(),
            positions={tp: p for tp, p in view.positions.items() if tp not in restarted},
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
