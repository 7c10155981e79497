"""Algorithm 1 (HandleTaskCompletion): every case of the reserve/release decision."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from policies.reservation.slot_decisions import (
    CompletionDecision,
    PhaseView,
    SlotAction,
    handle_task_completion,
)

RESERVE = SlotAction.RESERVE
RELEASE = SlotAction.RELEASE


def phase(
    m: int,
    n: int | None,
    finished_before: int,
    *,
    final: bool = False,
    threshold: float = 0.5,
    priority: int = 7,
) -> PhaseView:
    return PhaseView(
        job_priority=priority,
        num_tasks=m,
        finished_before=finished_before,
        downstream_num_tasks=n,
        is_final_phase=final,
        prereserve_threshold=threshold,
    )


@pytest.mark.parametrize(
    ("view", "expected"),
    [
        # final phase: release (line 3), whatever n says
        (phase(4, None, 0, final=True), CompletionDecision(RELEASE, None)),
        (phase(4, 8, 3, final=True), CompletionDecision(RELEASE, None)),
        # Case-1, n unknown: reserve every slot with the job's priority (line 8)
        (phase(4, None, 0), CompletionDecision(RESERVE, 7)),
        (phase(4, None, 3), CompletionDecision(RESERVE, 7)),
        # Case-2.1, m = n: reserve
        (phase(4, 4, 0), CompletionDecision(RESERVE, 7)),
        (phase(4, 4, 3), CompletionDecision(RESERVE, 7)),
        # Case-2.2, m > n: the first m - n = 2 finishers release, the rest reserve (lines 9-13)
        (phase(5, 3, 0), CompletionDecision(RELEASE, None)),
        (phase(5, 3, 1), CompletionDecision(RELEASE, None)),
        (phase(5, 3, 2), CompletionDecision(RESERVE, 7)),
        (phase(5, 3, 4), CompletionDecision(RESERVE, 7)),
        # Case-2.3, m < n, R = 0.5: reserve; the finisher taking the fraction past R asks n - m
        (phase(4, 10, 0), CompletionDecision(RESERVE, 7)),
        (phase(4, 10, 1), CompletionDecision(RESERVE, 7)),  # 2/4 = R, not past it
        (phase(4, 10, 2), CompletionDecision(RESERVE, 7, prereserve=6)),  # 3/4 > R
        (phase(4, 10, 3), CompletionDecision(RESERVE, 7)),  # already asked
        # R = 0: the first finisher asks; R = 1: nobody does
        (phase(4, 6, 0, threshold=0.0), CompletionDecision(RESERVE, 7, prereserve=2)),
        (phase(4, 6, 3, threshold=1.0), CompletionDecision(RESERVE, 7)),
    ],
)
def test_completion_decision(view: PhaseView, expected: CompletionDecision) -> None:
    assert handle_task_completion(view) == expected


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"num_tasks": 0, "finished_before": 0}, "num_tasks"),
        ({"num_tasks": 3, "finished_before": 3}, "finished_before"),
        ({"num_tasks": 3, "finished_before": -1}, "finished_before"),
        ({"num_tasks": 3, "finished_before": 0, "downstream_num_tasks": 0}, "downstream_num_tasks"),
        (
            {"num_tasks": 3, "finished_before": 0, "prereserve_threshold": 1.5},
            "prereserve_threshold",
        ),
    ],
)
def test_invalid_view_names_the_field(kwargs: dict[str, object], field: str) -> None:
    args: dict[str, object] = {"job_priority": 1, "downstream_num_tasks": None} | kwargs
    with pytest.raises(ValueError, match=f"^{field}:"):
        PhaseView(**args)  # type: ignore[arg-type]


@given(
    m=st.integers(1, 60),
    n=st.integers(1, 60),
    threshold=st.floats(0.0, 0.999),
)
def test_whole_phase_reserves_exactly_what_the_next_phase_needs(
    m: int, n: int, threshold: float
) -> None:
    decisions = [handle_task_completion(phase(m, n, k, threshold=threshold)) for k in range(m)]
    reserved = sum(d.action is RESERVE for d in decisions)
    asked = sum(d.prereserve for d in decisions)
    assert reserved == min(m, n)
    assert asked == max(n - m, 0)
    assert sum(d.prereserve > 0 for d in decisions) == (1 if n > m else 0)
    assert all(d.priority == (7 if d.action is RESERVE else None) for d in decisions)
