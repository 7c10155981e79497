"""Candidate lists over a real Mosquitto: the aggregator's publisher, the job master's feed, and
the gRPC resync that repairs what the feed could not apply (ROSE Sec. 5.2)."""

from __future__ import annotations

import contextlib
import logging
import struct
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent import futures
from pathlib import Path

import grpc
import numpy as np
import pytest

from aggregator.mqtt_publisher import CandidatePublisher
from job_master.candidate_feed import AggregatorResync, CandidateFeed, Resync
from policies.oversubscription.candidate_sync import (
    MachineList,
    encode_candidates,
    encode_machine_list,
)
from sluice import brokers
from sluice.brokers import ServiceProcess
from sluice_pb import aggregator_pb2 as agg_pb
from sluice_pb import aggregator_pb2_grpc as agg_grpc

pytestmark = pytest.mark.integration

# 200 machines: a bit vector is 46 bytes, so a delta of up to 6 flips is the shorter message.
MACHINES = tuple(f"node-{i:03d}" for i in range(200))
WAIT = 10.0


def eventually(predicate: Callable[[], bool], timeout: float = WAIT) -> bool:
    """Poll ``predicate`` until it holds or ``timeout`` passes; whether it held."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


class FakeAggregator(agg_grpc.AggregatorServiceServicer):
    """The truth the aggregator holds, its messages, and its gRPC resync service."""

    def __init__(self, names: tuple[str, ...], seed: int = 7) -> None:
        self._lock = threading.Lock()
        self._rng = np.random.default_rng(seed)
        self.machines = MachineList(version=1, names=names)
        self.candidate_version = 0
        self.membership = np.zeros(len(names), dtype=np.bool_)
        self.calls: Counter[str] = Counter()
        # A delta needs a previous round over the same machine list.
        self._delta_base_valid = False

    # -- the aggregator's side of the protocol

    def list_message(self) -> bytes:
        return encode_machine_list(self.machines)

    def next_round(self, change: str) -> bytes:
        """Compute a round (``change``: "random", "same" or "flipN") and return its message:
        a delta against the previous round when that is shorter, as the aggregator sends."""
        current = self.membership
        if change == "random":
            membership = self._rng.random(current.size) < 0.3
        elif change == "same":
            membership = current.copy()
        else:
            membership = current.copy()
            flips = self._rng.choice(current.size, int(change.removeprefix("flip")), replace=False)
            membership[flips] = ~membership[flips]
        previous = (self.candidate_version, current) if self._delta_base_valid else None
        with self._lock:
            self.candidate_version += 1
            self.membership = membership
            self._delta_base_valid = True
        return encode_candidates(
            self.machines.version, self.candidate_version, membership, previous=previous
        )

    def join(self, name: str) -> None:
        """A machine joins (``ver_m`` + 1), not a candidate until a round says so."""
        with self._lock:
            self.machines = MachineList(self.machines.version + 1, (*self.machines.names, name))
            self.membership = np.append(self.membership, False)
            self._delta_base_valid = False

    def expected(self) -> tuple[str, ...]:
        return tuple(n for n, c in zip(self.machines.names, self.membership, strict=True) if c)

    # -- the gRPC service

    def GetMachineList(self, request, context):
        with self._lock:
            self.calls["list"] += 1
            return agg_pb.MachineListReply(
                machine_version=self.machines.version,
                machines=self.machines.names,
                message=self.list_message(),
            )

    def GetCandidates(self, request, context):
        with self._lock:
            self.calls["candidates"] += 1
            return agg_pb.CandidatesReply(
                machine_version=self.machines.version,
                candidate_version=self.candidate_version,
                candidates=self.expected(),
                message=encode_candidates(
                    self.machines.version, self.candidate_version, self.membership
                ),
            )


@pytest.fixture
def closing() -> Iterator[contextlib.ExitStack]:
    with contextlib.ExitStack() as stack:
        yield stack


@pytest.fixture
def prefix() -> str:
    """Topics of their own per test: the broker is shared and keeps retained lists."""
    return f"test/{uuid.uuid4().hex[:12]}"


@pytest.fixture
def url(mqtt_server: ServiceProcess) -> str:
    return f"mqtt://{mqtt_server.address}"


@pytest.fixture
def aggregator(closing: contextlib.ExitStack) -> tuple[FakeAggregator, str]:
    fake = FakeAggregator(MACHINES)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    agg_grpc.add_AggregatorServiceServicer_to_server(fake, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    closing.callback(server.stop, None)
    return fake, f"127.0.0.1:{port}"


def start_publisher(
    closing: contextlib.ExitStack, url: str, prefix: str, **kw
) -> CandidatePublisher:
    publisher = CandidatePublisher(url, prefix, **kw)
    publisher.start()
    closing.callback(publisher.close)
    return publisher


def start_feed(
    closing: contextlib.ExitStack,
    url: str,
    prefix: str,
    resync: Resync | str | None = None,
    **kw,
) -> CandidateFeed:
    """A started feed, closed after the test; a ``str`` resync is the aggregator's address."""
    if isinstance(resync, str):
        resync = AggregatorResync(resync)
        closing.callback(resync.close)
    feed = CandidateFeed(url, prefix, resync, **kw)
    feed.start()
    closing.callback(feed.close)
    return feed


def publish(publisher: CandidatePublisher, message: bytes, *, machine_list: bool = False) -> None:
    """Hand over one message and wait until the broker acknowledged it."""
    before = publisher.published
    if machine_list:
        publisher.publish_machine_list(message)
    else:
        publisher.publish_candidates(message)
    assert eventually(lambda: publisher.published > before)


ROUNDS = ["random", "flip1", "flip3", "same", "random", "flip6", "flip2", "random", "flip1"]


def test_late_feed_gets_the_retained_list_then_follows_bit_vectors_and_deltas(
    url: str, prefix: str, closing: contextlib.ExitStack
) -> None:
    truth = FakeAggregator(MACHINES)
    publisher = start_publisher(closing, url, prefix)
    publish(publisher, truth.list_message(), machine_list=True)

    feed = start_feed(closing, url, prefix)  # subscribes after the list was published
    assert eventually(lambda: feed.versions == (1, 0))
    assert feed.replica.machines.names == MACHINES

    kinds = []
    for change in ROUNDS:
        message = truth.next_round(change)
        kinds.append(message[:1])
        publisher.publish_candidates(message)
        assert feed.wait_for_version(truth.candidate_version, WAIT), change
        assert feed.candidates() == truth.expected(), change
    assert set(kinds) == {b"C", b"D"}
    assert (feed.applied, feed.resyncs, feed.malformed) == (1 + len(ROUNDS), 0, 0)


def test_feed_joining_mid_stream_resyncs_the_delta_it_cannot_apply(
    url: str, prefix: str, closing: contextlib.ExitStack, aggregator: tuple[FakeAggregator, str]
) -> None:
    truth, address = aggregator
    publisher = start_publisher(closing, url, prefix)
    publish(publisher, truth.list_message(), machine_list=True)
    for change in ["random", "flip2", "flip1"]:
        publish(publisher, truth.next_round(change))

    changes: list[int] = []
    feed = start_feed(
        closing, url, prefix, address, on_change=lambda r: changes.append(r.candidate_version)
    )
    assert eventually(lambda: feed.versions == (1, 0))

    delta = truth.next_round("flip2")  # against round 3, which this feed never saw
    assert delta[:1] == b"D"
    publisher.publish_candidates(delta)
    assert feed.wait_for_version(4, WAIT)
    assert feed.candidates() == truth.expected()
    assert feed.resyncs == 1
    assert truth.calls == Counter(candidates=1)

    # Now in step: the next delta applies as it is.
    publisher.publish_candidates(truth.next_round("flip1"))
    assert feed.wait_for_version(5, WAIT)
    assert feed.candidates() == truth.expected()
    assert (feed.resyncs, truth.calls["candidates"]) == (1, 1)
    assert changes == [0, 4, 5]  # the list, the resync, the delta


class SwitchableResync:
    """A :class:`Resync` in front of the fake aggregator that can be down."""

    def __init__(self, truth: FakeAggregator) -> None:
        self.truth = truth
        self.up = False
        self.attempts = 0

    def machine_list(self) -> bytes:
        self._reach()
        return self.truth.GetMachineList(None, None).message

    def candidates(self) -> bytes:
        self._reach()
        return self.truth.GetCandidates(None, None).message

    def _reach(self) -> None:
        self.attempts += 1
        if not self.up:
            raise ConnectionError("aggregator down")


def test_a_failed_resync_is_logged_once_and_retried_on_the_next_message(
    url: str, prefix: str, closing: contextlib.ExitStack, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="test.feed")
    truth = FakeAggregator(MACHINES)
    publisher = start_publisher(closing, url, prefix)
    publish(publisher, truth.list_message(), machine_list=True)
    for change in ["random", "flip1"]:
        publish(publisher, truth.next_round(change))
    resync = SwitchableResync(truth)
    feed = start_feed(closing, url, prefix, resync, log=logging.getLogger("test.feed"))
    assert eventually(lambda: feed.versions == (1, 0))

    def logged(level: int) -> list[str]:
        return [
            r.getMessage() for r in caplog.records if r.name == "test.feed" and r.levelno == level
        ]

    # Two deltas the feed cannot apply while the aggregator is down: one warning for both.
    publisher.publish_candidates(truth.next_round("flip1"))
    assert eventually(lambda: resync.attempts == 1)
    publisher.publish_candidates(truth.next_round("flip1"))
    assert eventually(lambda: resync.attempts == 2)
    assert feed.versions == (1, 0)
    assert len(logged(logging.WARNING)) == 1

    resync.up = True
    publisher.publish_candidates(truth.next_round("flip1"))
    assert feed.wait_for_version(truth.candidate_version, WAIT)
    assert feed.candidates() == truth.expected()
    assert feed.resyncs == 1
    assert len(logged(logging.WARNING)) == 1
    assert len([m for m in logged(logging.INFO) if "works again" in m]) == 1


def test_without_a_resync_the_feed_waits_for_the_next_bit_vector(
    url: str, prefix: str, closing: contextlib.ExitStack
) -> None:
    truth = FakeAggregator(MACHINES)
    publisher = start_publisher(closing, url, prefix)
    publish(publisher, truth.list_message(), machine_list=True)
    publish(publisher, truth.next_round("random"))
    feed = start_feed(closing, url, prefix)
    assert eventually(lambda: feed.versions == (1, 0))

    delta = truth.next_round("flip1")
    bits = truth.next_round("random")
    assert (delta[:1], bits[:1]) == (b"D", b"C")
    publisher.publish_candidates(delta)
    publisher.publish_candidates(bits)
    assert feed.wait_for_version(3, WAIT)
    assert feed.candidates() == truth.expected()
    assert (feed.applied, feed.resyncs, feed.malformed) == (2, 0, 0)


@pytest.mark.parametrize(
    ("list_published", "resyncs", "calls"),
    [
        # The aggregator publishes the new list before the round: nothing to fetch.
        (True, 0, Counter()),
        # The feed sees a round over a list it does not have: it fetches both.
        (False, 1, Counter(list=1, candidates=1)),
    ],
    ids=["list-then-round", "round-without-list"],
)
def test_machine_joining_bumps_ver_m_and_the_feed_ends_with_the_new_list(
    url: str,
    prefix: str,
    closing: contextlib.ExitStack,
    aggregator: tuple[FakeAggregator, str],
    list_published: bool,
    resyncs: int,
    calls: Counter[str],
) -> None:
    truth, address = aggregator
    publisher = start_publisher(closing, url, prefix)
    publish(publisher, truth.list_message(), machine_list=True)
    feed = start_feed(closing, url, prefix, address)
    assert eventually(lambda: feed.versions == (1, 0))
    publisher.publish_candidates(truth.next_round("random"))
    assert feed.wait_for_version(1, WAIT)

    truth.join("node-new")
    if list_published:
        publisher.publish_machine_list(truth.list_message())
    message = truth.next_round("flip1")
    assert message[:1] == b"C"  # the first round over a new list
    publisher.publish_candidates(message)

    assert eventually(lambda: feed.versions == (2, 2))
    assert feed.replica.machines.names == (*MACHINES, "node-new")
    assert feed.candidates() == truth.expected()
    assert (feed.resyncs, truth.calls) == (resyncs, calls)


MALFORMED = [
    b"",
    b"Zjunk",
    b"C\x00\x01",  # truncated header
    encode_machine_list(MachineList(9, ("x",))),  # a list on the candidates topic
    encode_candidates(1, 99, np.ones(len(MACHINES), dtype=np.bool_))[:-1],  # short bit vector
    # Deltas against the feed's round 0: three flips announced, two sent; a flip out of range.
    struct.pack(">cQQQII", b"D", 1, 98, 0, len(MACHINES), 3) + struct.pack(">HH", 1, 2),
    struct.pack(">cQQQII", b"D", 1, 97, 0, len(MACHINES), 1) + struct.pack(">H", 500),
]


def test_malformed_messages_are_counted_and_logged_and_the_feed_keeps_working(
    url: str, prefix: str, closing: contextlib.ExitStack, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="test.feed")
    truth = FakeAggregator(MACHINES)
    publisher = start_publisher(closing, url, prefix)
    publish(publisher, truth.list_message(), machine_list=True)
    feed = start_feed(closing, url, prefix, log=logging.getLogger("test.feed"))
    assert eventually(lambda: feed.versions == (1, 0))

    for message in MALFORMED:
        publisher.publish_candidates(message)
    publisher.publish_candidates(truth.next_round("random"))

    assert feed.wait_for_version(1, WAIT)
    assert feed.candidates() == truth.expected()
    assert feed.malformed == len(MALFORMED)
    lines = [r.getMessage() for r in caplog.records if r.name == "test.feed"]
    assert len(lines) == len(MALFORMED)
    assert all(publisher.candidates_topic in line and "\n" not in line for line in lines)


def test_publisher_and_feed_recover_from_a_broker_restart(
    tmp_path: Path,
    prefix: str,
    closing: contextlib.ExitStack,
    aggregator: tuple[FakeAggregator, str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="test")
    port = brokers.free_port()

    started: list[ServiceProcess] = []

    @closing.callback  # registered first, so it runs after the clients have closed
    def stop_brokers() -> None:
        for broker in started:
            broker.stop()

    def start_broker() -> ServiceProcess:
        started.append(
            brokers.start_mosquitto(port, tmp_path / "mosquitto", tmp_path / "mosquitto.log")
        )
        return started[-1]

    broker = start_broker()
    url = f"mqtt://{broker.address}"
    truth, address = aggregator
    publisher = start_publisher(closing, url, prefix, log=logging.getLogger("test.publisher"))
    feed = start_feed(closing, url, prefix, address, log=logging.getLogger("test.feed"))
    publisher.publish_machine_list(truth.list_message())
    assert eventually(lambda: feed.versions == (1, 0))
    publisher.publish_candidates(truth.next_round("random"))
    assert feed.wait_for_version(1, WAIT)

    broker.stop()
    assert eventually(lambda: not publisher.connected and not feed.connected)
    publisher.publish_candidates(truth.next_round("flip1"))  # round 2: superseded while down
    publisher.publish_candidates(truth.next_round("flip1"))  # round 3: sent on reconnecting
    truth.next_round("flip1")  # round 4: computed, not yet published; only a resync has it
    start_broker()

    assert eventually(lambda: publisher.connected and feed.connected, 2 * WAIT)
    assert feed.wait_for_version(4, WAIT)
    assert feed.candidates() == truth.expected()
    assert feed.resyncs >= 1
    # The restarted broker lost the retained list; the publisher retained it again.
    late = start_feed(closing, url, prefix)
    assert eventually(lambda: late.versions == (1, 0))
    publish(publisher, truth.next_round("flip2"))
    assert feed.wait_for_version(5, WAIT)
    assert feed.candidates() == truth.expected()

    # list, round 1; then, reconnected, the list again and only the latest round; round 5
    assert publisher.published == 5
    for name in ("test.publisher", "test.feed"):
        records = [r for r in caplog.records if r.name == name]
        assert len([r for r in records if r.levelno == logging.WARNING]) == 1, name
        assert len([r for r in records if "connected again" in r.getMessage()]) == 1, name
