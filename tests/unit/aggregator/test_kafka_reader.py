"""TopicReader against a fake consumer: where new partitions start, late partitions, outages
with backoff and resumption at the outage time, and what poll returns.  (A broker that comes
back empty: test_broker_restart.py, with these fakes.)"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest
from kafka import TopicPartition
from kafka.errors import KafkaConnectionError, KafkaError
from kafka.structs import OffsetAndTimestamp

from aggregator.kafka_reader import REFRESH_S, Record, TopicReader

MT, OT = "metrics", "outcomes"


@dataclass
class Broker:
    """What every fake consumer sees: partitions, offsets by time, records, and outages."""

    partitions: dict[str, set[int]] = field(default_factory=dict)
    offsets_at: dict[tuple[str, int], int] = field(default_factory=dict)  # for any time asked
    batches: list[dict[TopicPartition, list[Any]]] = field(default_factory=list)
    down: bool = False
    consumers: list[FakeConsumer] = field(default_factory=list)
    attempts: int = 0  # consumers the reader tried to build
    ends: dict[tuple[str, int], int] = field(default_factory=dict)  # log end offsets (0 if not)
    cluster_id: str | None = None
    topic_ids: dict[str, str] = field(default_factory=dict)

    def factory(self, bootstrap: str) -> FakeConsumer:
        self.attempts += 1
        if self.down:
            raise KafkaConnectionError("no broker reachable")
        consumer = FakeConsumer(self, bootstrap)
        self.consumers.append(consumer)
        return consumer


class FakeConsumer:
    """The KafkaConsumer methods TopicReader uses; records every positioning call."""

    def __init__(self, broker: Broker, bootstrap: str) -> None:
        self.broker = broker
        self.bootstrap = bootstrap
        self.lookups = 0
        self.assigned: list[list[TopicPartition]] = []
        self.time_queries: list[dict[TopicPartition, int]] = []
        self.seeks: list[tuple[TopicPartition, int]] = []
        self.to_end: list[set[TopicPartition]] = []
        self.to_beginning: list[set[TopicPartition]] = []
        self.positions: dict[TopicPartition, int] = {}
        self.polls = 0
        self.closed = False
        # kafka-python keeps the metadata's ids here; the reader reads them from it.
        self._cluster = SimpleNamespace(cluster_id=broker.cluster_id, topic_id=broker.topic_ids.get)

    def _check(self) -> None:
        if self.broker.down:
            raise KafkaConnectionError("broker went away")

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        self._check()
        self.lookups += 1
        return self.broker.partitions.get(topic)

    def assign(self, partitions: list[TopicPartition]) -> None:
        self.assigned.append(list(partitions))

    def offsets_for_times(
        self, timestamps: dict[TopicPartition, int]
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        self.time_queries.append(dict(timestamps))
        found: dict[TopicPartition, OffsetAndTimestamp | None] = {}
        for tp, ms in timestamps.items():
            offset = self.broker.offsets_at.get((tp.topic, tp.partition))
            found[tp] = None if offset is None else OffsetAndTimestamp(offset, ms, -1)
        return found

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self.seeks.append((tp, offset))
        self.positions[tp] = offset

    def seek_to_end(self, *partitions: TopicPartition) -> None:
        self.to_end.append(set(partitions))
        for tp in partitions:
            self.positions[tp] = self.broker.ends.get((tp.topic, tp.partition), 0)

    def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        self.to_beginning.append(set(partitions))
        for tp in partitions:
            self.positions[tp] = 0

    def position(self, tp: TopicPartition, timeout_ms: int | None = None) -> int | None:
        self._check()
        return self.positions.get(tp)

    def end_offsets(
        self, partitions: list[TopicPartition], timeout_ms: int | None = None
    ) -> dict[TopicPartition, int]:
        self._check()
        return {tp: self.broker.ends.get((tp.topic, tp.partition), 0) for tp in partitions}

    def poll(self, timeout_ms: int, max_records: int) -> dict[TopicPartition, list[Any]]:
        self._check()
        self.polls += 1
        batch = self.broker.batches.pop(0) if self.broker.batches else {}
        for tp, messages in batch.items():  # each message is one offset further
            self.positions[tp] = self.positions.get(tp, 0) + len(messages)
        return batch

    def close(self) -> None:
        self.closed = True


class Clock:
    def __init__(self, now: float = 100.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def tp(topic: str, partition: int) -> TopicPartition:
    return TopicPartition(topic, partition)


def message(key: bytes | None, value: bytes | None) -> SimpleNamespace:
    return SimpleNamespace(key=key, value=value)


def reader(
    broker: Broker,
    *,
    replay_from: float | None = None,
    clock: Clock | None = None,
    wall: Clock | None = None,
    topics: tuple[str, ...] = (MT, OT),
) -> TopicReader:
    return TopicReader(
        "k1:9092,k2:9092",
        topics,
        replay_from=replay_from,
        consumer_factory=broker.factory,
        clock=clock or Clock(),
        wall_clock=wall or Clock(5_000.0),
    )


def is_connected(r: TopicReader) -> bool:
    # A call, so that an earlier ``assert not r.connected`` does not narrow this one.
    return r.connected


# Polls use timeout 0: the reader then never actually sleeps.


@pytest.mark.parametrize(
    ("replay_from", "offsets_at", "seeks", "to_end"),
    [
        (None, {(MT, 0): 5}, [], {tp(MT, 0), tp(MT, 1)}),
        (1_000.5, {(MT, 0): 5, (MT, 1): 9}, [(tp(MT, 0), 5), (tp(MT, 1), 9)], None),
        (1_000.5, {(MT, 1): 9}, [(tp(MT, 1), 9)], {tp(MT, 0)}),  # nothing after the time in 0
        (1_000.5, {}, [], {tp(MT, 0), tp(MT, 1)}),
    ],
    ids=["no replay", "replay", "replay, one partition empty", "replay, nothing new"],
)
def test_new_partitions_start_at_the_replay_time_or_at_the_end(
    replay_from: float | None,
    offsets_at: dict[tuple[str, int], int],
    seeks: list[tuple[TopicPartition, int]],
    to_end: set[TopicPartition] | None,
) -> None:
    broker = Broker(partitions={MT: {1, 0}}, offsets_at=offsets_at)
    assert reader(broker, replay_from=replay_from, topics=(MT,)).poll(0) == []
    (consumer,) = broker.consumers
    assert consumer.bootstrap == "k1:9092,k2:9092"
    assert consumer.assigned == [[tp(MT, 0), tp(MT, 1)]]
    if replay_from is None:
        assert consumer.time_queries == []
    else:
        assert consumer.time_queries == [{tp(MT, 0): 1_000_500, tp(MT, 1): 1_000_500}]
    assert sorted(consumer.seeks) == seeks
    assert consumer.to_end == ([] if to_end is None else [to_end])


def test_partitions_that_appear_later_are_assigned_at_the_next_refresh() -> None:
    broker = Broker(partitions={MT: {0}}, offsets_at={(OT, 0): 3})
    clock = Clock()
    r = reader(broker, replay_from=1_000.0, clock=clock)
    r.poll(0)
    (consumer,) = broker.consumers
    assert consumer.assigned == [[tp(MT, 0)]]
    broker.partitions[OT] = {0}
    clock.now += REFRESH_S - 0.25
    r.poll(0)
    assert consumer.lookups == 2  # not looked up again before REFRESH_S
    assert consumer.assigned == [[tp(MT, 0)]]
    clock.now += 0.25
    r.poll(0)
    assert consumer.lookups == 4
    assert consumer.assigned == [[tp(MT, 0)], [tp(MT, 0), tp(OT, 0)]]
    # Only the new partition is positioned; the metrics partition keeps its place.
    assert consumer.time_queries[-1] == {tp(OT, 0): 1_000_000}
    assert consumer.seeks[-1] == (tp(OT, 0), 3)
    clock.now += REFRESH_S
    r.poll(0)
    assert len(consumer.assigned) == 2  # unchanged partitions are not assigned again


def test_nothing_is_polled_until_some_topic_has_partitions() -> None:
    broker = Broker()
    r = reader(broker)
    assert r.poll(0) == []
    (consumer,) = broker.consumers
    assert (consumer.polls, consumer.assigned) == (0, [])


def test_records_come_back_with_empty_bytes_for_missing_keys_and_values() -> None:
    broker = Broker(partitions={MT: {0, 1}, OT: {0}})
    broker.batches = [
        {
            tp(MT, 0): [message(b"n1", b"a"), message(b"n1", b"b")],
            tp(OT, 0): [message(None, None)],
        },
        {tp(MT, 1): [message(b"n2", b"c")]},
    ]
    r = reader(broker)
    first = r.poll(0)
    assert first == [Record(MT, b"n1", b"a"), Record(MT, b"n1", b"b"), Record(OT, b"", b"")]
    assert r.records_read == 3
    assert r.poll(0) == [Record(MT, b"n2", b"c")]
    assert r.records_read == 4
    assert r.poll(0) == []
    assert r.records_read == 4
    assert r.connected


def test_an_outage_backs_off_and_the_new_consumer_resumes_at_the_outage_time(
    caplog: pytest.LogCaptureFixture,
) -> None:
    broker = Broker(partitions={MT: {0}}, offsets_at={(MT, 0): 77}, ends={(MT, 0): 80})
    clock, wall = Clock(), Clock(5_000.25)
    r = reader(broker, clock=clock, wall=wall, topics=(MT,))
    r.poll(0)
    first = broker.consumers[0]
    assert first.to_end == [{tp(MT, 0)}]  # no replay: started at the end

    broker.down = True
    with caplog.at_level(logging.INFO, logger="sluice.aggregator.kafka"):
        assert r.poll(0) == []
        assert first.closed and not r.connected
        wall.now = 9_999.0  # later failures must not move the resume time
        # Backoff 0.5 s, then 1 s, then 2 s: no new consumer is tried before each expires.
        for attempts, backoff in enumerate((0.5, 1.0, 2.0), start=2):
            clock.now += backoff - 0.125
            assert r.poll(0) == []
            assert broker.attempts == attempts - 1
            clock.now += 0.125
            assert r.poll(0) == []  # tried, and the broker is still down
            assert broker.attempts == attempts
        assert len(broker.consumers) == 1

        broker.down = False
        clock.now += 4.0
        assert r.poll(0) == []
        assert is_connected(r)
    second = broker.consumers[1]
    assert second.assigned == [[tp(MT, 0)]]
    assert second.time_queries == [{tp(MT, 0): 5_000_250}]
    assert second.seeks == [(tp(MT, 0), 77)]
    warnings = [rec for rec in caplog.records if rec.levelno == logging.WARNING]
    assert len(warnings) == 1  # one outage, logged once
    assert sum("reachable again" in rec.getMessage() for rec in caplog.records) == 1


@pytest.mark.parametrize(
    ("replay_from", "expected_query"), [(None, None), (1_000.0, {tp(MT, 0): 1_000_000})]
)
def test_a_broker_down_at_start_keeps_the_original_starting_point(
    replay_from: float | None, expected_query: dict[TopicPartition, int] | None
) -> None:
    broker = Broker(partitions={MT: {0}}, offsets_at={(MT, 0): 1}, down=True)
    clock = Clock()
    r = reader(broker, replay_from=replay_from, clock=clock, topics=(MT,))
    assert r.poll(0) == []
    assert broker.consumers == [] and not r.connected
    broker.down = False
    clock.now += 0.5
    r.poll(0)
    (consumer,) = broker.consumers
    # Nothing was being read when the outage began, so there is no outage time to resume at.
    assert consumer.time_queries == ([] if expected_query is None else [expected_query])


class Refusing(FakeConsumer):
    def poll(self, timeout_ms: int, max_records: int) -> dict[TopicPartition, list[Any]]:
        raise OSError("connection reset")

    def close(self) -> None:
        raise KafkaError("cannot close either")


def test_an_os_error_is_an_outage_and_a_failing_close_is_swallowed() -> None:
    broker = Broker(partitions={MT: {0}})
    r = TopicReader(
        "k:9092",
        (MT,),
        consumer_factory=lambda bootstrap: Refusing(broker, bootstrap),
        clock=Clock(),
    )
    assert r.poll(0) == []
    assert not r.connected
    r.close()  # nothing left to close


def test_close_closes_the_consumer() -> None:
    broker = Broker(partitions={MT: {0}})
    r = reader(broker)
    r.poll(0)
    r.close()
    assert broker.consumers[0].closed
    assert not r.connected
