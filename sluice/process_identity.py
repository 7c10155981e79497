"""Who a pid is, and stopping a process only while it is still the one that was started.

A pid names a process only until it ends: the kernel then hands the number to the next process
(with ``pid_max`` 32768, soon on a busy machine).  A pid recorded in ``cluster.json`` is
therefore stored with the process's identity, read from ``/proc`` right after it was started
(``sluice local up``, ``restart``): its start time (field 22 of ``/proc/PID/stat``, clock ticks
after boot), the boot it started in (``/proc/sys/kernel/random/boot_id``) and its command line.
A pid and a start time name one process of one boot: a process that got the pid later started
later.  The command line alone does not (a new daemon of the same kind has the same one); it is
all a record written before identities were recorded has, and is then the rule.

Signals go through a pidfd (Linux 5.3+) opened before the identity is checked: once the check
passes, the pidfd stays that process's even if it ends and its pid is reused while we wait for
it to stop.  Without pidfds, the identity is checked again before every signal.
"""

from __future__ import annotations

import contextlib
import enum
import os
import select
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")
BOOT_ID = PROC / "sys" / "kernel" / "random" / "boot_id"
PROGRAM_WORDS = 4  # how much of a command line names the program ("python -m sluice agent")


@dataclass(frozen=True)
class ProcessIdentity:
    """One process of one boot: ``pid`` with ``start_ticks`` (clock ticks after boot, fixed at
    fork and kept across exec) in the boot ``boot_id``; ``cmdline`` as ``/proc`` showed it."""

    pid: int
    start_ticks: int
    boot_id: str
    cmdline: tuple[str, ...]

    def to_record(self) -> dict[str, object]:
        """As ``cluster.json`` keeps it (JSON: the command line as a list)."""
        return {
            "pid": self.pid,
            "start_ticks": self.start_ticks,
            "boot_id": self.boot_id,
            "cmdline": list(self.cmdline),
        }

    @classmethod
    def from_record(cls, record: object) -> ProcessIdentity | None:
        """The identity ``record`` holds, or None when it holds none (absent: a cluster recorded
        before identities were, or a malformed one)."""
        if not isinstance(record, dict):
            return None
        pid, ticks, boot, cmdline = (
            record.get(k) for k in ("pid", "start_ticks", "boot_id", "cmdline")
        )
        if not (isinstance(pid, int) and isinstance(ticks, int) and isinstance(boot, str)):
            return None
        if not isinstance(cmdline, list):
            return None
        return cls(pid, ticks, boot, tuple(str(word) for word in cmdline))


def read_identity(pid: int) -> ProcessIdentity | None:
    """The identity of the process that has ``pid`` now; None when there is none, or only a
    zombie (it has exited: there is no one left to signal)."""
    try:
        stat = (PROC / str(pid) / "stat").read_text()
        cmdline = (PROC / str(pid) / "cmdline").read_bytes()
        boot_id = BOOT_ID.read_text().strip()
    except (OSError, ValueError):
        return None
    # The command name (field 2, in parentheses) may hold spaces and parentheses itself: the
    # fields after it start after the last ")".  Field 3 is the state, field 22 the start time.
    fields = stat.rsplit(")", 1)[-1].split()
    if len(fields) < 20 or fields[0] in ("Z", "X"):
        return None
    words = tuple(w.decode(errors="replace") for w in cmdline.split(b"\0")[:-1])
    return ProcessIdentity(pid, int(fields[19]), boot_id, words)


class Verdict(enum.Enum):
    OURS = "ours"  # the recorded process: may be signalled
    GONE = "gone"  # no process has the pid (or only a zombie)
    OTHER = "other"  # another process has the pid now: never signal it


def judge(
    pid: int, recorded: ProcessIdentity | None, argv: list[str], now: ProcessIdentity | None
) -> Verdict:
    """Whether ``now`` (who has ``pid`` now) is the process that was recorded.  With a recorded
    identity of this pid: the same start time in the same boot, running the same program.
    Without one (a record older than identities, or a pid rewritten by hand): the command line
    only, ``argv``'s first words, which a new daemon of the same kind also passes."""
    if now is None:
        return Verdict.GONE
    if recorded is not None and recorded.pid == pid:
        same = (
            now.start_ticks == recorded.start_ticks
            and now.boot_id == recorded.boot_id
            and now.cmdline[:PROGRAM_WORDS] == recorded.cmdline[:PROGRAM_WORDS]
        )
    else:
        same = list(now.cmdline[:PROGRAM_WORDS]) == [str(a) for a in argv[:PROGRAM_WORDS]]
    return Verdict.OURS if same else Verdict.OTHER


@dataclass(frozen=True)
class Recorded:
    """A process as a record names it: ``name`` for messages ("node-1's agent"), the recorded
    pid, its recorded identity (None: none recorded) and the command line that started it."""

    name: str
    pid: int
    identity: ProcessIdentity | None
    argv: list[str]

    @property
    def by_command_line(self) -> bool:
        """Whether only its command line can tell it (no identity recorded for this pid)."""
        return self.identity is None or self.identity.pid != self.pid


def stop(
    processes: list[Recorded], say: Callable[[str], None], timeout: float = 10.0
) -> dict[str, Verdict]:
    """SIGTERM each of ``processes`` that is still the recorded process, then SIGKILL those of
    them still running after ``timeout`` seconds.  A pid that another process has now is not
    signalled, and ``say`` says so in one line; so is a check by command line only.  Returns
    each process's verdict before it was signalled (by name)."""
    verdicts: dict[str, Verdict] = {}
    signalled: list[tuple[Recorded, int | None]] = []
    for process in processes:
        if process.pid <= 0:
            verdicts[process.name] = Verdict.GONE
            continue
        pidfd = _open_pidfd(process.pid)  # before the check: then it is the checked process
        verdict = judge(process.pid, process.identity, process.argv, read_identity(process.pid))
        verdicts[process.name] = verdict
        if verdict is not Verdict.GONE and process.by_command_line:
            say(
                f"{process.name} (pid {process.pid}): no start time recorded (a cluster "
                "started by an older sluice, or the pid rewritten): checked by command line only"
            )
        if verdict is Verdict.OTHER:
            say(
                f"{process.name} (pid {process.pid}) is gone; pid now belongs to another "
                "process: not signalled"
            )
        if verdict is not Verdict.OURS:
            _close(pidfd)
            continue
        _signal(process, pidfd, signal.SIGTERM)
        signalled.append((process, pidfd))
    deadline = time.monotonic() + timeout
    while any(_running(p, fd) for p, fd in signalled) and time.monotonic() < deadline:
        time.sleep(0.05)
    for process, pidfd in signalled:
        if _running(process, pidfd):
            _signal(process, pidfd, signal.SIGKILL)
        _close(pidfd)
    return verdicts


def _open_pidfd(pid: int) -> int | None:
    """A pidfd of ``pid``, or None: no such process, or no pidfds here (Python before 3.9,
    Linux before 5.3, another system)."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def _close(pidfd: int | None) -> None:
    if pidfd is not None:
        os.close(pidfd)


def _signal(process: Recorded, pidfd: int | None, sig: signal.Signals) -> None:
    """Send ``sig`` to the recorded process: through its pidfd, or, without one, by pid only
    after checking again that the pid is still its (it may have ended and the pid been reused
    since the last check)."""
    with contextlib.suppress(ProcessLookupError):
        if pidfd is not None:
            signal.pidfd_send_signal(pidfd, sig)
        elif (
            judge(process.pid, process.identity, process.argv, read_identity(process.pid))
            is Verdict.OURS
        ):
            os.kill(process.pid, sig)


def _running(process: Recorded, pidfd: int | None) -> bool:
    """Whether the recorded process has yet to exit.  A child of ours that exited is reaped
    (else it would stay a zombie until the CLI exits)."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(process.pid, os.WNOHANG)
    if pidfd is not None:  # readable once the process has exited
        return not select.select([pidfd], [], [], 0)[0]
    now = read_identity(process.pid)
    return judge(process.pid, process.identity, process.argv, now) is Verdict.OURS
