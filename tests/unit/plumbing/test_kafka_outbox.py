"""KafkaOutbox with fake producers: bounded buffer dropping the oldest, order, whole batches
resent after a failure on a rebuilt producer, flush and close.

The sender is a real thread, so tests wait for conditions (``wait_until``); nothing asserts on
how long anything took.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest
from kafka.errors import KafkaConnectionError, KafkaTimeoutError

from plumbing.kafka_outbox import KafkaOutbox

TOPIC = "sluice.test"


@dataclass
class FakeFuture:
    error: Exception | None = None

    def get(self, timeout: float | None = None) -> None:
        if self.error is not None:
            raise self.error


@dataclass
class FakeProducer:
    """Accepts every ``send``; the futures of ``failing`` values raise KafkaTimeoutError.
    ``send_error`` / ``flush_error`` make those calls raise; ``on_flush`` runs inside flush."""

    failing: frozenset[bytes] = frozenset()
    send_error: Exception | None = None
    flush_error: Exception | None = None
    on_flush: Callable[[], None] | None = None
    sent: list[tuple[str, bytes, bytes]] = field(default_factory=list)
    closed_with: list[float | None] = field(default_factory=list)

    def send(self, topic: str, value: bytes, key: bytes) -> FakeFuture:
        if self.send_error is not None:
            raise self.send_error
        self.sent.append((topic, key, value))
        return FakeFuture(KafkaTimeoutError("no ack") if value in self.failing else None)

    def flush(self, timeout: float | None = None) -> None:
        if self.on_flush is not None:
            self.on_flush()
        if self.flush_error is not None:
            raise self.flush_error

    def close(self, timeout: float | None = None) -> None:
        self.closed_with.append(timeout)

    @property
    def values(self) -> list[bytes]:
        return [value for _, _, value in self.sent]


class Factory:
    """Hands out ``plan``'s producers in turn (an exception is raised instead), then working
    ones; remembers every producer built and the bootstrap it was asked for."""

    def __init__(self, *plan: FakeProducer | Exception) -> None:
        self._plan: Iterator[FakeProducer | Exception] = iter(plan)
        self.built: list[FakeProducer] = []
        self.calls: list[str] = []

    def __call__(self, bootstrap: str) -> FakeProducer:
        self.calls.append(bootstrap)
        step = next(self._plan, None)
        if isinstance(step, Exception):
            raise step
        producer = step or FakeProducer()
        self.built.append(producer)
        return producer

    @property
    def delivered(self) -> list[bytes]:
        """What the last producer delivered."""
        return self.built[-1].values


def wait_until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.01)


@pytest.fixture
def outboxes() -> Iterator[list[KafkaOutbox]]:
    """Outboxes a test creates are closed even when it fails."""
    made: list[KafkaOutbox] = []
    yield made
    for outbox in made:
        outbox.close(timeout=1)


def make(
    outboxes: list[KafkaOutbox], factory: Factory, capacity: int = 100, start: bool = True
) -> KafkaOutbox:
    outbox = KafkaOutbox(
        "k:9092",
        TOPIC,
        capacity=capacity,
        producer_factory=factory,
        log=logging.getLogger("test.outbox"),
    )
    outboxes.append(outbox)
    if start:
        outbox.start()
    return outbox


def values(n: int, start: int = 0) -> list[bytes]:
    return [f"m{i}".encode() for i in range(start, start + n)]


def test_capacity_must_be_positive() -> None:
    with pytest.raises(ValueError, match=r"^capacity: must be at least 1$"):
        KafkaOutbox("k:9092", TOPIC, capacity=0)


@pytest.mark.parametrize(
    ("capacity", "offered", "dropped"), [(1, 1, 0), (1, 4, 3), (3, 3, 0), (3, 5, 2), (5, 12, 7)]
)
def test_a_full_buffer_drops_and_counts_its_oldest_messages(
    outboxes: list[KafkaOutbox], capacity: int, offered: int, dropped: int
) -> None:
    factory = Factory()
    outbox = make(outboxes, factory, capacity=capacity, start=False)
    for value in values(offered):
        outbox.offer("n1", value)
    assert (outbox.dropped, outbox.pending, outbox.sent) == (dropped, offered - dropped, 0)
    outbox.start()
    assert outbox.flush(10.0)
    assert factory.delivered == values(offered)[dropped:]  # the newest survive, in order
    assert (outbox.dropped, outbox.pending, outbox.sent) == (dropped, 0, offered - dropped)


def test_messages_go_out_in_order_with_their_keys(outboxes: list[KafkaOutbox]) -> None:
    factory = Factory()
    outbox = make(outboxes, factory)
    expected = []
    for i, value in enumerate(values(20)):
        key = f"node-{i % 3}"
        outbox.offer(key, value)
        expected.append((TOPIC, key.encode(), value))
    assert outbox.flush(10.0)
    assert factory.built[0].sent == expected
    assert factory.calls == ["k:9092"]
    assert outbox.connected


@pytest.mark.parametrize(
    "broken",
    [
        FakeProducer(failing=frozenset(values(3))),
        FakeProducer(failing=frozenset([b"m1"])),  # part-way: the whole batch goes again
        FakeProducer(send_error=KafkaTimeoutError("metadata")),
        FakeProducer(flush_error=OSError("connection reset")),
        KafkaConnectionError("no broker"),  # the producer cannot even be built
    ],
    ids=["every ack fails", "one ack fails", "send fails", "flush fails", "factory fails"],
)
def test_a_failed_batch_stays_buffered_and_goes_again_on_a_new_producer(
    outboxes: list[KafkaOutbox],
    caplog: pytest.LogCaptureFixture,
    broken: FakeProducer | Exception,
) -> None:
    factory = Factory(broken)
    outbox = make(outboxes, factory, start=False)
    for value in values(3):
        outbox.offer("n1", value)
    with caplog.at_level(logging.INFO, logger="test.outbox"):
        outbox.start()
        wait_until(lambda: outbox.sent == 3)
    assert len(factory.calls) == 2
    assert factory.delivered == values(3)  # the retry sent the whole batch, in order
    if isinstance(broken, FakeProducer):
        assert broken.closed_with == [0]  # the broken producer was dropped at once
    assert (outbox.pending, outbox.dropped) == (0, 0)
    assert outbox.connected
    levels = [r.levelno for r in caplog.records]
    assert levels == [logging.WARNING, logging.INFO]  # the outage and its end, once each


def test_messages_dropped_while_a_batch_is_in_flight_are_not_sent_twice(
    outboxes: list[KafkaOutbox],
) -> None:
    outbox: KafkaOutbox | None = None
    newer = iter(values(2, start=3))

    def overflow() -> None:
        # Two more arrive while the first batch is being sent: m0 and m1 leave the buffer.
        assert outbox is not None
        for value in newer:
            outbox.offer("n1", value)

    factory = Factory(FakeProducer(on_flush=overflow))
    outbox = make(outboxes, factory, capacity=3, start=False)
    for value in values(3):
        outbox.offer("n1", value)
    outbox.start()
    wait_until(lambda: outbox is not None and outbox.pending == 0)
    assert factory.built[0].values == values(5)
    assert outbox.dropped == 2


def test_flush_reports_whether_the_buffer_emptied(outboxes: list[KafkaOutbox]) -> None:
    stuck = make(outboxes, Factory(*[FakeProducer(failing=frozenset(values(2)))] * 50))
    stuck.offer("n1", b"m0")
    stuck.offer("n1", b"m1")
    assert not stuck.flush(0.2)
    assert stuck.pending == 2
    idle = make(outboxes, Factory())
    assert idle.flush(0.0)


def test_close_makes_one_last_attempt_and_stops(outboxes: list[KafkaOutbox]) -> None:
    factory = Factory()
    outbox = make(outboxes, factory)
    for value in values(50):
        outbox.offer("n1", value)
    outbox.close(timeout=10.0)
    assert factory.delivered == values(50)
    assert outbox.pending == 0
    assert factory.built[0].closed_with == [1]
    assert not outbox.connected
    assert outbox._thread is not None and not outbox._thread.is_alive()


def test_close_gives_up_on_an_unreachable_broker(outboxes: list[KafkaOutbox]) -> None:
    factory = Factory(*[KafkaConnectionError("no broker")] * 50)
    outbox = make(outboxes, factory)
    outbox.offer("n1", b"m0")
    wait_until(lambda: len(factory.calls) >= 1)
    outbox.close(timeout=10.0)
    assert outbox._thread is not None and not outbox._thread.is_alive()
    assert outbox.pending == 1  # kept, not claimed as sent
    assert outbox.sent == 0


def test_close_without_start_is_harmless(outboxes: list[KafkaOutbox]) -> None:
    factory = Factory()
    outbox = make(outboxes, factory, start=False)
    outbox.offer("n1", b"m0")
    outbox.close()
    assert factory.calls == []


def test_flush_hurries_a_sender_that_waits_out_an_outage(outboxes: list[KafkaOutbox]) -> None:
    """Nine failed deliveries back off 45 s in all (0.5 s doubling to 10 s); a flush waiting
    meanwhile has the sender retry every HURRY_S instead, and gets the buffer out well within
    its 30 s once the broker takes it (the tenth attempt)."""
    factory = Factory(*[KafkaConnectionError("no broker")] * 9)
    outbox = make(outboxes, factory)
    for value in values(3):
        outbox.offer("n1", value)
    wait_until(lambda: outbox.unreachable)
    assert outbox.flush(30.0)
    assert len(factory.calls) == 10
    assert factory.delivered == values(3)
    assert outbox.sent == 3 and not outbox.unreachable


@dataclass
class Sender:
    forced: int = 0

    def force_close(self) -> None:
        self.forced += 1


@dataclass
class UnclosableProducer(FakeProducer):
    """kafka-python 3's: ``close`` flushes first, and raises while batches are pending."""

    _sender: Sender = field(default_factory=Sender)

    def close(self, timeout: float | None = None) -> None:
        super().close(timeout)
        raise KafkaTimeoutError("Timeout waiting for future")


def test_a_broken_producer_that_cannot_close_has_its_network_thread_stopped(
    outboxes: list[KafkaOutbox],
) -> None:
    broken = UnclosableProducer(send_error=KafkaConnectionError("gone"))
    factory = Factory(broken)
    outbox = make(outboxes, factory)
    outbox.offer("n1", b"m0")
    wait_until(lambda: len(factory.built) == 2 and outbox.pending == 0)
    assert broken.closed_with == [0]
    assert broken._sender.forced == 1  # else its thread would outlive it, one per outage
    assert factory.delivered == [b"m0"]
