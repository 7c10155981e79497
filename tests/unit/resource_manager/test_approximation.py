"""The drop ratio a job runs with: its priority's, or its own within the cluster's bound."""

from __future__ import annotations

from pathlib import Path

import pytest

from policies.approximation.dias_config import parse_dias_config
from policies.scheduling.jobspec import JobSpec, SpecError, parse_job_spec
from resource_manager.records import Approximation
from tests.builders import job_doc, phase_doc
from tests.unit.resource_manager.harness import Driver, add_node, new_core

DIAS = parse_dias_config(
    {"priorities": [{"priority": 0, "drop_ratio": 0.2, "max_drop_ratio": 0.4}]}
)


def core_with_dias(path: Path | str = ":memory:") -> Driver:
    core = new_core(path, dias=DIAS)
    add_node(core, "n1", cpu=16, memory_mb=16384)
    return core


def spec(priority: int = 0, asked: float | None = None, droppable: bool = True) -> JobSpec:
    extra: dict[str, object] = {"priority": priority}
    if asked is not None:
        extra["approximation"] = {"drop_ratio": asked}
    return parse_job_spec(
        job_doc(
            phase_doc("map", 10, droppable=droppable),
            phase_doc("reduce", 3, after=["map"]),
            **extra,
        )
    )


@pytest.mark.parametrize(
    ("job", "expected"),
    [
        (spec(), Approximation(0.2, 2, 0.15)),  # its priority's ratio; Fig. 6 at 0.2
        (spec(asked=0.35), Approximation(0.35, 3, 0.235)),  # 3 of 10 dropped: read at 0.3
        (spec(asked=0.0), Approximation(0.0, 0, 0.0)),
        (spec(priority=1), Approximation()),  # a priority without a ratio drops nothing
        (spec(droppable=False), Approximation()),
    ],
)
def test_the_jobs_approximation_is_fixed_at_submission(
    job: JobSpec, expected: Approximation
) -> None:
    submitted = core_with_dias().submit(job, client_mode=False, now=1.0)
    approximation = submitted.approximation
    assert (approximation.drop_ratio, approximation.dropped_tasks) == (
        expected.drop_ratio,
        expected.dropped_tasks,
    )
    assert approximation.expected_error == pytest.approx(expected.expected_error)
    assert approximation.approximate is (expected.dropped_tasks > 0)


def test_a_drop_ratio_past_the_bound_is_refused_and_nothing_is_created() -> None:
    core = core_with_dias()
    with pytest.raises(SpecError, match=r"approximation\.drop_ratio: 0\.5 is above"):
        core.submit(spec(asked=0.5), client_mode=False, now=1.0)
    assert core.list_jobs() == []


def test_the_approximation_survives_an_rm_restart(tmp_path: Path) -> None:
    path = tmp_path / "rm.db"
    job = core_with_dias(path).submit(spec(), client_mode=False, now=1.0)
    assert new_core(path, dias=DIAS).job(job.job_id).approximation == job.approximation
