"""Locality in the scheduling pass (delay scheduling): an ask that names preferred nodes goes
to one of them if it fits, waits for them until its ``local_until``, and then takes any node."""

from __future__ import annotations

from dataclasses import replace

import pytest

from policies.scheduling.asks import MAX_PREFERRED_NODES, AskError, PhaseAsk, check_asks
from policies.scheduling.framework import (
    PassContext,
    PendingAsk,
    Refusal,
    baseline_profile,
    schedule_pass,
)
from tests.builders import job_spec, phase_doc, res
from tests.unit.scheduling.test_framework import index_of, pending


def place(ask: PendingAsk, now: float, *nodes: tuple[str, float, int, float, int]):
    index = index_of(*nodes)
    context = PassContext(now=now, cluster=index)
    return schedule_pass([ask], context, baseline_profile())


# (free cpu of the preferred node "busy", now) -> where the container goes (None: it waits)
@pytest.mark.parametrize(
    ("busy_free", "now", "node"),
    [
        (1.0, 0.0, "busy"),  # a preferred node with room wins over a less allocated one
        (1.0, 9.0, "busy"),  # ... after the wait too
        (0.0, 0.0, None),  # no room there: it waits for it during the locality wait
        (0.0, 2.9, None),
        (0.0, 3.0, "idle"),  # the wait is over: any node
    ],
)
def test_a_preferred_node_is_taken_first_and_waited_for_until_the_locality_wait_ends(
    busy_free: float, now: float, node: str | None
):
    ask = replace(pending("j"), preferred_nodes=frozenset({"busy"}), local_until=3.0)
    plan = place(ask, now, ("busy", 4, 4096, 4 - busy_free, 0), ("idle", 4, 4096, 0, 0))
    assert [p.node_id for p in plan.placements] == ([node] if node else [])
    assert [w.ask for w in plan.waiting] == ([] if node else [ask])
    if not node:
        assert plan.waiting[0].why == Refusal(
            "Locality", "waits for one of 1 nodes near its input until 3 s (locality wait)"
        )
    assert plan.preemptions == ()


def test_each_container_of_an_ask_goes_to_a_preferred_node_while_they_have_room():
    ask = replace(pending("j", count=3), preferred_nodes=frozenset({"a", "b"}), local_until=0.0)
    plan = place(ask, 0.0, ("a", 4, 4096, 3, 0), ("b", 4, 4096, 2, 0), ("c", 4, 4096, 0, 0))
    # b (2 free) then a and b (1 free each, a first by id), and none left for "c"
    assert sorted(p.node_id for p in plan.placements) == ["a", "b", "b"]


def test_an_unknown_preferred_node_is_ignored():
    ask = replace(pending("j"), preferred_nodes=frozenset({"gone"}), local_until=0.0)
    plan = place(ask, 0.0, ("a", 4, 4096, 0, 0))
    assert [p.node_id for p in plan.placements] == ["a"]


@pytest.mark.parametrize(
    ("nodes", "message"),
    [
        (("n1", ""), r"asks\[0\]\.preferred_nodes\[1\]: must be a node id, got an empty string"),
        (("n1", "n1"), r"asks\[0\]\.preferred_nodes\[1\]: 'n1' is named twice"),
        (
            tuple(f"n{i}" for i in range(MAX_PREFERRED_NODES + 1)),
            rf"asks\[0\]\.preferred_nodes: at most {MAX_PREFERRED_NODES} nodes",
        ),
    ],
)
def test_a_bad_preferred_node_list_is_refused(nodes: tuple[str, ...], message: str):
    spec = job_spec(phase_doc("p", 2, cpu=1, memory_mb=256))
    with pytest.raises(AskError, match=message):
        check_asks(spec, [PhaseAsk("p", 1, res(1, 256), nodes)], {})
