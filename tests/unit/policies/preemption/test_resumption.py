"""Delayed resumption: a preempted container resumes only after D fitting offers."""

from __future__ import annotations

import pytest

from policies.preemption.resumption import PreemptedContainer, Verdict, consider_offer
from policies.scheduling.resources import Resources

R = Resources
# suspended to the paper's footprint <0.01, 64 MB>; it lacks <3.99, 4096> to resume
SUSPENDED = PreemptedContainer("c1", "node-7", held=R(0.01, 64), original=R(4.0, 4160))


def offers(count: int, delay: int) -> list[Verdict]:
    container = SUSPENDED
    verdicts = []
    for _ in range(count):
        decision = consider_offer(container, "node-7", R(4.0, 4096), delay)
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
    ("node", "free", "verdict"),
    [
        ("node-8", R(64.0, 65536), Verdict.IGNORE),  # another machine never resumes it
        ("node-7", R(3.0, 4096), Verdict.IGNORE),  # too little CPU
        ("node-7", R(4.0, 4095), Verdict.IGNORE),  # one MiB short: memory is exact
        ("node-7", R(4.0, -1), Verdict.IGNORE),  # an over-allocated node offers nothing
        ("node-7", R(3.99, 4096), Verdict.DECLINE),  # exactly what it lacks fits
    ],
)
def test_only_fitting_offers_on_its_node_count(
    node: str, free: Resources, verdict: Verdict
) -> None:
    decision = consider_offer(SUSPENDED, node, free, 3)
    assert decision.verdict is verdict
    if verdict is Verdict.IGNORE:
        assert decision.container is SUSPENDED


def test_input_is_never_mutated() -> None:
    decision = consider_offer(SUSPENDED, "node-7", R(4.0, 4096), 3)
    assert SUSPENDED.declined_offers == 0
    assert decision.container.declined_offers == 1


def test_bad_delay_names_the_field() -> None:
    with pytest.raises(ValueError, match=r"^delay_offers:"):
        consider_offer(SUSPENDED, "node-7", R(4.0, 4096), -1)
