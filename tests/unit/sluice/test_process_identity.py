"""Who a recorded pid is, against real processes: a recorded identity (start time, boot, command
line) matches its process while it runs and no longer once it has exited; a record with another
start time is refused; a record without one falls back to the command line; ``stop`` signals
only the recorded process (issue 35, item 4)."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from collections.abc import Callable, Iterator

import pytest

from sluice.process_identity import (
    ProcessIdentity,
    Recorded,
    Verdict,
    judge,
    read_identity,
    stop,
)

SLEEP = ["sleep", "300"]


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    process = subprocess.Popen(SLEEP)
    try:
        yield process
    finally:
        process.kill()
        process.wait()


def _identity(process: subprocess.Popen[bytes]) -> ProcessIdentity:
    identity = read_identity(process.pid)
    assert identity is not None
    return identity


def test_an_identity_read_from_proc_names_the_running_process(
    sleeper: subprocess.Popen[bytes],
) -> None:
    identity = _identity(sleeper)
    assert identity.pid == sleeper.pid
    assert identity.cmdline == tuple(SLEEP)
    assert identity.start_ticks > 0 and len(identity.boot_id) == 36
    assert ProcessIdentity.from_record(identity.to_record()) == identity
    assert judge(sleeper.pid, identity, [], read_identity(sleeper.pid)) is Verdict.OURS


def test_a_recorded_identity_no_longer_matches_once_its_process_has_exited(
    sleeper: subprocess.Popen[bytes],
) -> None:
    identity = _identity(sleeper)
    sleeper.kill()
    os.waitid(os.P_PID, sleeper.pid, os.WEXITED | os.WNOWAIT)  # exited, not yet reaped
    assert read_identity(sleeper.pid) is None  # a zombie is no one to signal
    assert judge(sleeper.pid, identity, SLEEP, read_identity(sleeper.pid)) is Verdict.GONE
    sleeper.wait()  # reaped: the pid is free for anyone (and whoever gets it is not this one)
    assert judge(sleeper.pid, identity, SLEEP, read_identity(sleeper.pid)) is not Verdict.OURS


def _other_start(identity: ProcessIdentity) -> ProcessIdentity:
    return dataclasses.replace(identity, start_ticks=identity.start_ticks - 1)


def _other_boot(identity: ProcessIdentity) -> ProcessIdentity:
    return dataclasses.replace(identity, boot_id="00000000-0000-0000-0000-000000000000")


def _other_program(identity: ProcessIdentity) -> ProcessIdentity:
    return dataclasses.replace(identity, cmdline=("python", "-m", "sluice", "agent"))


@pytest.mark.parametrize(
    ("change", "verdict"),
    [
        (lambda i: i, Verdict.OURS),
        (_other_start, Verdict.OTHER),  # the pid was reused by a later process
        (_other_boot, Verdict.OTHER),  # recorded in another boot
        (_other_program, Verdict.OTHER),
    ],
    ids=["same", "other start time", "other boot", "other program"],
)
def test_a_record_of_this_pid_must_match_start_time_boot_and_program(
    sleeper: subprocess.Popen[bytes],
    change: Callable[[ProcessIdentity], ProcessIdentity],
    verdict: Verdict,
) -> None:
    recorded = change(_identity(sleeper))
    assert judge(sleeper.pid, recorded, SLEEP, read_identity(sleeper.pid)) is verdict


@pytest.mark.parametrize(
    ("argv", "verdict"),
    [
        (SLEEP, Verdict.OURS),
        ([sys.executable, "-m", "sluice", "agent"], Verdict.OTHER),
        ([], Verdict.OTHER),  # nothing recorded at all: never signalled
    ],
    ids=["same command line", "another command line", "none"],
)
def test_without_a_start_time_for_this_pid_the_command_line_decides(
    sleeper: subprocess.Popen[bytes], argv: list[str], verdict: Verdict
) -> None:
    now = read_identity(sleeper.pid)
    assert judge(sleeper.pid, None, argv, now) is verdict
    # An identity recorded for another pid (the pid rewritten by hand) says nothing of this one.
    another = dataclasses.replace(_identity(sleeper), pid=sleeper.pid + 1, start_ticks=1)
    assert judge(sleeper.pid, another, argv, now) is verdict


def test_stop_leaves_a_pid_that_another_process_has_now_and_says_so(
    sleeper: subprocess.Popen[bytes],
) -> None:
    said: list[str] = []
    reused = Recorded("node-1's agent", sleeper.pid, _other_start(_identity(sleeper)), SLEEP)
    assert stop([reused], said.append, timeout=5) == {"node-1's agent": Verdict.OTHER}
    assert said == [
        f"node-1's agent (pid {sleeper.pid}) is gone; pid now belongs to another process: "
        "not signalled"
    ]
    assert sleeper.poll() is None


def test_stop_ends_the_recorded_process(sleeper: subprocess.Popen[bytes]) -> None:
    said: list[str] = []
    ours = Recorded("the aggregator", sleeper.pid, _identity(sleeper), SLEEP)
    assert stop([ours], said.append, timeout=30) == {"the aggregator": Verdict.OURS}
    assert said == []
    assert sleeper.wait(timeout=30) is not None  # SIGTERM ends `sleep`
    assert read_identity(sleeper.pid) is None


def test_stop_by_command_line_only_says_so(sleeper: subprocess.Popen[bytes]) -> None:
    said: list[str] = []
    old = Recorded("the RM", sleeper.pid, None, SLEEP)
    assert stop([old], said.append, timeout=30) == {"the RM": Verdict.OURS}
    assert len(said) == 1 and "checked by command line only" in said[0]
    sleeper.wait(timeout=30)
