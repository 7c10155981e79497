"""The CLI names job and task states as plumbing.wire does, without importing it (issue 28:
plumbing.wire imports the job spec's parser, which `sluice jobs` does not need)."""

from __future__ import annotations

import pytest

from plumbing import wire
from sluice import render
from sluice_pb import common_pb2 as pb


@pytest.mark.parametrize("state", [*pb.JobState.values(), 99])
def test_a_job_state_is_named_as_the_wire_names_it(state: int) -> None:
    assert render.job_state_name(state) == wire.job_state_name(state)  # type: ignore[arg-type]


@pytest.mark.parametrize("state", [*pb.TaskState.values(), 99])
def test_a_task_state_is_named_as_the_wire_names_it(state: int) -> None:
    assert render.task_state_name(state) == wire.task_state_name(state)  # type: ignore[arg-type]
