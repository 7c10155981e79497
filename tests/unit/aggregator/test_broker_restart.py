"""A broker that comes back empty: which partitions :func:`restarted_partitions` finds on a new
log (a pure decision over two looks), and how the reader acts on it (reads them again from the
beginning, says so once, keeps reading).  The real broker restart:
tests/integration/data_plane/test_broker_restart.py."""

from __future__ import annotations

import logging

import pytest
from kafka import TopicPartition

from aggregator.kafka_reader import REFRESH_S, LogView, restarted_partitions
from tests.unit.aggregator.test_kafka_reader import (
    MT,
    OT,
    Broker,
    Clock,
    is_connected,
    message,
    reader,
    tp,
)

P0, P1 = tp(MT, 0), tp(MT, 1)


def view(
    positions: dict[TopicPartition, int],
    ends: dict[TopicPartition, int],
    cluster_id: str | None = "c1",
    topic_ids: dict[str, str] | None = None,
) -> LogView:
    return LogView(positions, ends, cluster_id, {MT: "id-1"} if topic_ids is None else topic_ids)


@pytest.mark.parametrize(
    ("before", "now", "expected"),
    [
        # The same log, read up to its end, with and without new messages.
        (view({P0: 50}, {P0: 50}), view({P0: 50}, {P0: 50}), {}),
        (view({P0: 50}, {P0: 50}), view({P0: 53}, {P0: 55}), {}),
        (None, view({P0: 50}, {P0: 50}), {}),
        (None, view({}, {}), {}),
        # Tansu's log end is its last batch's first offset + 1: a consumer that read a batch of
        # ten from offset 3 is at 13 while the end says 4, and stays there until a new batch.
        (view({P0: 3}, {P0: 4}), view({P0: 13}, {P0: 4}), {}),
        (view({P0: 13}, {P0: 4}), view({P0: 13}, {P0: 4}), {}),
        (view({P0: 13}, {P0: 4}), view({P0: 13}, {P0: 14}), {}),
        (view({P0: 13}, {P0: 4}), view({P0: 18}, {P0: 14}), {}),  # a batch of 5, read
        # Came back empty.
        (view({P0: 50}, {P0: 50}), view({P0: 50}, {P0: 0}), {P0: "log end went back from 50"}),
        (view({P0: 50}, {P0: 50}), view({P0: 50}, {P0: 3}), {P0: "log end went back from 50"}),
        (None, view({P0: 50}, {P0: 0}), {P0: "log empty"}),
        # A Tansu just back reports ends that jump back while producers resend (the consumer,
        # reset to the new log's beginning, had read 17 of its then 27 messages).
        (view({}, {P0: 27}), view({P0: 17}, {P0: 13}), {}),
        (view({P0: 17}, {P0: 13}), view({P0: 17}, {P0: 13}), {}),
        (view({P0: 13}, {P0: 4}), view({P0: 13}, {P0: 6}), {P0: "log grew below the position"}),
        (
            view({P0: 50, P1: 5}, {P0: 50, P1: 5}),
            view({P0: 50, P1: 5}, {P0: 50, P1: 5}, cluster_id="c2"),
            {P0: "cluster id c2, was c1", P1: "cluster id c2, was c1"},
        ),
        (
            view({P0: 50}, {P0: 50}),
            view({P0: 50}, {P0: 50}, topic_ids={MT: "id-2"}),
            {P0: "topic created again"},
        ),
        # Ids not known at one of the looks are no evidence either way.
        (view({P0: 5}, {P0: 5}, None, {}), view({P0: 5}, {P0: 5}, "c2", {MT: "id-2"}), {}),
        (view({P0: 5}, {P0: 5}), view({P0: 5}, {P0: 5}, None, {}), {}),
        # Only the partition that went back; a partition of no end (not looked at) is skipped.
        (
            view({P0: 50, P1: 20}, {P0: 50, P1: 20}),
            view({P0: 50, P1: 20}, {P0: 50, P1: 2}),
            {P1: "log end went back from 20"},
        ),
        (view({P0: 50}, {P0: 50}), view({P0: 50}, {}), {}),
        # A partition still at 0 (an empty topic) reads the new log from its beginning anyway.
        (
            view({P0: 0}, {P0: 0}),
            view({P0: 0}, {P0: 0}, cluster_id="c2", topic_ids={MT: "id-2"}),
            {},
        ),
    ],
    ids=[
        "unchanged",
        "grew and read",
        "first look",
        "nothing assigned",
        "tansu: read a batch",
        "tansu: read a batch, idle",
        "tansu: new batch not read yet",
        "tansu: new batch read",
        "empty log",
        "shorter log",
        "first look, empty log",
        "tansu: end jumped back",
        "tansu: end jumped back, idle",
        "grew below the position",
        "new cluster id",
        "topic created again",
        "ids learnt",
        "ids unknown now",
        "one partition of two",
        "no end",
        "at the beginning",
    ],
)
def test_which_partitions_are_on_a_new_log(
    before: LogView | None, now: LogView, expected: dict[TopicPartition, str]
) -> None:
    assert restarted_partitions(before, now) == expected


@pytest.mark.parametrize(
    ("before", "now", "expected"),
    [
        # Just reset and read up to 14; Tansu's end, still jumping, says 12 (seen in CI): the
        # same restart, not another.
        (view({P0: 14}, {P0: 14}), view({P0: 14}, {P0: 12}), {}),
        (view({P0: 13}, {P0: 4}), view({P0: 13}, {P0: 6}), {}),
        # The strong signs still count while settling.
        (view({P0: 14}, {P0: 14}), view({P0: 14}, {P0: 0}), {P0: "log empty"}),
        (view({P0: 14}, {P0: 14}), view({P0: 14}, {P0: 14}, "c2"), {P0: "cluster id c2, was c1"}),
    ],
)
def test_a_partition_just_reset_is_judged_by_ids_and_an_empty_log_only(
    before: LogView, now: LogView, expected: dict[TopicPartition, str]
) -> None:
    assert restarted_partitions(before, now, settling={P0}) == expected


def test_a_remembered_view_keeps_the_ends_of_partitions_gone_from_this_look() -> None:
    before = view({P0: 50, P1: 20}, {P0: 50, P1: 20})
    now = view({P0: 51}, {P0: 51}).remembered(before)
    assert now.ends == {P0: 51, P1: 20}
    assert view({P0: 51}, {P0: 51}).remembered(None).ends == {P0: 51}
    assert now.forgetting_identity() == LogView(now.positions, now.ends, None, {})


def test_the_reader_reads_a_new_log_from_the_beginning_and_says_so_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    broker = Broker(
        partitions={MT: {0, 1}, OT: {0}},
        ends={(MT, 0): 500, (MT, 1): 300, (OT, 0): 40},
        cluster_id="tansu_cluster",
        topic_ids={MT: "m-1", OT: "o-1"},
    )
    clock = Clock()
    r = reader(broker, clock=clock)
    r.poll(0)
    (consumer,) = broker.consumers
    assert consumer.to_beginning == []

    # The broker comes back empty between two looks, without the consumer noticing (kafka-python
    # reconnects by itself); agents publish again: three samples on the metrics' partition 0.
    # The consumer's metadata still holds the old topic ids at the first look.
    broker.ends = {(MT, 0): 3, (MT, 1): 0, (OT, 0): 0}
    with caplog.at_level(logging.INFO, logger="sluice.aggregator.kafka"):
        for _ in range(3):
            clock.now += REFRESH_S
            assert r.poll(0) == []
            broker.topic_ids.update({MT: "m-2", OT: "o-2"})  # the next looks see the new ids
    assert consumer.to_beginning == [{tp(MT, 0), tp(MT, 1), tp(OT, 0)}]
    assert r.resets == 1
    (line,) = [rec.getMessage() for rec in caplog.records if "came back" in rec.getMessage()]
    assert line == (
        "Kafka at k1:9092,k2:9092 came back with new logs; reading 3 partitions again from the "
        "beginning: metrics[0] at 500, log end 3 (log end went back from 500); "
        "metrics[1] at 300, log end 0 (log end went back from 300); "
        "outcomes[0] at 40, log end 0 (log end went back from 40)"
    )
    # And it keeps reading, from the new log's first message.
    broker.batches = [{tp(MT, 0): [message(b"n1", b"a")]}]
    assert [rec.value for rec in r.poll(0)] == [b"a"]
    assert consumer.positions[tp(MT, 0)] == 1
    assert r.connected


def test_a_new_cluster_id_reads_every_partition_again() -> None:
    broker = Broker(partitions={MT: {0}}, ends={(MT, 0): 7}, cluster_id="a")
    clock = Clock()
    r = reader(broker, clock=clock, topics=(MT,))
    r.poll(0)
    broker.consumers[0]._cluster.cluster_id = "b"
    clock.now += REFRESH_S
    r.poll(0)
    assert broker.consumers[0].to_beginning == [{tp(MT, 0)}]
    clock.now += REFRESH_S
    r.poll(0)
    assert r.resets == 1


def test_a_look_that_fails_is_an_outage() -> None:
    broker = Broker(partitions={MT: {0}}, ends={(MT, 0): 7})
    clock = Clock()
    r = reader(broker, clock=clock, topics=(MT,))
    r.poll(0)
    assert is_connected(r)
    broker.down = True
    clock.now += REFRESH_S
    assert r.poll(0) == []
    assert not is_connected(r)
    assert broker.consumers[0].closed
