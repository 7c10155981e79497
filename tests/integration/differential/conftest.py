"""Fixtures shared by the differential tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.cluster.harness import Gate
from tests.integration.differential.harness import TaskGates


@pytest.fixture
def gate() -> Iterator[Gate]:
    """A gate for holding tasks (harness.Gate), closed after the test."""
    held = Gate()
    yield held
    held.close()


@pytest.fixture
def gates() -> Iterator[TaskGates]:
    """A gate per task (harness.TaskGates), removed after the test."""
    held = TaskGates()
    yield held
    held.close()
