"""The aggregator's mutable state behind one lock: the metric windows, the machine ratings, the
newest sample of every machine and the latest round.

Threads: the Kafka thread calls ``ingest``, the period thread ``run_round``, gRPC handlers read
``latest`` and the per-machine queries.  Decisions are made by pure code
(``policies.oversubscription.rounds``, the ranking function, ``RatingBook``); this class only
decodes what arrives, keeps it, and takes consistent snapshots.  Decoding errors are counted and
logged, never raised: one bad message must not stop the pipeline.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass

from google.protobuf.message import DecodeError

from aggregator.kafka_reader import Record
from aggregator.ratings import RatingBook
from aggregator.samples import MachineSample, sample_from_metrics
from aggregator.windows import WindowStore
from policies.oversubscription.config import OversubscriptionConfig
from policies.oversubscription.machine_rating import TaskOutcome
from policies.oversubscription.rounds import Ranking, Round, compute_round, first_versions
from sluice_pb import metrics_pb2 as mpb

log = logging.getLogger("sluice.aggregator")

OUTCOME_FROM_PB = {
    mpb.TASK_OUTCOME_FINISHED: TaskOutcome.SUCCEEDED,
    mpb.TASK_OUTCOME_FAILED: TaskOutcome.FAILED,
    mpb.TASK_OUTCOME_KILLED: TaskOutcome.KILLED,
    mpb.TASK_OUTCOME_EVICTED: TaskOutcome.EVICTED,
    mpb.TASK_OUTCOME_STRAGGLER: TaskOutcome.TAILED,
    mpb.TASK_OUTCOME_LOST: TaskOutcome.CRASHED,  # the machine, not the task, gave way
}
OUTCOMES_SCHEMA_VERSION = 1


@dataclass(frozen=True)
class Settings:
    metrics_topic: str
    outcomes_topic: str
    window: int
    stale_after: float
    forget_after: float
    config: OversubscriptionConfig
    ranking: Ranking
    ranking_name: str


@dataclass
class Counters:
    samples: int = 0
    duplicates: int = 0
    malformed: int = 0
    outcomes: int = 0


class AggregatorState:
    """See the module docstring."""

    def __init__(self, settings: Settings, start_time: float) -> None:
        self.settings = settings
        self._lock = threading.Lock()
        self._windows = WindowStore(window=settings.window)
        self._ratings = RatingBook(
            top_k=settings.config.rating_top_k, decay=settings.config.rating_decay
        )
        self._latest_sample: dict[str, mpb.NodeMetrics] = {}
        self._start_versions = first_versions(start_time)
        self._round: Round | None = None
        self.counters = Counters()
        self._malformed_logged = 0

    # ------------------------------------------------------------------ input

    def refill(self, samples: Sequence[MachineSample]) -> int:
        """Put samples read back from InfluxDB into the windows; how many were new."""
        with self._lock:
            return sum(1 for sample in samples if self._windows.add(sample))

    def ingest(self, records: Sequence[Record], now: float) -> list[MachineSample]:
        """Decode and keep ``records``; the metric samples that were new (to be stored)."""
        accepted: list[MachineSample] = []
        with self._lock:
            for record in records:
                if record.topic == self.settings.metrics_topic:
                    sample = self._metrics(record)
                    if sample is not None:
                        accepted.append(sample)
                elif record.topic == self.settings.outcomes_topic:
                    self._outcome(record, now)
        return accepted

    def _metrics(self, record: Record) -> MachineSample | None:
        try:
            message = mpb.NodeMetrics.FromString(record.value)
            sample = sample_from_metrics(message)
        except (DecodeError, ValueError) as error:
            self._malformed(record, error)
            return None
        if not self._windows.add(sample):
            self.counters.duplicates += 1
            return None
        self.counters.samples += 1
        del message.tasks[:]  # the newest sample is kept for `sluice nodes`, without its tasks
        self._latest_sample[sample.node_id] = message
        return sample

    def _outcome(self, record: Record, now: float) -> None:
        try:
            event = mpb.OutcomeEvent.FromString(record.value)
            if event.schema_version != OUTCOMES_SCHEMA_VERSION:
                raise ValueError(f"schema_version: unknown version {event.schema_version}")
            if not event.job_id:
                raise ValueError("job_id: empty")
            kind = event.WhichOneof("event")
            if kind == "task":
                outcome = OUTCOME_FROM_PB.get(event.task.kind)
                if outcome is None or not event.task.node_id:
                    raise ValueError("task: needs a node_id and a known kind")
                self._ratings.record(event.job_id, event.task.node_id, outcome, now)
            elif kind == "job_ended":
                self._ratings.end_job(event.job_id)
            else:
                raise ValueError("event: neither task nor job_ended")
        except (DecodeError, ValueError) as error:
            self._malformed(record, error)
            return
        self.counters.outcomes += 1

    def _malformed(self, record: Record, error: Exception) -> None:
        self.counters.malformed += 1
        # Log the first few in full, then every 100th, so a flood cannot fill the disk.
        if self._malformed_logged < 10 or self.counters.malformed % 100 == 0:
            self._malformed_logged += 1
            log.warning(
                "skipping a malformed message on %s (key %r): %s (%d so far)",
                record.topic,
                record.key[:64],
                error,
                self.counters.malformed,
            )

    # ------------------------------------------------------------------ the period

    def run_round(self, now: float) -> Round:
        """Forget long-silent machines, fold in ended jobs, rank, and keep the new round."""
        settings = self.settings
        with self._lock:
            for node_id in self._windows.node_ids:
                seen = self._windows.last_seen(node_id)
                if seen is not None and now - seen > settings.forget_after:
                    log.info("forgetting %s: silent for %.0f s", node_id, now - seen)
                    self._windows.forget(node_id)
                    self._latest_sample.pop(node_id, None)
            self._ratings.rate(now)
            node_ids, windows = self._windows.snapshot(now, settings.stale_after)
            ratings = self._ratings.ratings(node_ids)
            previous = self._round
        result = compute_round(
            previous,
            self._start_versions,
            node_ids,
            windows,
            ratings,
            settings.config,
            settings.ranking,
            now,
        )
        with self._lock:
            self._round = result
        return result

    # ------------------------------------------------------------------ queries

    @property
    def latest(self) -> Round | None:
        with self._lock:
            return self._round

    def newest_sample(self, node_id: str) -> mpb.NodeMetrics | None:
        with self._lock:
            return self._latest_sample.get(node_id)

    def window_length(self, node_id: str) -> int:
        with self._lock:
            return self._windows.window_length(node_id)

    def score(self, node_id: str) -> float:
        with self._lock:
            return self._ratings.score(node_id)
