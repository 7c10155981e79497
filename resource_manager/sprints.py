"""The RM's sprint budget (DiAS Sec. 3.2-3.3): the shell around the pure sprinter of
:mod:`policies.approximation.sprinting`.

The RM keeps the budget and decides which jobs in execution sprint; the nodes carry it out on
the jobs' task containers (docs/approximation.md).  A job enters the sprinter when it enters
execution (its job master's container is granted) with its priority's timeout ``T_k`` from the
cluster's DiAS settings, and leaves it when it leaves execution (it ends, or is evicted).  Its
timer starts when the RM first sees one of its tasks running, not at the grant (a job master
takes seconds to start), and its sprint spends the budget only while it has tasks running
(between phases it keeps sprinting, spending nothing, and its next tasks sprint as they start).

What it holds (the budget as of a time, the jobs in execution and whether they sprint, and the
last sprints for ``sluice sprint``) is kept in the RM's store with the unit of work that changed
it, so the budget survives an RM restart: the time the RM was down counts as it would have
(a sprint went on, the budget drained and replenished).  Times are wall-clock seconds.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace

from policies.approximation.dias_config import DiasConfig
from policies.approximation.sprinting import (
    SprintConfig,
    SprinterState,
    SprintingJob,
    advance,
    dispatch,
    finish,
    initial_sprinter,
    next_change,
    tasks_changed,
)
from resource_manager.tables import Tables

SETTING = "dias_sprinter"
HISTORY_KEPT = 200  # sprints listed by `sluice sprint`


@dataclass(frozen=True)
class SprintRecord:
    """One job's sprint: when it began, when it ended (0 while it goes on) and how long it
    sprinted; ``why`` it ended (the job ended, the budget ran dry)."""

    job_id: str
    started_at: float
    ended_at: float = 0.0
    sprinted_s: float = 0.0
    why: str = ""


class SprintBook:
    """See the module docstring."""

    def __init__(self, dias: DiasConfig, tables: Tables) -> None:
        self.dias = dias
        self.config = SprintConfig(
            capacity=dias.sprint.budget_s, replenish_rate=dias.sprint.replenish_rate
        )
        self._tables = tables
        self.state: SprinterState | None = None  # None until the first time is known
        self.history: list[SprintRecord] = []
        self._load()

    @property
    def enabled(self) -> bool:
        """Does any priority sprint?"""
        return any(math.isfinite(p.sprint_timeout_s) for p in self.dias.priorities)

    def sprinting(self, job_id: str) -> bool:
        job = self.state.job(job_id) if self.state is not None else None
        return job is not None and job.sprinting

    def jobs_in(self) -> list[str]:
        """The jobs in the sprinter (in execution, as last told)."""
        return [j.job_id for j in self.state.jobs] if self.state is not None else []

    def at(self, now: float) -> SprinterState:
        """The sprinter as it is at ``now`` (nothing is changed)."""
        if self.state is None:
            return initial_sprinter(self.config, now)
        return advance(self.state, self.config, max(now, self.state.clock))

    def sprinted_until(self, job_id: str, when: float) -> float:
        """How long ``job_id`` will have sprinted once it leaves the sprinter at ``when`` (as
        :meth:`update` computes it; 0 for a job not in the sprinter)."""
        if self.state is None or self.state.job(job_id) is None:
            return 0.0
        _, record = finish(self.state, self.config, job_id, max(when, self.state.clock))
        return record.sprinted_time

    def budget_at(self, now: float) -> float:
        """The budget left at ``now``."""
        return self.at(now).budget

    def next_change(self) -> float | None:
        """When a sprint next starts or ends (wall), or None."""
        if self.state is None:
            return None
        change = next_change(self.state, self.config)
        return change if math.isfinite(change) else None

    def update(
        self,
        now: float,
        entered: Sequence[tuple[str, int, float]] = (),
        left: Sequence[tuple[str, float]] = (),
        running: Sequence[tuple[str, bool]] = (),
    ) -> list[str]:
        """Bring the sprinter to ``now``: jobs that ``entered`` execution (id, priority, when),
        that ``left`` it (id, when), and whether jobs have tasks ``running`` as of ``now`` (id,
        any running: a job that entered counts none until said here); returns the jobs whose
        sprinting changed."""
        if not self.enabled:
            return []
        before = self.state if self.state is not None else initial_sprinter(self.config, now)
        state = before
        was = {j.job_id: j.sprinting for j in state.jobs}
        history = list(self.history)
        for job_id, when in sorted(left, key=lambda item: item[1]):
            if state.job(job_id) is None:
                continue
            state, record = finish(state, self.config, job_id, max(when, state.clock))
            _close(history, record, state.clock, "the job left execution")
        for job_id, priority, when in sorted(entered, key=lambda item: item[2]):
            if state.job(job_id) is not None:
                continue
            timeout = self.dias.policy_of(priority).sprint_timeout_s
            state = dispatch(
                state, self.config, job_id, timeout, max(when, state.clock), tasks_running=False
            )
        at = max(now, state.clock)
        for job_id, any_running in running:
            state = tasks_changed(state, self.config, job_id, any_running, at)
        state = advance(state, self.config, at)
        changed = [j.job_id for j in state.jobs if j.sprinting != was.get(j.job_id, False)] + [
            job_id for job_id, sprinted in was.items() if sprinted and state.job(job_id) is None
        ]
        for job in state.jobs:
            if job.sprinting and not was.get(job.job_id, False):
                history.append(SprintRecord(job.job_id, started_at=job.due))
            elif was.get(job.job_id, False) and not job.sprinting:
                _close(history, job, state.clock, "the budget ran dry")
        del history[: max(0, len(history) - HISTORY_KEPT)]
        if _jobs_changed(before, state) or history != self.history or self.state is None:
            self._set(state, history)  # (a mere advance of the clock is recomputed, not kept)
        return changed

    # ------------------------------------------------------------------ persistence

    def _set(self, state: SprinterState, history: list[SprintRecord]) -> None:
        previous = (self.state, self.history)

        def undo() -> None:
            self.state, self.history = previous

        self._tables.journal(undo)
        self.state, self.history = state, history
        record = {
            "budget": state.budget,
            "clock": state.clock,
            "jobs": [asdict(j) for j in state.jobs],
            "history": [asdict(h) for h in history],
        }
        self._tables.save_setting(SETTING, json.dumps(record, sort_keys=True))

    def _load(self) -> None:
        text = self._tables.setting(SETTING)
        if not text:
            return
        record = json.loads(text)
        jobs = tuple(
            SprintingJob(
                job_id=str(j["job_id"]),
                timeout=float(j["timeout"]),
                dispatched_at=float(j["dispatched_at"]),
                sprinting=bool(j["sprinting"]),
                sprint_over=bool(j["sprint_over"]),
                sprinted_time=float(j["sprinted_time"]),
                # (a record kept before the clock started at the first task: as it was)
                first_task_at=float(j.get("first_task_at", j["dispatched_at"])),
                running=bool(j.get("running", True)),
            )
            for j in record.get("jobs", [])
        )
        budget = min(float(record["budget"]), self.config.capacity)  # (a smaller budget now)
        self.state = SprinterState(budget, float(record["clock"]), jobs)
        self.history = [SprintRecord(**h) for h in record.get("history", [])]


def _close(history: list[SprintRecord], job: SprintingJob, at: float, why: str) -> None:
    """End the open record of ``job``'s sprint, if it sprinted."""
    for index in range(len(history) - 1, -1, -1):
        record = history[index]
        if record.job_id == job.job_id and not record.ended_at:
            history[index] = replace(record, ended_at=at, sprinted_s=job.sprinted_time, why=why)
            return


def _jobs_changed(before: SprinterState, after: SprinterState) -> bool:
    """Did a job enter, leave, start or stop sprinting, or start or stop running tasks?"""
    flags = [(j.job_id, j.sprinting, j.sprint_over, j.running) for j in before.jobs]
    return flags != [(j.job_id, j.sprinting, j.sprint_over, j.running) for j in after.jobs]
