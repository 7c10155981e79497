"""Delayed resumption: a preempted container resumes only after D fitting offers."""

from __future__ import annotations

import pytest

from policies.preemption.resumption import PreemptedContainer, Verdict, consider_offer

SUSPENDED = PreemptedContainer("c1", "node-7", held=(0.01, 64.0), original=(4.0, 4160.0))


def offers(count: int, delay: int) -> list[Verdict]:
    container = SUSPENDED
    verdicts = []
    for _ in range(count):
        decision = consider_offer(container, "node-7", (4.0, 4096.0), delay)
        verdicts.append(decision.verdict)
        container = decision.container
    return verdicts


@pytest.mark.parametrize(
    ("delay", "expected"),
    [
        (0, [Verdict.RESUME]),
        (1, [Verdict.DECLINE, Verdict.RESUME]),
        (3, [Verdict.DECLINE] * 3 + [Verdict.RESUME]),  # the paper's D = 3
    ],
)
def test_resumes_after_d_declined_offers(delay: int, expected: list[Verdict]) -> None:
    assert offers(delay + 1, delay) == expected


@pytest.mark.parametrize(
    ("node", "free"),
    [
        ("node-8", (64.0, 65536.0)),  # another machine never resumes it
        ("node-7", (3.0, 4096.0)),  # too little CPU to restore <4, 4160> from <0.01, 64>
        ("node-7", (4.0, 4000.0)),  # too little memory
    ],
)
def test_offers_that_cannot_resume_do_not_count(node: str, free: tuple[float, float]) -> None:
    decision = consider_offer(SUSPENDED, node, free, 3)
    assert decision.verdict is Verdict.IGNORE
    assert decision.container is SUSPENDED


def test_input_is_never_mutated() -> None:
    decision = consider_offer(SUSPENDED, "node-7", (4.0, 4096.0), 3)
    assert SUSPENDED.declined_offers == 0
    assert decision.container.declined_offers == 1


@pytest.mark.parametrize(
    ("free", "delay", "field"), [((1.0,), 3, "free"), ((4.0, 4096.0), -1, "delay_offers")]
)
def test_bad_arguments_name_the_field(free: tuple[float, ...], delay: int, field: str) -> None:
    with pytest.raises(ValueError, match=f"^{field}:"):
        consider_offer(SUSPENDED, "node-7", free, delay)
