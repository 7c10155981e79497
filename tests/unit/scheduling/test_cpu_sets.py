"""Node-local cpuset choice: least-pinned CPUs first, ties to the lower id, never too many."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from policies.scheduling.cpu_sets import choose_cpuset


@pytest.mark.parametrize(
    ("node_cpus", "assigned", "cpu", "expected"),
    [
        ([0, 1, 2, 3], {}, 2.0, (0, 1)),
        ([0, 1, 2, 3], {}, 0.5, (0,)),  # a fraction still gets one CPU; quota does the rest
        ([0, 1, 2, 3], {}, 0.0, (0,)),
        ([0, 1, 2, 3], {}, 1.5, (0, 1)),
        ([0, 1, 2, 3], {}, 2.0000000001, (0, 1)),  # float noise does not cost a CPU
        ([0, 1, 2, 3], {"t1": [0, 1]}, 2.0, (2, 3)),
        ([0, 1, 2, 3], {"t1": [0, 1], "t2": [0, 2]}, 2.0, (1, 3)),  # 3 is free, 1 beats 0 and 2
        ([0, 1], {}, 8.0, (0, 1)),  # never more than the node has
        ([7, 3, 5], {"t": [3]}, 2.0, (5, 7)),
        ([0, 1], {"t": [0, 9]}, 1.0, (1,)),  # CPUs outside the node are ignored
        ([], {}, 1.0, ()),
    ],
)
def test_choose_cpuset(
    node_cpus: Sequence[int],
    assigned: Mapping[str, Sequence[int]],
    cpu: float,
    expected: tuple[int, ...],
):
    assert choose_cpuset(node_cpus, assigned, cpu) == expected


@given(
    st.lists(st.integers(0, 63), min_size=1, max_size=16, unique=True),
    st.dictionaries(st.text(max_size=3), st.lists(st.integers(0, 63), max_size=4), max_size=5),
    st.floats(0.0, 32.0),
)
def test_choice_is_sorted_unique_within_the_node_and_least_loaded(
    node_cpus: list[int], assigned: dict[str, list[int]], cpu: float
):
    chosen = choose_cpuset(node_cpus, assigned, cpu)
    assert list(chosen) == sorted(set(chosen))
    assert set(chosen) <= set(node_cpus)
    assert 1 <= len(chosen) <= len(node_cpus)
    load = {c: sum(c in cpus for cpus in assigned.values()) for c in node_cpus}
    left_out = set(node_cpus) - set(chosen)
    if left_out:
        assert max(load[c] for c in chosen) <= min(load[c] for c in left_out)
