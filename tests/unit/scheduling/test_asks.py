"""Every ask a job master sends is held to the job's spec."""

from __future__ import annotations

import pytest

from policies.scheduling.asks import AskError, PhaseAsk, check_asks
from tests.builders import job_spec, phase_doc, res

SPEC = job_spec(phase_doc("map", 4, cpu=1.0, memory_mb=256), phase_doc("sum", 1, after=["map"]))


@pytest.mark.parametrize(
    ("asks", "held", "error"),
    [
        ([PhaseAsk("map", 4, res(1.0, 256))], {}, None),
        ([PhaseAsk("map", 2, res(1.0, 256))], {"map": 2}, None),
        ([PhaseAsk("map", 0, res(1.0, 256)), PhaseAsk("sum", 1, res(1.0, 256))], {}, None),
        ([], {"map": 4}, None),
        (
            [PhaseAsk("reduce", 1, res(1.0, 256))],
            {},
            "asks[0].phase: the job has no phase 'reduce'",
        ),
        (
            [PhaseAsk("map", 1, res(1.0, 256)), PhaseAsk("map", 1, res(1.0, 256))],
            {},
            "asks[1].phase: 'map' is asked for twice (also asks[0])",
        ),
        (
            [PhaseAsk("map", 1, res(-1.0, 256))],  # negative resources: a 2-cpu node ran 17
            {},
            "asks[0].resources: must be phase 'map''s 1 cpu / 256 MiB, got -1 cpu / 256 MiB",
        ),
        (
            [PhaseAsk("map", 1, res(0.5, 256))],
            {},
            "asks[0].resources: must be phase 'map''s 1 cpu / 256 MiB",
        ),
        (
            [PhaseAsk("map", 40_000, res(1.0, 256))],  # held the RM's lock for 8.6 s
            {},
            "asks[0].count: 40000 is more than phase 'map' can still use (4 tasks, 0 containers",
        ),
        (
            [PhaseAsk("map", 3, res(1.0, 256))],
            {"map": 2},
            "asks[0].count: 3 is more than phase 'map' can still use (4 tasks, 2 containers held)",
        ),
        ([PhaseAsk("map", -1, res(1.0, 256))], {}, "asks[0].count: must not be negative, got -1"),
    ],
)
def test_asks_are_checked_against_the_spec(
    asks: list[PhaseAsk], held: dict[str, int], error: str | None
) -> None:
    if error is None:
        check_asks(SPEC, asks, held)
        return
    with pytest.raises(AskError) as caught:
        check_asks(SPEC, asks, held)
    assert str(caught.value).startswith(error)
