"""The ``process`` runtime: each task is a subprocess in its own cgroup (or, failing that, a plain
process group with CPU affinity).

How a task is started, without ``preexec_fn`` (unsafe in the multi-threaded agent): the runtime
creates the task's cgroups, then starts ``/bin/sh -c WRAPPER`` in a new session with output to
the task's log file.  The wrapper writes its own PID into the ``cgroup.procs`` files named in
``SLUICE_CGROUP_PROCS`` (so the task and all its children are inside before the task runs), marks
the task started, runs the task's argv, and records the exit status -- the shell's ``$?``, i.e.
128+N for a task killed by signal N -- atomically in the task's state directory.  Because the
wrapper, not the agent, records the status, tasks and their exit codes survive the agent being
SIGKILLed.

A new runtime with the same ``node_id`` and ``state_dir`` adopts every task directory it finds:
an exit-status file means EXITED; otherwise the recorded wrapper PID, checked against its start
time in ``/proc/<pid>/stat`` (PIDs are reused), means the task still runs.

``stop`` signals the task's processes -- the cgroup's members, or the process group's in fallback
mode -- but never the wrapper, which must survive to record the status.  Once the task has
ended, the wrapper ignores SIGTERM, SIGINT and SIGHUP, and so does the ``mv`` it records the
status with: that ``mv`` is a member too, and a stop still signalling the members used to kill
it, leaving no status, which then read as 137 (lost) instead of the task's 143 -- on a busy
host, where the ``mv`` lives long enough to be seen, several times a run.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from enum import Enum
from pathlib import Path

from node_agent.runtime import cgroups
from node_agent.runtime.base import (
    ResourceLimits,
    RunObservation,
    RunState,
    RuntimeError_,
    TaskLaunch,
    TaskUsage,
    UnknownTaskError,
    scope_name,
)
from node_agent.runtime.task_state import StateStore, TaskDir, atomic_write, encode_name
from plumbing.errors import UserError

WRAPPER = r"""
IFS=:
for f in $SLUICE_CGROUP_PROCS; do
  echo $$ > "$f" || { echo "sluice: cannot join cgroup $f" >&2; exit 125; }
done
unset IFS SLUICE_CGROUP_PROCS
: > "$SLUICE_TASK_DIR/started" || { echo "sluice: cannot write $SLUICE_TASK_DIR" >&2; exit 125; }
"$@"
status=$?
trap '' TERM INT HUP
echo "$status" > "$SLUICE_TASK_DIR/exit_code.tmp" &&
  PATH=/usr/bin:/bin mv -f "$SLUICE_TASK_DIR/exit_code.tmp" "$SLUICE_TASK_DIR/exit_code"
exit "$status"
"""
"""Runs as ``sh -c WRAPPER sluice-task ARGV...``; see the module docstring."""

PID_FILE = "pid.json"
STARTED_MARKER = "started"  # written by the wrapper once inside its cgroups, before the task runs
SUSPENDED_MARKER = "suspended"  # fallback mode only: a stopped process group looks like any other
START_TIMEOUT_S = 5.0
KILL_WAIT_S = 3.0
"""How long after SIGKILL to wait before giving up on the wrapper too."""
LOST_EXIT_CODE = 128 + signal.SIGKILL
"""Recorded when the wrapper vanished without recording a status (it was SIGKILLed itself)."""
_POLL_S = 0.01
_DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


# --- /proc ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProcStat:
    """The fields of ``/proc/<pid>/stat`` the runtime needs."""

    state: str
    pgrp: int
    cpu_ticks: int  # utime + stime + cutime + cstime
    starttime: int  # clock ticks after boot; with the PID, identifies a process uniquely


def proc_stat(pid: int) -> ProcStat | None:
    """``/proc/<pid>/stat`` parsed, or ``None`` if there is no such process."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # The command name (field 2) may contain spaces and parentheses; it ends at the last ")".
    fields = text[text.rindex(")") + 2 :].split()
    # fields[0] is field 3 of proc(5): state, pgrp=5, utime..cstime=14..17, starttime=22.
    return ProcStat(
        state=fields[0],
        pgrp=int(fields[2]),
        cpu_ticks=sum(int(f) for f in fields[11:15]),
        starttime=int(fields[19]),
    )


def is_same_process(pid: int, starttime: int) -> bool:
    """Whether ``pid`` still names the live (not zombie) process that started at ``starttime``."""
    stat = proc_stat(pid)
    return stat is not None and stat.state != "Z" and stat.starttime == starttime


def group_members(pgid: int) -> set[int]:
    """Live processes of process group ``pgid`` (a whole-``/proc`` scan)."""
    members = set()
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            stat = proc_stat(int(entry.name))
            if stat is not None and stat.pgrp == pgid and stat.state != "Z":
                members.add(int(entry.name))
    return members


def _environment(pid: int) -> list[bytes]:
    try:
        return Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return []


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


# --- has it started? -----------------------------------------------------------------------


class StartVerdict(Enum):
    WAITING = "waiting"  # the wrapper is not yet inside its cgroups: look again
    STARTED = "started"  # the task runs (or ran and its status is still to come)
    EXITED = "exited"  # the task ran and its wrapper recorded its status
    FAILED = "failed"  # the wrapper ended before the task ran


@dataclass(frozen=True)
class StartLook:
    """One look at a task being started, read in this order: whether the wrapper had ended,
    then whether its exit status was recorded, then whether it marked the task started.  The
    wrapper writes the marker, then the status, then ends: so a wrapper seen ended has written
    everything it ever will, and a task that ends between the reads is seen started."""

    wrapper_ended: bool
    exit_recorded: bool
    marked_started: bool


def start_verdict(look: StartLook) -> StartVerdict:
    """What one :class:`StartLook` says about the start (never two looks mixed)."""
    if look.exit_recorded:
        return StartVerdict.EXITED
    if look.marked_started:
        return StartVerdict.STARTED
    if look.wrapper_ended:
        return StartVerdict.FAILED
    return StartVerdict.WAITING


# --- the runtime ----------------------------------------------------------------------------


@dataclass
class _Task:
    """What the runtime holds about one task (mutable; guarded by the runtime's lock)."""

    launch: TaskLaunch
    started_at: float
    dir: TaskDir
    pid: int | None  # the wrapper's; None only if the agent died between fork and pid.json
    starttime: int
    child: subprocess.Popen[bytes] | None = None  # set when this instance started it
    final: RunObservation | None = None  # once it exited: never read from disk again

    @property
    def cgroup(self) -> str:
        return self.dir.path.name


class ProcessRuntime:
    """Tasks as subprocesses in cgroups ``sluice/<cluster_id>_<node_id>/<task>``; see the module
    docstring.  The cluster id keeps two clusters' agents with the same node id on one machine
    (two local clusters) apart: neither reads, limits nor purges the other's cgroups.

    ``cgroup_root`` is where cgroup hierarchies are mounted (``None``: do not use cgroups).  If
    nothing usable is there, the runtime falls back to plain processes and ``describe()`` says so.
    """

    name = "process"

    def __init__(
        self,
        node_id: str,
        state_dir: Path,
        *,
        cluster_id: str = "sluice",
        cgroup_root: Path | None = Path("/sys/fs/cgroup"),
        freeze_timeout: float = cgroups.FREEZE_TIMEOUT_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._node_id = node_id
        self._scope = scope_name(cluster_id, node_id)
        self._store = StateStore.under(state_dir)
        self._freeze_timeout = freeze_timeout
        self._clock = clock
        self._lock = threading.RLock()
        self._tasks: dict[str, _Task] = {}
        self._unreadable: list[str] = []
        self._cpus = cgroups.host_cpus()
        self._taskset = shutil.which("taskset")
        self._cgroups, self._fallback_reason = _open_cgroups(cgroup_root, self._scope)
        self._adopt()

    # -- TaskRuntime -------------------------------------------------------------------------

    def describe(self) -> str:
        where = f"process runtime for node {self._node_id!r}"
        if self._cgroups is not None:
            text = f"{where}: {self._cgroups.describe()}, tasks in sluice/{self._scope}/<task>"
            if not self._cgroups.enforces("cpuset"):
                text += f"; cpuset by CPU affinity ({self._affinity_tool()})"
        else:
            text = (
                f"{where}: FALLBACK to plain processes ({self._fallback_reason}); cpuset by CPU "
                f"affinity ({self._affinity_tool()}), suspend by SIGSTOP/SIGCONT, CPU quota and "
                "memory limit NOT enforced"
            )
        text += f"; adopted {len(self._tasks)} task(s)"
        if self._unreadable:
            text += f"; ignored unreadable state in {', '.join(self._unreadable)}"
        return text

    def start(self, launch: TaskLaunch) -> None:
        cgroups.validate_limits(launch.limits, self._cpus)
        if not launch.argv:
            raise UserError("argv: must name a program to run")
        with self._lock:
            task_dir = self._store.claim(launch, self._tasks)
            task = _Task(launch, self._clock(), task_dir, pid=None, starttime=0)
            try:
                task_dir.write_launch(launch, task.started_at)
                self._spawn(task)
                self._tasks[launch.task_key] = task
                self._await_started(task)
            except BaseException:
                self._tasks.pop(launch.task_key, None)
                self._abandon(task)
                raise

    def observe(self) -> Sequence[RunObservation]:
        with self._lock:
            return [self._observe(self._tasks[key]) for key in sorted(self._tasks)]

    def stop(self, task_key: str, grace_seconds: float = 5.0) -> None:
        with self._lock:
            task = self._get(task_key)
            if self._finished(task):
                self._settle(task)
                return
            self._resume(task)
            term_deadline = time.monotonic() + grace_seconds
            kill_deadline = term_deadline + KILL_WAIT_S
            signalled: dict[int, int] = {}
            while not self._finished(task):
                now = time.monotonic()
                sig = signal.SIGTERM if now < term_deadline else signal.SIGKILL
                if now >= kill_deadline and task.pid is not None:
                    _signal(task.pid, signal.SIGKILL)  # the wrapper itself hangs: give up on it
                if now >= kill_deadline + KILL_WAIT_S:
                    raise RuntimeError_(
                        f"task {task_key!r}: processes {sorted(self._members(task))} survive "
                        "SIGKILL (stuck in uninterruptible sleep?)"
                    )
                for pid in self._members(task) - {task.pid}:
                    if signalled.get(pid) != sig:
                        _signal(pid, sig)
                        signalled[pid] = sig
                time.sleep(_POLL_S)
            self._settle(task)
            self._kill_leftovers(task)

    def suspend(self, task_key: str) -> None:
        with self._lock:
            task = self._require_live(task_key, "suspend")
            if self._is_suspended(task):
                return
            if self._cgroups is not None:
                self._cgroups.freeze(task.cgroup, self._freeze_timeout)
                return
            assert task.pid is not None  # a live task in fallback mode has a wrapper
            (task.dir.path / SUSPENDED_MARKER).touch()
            with contextlib.suppress(ProcessLookupError):
                os.killpg(task.pid, signal.SIGSTOP)
            try:
                self._await_group_stopped(task)
            except RuntimeError_:
                self._resume(task)  # do not leave it half stopped
                raise

    def resume(self, task_key: str) -> None:
        with self._lock:
            self._resume(self._get(task_key))

    def resize(self, task_key: str, limits: ResourceLimits) -> None:
        cgroups.validate_limits(limits, self._cpus)
        with self._lock:
            task = self._require_live(task_key, "resize")
            if self._cgroups is not None:
                self._cgroups.set_limits(task.cgroup, limits)
            if self._cgroups is None or not self._cgroups.enforces("cpuset"):
                cpus = set(limits.cpuset or self._cpus)
                for pid in self._members(task):
                    with contextlib.suppress(ProcessLookupError):
                        os.sched_setaffinity(pid, cpus)
            task.dir.update_limits(limits)
            task.launch = replace(task.launch, limits=limits)

    def promote(self, task_key: str, allocation_id: str, limits: ResourceLimits) -> None:
        cgroups.validate_limits(limits, self._cpus)
        with self._lock:
            task = self._require_live(task_key, "promote")
            regular = replace(
                task.launch, speculative=False, allocation_id=allocation_id, limits=limits
            )
            if task.launch.speculative and self._cgroups is not None:
                self._cgroups.set_weight(task.cgroup, speculative=False)
            task.launch = regular
            task.dir.write_launch(regular, task.started_at)
        self.resize(task_key, limits)

    def pressure_dir(self, task_key: str) -> Path | None:
        with self._lock:
            task = self._tasks.get(task_key)
            if task is None or self._cgroups is None:
                return None
            return self._cgroups.pressure_dir(task.cgroup)

    def service_host(self, task_key: str) -> str | None:
        return "127.0.0.1"  # a process shares the node's network

    def swap_bytes(self, task_key: str) -> int | None:
        with self._lock:
            task = self._tasks.get(task_key)
            if task is None or self._cgroups is None or not self._cgroups.exists(task.cgroup):
                return None
            return self._cgroups.swap_bytes(task.cgroup)

    def usage(self, task_key: str) -> TaskUsage:
        with self._lock:
            task = self._get(task_key)
            if self._cgroups is not None and self._cgroups.exists(task.cgroup):
                return self._cgroups.usage(task.cgroup)
            pids = self._members(task)  # the wrapper only if it still is the wrapper
            stats = [s for s in map(proc_stat, pids) if s is not None]
            ticks = sum(s.cpu_ticks for s in stats)
            return TaskUsage(
                cpu_seconds=ticks / os.sysconf("SC_CLK_TCK"),
                memory_bytes=cgroups.proc_rss_bytes(pids),
            )

    def logs(self, task_key: str) -> bytes:
        with self._lock:
            return self._get(task_key).dir.read_log()

    def cleanup(self, task_key: str) -> None:
        with self._lock:
            task = self._get(task_key)
            if not self._finished(task):
                raise RuntimeError_(f"task {task_key!r} is still running; stop it first")
            self._settle(task)
            self._kill_leftovers(task)
            if self._cgroups is not None:
                self._cgroups.remove(task.cgroup)

    def forget(self, task_key: str) -> None:
        with self._lock:
            self.cleanup(task_key)
            self._tasks.pop(task_key).dir.remove()

    def close(self) -> None:
        """Nothing to release: tasks keep running, and their wrappers record their exit."""

    # -- beyond the protocol -----------------------------------------------------------------

    def purge(self, grace_seconds: float = 1.0) -> None:
        """Stop every task, then remove all cgroups under ``sluice/<scope>`` and all state.

        Also kills processes left in cgroups of tasks whose state was lost, so nothing of this
        node remains (``sluice local down``).
        """
        with self._lock:
            for key in sorted(self._tasks):
                self.stop(key, grace_seconds)
                self.cleanup(key)
            if self._cgroups is not None:
                for name in self._cgroups.task_names():
                    self._kill_cgroup(name)
                self._cgroups.remove_node()
            self._tasks.clear()
            self._store.remove_all()

    @property
    def uses_cgroups(self) -> bool:
        return self._cgroups is not None

    # -- internals ---------------------------------------------------------------------------

    def _affinity_tool(self) -> str:
        return "taskset" if self._taskset else "NOT enforced at start: taskset missing"

    def _spawn(self, task: _Task) -> None:
        launch = task.launch
        procs: tuple[Path, ...] = ()
        if self._cgroups is not None:
            self._cgroups.create(task.cgroup, launch.limits)
            if launch.speculative:
                self._cgroups.set_weight(task.cgroup, speculative=True)
            procs = self._cgroups.procs_files(task.cgroup)
        argv = list(launch.argv)
        uses_affinity = self._cgroups is None or not self._cgroups.enforces("cpuset")
        if uses_affinity and launch.limits.cpuset and self._taskset:
            argv = [self._taskset, "-c", cgroups.format_cpuset(launch.limits.cpuset), *argv]
        env = {
            "PATH": os.environ.get("PATH", _DEFAULT_PATH),
            **launch.env,
            "SLUICE_TASK_KEY": launch.task_key,
            "SLUICE_JOB_ID": launch.job_id,
            "SLUICE_TASK_ID": launch.task_id,
            "SLUICE_ATTEMPT": str(launch.attempt),
            "SLUICE_TASK_DIR": str(task.dir.path),
            "SLUICE_CGROUP_PROCS": ":".join(str(p) for p in procs),
        }
        with task.dir.log_file.open("ab") as log:
            task.child = subprocess.Popen(
                ["/bin/sh", "-c", WRAPPER, "sluice-task", *argv],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=task.dir.path,
                start_new_session=True,  # own process group; survives the agent's death
                close_fds=True,
            )
        task.pid = task.child.pid
        stat = proc_stat(task.pid)
        task.starttime = stat.starttime if stat is not None else 0
        _write_pid_file(task)

    def _await_started(self, task: _Task) -> None:
        """Wait until the wrapper is inside its cgroups (or the task already finished): each
        verdict comes from one :class:`StartLook` (a task that exits between two reads of
        different looks was once reported as never started)."""
        if self._cgroups is None or task.child is None:
            return
        deadline = time.monotonic() + START_TIMEOUT_S
        while (verdict := start_verdict(self._look_at_start(task))) is StartVerdict.WAITING:
            if time.monotonic() > deadline:
                break
            time.sleep(_POLL_S / 5)
        if verdict in (StartVerdict.WAITING, StartVerdict.FAILED):
            output = task.dir.read_log().decode(errors="replace").strip().splitlines()
            raise RuntimeError_(  # one line: the last few lines of the wrapper's output
                f"task {task.launch.task_key!r} did not start"
                + (f" within {START_TIMEOUT_S:g} s" if verdict is StartVerdict.WAITING else "")
                + ": "
                + ("; ".join(output[-3:]) or "no output")
            )

    @staticmethod
    def _look_at_start(task: _Task) -> StartLook:
        """The reads of one :class:`StartLook`, in its order."""
        assert task.child is not None
        ended = task.child.poll() is not None
        recorded = task.dir.read_exit() is not None
        marked = (task.dir.path / STARTED_MARKER).exists()
        return StartLook(ended, recorded, marked)

    def _abandon(self, task: _Task) -> None:
        """Undo a failed start completely, so the key can be used again."""
        if task.child is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(task.child.pid, signal.SIGKILL)
            task.child.wait()
        if self._cgroups is not None:
            with contextlib.suppress(RuntimeError_):
                self._kill_cgroup(task.cgroup)
                self._cgroups.remove(task.cgroup)
        task.dir.remove()

    def _adopt(self) -> None:
        """Take over the tasks a previous instance started (see the module docstring)."""
        for task_dir in self._store.existing():
            try:
                launch, started_at = task_dir.read_launch()
            except (OSError, ValueError, KeyError, TypeError):
                self._unreadable.append(str(task_dir.path))
                continue
            if self._store.task(launch.task_key) != task_dir:
                self._unreadable.append(str(task_dir.path))
                continue
            task = _Task(launch, started_at, task_dir, pid=None, starttime=0)
            try:
                record = json.loads((task_dir.path / PID_FILE).read_text())
                task.pid, task.starttime = int(record["pid"]), int(record["starttime"])
            except (OSError, ValueError, KeyError):
                self._recover_pid(task)
            self._tasks[launch.task_key] = task

    def _recover_pid(self, task: _Task) -> None:
        """The agent died between fork and writing pid.json: the oldest cgroup member is the
        wrapper.  (In fallback mode such a task can only be reported as lost.)"""
        if self._cgroups is None or not self._cgroups.exists(task.cgroup):
            return
        members = [
            (s.starttime, pid)
            for pid in self._cgroups.pids(task.cgroup)
            if (s := proc_stat(pid)) is not None
        ]
        if members:
            task.starttime, task.pid = min(members)
            _write_pid_file(task)

    def _get(self, task_key: str) -> _Task:
        try:
            return self._tasks[task_key]
        except KeyError:
            raise UnknownTaskError(f"no task {task_key!r} on this node") from None

    def _require_live(self, task_key: str, action: str) -> _Task:
        task = self._get(task_key)
        if self._finished(task):
            raise RuntimeError_(f"cannot {action} task {task_key!r}: it has exited")
        return task

    def _wrapper_alive(self, task: _Task) -> bool:
        if task.child is not None:
            task.child.poll()  # reap our own child so it does not linger as a zombie
        return task.pid is not None and is_same_process(task.pid, task.starttime)

    def _members(self, task: _Task) -> set[int]:
        """Live processes of the task, the wrapper included."""
        if self._cgroups is not None:
            return self._cgroups.pids(task.cgroup) if self._cgroups.exists(task.cgroup) else set()
        if task.pid is None:
            return set()
        members = group_members(task.pid)
        if self._wrapper_alive(task):
            return members
        # The wrapper is gone, so its PID -- the group id -- may have been reused by an unrelated
        # process: keep only processes that carry this task's marker in their environment.
        marker = f"SLUICE_TASK_DIR={task.dir.path}".encode()
        return {pid for pid in members if marker in _environment(pid)}

    def _finished(self, task: _Task) -> bool:
        """The wrapper recorded a status, or nothing of the task is left to record one."""
        if task.final is not None or task.dir.read_exit() is not None:
            return True
        if self._wrapper_alive(task):
            return False
        # Re-read: the wrapper may have recorded the status just before it exited.
        return task.dir.read_exit() is not None or not (self._members(task) - {task.pid})

    def _settle(self, task: _Task) -> None:
        """Give a finished task whose wrapper died unrecorded the status of a SIGKILL."""
        if task.dir.read_exit() is None:
            task.dir.write_exit(LOST_EXIT_CODE)

    def _observe(self, task: _Task) -> RunObservation:
        if task.final is not None:
            return task.final
        finished = task.dir.read_exit()
        if finished is None and self._finished(task):
            self._settle(task)
            finished = task.dir.read_exit()
        if finished is not None:
            state = RunState.EXITED
        elif self._is_suspended(task):
            state = RunState.SUSPENDED
        else:
            state = RunState.RUNNING
        launch = task.launch
        observation = RunObservation(
            task_key=launch.task_key,
            job_id=launch.job_id,
            task_id=launch.task_id,
            attempt=launch.attempt,
            allocation_id=launch.allocation_id,
            state=state,
            limits=launch.limits,
            exit_code=None if finished is None else finished[0],
            started_at=task.started_at,
            finished_at=None if finished is None else finished[1],
            speculative=launch.speculative,
        )
        if finished is not None:
            task.final = observation  # an ended task's result never changes: remember it
        return observation

    def _is_suspended(self, task: _Task) -> bool:
        if self._cgroups is not None:
            return self._cgroups.exists(task.cgroup) and self._cgroups.is_frozen(task.cgroup)
        return (task.dir.path / SUSPENDED_MARKER).exists()

    def _resume(self, task: _Task) -> None:
        if not self._is_suspended(task):
            return
        if self._cgroups is not None:
            self._cgroups.thaw(task.cgroup, self._freeze_timeout)
            return
        if task.pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(task.pid, signal.SIGCONT)
        (task.dir.path / SUSPENDED_MARKER).unlink(missing_ok=True)

    def _await_group_stopped(self, task: _Task) -> None:
        deadline = time.monotonic() + self._freeze_timeout
        while True:
            states = [s.state for s in map(proc_stat, self._members(task)) if s is not None]
            if all(state in "Tt" for state in states):
                return
            if time.monotonic() > deadline:
                raise RuntimeError_(
                    f"task {task.launch.task_key!r}: SIGSTOP did not stop every process within "
                    f"{self._freeze_timeout:g} s"
                )
            time.sleep(_POLL_S / 5)

    def _kill_leftovers(self, task: _Task) -> None:
        """SIGKILL processes the task left behind (daemons in its cgroup or process group)."""
        if self._cgroups is not None:
            self._kill_cgroup(task.cgroup)
            return
        for pid in self._members(task):
            _signal(pid, signal.SIGKILL)
        self._wrapper_alive(task)  # reap

    def _kill_cgroup(self, name: str) -> None:
        """SIGKILL every process in a task cgroup and wait until it is empty."""
        assert self._cgroups is not None
        if not self._cgroups.exists(name):
            return
        if self._cgroups.is_frozen(name):
            self._cgroups.thaw(name, self._freeze_timeout)  # frozen processes cannot die
        deadline = time.monotonic() + KILL_WAIT_S
        while pids := self._cgroups.pids(name):
            for pid in pids:
                _signal(pid, signal.SIGKILL)
            for task in self._tasks.values():
                self._wrapper_alive(task)  # reap
            if time.monotonic() > deadline:
                raise RuntimeError_(f"cgroup {name}: processes {sorted(pids)} survive SIGKILL")
            time.sleep(_POLL_S)


def _write_pid_file(task: _Task) -> None:
    record = {"pid": task.pid, "starttime": task.starttime}
    atomic_write(task.dir.path / PID_FILE, json.dumps(record))


def _open_cgroups(root: Path | None, scope: str) -> tuple[cgroups.CgroupDriver | None, str]:
    """The cgroup driver to use, or ``None`` and why not."""
    if root is None:
        return None, "cgroups disabled"
    node = encode_name(scope)
    try:
        driver = cgroups.detect(root, node)
    except RuntimeError_ as e:
        return None, str(e)
    if driver is None:
        return None, f"no cgroup filesystem at {root}"
    try:
        driver.prepare_node()
    except (OSError, RuntimeError_) as e:
        return None, f"cgroups at {root} not writable: {e}"
    return driver, ""
