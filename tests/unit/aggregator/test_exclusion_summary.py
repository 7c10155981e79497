"""Why a candidate list is empty (issue 28 section 3): the aggregator groups each machine's
reason for not being a candidate, logs it and answers it with the candidate list."""

from __future__ import annotations

import pytest

from aggregator.service import exclusion_summary


@pytest.mark.parametrize(
    ("reasons", "summary"),
    [
        ([], ""),
        (["", ""], ""),  # every machine is a candidate
        (["overloaded: cpu_ut", "overloaded: cpu_ut"], "2 nodes overloaded (cpu_ut)"),
        (
            ["disconnected", "overloaded: cpu_ut", "", "overloaded: cpu_ut"],
            "2 nodes overloaded (cpu_ut), 1 node disconnected",
        ),
        (
            ["overloaded: load_avg_1", "overloaded: cpu_ut"],
            "1 node overloaded (cpu_ut), 1 node overloaded (load_avg_1)",
        ),
        (["low rating"], "1 node low rating"),
    ],
)
def test_exclusion_summary(reasons: list[str], summary: str) -> None:
    assert exclusion_summary(reasons) == summary
