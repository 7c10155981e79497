"""Refusals in the log: one bounded line each, repeats counted and summed up (the clock passed
in), and what is echoed cut short."""

from __future__ import annotations

import logging

import pytest

from plumbing.authz import (
    MAX_ECHO,
    RefusalLog,
    bounded,
    decoder,
    foreign_job,
    foreign_node,
    log_refusal,
    quoted,
)
from plumbing.tls import Identity, Role
from sluice_pb import resource_manager_pb2 as rm_pb

A = ("agent 'node-1'", "Heartbeat", "request")
B = ("broker 'kafka'", "Heartbeat", "Heartbeat")


def _run(log: RefusalLog, events: list[tuple[float, tuple[str, str, str]]]) -> list[str]:
    """What is logged for each (time, kind): 'first' for a logged refusal, summaries as given."""
    out: list[str] = []
    for now, kind in events:
        first, summaries = log.note(kind, now)
        out.extend(summaries)
        if first:
            out.append(f"first {kind[0]} at {now:g}")
    return out


@pytest.mark.parametrize(
    ("events", "expected"),
    [
        pytest.param([(0.0, A)], ["first agent 'node-1' at 0"], id="one"),
        pytest.param(
            [(0.0, A), (1.0, A), (59.9, A)],
            ["first agent 'node-1' at 0"],
            id="repeats-within-the-window-are-counted",
        ),
        pytest.param(
            [(0.0, A), (1.0, A), (2.0, A), (61.0, A)],
            [
                "first agent 'node-1' at 0",
                "refused Heartbeat to agent 'node-1' 2 more times like this in the last 61 s "
                "(request)",
                "first agent 'node-1' at 61",
            ],
            id="summed-up-when-the-window-ends",
        ),
        pytest.param(
            [(0.0, A), (61.0, A)],
            ["first agent 'node-1' at 0", "first agent 'node-1' at 61"],
            id="no-summary-without-repeats",
        ),
        pytest.param(
            [(0.0, A), (0.5, B), (1.0, A), (1.5, B)],
            ["first agent 'node-1' at 0", "first broker 'kafka' at 0.5"],
            id="kinds-apart",
        ),
        pytest.param(
            [(0.0, A), (5.0, A), (70.0, B)],
            [
                "first agent 'node-1' at 0",
                "refused Heartbeat to agent 'node-1' 1 more times like this in the last 70 s "
                "(request)",
                "first broker 'kafka' at 70",
            ],
            id="another-kind-ends-the-window",
        ),
    ],
)
def test_rate_limit(events: list[tuple[float, tuple[str, str, str]]], expected: list[str]) -> None:
    assert _run(RefusalLog(window_s=60.0), events) == expected


def test_the_table_holds_at_most_max_kinds_and_sums_up_what_it_drops() -> None:
    log = RefusalLog(window_s=60.0, max_kinds=2)
    kinds = [(f"client 'u{i}'", "SubmitJob", "job") for i in range(3)]
    assert log.note(kinds[0], 0.0) == (True, [])
    assert log.note(kinds[0], 1.0) == (False, [])
    assert log.note(kinds[1], 2.0) == (True, [])
    first, summaries = log.note(kinds[2], 3.0)  # u0 makes room, summed up early
    assert first
    assert summaries == [
        "refused SubmitJob to client 'u0' 1 more times like this in the last 3 s (job)"
    ]
    assert len(log._windows) == 2
    assert log.flush(100.0) == []  # u1 and u2 had no repeats


def test_a_flood_logs_two_lines(caplog: pytest.LogCaptureFixture) -> None:
    logger = logging.getLogger("test.refusals")
    identity = Identity(Role.BROKER, "flood-test")
    with caplog.at_level(logging.WARNING, logger="test.refusals"):
        for i in range(1000):
            log_refusal(logger, "/sluice.v1.X/Y", identity, "ipv4:10.0.0.1:5", "Y: no", now=i / 100)
        log_refusal(logger, "/sluice.v1.X/Y", identity, "ipv4:10.0.0.1:5", "Y: no", now=70.0)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 3, lines
    assert lines[0].startswith("refused Y to broker 'flood-test' at ipv4:10.0.0.1:5: Y: no")
    assert (
        lines[1] == "refused Y to broker 'flood-test' 999 more times like this in the last 70 s (Y)"
    )


def test_every_echoed_value_is_cut(caplog: pytest.LogCaptureFixture) -> None:
    logger = logging.getLogger("test.refusals.cut")
    huge = "x" * 1_000_000
    with caplog.at_level(logging.WARNING, logger="test.refusals.cut"):
        log_refusal(logger, "/s/" + huge, Identity(Role.AGENT, huge), huge, f"{huge}: {huge}", 0.0)
    (line,) = [r.getMessage() for r in caplog.records]
    assert len(line) < 1000
    assert "1,000,000 characters" in line


@pytest.mark.parametrize(
    ("problem", "longest"),
    [
        (foreign_node(Identity(Role.AGENT, "node-1"), "n" * 1_000_000), 300),
        (foreign_job(Identity(Role.JOB_MASTER, "job-1"), "j" * 1_000_000), 300),
        (foreign_node(Identity(Role.AGENT, "node-1"), "node-2"), 100),
    ],
)
def test_refusals_echo_a_bounded_value(problem: str | None, longest: int) -> None:
    assert problem is not None
    assert len(problem) < longest


def test_bounded_and_quoted() -> None:
    assert bounded("short") == "short"
    assert bounded("y" * (MAX_ECHO + 1)) == "y" * MAX_ECHO + f"… ({MAX_ECHO + 1:,} characters)"
    assert quoted("a'b") == repr("a'b")
    assert quoted("z" * 500, 10) == repr("z" * 10) + "… (500 characters)"


def test_the_decoder_answers_one_line_and_keeps_no_bytes() -> None:
    decode = decoder(rm_pb.HeartbeatRequest.FromString)
    assert decode(rm_pb.HeartbeatRequest(node_id="n").SerializeToString()).node_id == "n"
    with pytest.raises(Exception) as caught:
        decode(b"\x07" * 1000)
    error = caught.value
    assert str(error) == "request: does not decode as sluice.v1.HeartbeatRequest (1,000 bytes)"
    assert error.__context__ is None and error.__cause__ is None  # no parser error, no bytes
    assert decoder(None)(b"raw") == b"raw"
