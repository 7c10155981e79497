"""Limits of the RM: submissions per minute per person, and what a node may register.

Submissions (a token bucket per user): one person submitting in a loop must not crowd everyone
else out: each user (the name in their certificate or bearer token) may submit ``per_minute``
jobs a minute on average, in bursts of as many.  A refused submission changes nothing; the error
says when to try again.  The buckets live in memory (a restart refills them) and are bounded: a
full bucket carries no information and is the first forgotten.

Nodes: a registration is refused unless its capacity is one a machine can have
(:func:`capacity_problem`) and its node name is one the operator approved (:class:`NodeNames`).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path

log = logging.getLogger(__name__)

MAX_USERS = 10_000


@dataclass
class _Bucket:
    tokens: float
    at: float


class SubmissionRate:
    def __init__(self, per_minute: int) -> None:
        """``per_minute``: 0 means no limit."""
        self.per_minute = per_minute
        self._buckets: dict[str, _Bucket] = {}

    def take(self, user: str, now: float) -> str | None:
        """Spend one submission of ``user`` at monotonic time ``now``, or say why not (one
        line naming the limit)."""
        if not self.per_minute or not user:
            return None
        rate = self.per_minute / 60.0
        bucket = self._buckets.get(user)
        if bucket is None:
            if len(self._buckets) >= MAX_USERS:
                self._forget_full(now)
            bucket = self._buckets[user] = _Bucket(float(self.per_minute), now)
        bucket.tokens = min(float(self.per_minute), bucket.tokens + (now - bucket.at) * rate)
        bucket.at = now
        if bucket.tokens < 1.0:
            wait = (1.0 - bucket.tokens) / rate
            return (
                f"submissions: {user} submitted more than {self.per_minute} jobs a minute, the "
                f"limit per user (--submissions-per-minute); try again in {wait:.1f} s"
            )
        bucket.tokens -= 1.0
        return None

    def _forget_full(self, now: float) -> None:
        rate = self.per_minute / 60.0
        full = [
            user
            for user, b in self._buckets.items()
            if b.tokens + (now - b.at) * rate >= self.per_minute
        ]
        for user in full or list(self._buckets)[: len(self._buckets) // 2]:
            del self._buckets[user]


# ---------------------------------------------------------------- what a node may register

# The largest machine a node may say it is.  Far above any machine built today (the largest
# single-system-image servers have a few thousand hardware threads and tens of TiB of memory),
# low enough that one agent claiming a made-up capacity (1e9 CPUs, once) cannot make the
# scheduler grant work that can never run, nor dwarf every other node in the shares and the
# scores computed over the cluster's capacity.
MAX_NODE_CPU = 4096.0
MAX_NODE_MEMORY_MB = 64 * 1024 * 1024  # 64 TiB


def capacity_problem(cpu: float, memory_mb: int) -> tuple[str, str] | None:
    """Why a node may not register with this capacity, as (field, problem), or None.  Each
    must be a finite number above 0 and at most what a machine can have (MAX_NODE_*)."""
    for name, value, most in (
        ("capacity.cpu", cpu, MAX_NODE_CPU),
        ("capacity.memory_mb", memory_mb, MAX_NODE_MEMORY_MB),
    ):
        if not math.isfinite(value) or value <= 0:
            return name, f"must be a finite number above 0, got {value!r}"
        if value > most:
            return name, f"{value:.15g} is more than a machine can have (at most {most:.15g})"
    return None


class NodeNames:
    """The node names the operator approved (``sluice rm --nodes-allowed``): glob patterns given
    on the command line, and those of a file, one a line (``#`` starts a comment), re-read when
    the file changes, so a new node is approved without restarting the RM.  With neither, any
    name is approved (certificates still bind an agent to the node they name)."""

    def __init__(self, patterns: tuple[str, ...] = (), file: Path | None = None) -> None:
        """Raises ValueError (one line) if ``file`` cannot be read."""
        self.patterns = patterns
        self.file = file
        self._stamp: tuple[int, int] | None = None
        self._from_file: tuple[str, ...] = ()
        if file is not None:
            self._reload(file)

    @property
    def restricted(self) -> bool:
        return bool(self.patterns) or self.file is not None

    def problem(self, node_id: str) -> str | None:
        """Why ``node_id`` may not register (one line saying how to approve it), or None."""
        if not self.restricted:
            return None
        if self.file is not None:
            try:
                self._reload(self.file)
            except ValueError as error:  # kept: the last patterns read stay in force
                log.warning("--nodes-allowed-file: %s; keeping the names read before", error)
        if any(fnmatchcase(node_id, p) for p in (*self.patterns, *self._from_file)):
            return None
        where = (
            f"add it to {self.file} (re-read at once)"
            if self.file is not None
            else "start the RM with --nodes-allowed for it"
        )
        return f"{node_id} is not an approved node name; to approve it, {where}"

    def _reload(self, file: Path) -> None:
        try:
            stat = file.stat()
            stamp = (stat.st_mtime_ns, stat.st_size)
            if stamp == self._stamp:
                return
            text = file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            raise ValueError(f"{file}: {getattr(error, 'strerror', None) or error}") from None
        patterns = []
        for line in text.splitlines():
            pattern = line.split("#", 1)[0].strip()
            if pattern:
                patterns.append(pattern)
        self._stamp, self._from_file = stamp, tuple(patterns)
