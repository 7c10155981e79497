"""A CandidateFeed closes its MQTT client cleanly at whatever point ``close()`` finds it:
connecting, waiting for a CONNACK that never comes, subscribed, or applying messages.

aiomqtt leaves a connection attempt that is cancelled or fails half-open (paho's socket and its
keepalive task); a loop closed over them printed "Task was destroyed but it is pending!" and,
when paho's client was collected, "RuntimeError: Event loop is closed" — at the end of
``sluice demo`` and in job masters' logs.  Python reports these on stderr when the process
tidies up, so each scenario runs in a child process whose stderr must stay empty.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import uuid

import pytest

from sluice.brokers import ServiceProcess

pytestmark = pytest.mark.integration

CHILD = textwrap.dedent(
    """
    import gc, socket, sys, threading, time

    from aggregator.mqtt_publisher import CandidatePublisher
    from job_master.candidate_feed import CandidateFeed
    from policies.oversubscription.candidate_sync import (
        MachineList, encode_candidates, encode_machine_list,
    )

    url, prefix, scenario, repeat = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    WAIT = 10.0

    def wait_until(predicate, what):
        deadline = time.monotonic() + WAIT
        while not predicate():
            assert time.monotonic() < deadline, what
            time.sleep(0.005)

    if scenario == "no-connack":
        # A TCP listener that never answers: the feed waits for its CONNACK when closed.
        server = socket.socket()
        server.bind(("127.0.0.1", 0))
        server.listen(16)
        accepted = []
        def accept():
            while True:
                accepted.append(server.accept())
        threading.Thread(target=accept, daemon=True).start()
        url = f"mqtt://127.0.0.1:{server.getsockname()[1]}"

    publisher = None
    if scenario == "applying":
        publisher = CandidatePublisher(url, prefix)
        publisher.start()
        publisher.publish_machine_list(encode_machine_list(MachineList(7, ("a", "b"))))

    for round in range(repeat):
        feed = CandidateFeed(url, prefix)
        feed.start()
        if scenario == "connected":
            wait_until(lambda: feed.connected, "the feed did not connect")
        elif scenario == "applying":
            # The retained list arrives on subscribing; the candidates are not retained.
            wait_until(lambda: feed.versions[0] == 7, "the feed got no machine list")
            publisher.publish_candidates(encode_candidates(7, round + 1, [True, round % 2 == 0]))
            assert feed.wait_for_version(round + 1, WAIT), feed.versions
        elif scenario == "no-connack":
            wait_until(lambda: len(accepted) > round, "the feed did not connect")
        started = time.monotonic()
        feed.close(timeout=0.5)
        # close() is bounded by its timeout (twice 0.5 s); only a hang, never load, exceeds this
        assert time.monotonic() - started < 20.0, "close() hung"
    if publisher is not None:
        publisher.close()
    gc.collect()  # collect abandoned clients now, while the test still reads stderr
    print("ok")
    """
)

NOISE = (
    "Traceback",
    "Task was destroyed",
    "Event loop is closed",
    "Exception in callback",
    "Exception ignored",
    "Unexpected message ID",
)


@pytest.mark.parametrize(
    ("scenario", "repeat"),
    [
        ("at-once", 30),  # closed while connecting: most rounds before the CONNACK
        ("connected", 5),
        ("applying", 5),
        ("no-connack", 2),
    ],
)
def test_closing_the_feed_leaves_nothing_on_stderr(
    mqtt_server: ServiceProcess, scenario: str, repeat: int
) -> None:
    prefix = f"test/{uuid.uuid4().hex[:8]}"
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            CHILD,
            f"mqtt://{mqtt_server.address}",
            prefix,
            scenario,
            str(repeat),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.stdout == "ok\n", result.stderr
    assert not [word for word in NOISE if word in result.stderr], result.stderr
    # The only thing the feed may say: the never-answering broker's timeout, as one warning.
    lines = [line for line in result.stderr.splitlines() if "Operation timed out" not in line]
    assert lines == [], result.stderr
