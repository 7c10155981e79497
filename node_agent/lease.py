"""The node agent's lease on its tasks: fencing when the resource manager cannot be reached.

The RM declares a node lost after ``--node-timeout`` without a heartbeat, and its job masters
retry the node's tasks elsewhere.  A node cut off from the RM (a partition, a stopped RM) would
otherwise keep running the old attempts beside the retries until it reaches the RM again.  So
the agent holds a lease, as Kubernetes' and Nomad's clients do for their own allocations: the
RM tells it the node timeout at registration, every answered registration or heartbeat renews
it, and once it has not been renewed for :func:`plumbing.intervals.fence_after` (the node timeout
less a stop's grace and a monitor pass) the agent stops its tasks and job masters itself, except
the tasks of jobs that say ``on_node_lost: run_on``, and logs once which and why.

What must survive an agent restart is kept in ``<state-dir>/lease.json``: the node timeout, the
last renewal (by the monotonic clock, which is the machine's since boot: it is kept with the boot
id and ignored after a reboot) and the tasks that may run on.  A restarted agent does not fence
before its first attempt to register has ended: it may still be within the node timeout, and the
RM then lets it adopt its tasks.

:func:`fence_due` is the decision; :class:`Lease` is its state (thread-safe: the heartbeat loop
renews it, the monitor loop asks it, gRPC handlers mark tasks that may run on).
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from node_agent.runtime.task_state import atomic_write
from plumbing.intervals import HEARTBEATS_PER_NODE_TIMEOUT, fence_after

log = logging.getLogger(__name__)

LEASE_FILE = "lease.json"
BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
SAVE_EVERY_S = 1.0
"""A renewal is written at most this often (an older one on disk only fences a restarted agent
that cannot reach the RM sooner, never later)."""


@dataclass(frozen=True)
class LeaseView:
    """What the fencing decision looks at: the node timeout (0: unknown, never fence), the last
    renewal (monotonic, None: never), whether the agent already fenced since that renewal, and
    whether its first attempt to register has ended."""

    node_timeout: float
    renewed_at: float | None
    fenced: bool
    first_attempt_done: bool


def fence_due(view: LeaseView, now: float, monitor_interval: float) -> float | None:
    """The seconds since the last renewal if the agent must fence now, else None."""
    if view.fenced or not view.first_attempt_done or view.node_timeout <= 0:
        return None
    if view.renewed_at is None:
        return None  # never reached an RM that told its node timeout: nothing to count from
    silent = now - view.renewed_at
    return silent if silent >= fence_after(view.node_timeout, monitor_interval) else None


def retry_pause(
    backoff: float,
    interval: float,
    max_backoff: float,
    node_timeout: float,
    *,
    fenced: bool,
    rm_down: bool,
) -> float:
    """The wait before the next attempt to reach the RM, after an attempt that waited
    ``backoff`` failed: doubled, up to ``max_backoff`` (never below ``interval``).

    While an RM may be counting this node's silence (the node timeout is known, the agent has
    not fenced, and the RM's address does not refuse connections), never longer than a node
    timeout's share of attempts (``HEARTBEATS_PER_NODE_TIMEOUT``): an RM that is briefly away
    (just restarted, or too busy to answer one call) counts this node lost a node timeout after
    its last heartbeat, or after its own start, so an agent sleeping out a longer backoff is
    counted lost, and fences itself, before its next attempt (seen: an RM that restarted under
    load failed the agent's first call, the agent waited 8 s, and the RM's 5.5 s node timeout
    and the agent's lease both ran out in between).  With ``rm_down`` (connections refused: no
    RM runs to count anything) the backoff grows: the agent is woken as soon as one listens."""
    longer = min(backoff * 2, max(max_backoff, interval))
    if node_timeout > 0 and not fenced and not rm_down:
        longer = min(longer, max(node_timeout / HEARTBEATS_PER_NODE_TIMEOUT, interval))
    return longer


def _boot_id() -> str:
    try:
        return BOOT_ID.read_text().strip()
    except OSError:
        return ""


class Lease:
    """See the module docstring.  ``state_dir`` None: nothing is kept across restarts."""

    def __init__(self, state_dir: Path | None, monitor_interval: float) -> None:
        self._file = state_dir / LEASE_FILE if state_dir is not None else None
        self._monitor_interval = monitor_interval
        self._lock = threading.Lock()
        self._node_timeout = 0.0
        self._renewed_at: float | None = None
        self._fenced = False
        self._first_attempt_done = False
        self._run_on: set[str] = set()
        self._saved_at: float | None = None
        self._save_lock = threading.Lock()
        self._boot = _boot_id()
        self._load()

    # ------------------------------------------------------------------ the heartbeat loop

    def renewed(self, now: float, node_timeout: float | None = None) -> None:
        """The RM answered a registration (which says its ``node_timeout``) or a heartbeat
        at monotonic ``now``."""
        with self._lock:
            if node_timeout is not None:
                self._node_timeout = max(node_timeout, 0.0)
            self._renewed_at = now
            self._first_attempt_done = True
            if self._fenced:
                log.info("lease renewed: the resource manager is reachable again")
            self._fenced = False
            save = (
                node_timeout is not None
                or self._saved_at is None
                or now - self._saved_at >= SAVE_EVERY_S
            )
        if save:
            self._save(now)

    def not_counting(self, now: float) -> None:
        """No RM runs at its address (a connection there was refused): nobody can count this
        node lost, and an RM that starts there gives every node it recovered the whole node
        timeout to register, so the lease runs from ``now`` (monotonic), as if renewed.  Not
        after fencing: a fenced agent stays fenced until an RM answers."""
        with self._lock:
            if self._fenced:
                return
            self._renewed_at = now
            save = self._saved_at is None or now - self._saved_at >= SAVE_EVERY_S
        if save:
            self._save(now)

    def attempt_failed(self) -> None:
        """An attempt to reach the RM failed: from now on a restarted agent may fence."""
        with self._lock:
            self._first_attempt_done = True

    # ------------------------------------------------------------------ the monitor loop

    def due(self, now: float) -> float | None:
        """The seconds without the RM if the agent must fence now (once per expiry), else
        None.  The caller then fences and calls :meth:`fenced`."""
        with self._lock:
            view = LeaseView(
                self._node_timeout, self._renewed_at, self._fenced, self._first_attempt_done
            )
        return fence_due(view, now, self._monitor_interval)

    def fenced(self) -> None:
        with self._lock:
            self._fenced = True

    def fenced_problem(self) -> str | None:
        """Why no new work may start here now (the agent fenced and has not reached the RM
        since: the RM counts this node lost, so anything started would run beside its retry),
        or None."""
        with self._lock:
            if not self._fenced:
                return None
            timeout = self._node_timeout
        return (
            "this node has not reached the resource manager for longer than its node timeout "
            f"({timeout:g} s) and has fenced its tasks; nothing starts here until it is back"
        )

    @property
    def is_fenced(self) -> bool:
        with self._lock:
            return self._fenced

    @property
    def node_timeout(self) -> float:
        with self._lock:
            return self._node_timeout

    # ------------------------------------------------------------------ tasks that run on

    def run_on(self, key: str) -> None:
        """Task ``key``'s job says ``on_node_lost: run_on``: fencing leaves it running."""
        with self._lock:
            if key in self._run_on:
                return
            self._run_on.add(key)
        self._save(None)

    def runs_on(self, key: str) -> bool:
        with self._lock:
            return key in self._run_on

    def keep_only(self, live: Iterable[str]) -> None:
        """Forget the tasks that may run on but are no longer known here."""
        known = set(live)
        with self._lock:
            gone = self._run_on - known
            if not gone:
                return
            self._run_on &= known
        self._save(None)

    # ------------------------------------------------------------------ the state file

    def _save(self, now: float | None) -> None:
        if self._file is None:
            return
        with self._lock:
            record = {
                "boot_id": self._boot,
                "node_timeout": self._node_timeout,
                "renewed_at": self._renewed_at,
                "run_on": sorted(self._run_on),
            }
            if now is not None:
                self._saved_at = now
        try:
            with self._save_lock:  # (one temporary file: one writer at a time)
                atomic_write(self._file, json.dumps(record))
        except OSError as error:  # the lease still holds in memory; say so, once per failure
            log.warning("lease: %s cannot be written (%s)", self._file, error)

    def _load(self) -> None:
        if self._file is None or not self._file.exists():
            return
        try:
            record = json.loads(self._file.read_text())
            node_timeout = float(record["node_timeout"])
            renewed = record["renewed_at"]
            run_on = {str(key) for key in record["run_on"]}
            same_boot = bool(self._boot) and record.get("boot_id") == self._boot
        except (OSError, ValueError, KeyError, TypeError) as error:
            log.warning("lease: %s unreadable (%s): starting without it", self._file, error)
            return
        self._node_timeout = max(node_timeout, 0.0)
        self._run_on = run_on
        if same_boot and renewed is not None:
            with contextlib.suppress(TypeError, ValueError):
                self._renewed_at = float(renewed)
