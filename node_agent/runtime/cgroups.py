"""Linux control groups for the process runtime: one cgroup per task, v1 and v2.

Every task lives at ``<hierarchy>/sluice/<node>/<task>`` in each hierarchy used, so several
agents on one machine never collide and removing ``sluice/<node>`` removes all of one agent.
A speculative task (ROSE Sec. 6.1, "resource isolation") has a tenth of a regular task's CPU
weight (:meth:`CgroupDriver.set_weight`), which an upgrade restores in place.  Departure: the
paper groups speculative tasks in a subtree of their own; a task cannot be upgraded out of
one without moving its processes between cgroups, which proved unreliable under load (a
moved task was found gone), so each task carries the low weight itself, as a Docker
container does.  Under contention N speculative tasks then get N tenths, not one.

* **v1** has one hierarchy per controller (``<root>/cpu``, ``<root>/cpuacct``, ``<root>/cpuset``,
  ``<root>/memory``, ``<root>/freezer``; co-mounted ``cpu,cpuacct`` is found too).  A new cpuset
  cgroup starts with empty ``cpuset.cpus``/``cpuset.mems`` and refuses processes until both are
  set, so every level copies them from its parent.
* **v2** is one unified tree; a controller works in a child only once it is enabled in every
  ancestor's ``cgroup.subtree_control``.  The freezer (``cgroup.freeze``) and ``cpu.stat`` need no
  controller.  Controllers bound to a v1 hierarchy (hybrid hosts) are missing from
  ``cgroup.controllers``; the driver then enforces only what it has and says so in ``describe()``.

Freezing is asynchronous in both versions: the driver writes the request and polls until the
kernel reports the group frozen, up to a deadline, and raises :class:`RuntimeError_` otherwise.

The module also holds the arithmetic from :class:`ResourceLimits` to kernel (and Docker) knobs.
"""

from __future__ import annotations

import contextlib
import errno
import os
import time
from collections.abc import Callable, Collection, Iterable
from pathlib import Path
from typing import ClassVar, Protocol

from node_agent.preemption import swap_bytes_v1, swap_bytes_v2
from node_agent.runtime.base import ResourceLimits, RuntimeError_, TaskUsage
from plumbing.errors import UserError

CFS_PERIOD_US = 100_000
"""CFS period for every task; the quota is ``cpu * CFS_PERIOD_US``."""

MIN_CFS_QUOTA_US = 1_000
"""The kernel rejects quotas below 1 ms."""

SLUICE_DIR = "sluice"
SPECULATIVE_SHARES_V1 = 102
"""``cpu.shares`` of a speculative task: a tenth of a regular task's default 1024."""
SPECULATIVE_WEIGHT_V2 = 10
"""``cpu.weight`` of a speculative task: a tenth of the default 100."""
REGULAR_SHARES_V1 = 1024
REGULAR_WEIGHT_V2 = 100
FREEZE_TIMEOUT_S = 5.0
_POLL_S = 0.005
_FIRST_POLL_S = 0.0002
_RMDIR_ATTEMPTS = 50

Clock = Callable[[], float]
Sleep = Callable[[float], None]


# --- limits -> knobs ------------------------------------------------------------------------


def cfs_quota_us(cpu: float) -> int:
    """CFS quota in microseconds per :data:`CFS_PERIOD_US` for ``cpu`` cores (at least 1 ms)."""
    return max(MIN_CFS_QUOTA_US, round(cpu * CFS_PERIOD_US))


def memory_limit_bytes(memory_mb: int) -> int:
    return memory_mb * 1024 * 1024


def format_cpuset(cpus: Iterable[int]) -> str:
    """Kernel list format: ``(0, 1, 2, 5)`` -> ``"0-2,5"``; the empty set -> ``""``."""
    ordered = sorted(set(cpus))
    ranges: list[str] = []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        ranges.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(ranges)


def parse_cpuset(text: str) -> tuple[int, ...]:
    """Inverse of :func:`format_cpuset` (sorted, without duplicates); raises ``ValueError``."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        low, dash, high = part.partition("-")
        first, last = int(low), int(high if dash else low)
        if first < 0 or last < first:
            raise ValueError(f"bad cpu range {part!r}")
        cpus.update(range(first, last + 1))
    return tuple(sorted(cpus))


def host_cpus() -> tuple[int, ...]:
    """CPU ids this process may run on (the node's CPUs as far as a task is concerned)."""
    return tuple(sorted(os.sched_getaffinity(0)))


def validate_limits(limits: ResourceLimits, cpus: Collection[int], field: str = "limits") -> None:
    """Raise :class:`UserError` naming the field if ``limits`` cannot be granted on ``cpus``."""
    if not limits.cpu > 0:
        raise UserError(f"{field}.cpu: must be > 0 cores, got {limits.cpu}")
    if limits.memory_mb <= 0:
        raise UserError(f"{field}.memory_mb: must be > 0, got {limits.memory_mb}")
    unknown = sorted(set(limits.cpuset) - set(cpus))
    if unknown:
        raise UserError(
            f"{field}.cpuset: no such CPU {format_cpuset(unknown)} on this node "
            f"(has {format_cpuset(cpus)})"
        )


# --- file access ----------------------------------------------------------------------------


def _write(path: Path, value: str) -> None:
    """One ``write(2)`` of ``value`` to a cgroup file, errors turned into one clear line."""
    try:
        with path.open("w") as f:
            f.write(value if value else "\n")  # an empty write would never reach the kernel
    except OSError as e:
        reason = {
            errno.EBUSY: "busy (limit below current usage?)",
            errno.EINVAL: "invalid value",
            errno.ENOENT: "no such file (controller not enabled?)",
            errno.EACCES: "permission denied",
            errno.EPERM: "not permitted",
        }.get(e.errno or 0, e.strerror or str(e))
        raise RuntimeError_(f"cgroup: writing {value!r} to {path} failed: {reason}") from e


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError as e:
        raise RuntimeError_(f"cgroup: reading {path} failed: {e.strerror or e}") from e


def _read_pids(procs: Path) -> set[int]:
    try:
        return {int(line) for line in procs.read_text().split()}
    except FileNotFoundError:
        return set()


def _rmdir_tree(path: Path, sleep: Sleep) -> None:
    """Remove a cgroup and its descendants, children first (cgroupfs only allows ``rmdir``).

    A cgroup whose last process just exited can report EBUSY for a moment, so retry briefly.
    """
    if not path.is_dir():
        return
    dirs = [Path(d) for d, _, _ in os.walk(path, topdown=False)]
    for d in dirs:
        for attempt in range(_RMDIR_ATTEMPTS):
            try:
                d.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError as e:
                if e.errno != errno.EBUSY or attempt == _RMDIR_ATTEMPTS - 1:
                    raise RuntimeError_(f"cgroup: cannot remove {d}: {e.strerror}") from e
                sleep(0.01)


# Polls between thaw-and-refreeze attempts while a v1 freeze stays in FREEZING.
_REFREEZE_EVERY = 20


def _wait_for(
    done: Callable[[], bool], timeout: float, clock: Clock, sleep: Sleep, what: str
) -> None:
    deadline = clock() + timeout
    pause = _FIRST_POLL_S
    while not done():
        if clock() >= deadline:
            raise RuntimeError_(f"cgroup: {what} did not complete within {timeout:g} s")
        sleep(pause)
        # The kernel usually finishes within half a millisecond: look again soon, then back off.
        pause = min(_POLL_S, pause * 2)


def proc_rss_bytes(pids: Iterable[int]) -> int:
    """Resident memory of ``pids`` from ``/proc`` (for when no memory controller counts it)."""
    page = os.sysconf("SC_PAGE_SIZE")
    total = 0
    for pid in pids:
        try:
            total += int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * page
        except (OSError, IndexError, ValueError):
            continue  # exited meanwhile
    return total


# --- drivers --------------------------------------------------------------------------------


class CgroupDriver(Protocol):
    """The cgroup operations of one node agent; ``task`` is the task's cgroup name."""

    version: int

    def describe(self) -> str:
        """What is enforced here, e.g. ``cgroup v1 (cpu, cpuset, memory, freezer)``."""
        ...

    def enforces(self, controller: str) -> bool:
        """Whether ``cpu``, ``cpuset`` or ``memory`` limits take effect."""
        ...

    def prepare_node(self) -> None:
        """Create ``sluice/<node>`` everywhere; raises ``OSError`` if cgroups are not writable."""
        ...

    def create(self, task: str, limits: ResourceLimits) -> None:
        """Create the task's cgroup(s) with ``limits`` (idempotent for an empty leftover)."""
        ...

    def exists(self, task: str) -> bool: ...

    def task_names(self) -> list[str]:
        """Names of the task cgroups present under ``sluice/<node>``."""
        ...

    def set_weight(self, task: str, *, speculative: bool) -> None:
        """A speculative task's tenth of the CPU weight, or a regular task's (where the cpu
        controller is enforced)."""
        ...

    def procs_files(self, task: str) -> tuple[Path, ...]:
        """The ``cgroup.procs`` files a process writes its PID to, to join the task."""
        ...

    def pids(self, task: str) -> set[int]:
        """Every process in the task's cgroup(s)."""
        ...

    def set_limits(self, task: str, limits: ResourceLimits) -> None: ...

    def freeze(self, task: str, timeout: float = FREEZE_TIMEOUT_S) -> None: ...

    def thaw(self, task: str, timeout: float = FREEZE_TIMEOUT_S) -> None: ...

    def is_frozen(self, task: str) -> bool: ...

    def usage(self, task: str) -> TaskUsage: ...

    def swap_bytes(self, task: str) -> int | None:
        """The task's memory in swap now, or None where the node cannot tell."""
        ...

    def pressure_dir(self, task: str) -> Path | None:
        """Where the task's PSI files are (cgroup v2 only)."""
        ...

    def remove(self, task: str) -> None:
        """Remove the task's cgroup(s); they must hold no process any more."""
        ...

    def remove_node(self) -> None:
        """Remove ``sluice/<node>`` (and ``sluice`` if no other agent uses it)."""
        ...


class CgroupV1:
    """Per-controller hierarchies under ``root`` (normally ``/sys/fs/cgroup``)."""

    version = 1
    _CANDIDATES: ClassVar[dict[str, tuple[tuple[str, str], ...]]] = {
        # controller -> (directory, file proving the controller is mounted there)
        "cpu": (("cpu", "cpu.cfs_quota_us"), ("cpu,cpuacct", "cpu.cfs_quota_us")),
        "cpuacct": (("cpuacct", "cpuacct.usage"), ("cpu,cpuacct", "cpuacct.usage")),
        "cpuset": (("cpuset", "cpuset.cpus"),),
        "memory": (("memory", "memory.limit_in_bytes"),),
        "freezer": (("freezer", "cgroup.procs"),),
    }

    def __init__(
        self, root: Path, node: str, *, clock: Clock = time.monotonic, sleep: Sleep = time.sleep
    ) -> None:
        self._clock, self._sleep = clock, sleep
        self._roots: dict[str, Path] = {}
        for controller, candidates in self._CANDIDATES.items():
            for directory, proof in candidates:
                if (root / directory / proof).exists():
                    self._roots[controller] = (root / directory).resolve()
                    break
        if "freezer" not in self._roots:
            raise RuntimeError_(f"cgroup v1: no freezer hierarchy under {root}")
        self._node_rel = Path(SLUICE_DIR) / node

    @staticmethod
    def present(root: Path) -> bool:
        return (root / "freezer" / "cgroup.procs").exists()

    def _hierarchies(self) -> list[Path]:
        """Distinct mounted hierarchies (co-mounted controllers share one)."""
        return sorted(set(self._roots.values()))

    def _dir(self, controller: str, task: str) -> Path:
        return self._roots[controller] / self._node_rel / task

    def describe(self) -> str:
        missing = [c for c in ("cpu", "cpuacct", "cpuset", "memory") if c not in self._roots]
        text = f"cgroup v1 ({', '.join(self._roots)})"
        return text + (f"; missing {', '.join(missing)}: not enforced" if missing else "")

    def enforces(self, controller: str) -> bool:
        return controller in self._roots

    def prepare_node(self) -> None:
        for hierarchy in self._hierarchies():
            self._mkdirs(hierarchy, self._node_rel)

    def _mkdirs(self, hierarchy: Path, rel: Path) -> None:
        """mkdir each level below ``hierarchy``; seed cpuset levels from their parent."""
        current = hierarchy
        for part in rel.parts:
            parent, current = current, current / part
            if current.is_dir():
                continue
            current.mkdir()
            if hierarchy == self._roots.get("cpuset"):
                for knob in ("cpuset.cpus", "cpuset.mems"):
                    _write(current / knob, _read(parent / knob).strip())

    def create(self, task: str, limits: ResourceLimits) -> None:
        for hierarchy in self._hierarchies():
            self._mkdirs(hierarchy, self._node_rel / task)
        self.set_limits(task, limits)

    def exists(self, task: str) -> bool:
        return self._dir("freezer", task).is_dir()

    def task_names(self) -> list[str]:
        names = set()
        for hierarchy in self._hierarchies():
            names.update(_subdirs(hierarchy / self._node_rel))
        return sorted(names)

    def set_weight(self, task: str, *, speculative: bool) -> None:
        if "cpu" in self._roots:
            shares = SPECULATIVE_SHARES_V1 if speculative else REGULAR_SHARES_V1
            _write(self._dir("cpu", task) / "cpu.shares", str(shares))

    def procs_files(self, task: str) -> tuple[Path, ...]:
        return tuple(h / self._node_rel / task / "cgroup.procs" for h in self._hierarchies())

    def pids(self, task: str) -> set[int]:
        return set().union(*(_read_pids(f) for f in self.procs_files(task)))

    def set_limits(self, task: str, limits: ResourceLimits) -> None:
        # Memory first: lowering it is what can fail (EBUSY), and then nothing has changed.
        if "memory" in self._roots:
            _write(
                self._dir("memory", task) / "memory.limit_in_bytes",
                str(memory_limit_bytes(limits.memory_mb)),
            )
        if "cpu" in self._roots:
            cpu = self._dir("cpu", task)
            _write(cpu / "cpu.cfs_period_us", str(CFS_PERIOD_US))
            _write(cpu / "cpu.cfs_quota_us", str(cfs_quota_us(limits.cpu)))
        if "cpuset" in self._roots:
            cpuset = self._dir("cpuset", task)
            cpus = format_cpuset(limits.cpuset) or _read(cpuset.parent / "cpuset.cpus").strip()
            _write(cpuset / "cpuset.cpus", cpus)

    def _freezer_state(self, task: str) -> str:
        return _read(self._dir("freezer", task) / "freezer.state").strip()

    def freeze(self, task: str, timeout: float = FREEZE_TIMEOUT_S) -> None:
        state = self._dir("freezer", task) / "freezer.state"
        _write(state, "FROZEN")
        polls = 0

        def frozen() -> bool:
            # v1 freezing can stall in FREEZING (a task caught in fork or vfork); as runc does,
            # ask again on every poll and thaw-then-freeze now and then to get it unstuck.
            nonlocal polls
            if self._freezer_state(task) == "FROZEN":
                return True
            polls += 1
            if polls % _REFREEZE_EVERY == 0:
                _write(state, "THAWED")
            _write(state, "FROZEN")
            return False

        try:
            _wait_for(
                frozen,
                timeout,
                self._clock,
                self._sleep,
                f"freezing {state.parent}",
            )
        except BaseException:  # a timeout, or an interrupt: never leave the task half frozen
            _write(state, "THAWED")
            raise

    def thaw(self, task: str, timeout: float = FREEZE_TIMEOUT_S) -> None:
        state = self._dir("freezer", task) / "freezer.state"
        _write(state, "THAWED")
        _wait_for(
            lambda: self._freezer_state(task) == "THAWED",
            timeout,
            self._clock,
            self._sleep,
            f"thawing {state.parent}",
        )

    def is_frozen(self, task: str) -> bool:
        """FROZEN, or stuck in FREEZING: either way it must be thawed before it can be killed."""
        return self._freezer_state(task) != "THAWED"

    def pressure_dir(self, task: str) -> Path | None:
        return None  # PSI per cgroup exists only on the unified hierarchy

    def swap_bytes(self, task: str) -> int | None:
        if "memory" not in self._roots:
            return None
        try:
            return swap_bytes_v1(_read(self._dir("memory", task) / "memory.stat"))
        except RuntimeError_:
            return None

    def usage(self, task: str) -> TaskUsage:
        if "cpuacct" in self._roots:
            cpu_ns = int(_read(self._dir("cpuacct", task) / "cpuacct.usage"))
        else:
            cpu_ns = 0
        if "memory" in self._roots:
            memory = int(_read(self._dir("memory", task) / "memory.usage_in_bytes"))
        else:
            memory = proc_rss_bytes(self.pids(task))
        return TaskUsage(cpu_seconds=cpu_ns / 1e9, memory_bytes=memory)

    def remove(self, task: str) -> None:
        for hierarchy in self._hierarchies():
            _rmdir_tree(hierarchy / self._node_rel / task, self._sleep)

    def remove_node(self) -> None:
        for hierarchy in self._hierarchies():
            _rmdir_tree(hierarchy / self._node_rel, self._sleep)
            _remove_if_unused(hierarchy / SLUICE_DIR)


class CgroupV2:
    """The unified hierarchy at ``root`` (``/sys/fs/cgroup``, or ``.../unified`` on hybrids)."""

    version = 2
    _WANTED = ("cpu", "cpuset", "memory")

    def __init__(
        self, root: Path, node: str, *, clock: Clock = time.monotonic, sleep: Sleep = time.sleep
    ) -> None:
        self._clock, self._sleep = clock, sleep
        self._root = root
        available = _read(root / "cgroup.controllers").split()
        self._controllers: tuple[str, ...] = tuple(c for c in self._WANTED if c in available)
        self._node = root / SLUICE_DIR / node

    @staticmethod
    def present(root: Path) -> bool:
        return (root / "cgroup.controllers").exists()

    def describe(self) -> str:
        missing = [c for c in self._WANTED if c not in self._controllers]
        text = f"cgroup v2 at {self._root} (freezer{''.join(', ' + c for c in self._controllers)})"
        return text + (f"; missing {', '.join(missing)}: not enforced" if missing else "")

    def enforces(self, controller: str) -> bool:
        return controller in self._controllers

    def prepare_node(self) -> None:
        enable = " ".join(f"+{c}" for c in self._controllers)
        level = self._root
        for part in (SLUICE_DIR, self._node.name):
            if enable:
                _write(level / "cgroup.subtree_control", enable)
            level = level / part
            level.mkdir(exist_ok=True)
        if enable:
            _write(level / "cgroup.subtree_control", enable)

    def _dir(self, task: str) -> Path:
        return self._node / task

    def create(self, task: str, limits: ResourceLimits) -> None:
        self._dir(task).mkdir(exist_ok=True)
        self.set_limits(task, limits)

    def exists(self, task: str) -> bool:
        return self._dir(task).is_dir()

    def task_names(self) -> list[str]:
        return _subdirs(self._node)

    def set_weight(self, task: str, *, speculative: bool) -> None:
        if "cpu" in self._controllers:
            weight = SPECULATIVE_WEIGHT_V2 if speculative else REGULAR_WEIGHT_V2
            _write(self._dir(task) / "cpu.weight", str(weight))

    def procs_files(self, task: str) -> tuple[Path, ...]:
        return (self._dir(task) / "cgroup.procs",)

    def pids(self, task: str) -> set[int]:
        return _read_pids(self._dir(task) / "cgroup.procs")

    def set_limits(self, task: str, limits: ResourceLimits) -> None:
        directory = self._dir(task)
        # Memory first: lowering it is what can fail (EBUSY), and then nothing has changed.
        if "memory" in self._controllers:
            _write(directory / "memory.max", str(memory_limit_bytes(limits.memory_mb)))
        if "cpu" in self._controllers:
            _write(directory / "cpu.max", f"{cfs_quota_us(limits.cpu)} {CFS_PERIOD_US}")
        if "cpuset" in self._controllers:
            # Empty means "the parent's CPUs" in v2, so no copying is needed.
            _write(directory / "cpuset.cpus", format_cpuset(limits.cpuset))

    def _events_frozen(self, task: str) -> bool:
        return "frozen 1" in _read(self._dir(task) / "cgroup.events").splitlines()

    def freeze(self, task: str, timeout: float = FREEZE_TIMEOUT_S) -> None:
        _write(self._dir(task) / "cgroup.freeze", "1")
        try:
            _wait_for(
                lambda: self._events_frozen(task),
                timeout,
                self._clock,
                self._sleep,
                f"freezing {self._dir(task)}",
            )
        except BaseException:  # a timeout, or an interrupt: never leave it half frozen
            _write(self._dir(task) / "cgroup.freeze", "0")
            raise

    def thaw(self, task: str, timeout: float = FREEZE_TIMEOUT_S) -> None:
        _write(self._dir(task) / "cgroup.freeze", "0")
        _wait_for(
            lambda: not self._events_frozen(task),
            timeout,
            self._clock,
            self._sleep,
            f"thawing {self._dir(task)}",
        )

    def is_frozen(self, task: str) -> bool:
        return self._events_frozen(task)

    def pressure_dir(self, task: str) -> Path | None:
        return self._dir(task) if self.exists(task) else None

    def swap_bytes(self, task: str) -> int | None:
        path = self._dir(task) / "memory.swap.current"
        try:
            return swap_bytes_v2(path.read_text())
        except OSError:
            return None

    def usage(self, task: str) -> TaskUsage:
        directory = self._dir(task)
        usec = 0
        for line in _read(directory / "cpu.stat").splitlines():
            key, _, value = line.partition(" ")
            if key == "usage_usec":
                usec = int(value)
        if "memory" in self._controllers:
            memory = int(_read(directory / "memory.current"))
        else:
            memory = proc_rss_bytes(self.pids(task))
        return TaskUsage(cpu_seconds=usec / 1e6, memory_bytes=memory)

    def remove(self, task: str) -> None:
        _rmdir_tree(self._dir(task), self._sleep)

    def remove_node(self) -> None:
        _rmdir_tree(self._node, self._sleep)
        _remove_if_unused(self._node.parent)


def _subdirs(directory: Path) -> list[str]:
    try:
        return sorted(e.name for e in os.scandir(directory) if e.is_dir())
    except FileNotFoundError:
        return []


def _remove_if_unused(directory: Path) -> None:
    """rmdir the shared ``sluice`` level unless another agent still has a node below it."""
    with contextlib.suppress(OSError):  # absent, or in use by another agent on this machine
        directory.rmdir()


def detect(
    root: Path, node: str, *, clock: Clock = time.monotonic, sleep: Sleep = time.sleep
) -> CgroupDriver | None:
    """The driver for the cgroup mount at ``root``, or ``None`` if there is none.

    A unified mount at ``root`` means v2; per-controller directories mean v1 (preferred on a
    hybrid host because the controllers live there); a lone ``root/unified`` means v2 there.
    """
    if CgroupV2.present(root):
        return CgroupV2(root, node, clock=clock, sleep=sleep)
    if CgroupV1.present(root):
        return CgroupV1(root, node, clock=clock, sleep=sleep)
    if CgroupV2.present(root / "unified"):
        return CgroupV2(root / "unified", node, clock=clock, sleep=sleep)
    return None
