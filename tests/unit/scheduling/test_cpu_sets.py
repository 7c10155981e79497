"""Node-local cpuset choice by granted CPU: for every set of pinned tasks, the CPU granted to them
fits in the union of their cpusets (issue 27 item 15, issue 35 item 2)."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from policies.scheduling.cpu_sets import Pinned, choose_cpuset, fits


def holds(node_cpus: Sequence[int], pinned: Mapping[str, Pinned]) -> bool:
    """The invariant checked by brute force, independently of the max flow: the grants of the
    tasks pinned within any set of cores fit in that set."""
    cores = sorted(set(node_cpus))
    for size in range(1, len(cores) + 1):
        for subset in itertools.combinations(cores, size):
            inside = sum(p.cpu for p in pinned.values() if set(p.cpuset or cores) <= set(subset))
            if inside > size + 1e-6:
                return False
    return True


def place(node_cpus: Sequence[int], grants: Sequence[float]) -> dict[str, Pinned]:
    """Start tasks one after another, each seeing the ones before it."""
    pinned: dict[str, Pinned] = {}
    for index, cpu in enumerate(grants):
        pinned[f"t{index}"] = Pinned(choose_cpuset(node_cpus, pinned, cpu), cpu)
    return pinned


P = Pinned


@pytest.mark.parametrize(
    ("node_cpus", "pinned", "cpu", "expected"),
    [
        ([0, 1, 2, 3], {}, 2.0, (0, 1)),
        ([0, 1, 2, 3], {}, 0.5, (0,)),  # a fraction still gets one CPU; quota does the rest
        ([0, 1, 2, 3], {}, 0.0, (0,)),
        ([0, 1, 2, 3], {}, 1.5, (0, 1)),
        ([0, 1, 2, 3], {}, 2.0000000001, (0, 1)),  # float noise does not cost a CPU
        ([0, 1, 2, 3], {"t1": P([0, 1], 2.0)}, 2.0, (2, 3)),
        ([0, 1, 2, 3], {"t1": P([0, 1], 2.0), "t2": P([0, 2], 1.0)}, 1.0, (3,)),
        ([0, 1], {}, 8.0, (0, 1)),  # never more than the node has
        ([7, 3, 5], {"t": P([3], 1.0)}, 2.0, (5, 7)),
        ([0, 1], {"t": P([0, 9], 1.0)}, 1.0, (1,)),  # CPUs outside the node are ignored
        ([], {}, 1.0, ()),
        # The issue's cases, on a node of 2 cpus.  A 0.1-cpu job master on core 0, then a
        # 0.9-cpu task: it goes where 0.9 is free, not where the fewest tasks are.
        ([0, 1], {"jm": P([0], 0.1)}, 0.9, (1,)),
        ([0, 1], {"jm": P([0], 0.1), "a": P([1], 0.9)}, 0.9, (0,)),
        ([0, 1], {"a": P([0], 0.9), "jm": P([1], 0.1)}, 0.9, (1,)),  # counting tasks: core 0
        ([0, 1], {"a": P([0], 0.9)}, 0.9, (1,)),
        ([0, 1], {"a": P([0], 0.5), "b": P([1], 0.5)}, 0.5, (0,)),  # 0.5 fits beside 0.5
        ([0, 1], {"a": P([0], 0.9), "b": P([1], 0.3)}, 0.8, (0, 1)),  # only both cores hold it
        ([0, 1], {"a": P([], 1.0)}, 1.0, (1,)),  # empty cpuset: the whole node
        ([0, 1], {"a": P([0], 1.0), "b": P([1], 1.0)}, 0.5, (0, 1)),  # fits nowhere: unpinned
        # The spread that leaves most room together is found by moving a task's share.
        ([0, 1], {"a": P([0, 1], 0.5), "b": P([1], 0.5)}, 1.0, (0,)),
        ([0, 1, 2], {"a": P([0, 1], 1.5), "b": P([2], 0.5)}, 1.0, (1, 2)),
    ],
)
def test_choose_cpuset(
    node_cpus: Sequence[int], pinned: Mapping[str, Pinned], cpu: float, expected: tuple[int, ...]
):
    assert choose_cpuset(node_cpus, pinned, cpu) == expected


@pytest.mark.parametrize(
    ("grants", "cores_used"),
    [
        ([0.9, 0.9], 2),  # two 0.9-cpu tasks: one core each
        ([0.5, 0.5, 0.5], 2),  # three 0.5-cpu tasks: not all on one core
        ([0.1, 0.9, 0.9], 2),  # a job master first, then two tasks
        ([0.9, 0.1, 0.9], 2),  # a job master between them
        ([1.0, 0.5, 0.5], 2),
    ],
)
def test_the_issues_cases_on_two_cpus(grants: list[float], cores_used: int):
    pinned = place([0, 1], grants)
    assert holds([0, 1], pinned), pinned
    assert len({c for p in pinned.values() for c in p.cpuset}) == cores_used


@pytest.mark.parametrize(
    ("pinned", "expected"),
    [
        ({"a": P([0], 0.9), "b": P([0], 0.9)}, False),
        ({"a": P([0], 0.5), "b": P([0], 0.5), "c": P([0], 0.5)}, False),
        ({"a": P([0, 1], 1.5), "b": P([1], 0.5)}, True),
        ({"a": P([0, 1], 1.5), "b": P([1], 0.6)}, False),
        ({"a": P([], 1.5), "b": P([1], 0.5)}, True),
    ],
)
def test_fits_is_the_invariant(pinned: dict[str, Pinned], expected: bool):
    assert fits([0, 1], pinned) is expected
    assert holds([0, 1], pinned) is expected


GRANTS = st.integers(0, 60).map(lambda twentieths: twentieths / 20)  # 0 to 3 cpu, 0.05 apart


@settings(max_examples=300, deadline=None)
@given(
    st.integers(1, 6),
    st.lists(st.tuples(st.booleans(), GRANTS, st.integers(0, 30)), max_size=25),
)
def test_grants_that_fit_the_node_stay_within_their_cores(
    cores: int, operations: list[tuple[bool, float, int]]
):
    """For any sequence of starts (whose grants fit the node) and exits, the grants of the
    tasks pinned within any set of cores fit in it; each cpuset is sorted, within the node and
    at least as wide as the grant."""
    node_cpus = list(range(cores))
    pinned: dict[str, Pinned] = {}
    for index, (starts, cpu, which) in enumerate(operations):
        if not starts and pinned:
            del pinned[sorted(pinned)[which % len(pinned)]]
            continue
        if sum(p.cpu for p in pinned.values()) + cpu > cores + 1e-9:
            continue  # the RM grants no more than the node has
        chosen = choose_cpuset(node_cpus, pinned, cpu)
        assert list(chosen) == sorted(set(chosen))
        assert set(chosen) <= set(node_cpus)
        assert max(1, -int(-cpu // 1)) <= len(chosen) <= cores
        pinned[f"t{index}"] = Pinned(chosen, cpu)
        assert holds(node_cpus, pinned), pinned
        assert fits(node_cpus, pinned)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(0, 7), min_size=1, max_size=6, unique=True),
    st.dictionaries(
        st.text(max_size=3),
        st.tuples(st.lists(st.integers(0, 9), max_size=4), GRANTS),
        max_size=5,
    ),
    GRANTS,
)
def test_any_snapshot_gives_a_valid_choice(
    node_cpus: list[int], tasks: dict[str, tuple[list[int], float]], cpu: float
):
    """Whatever the live tasks (over-granted nodes, foreign CPUs included): a sorted, non-empty
    set within the node, which keeps the invariant whenever any set could."""
    pinned = {key: Pinned(cpuset, grant) for key, (cpuset, grant) in tasks.items()}
    chosen = choose_cpuset(node_cpus, pinned, cpu)
    assert list(chosen) == sorted(set(chosen))
    assert set(chosen) <= set(node_cpus)
    assert 1 <= len(chosen) <= len(node_cpus)
    if fits(node_cpus, {**pinned, "new": Pinned(node_cpus, cpu)}):
        assert fits(node_cpus, {**pinned, "new": Pinned(chosen, cpu)})
