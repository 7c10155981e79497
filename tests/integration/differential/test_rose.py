"""Differential, ROSE (docs/oversubscription.md): the live cluster's agents and the simulated
nodes admit the same speculative tasks in the same order, with the same pass
(:func:`policies.oversubscription.node_pass.decide_pass`).

A blocker job holds every container its job master can get (its tasks held at a gate); a job
that opts into speculative work arrives, its asks wait, and after ``after_s`` its job master
places its tasks speculatively on the aggregator's candidates.  Each node's speculative CPU
quota (0.4 of 2 cores) admits one 0.5-cpu task at a time: the others wait in its queue and
start as the one before ends.  Then the gate opens and the blocker ends.

Speculative decisions are the agents', not the RM's, and are compared twice:

* **At the nodes**: each speculative task notes when it started and ended (on the host: the
  process runtime), and the simulation logs its nodes' admissions and ends
  (``OversubscribedSimulation.speculative_log``): every task admitted and ended at times within
  the tolerance, as many at once at most, and the same tasks in the first wave.
* **In the RM's decision trace**, what the job master reports in ``Allocate`` (``speculative``
  records: an attempt's outcome), each attempt's outcomes on their own: a job master reports
  only an attempt's latest outcome since its last call, and the live one's calls and its watch
  of the agents (every 0.5 s) are periodic where the simulated one's are not, so ``placed`` and
  ``queued`` may be folded into a later outcome on either side, and the last attempts'
  ``succeeded`` may not be reported at all (the job master exits first).  What is compared is
  each attempt's admission (``running``) and any other end (evicted, refused, ...); which node
  it went to is left out (the job master draws it from the candidates with its own random
  generator).

The simulated nodes queue as the agents do: a job master places one task per usable candidate
per round (Alg. 5 lines 1-3), and its next round comes at its interval after it placed some
(the simulator used to skip it until a task ended, so its nodes never queued anything and a
simulated quota of a whole node passed; it now fails here).

No task is evicted in this scenario: a regular task reclaiming memory on a live node comes when
the RM's heartbeat decides, which the test cannot hold to the simulated time closely enough yet."""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import yaml

from plumbing.wire import JOB_STATE_FROM_PB
from policies.oversubscription.config import OversubscriptionConfig
from policies.scheduling.lifecycle import JobState
from resource_manager.core import CoreSettings
from simulator.engine import SimSettings
from simulator.oversubscription import OversubscribedSimulation, OversubscriptionSettings
from simulator.workload import SimJob
from sluice import machines
from sluice.client import cluster_client_tls
from sluice_pb import resource_manager_pb2 as rm_pb
from tests.integration.cluster.harness import Cluster, Gate, phase, wait_until
from tests.integration.differential.harness import (
    NODES,
    TOLERANCE,
    assert_same_decisions,
    live_cluster,
    simulate,
)

pytestmark = pytest.mark.integration

THRESHOLDS = (0.9, 0.9, 1.0)  # the host's disk is shared with whatever else runs: not tested
AGENT_ARGS = ("--admission-thresholds", ",".join(f"{t:g}" for t in THRESHOLDS))
AGGREGATOR_ARGS = ("--load-threshold", "disk_ut=off", "--load-threshold", "disk_s_ut=off")
SPECULATIVE_TASKS, SLEEP_S = 4, 3  # on two nodes whose quota admits one at a time each
UNCOMPARED = {"placed", "queued", "succeeded"}
"""Outcomes a job master may fold into the next one before its next ``Allocate`` (placed,
queued), or not report at all (the last attempts' success: it may exit first)."""


def candidates(cluster: Cluster) -> list[str]:
    aggregator = cluster.info["data_plane"]["aggregator"]
    reply = machines.get_candidates(aggregator, cluster_client_tls(cluster.info))
    return list(reply.candidates)


def nodes(cluster: Cluster) -> list[rm_pb.NodeInfo]:
    return list(cluster.client.jobs.ListNodes(rm_pb.ListNodesRequest(), timeout=10).nodes)


def admissions(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The trace with each speculative attempt's :data:`UNCOMPARED` outcomes left out (what is
    left: admitted, i.e. ``running``, and an end but success) and its node, its outcomes a
    sequence of their own (``job/task``): the job master reports two tasks' ends in one call
    or in two, as they come, so only an attempt's own outcomes have an order."""
    kept: list[dict[str, Any]] = []
    for record in records:
        if record["decision"] != "speculative":
            kept.append(record)
        elif record["outcome"] not in UNCOMPARED:
            attempt = f"{record['job']}/{record['task']}.{record['attempt']}"
            kept.append({k: v for k, v in record.items() if k != "node"} | {"job": attempt})
    return kept


def stamped(path: Path) -> str:
    """A speculative task's script: it notes when it started and ended (the agent's admission
    as the task itself saw it), and sleeps between."""
    note = f'echo "$SLUICE_TASK_ID {{}} $(date +%s.%N)" >> {path}'
    return f"{note.format('admitted')}; sleep {SLEEP_S}; {note.format('succeeded')}"


def read_stamps(path: Path) -> list[tuple[str, str, float]]:
    return [
        (task, what, float(at))
        for task, what, at in (line.split() for line in path.read_text().splitlines())
    ]


Event = tuple[float, str, str]  # seconds after the first submission, task id, what


def assert_same_admissions(live: list[Event], simulated: list[Event]) -> None:
    """The agents and the simulated nodes admitted alike: every task admitted and ended on
    both sides at times within the tolerance, as many at once at most (the quota's), and the
    same tasks before the first one ended (the rest waited in the queues)."""
    shown = f"live: {sorted(live)}\nsimulated: {sorted(simulated)}"
    times = {(task, what): t for t, task, what in simulated}
    assert {(task, what) for _, task, what in live} == set(times), shown
    for t, task, what in live:
        assert TOLERANCE.allows(t, times[task, what]), f"{task} {what}\n{shown}"
    assert peak(live) == peak(simulated), shown
    assert first_wave(live) == first_wave(simulated), shown


def peak(events: list[Event]) -> int:
    """The most speculative tasks running at once (an end before a start at the same time)."""
    running = most = 0
    for _, _, what in sorted(events, key=lambda e: (e[0], e[2] == "admitted")):
        running += 1 if what == "admitted" else -1
        most = max(most, running)
    return most


def first_wave(events: list[Event]) -> set[str]:
    end = min(t for t, _, what in events if what != "admitted")
    return {task for t, task, what in events if what == "admitted" and t < end}


def test_speculative_admissions_are_decided_alike_live_and_simulated(
    tmp_path: Path, gate: Gate
) -> None:
    stamps = tmp_path / "stamps"
    with live_cluster(
        tmp_path,
        aggregator_period=1.0,
        agent_args=AGENT_ARGS,
        aggregator_args=AGGREGATOR_ARGS,
        max_master_share=0.5,
    ) as live:
        wait_until(lambda: len(candidates(live.cluster)) == NODES, 120, "both nodes candidates")
        blocker = live.submit(
            yaml.safe_dump(
                {
                    "name": "blocker",
                    "priority": 1,
                    "max_retries": 0,
                    # as many as fit beside the job masters: none is placed once the gate opens
                    "phases": [phase("hold", 7, gate.hold("sleep 1"), cpu=0.5)],
                }
            )
        )
        wait_until(
            lambda: all(n.capacity.cpu - n.allocated.cpu < 0.5 for n in nodes(live.cluster)),
            60,
            "the blocker holding every container",
        )
        speculative = live.submit(
            yaml.safe_dump(
                {
                    "name": "spec",
                    "priority": 10,
                    "max_retries": 0,
                    "speculative": {"after_s": 0.5},
                    "phases": [phase("map", SPECULATIVE_TASKS, stamped(stamps), cpu=0.5)],
                }
            )
        )
        spec_done = live.cluster.wait_final(speculative, timeout=240)
        gate.open(live.cluster, blocker, [])
        details = {blocker: live.cluster.wait_final(blocker, timeout=120)}
        details[speculative] = spec_done
        records = live.records()
    for detail in details.values():
        assert JOB_STATE_FROM_PB[detail.summary.state] is JobState.SUCCEEDED
    outcomes = [r["outcome"] for r in records if r["decision"] == "speculative"]
    assert "running" in outcomes, outcomes  # speculative work ran live
    rose = OversubscriptionSettings(
        placement="rose",
        usage_low=0.01,
        usage_high=0.01,
        after_s=0.5,
        aggregator_period=1.0,
        hot_fraction=0.0,
        specs_as_given=True,
        config=OversubscriptionConfig(admission_thresholds=THRESHOLDS, candidate_limit=NODES),
    )
    simulated = simulate(
        live,
        details,
        partial(_oversubscribed, rose=rose),
        core=CoreSettings(max_master_share=0.5),
    )
    assert_same_decisions(admissions(records), admissions(simulated.decisions))
    first = min(r["t"] for r in records if r["decision"] == "submit")
    assert isinstance(simulated, OversubscribedSimulation)
    assert simulated.speculative_log is not None
    assert_same_admissions(
        [(t - first, task, what) for task, what, t in read_stamps(stamps)],
        [(t, key.rsplit(".", 2)[1], what) for t, _, key, what in simulated.speculative_log],
    )


def _oversubscribed(
    jobs: list[SimJob],
    settings: SimSettings,
    seed: int,
    *,
    rose: OversubscriptionSettings,
    record_decisions: bool,
) -> OversubscribedSimulation:
    """The replay with the agents' speculative queues; a speculative task takes what its
    script sleeps (the live run measures no speculative task's time)."""
    sleeps = {"map": (float(SLEEP_S),) * SPECULATIVE_TASKS}
    jobs = [replace(j, durations=sleeps) if j.name == "spec" else j for j in jobs]
    return OversubscribedSimulation(jobs, settings, seed, rose, record_decisions=record_decisions)
