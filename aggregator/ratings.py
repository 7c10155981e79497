"""Machine ratings from the task outcomes job masters publish (ROSE Alg. 3, Sec. 5.1).

Outcomes arrive one task at a time on the outcomes topic; a job's report is rated once its job
master says the job ended (or, for a job master that died without saying so, once the job has
been silent for ``abandon_after`` seconds).  Each period the aggregator folds the reports of the
jobs that ended since the last period into the scores with ``rate_machines``, so one job counts
once and its K most penalised machines only (Alg. 3 line 9).

Scores are kept by node id, so machines can join and leave the window store freely.  Not
thread-safe: the aggregator calls it under its lock.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from policies.oversubscription.machine_rating import (
    JobReport,
    MachineRatings,
    TaskOutcome,
    rate_machines,
)


@dataclass
class _OpenJob:
    last_update: float
    hosts: list[str] = field(default_factory=list)
    outcomes: list[TaskOutcome] = field(default_factory=list)


class RatingBook:
    """Open job reports, ended ones waiting for the next period, and every node's score."""

    def __init__(self, *, top_k: int, decay: float = 1.0, abandon_after: float = 3600.0) -> None:
        if top_k < 1:
            raise ValueError("top_k: must be a positive integer")
        self._top_k = top_k
        self._decay = decay
        self._abandon_after = abandon_after
        self._open: dict[str, _OpenJob] = {}
        self._ended: list[_OpenJob] = []
        self._scores: dict[str, float] = {}
        self.jobs_rated = 0

    def record(self, job_id: str, node_id: str, outcome: TaskOutcome, now: float) -> None:
        """One task attempt of ``job_id`` ended on ``node_id`` with ``outcome``."""
        job = self._open.setdefault(job_id, _OpenJob(last_update=now))
        job.last_update = now
        job.hosts.append(node_id)
        job.outcomes.append(outcome)

    def end_job(self, job_id: str) -> None:
        """The job ended: its report is rated at the next ``rate`` call."""
        job = self._open.pop(job_id, None)
        if job is not None:
            self._ended.append(job)

    def rate(self, now: float) -> None:
        """Fold the reports of the jobs that ended (or were abandoned) into the scores."""
        abandoned = [
            j for j, job in self._open.items() if now - job.last_update > self._abandon_after
        ]
        for job_id in abandoned:
            self.end_job(job_id)
        reports = self._ended
        self._ended = []
        nodes = sorted({host for job in reports for host in job.hosts} | set(self._scores))
        if not nodes:
            return
        index = {node: i for i, node in enumerate(nodes)}
        previous = np.array([self._scores.get(node, 0.0) for node in nodes])
        scores = rate_machines(
            [
                JobReport(
                    hosts=np.array([index[h] for h in job.hosts], dtype=np.int64),
                    outcomes=np.array([int(o) for o in job.outcomes], dtype=np.int64),
                )
                for job in reports
            ],
            len(nodes),
            top_k=self._top_k,
            previous=previous,
            decay=self._decay,
        )
        self._scores = {node: float(score) for node, score in zip(nodes, scores, strict=True)}
        self.jobs_rated += len(reports)

    def score(self, node_id: str) -> float:
        return self._scores.get(node_id, 0.0)

    def ratings(self, node_ids: tuple[str, ...]) -> MachineRatings:
        """The scores of ``node_ids``, in that order (0 for a node never penalised)."""
        return MachineRatings(np.array([self._scores.get(n, 0.0) for n in node_ids]))

    @property
    def open_jobs(self) -> int:
        return len(self._open)
