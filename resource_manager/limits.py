"""Per-person rate limits of the RM: submissions per minute, as a token bucket per user.

One person submitting in a loop must not crowd everyone else out: each user (the name in their
certificate or bearer token) may submit ``per_minute`` jobs a minute on average, in bursts of as
many.  A refused submission changes nothing; the error says when to try again.  The buckets live
in memory (a restart refills them) and are bounded: a full bucket carries no information and is
the first forgotten.
"""

from __future__ import annotations

from dataclasses import dataclass

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
