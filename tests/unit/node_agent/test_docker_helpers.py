"""Pure helpers of the docker runtime: names, labels, limits, timestamps."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from node_agent.runtime import docker_runtime as dr
from node_agent.runtime.base import ResourceLimits, scope_name
from tests.unit.node_agent.conftest import make_launch

DOCKER_NAME = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.-]+")


@given(st.text(min_size=1), st.text(min_size=1))
def test_container_name_is_valid_for_any_node_and_key(node: str, key: str) -> None:
    assert DOCKER_NAME.fullmatch(dr.container_name(node, key))


def test_container_names_differ_when_sanitised_keys_collide() -> None:
    assert dr.container_name("n", "a/b") != dr.container_name("n", "a_b")
    assert dr.container_name("n1", "k") != dr.container_name("n2", "k")
    # two clusters with the same node id never share a container name
    assert dr.container_name(scope_name("a", "n1"), "k") != dr.container_name(
        scope_name("b", "n1"), "k"
    )


def test_labels_name_cluster_node_job_task_attempt_allocation_and_key() -> None:
    labels = dr.container_labels("lab", "node-7", make_launch(key="k1"))
    assert labels == {
        "sluice.cluster": "lab",
        "sluice.node": "node-7",
        "sluice.job": "job-1",
        "sluice.task": "task-0",
        "sluice.attempt": "1",
        "sluice.allocation": "alloc-9",
        "sluice.task_key": "k1",
    }


@pytest.mark.parametrize(
    ("limits", "quota", "cpuset", "memory"),
    [
        (ResourceLimits(cpu=0.5, memory_mb=64, cpuset=(1,)), 50_000, "1", 64 << 20),
        (ResourceLimits(cpu=2, memory_mb=1), 200_000, "0-3", 1 << 20),  # empty: all CPUs
    ],
)
def test_docker_limits(limits: ResourceLimits, quota: int, cpuset: str, memory: int) -> None:
    assert dr.docker_limits(limits, all_cpus=(0, 1, 2, 3)) == {
        "cpu_period": 100_000,
        "cpu_quota": quota,
        "cpuset_cpus": cpuset,
        "mem_limit": memory,
        "memswap_limit": memory,
    }


def test_limits_from_host_config_inverts_docker_limits() -> None:
    limits = ResourceLimits(cpu=1.5, memory_mb=300, cpuset=(0, 2))
    given_ = dr.docker_limits(limits, all_cpus=(0, 1, 2))
    host_config = {
        "CpuPeriod": given_["cpu_period"],
        "CpuQuota": given_["cpu_quota"],
        "CpusetCpus": given_["cpuset_cpus"],
        "Memory": given_["mem_limit"],
    }
    assert dr.limits_from_host_config(host_config) == limits


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1970-01-01T00:00:10.5Z", 10.5),
        ("1970-01-01T00:00:10.123456789Z", 10.123456789),
        ("1970-01-01T01:00:10+01:00", 10.0),
        ("0001-01-01T00:00:00Z", None),
        ("", None),
        (None, None),
        ("yesterday", None),
    ],
)
def test_parse_docker_time(text: str | None, expected: float | None) -> None:
    result = dr.parse_docker_time(text)
    assert result == pytest.approx(expected) if expected is not None else result is None
