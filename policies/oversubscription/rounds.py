"""One period of the cluster aggregator: rank the machines, version the result, and encode what
goes out over MQTT (ROSE Sec. 4-5.2).  Pure: the windows, ratings, ranking function and clock
reading are arguments, and the result is an immutable ``Round``.

Versions.  ``ver_m`` changes only when the set of machines does; ``ver_c`` changes every round.
Both start from the aggregator's start time in milliseconds rather than from 0, so that they
keep increasing across aggregator restarts: a job master ignores versions older than the ones
it holds, and would otherwise ignore a restarted aggregator until it caught up.

What goes out each round: the ``C`` bit vector, or the ``D`` delta against the previous round
when that is smaller and the machine list has not changed.  Every ``keyframe_every``-th round
is a bit vector regardless, so a job master that missed a delta and cannot ask the aggregator
recovers by itself.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from policies.oversubscription.candidate_sync import (
    MachineList,
    encode_candidates,
    encode_machine_list,
)
from policies.oversubscription.config import OversubscriptionConfig
from policies.oversubscription.machine_filter import FilterResult
from policies.oversubscription.machine_rating import MachineRatings
from policies.oversubscription.snapshot import MachineWindows

Ranking = Callable[[MachineWindows, MachineRatings, OversubscriptionConfig], FilterResult]
BoolArray = NDArray[np.bool_]

DEFAULT_KEYFRAME_EVERY = 6


@dataclass(frozen=True, eq=False)
class Round:
    """The outcome of one period.

    * ``machines``: the versioned machine list the membership refers to;
    * ``candidate_version``: ``ver_c`` of this round;
    * ``membership``: one flag per machine of ``machines``;
    * ``ranked``: the candidates' names, best first;
    * ``result``: the ranking function's full answer (why each machine is or is not in);
    * ``windows``: the windows that were ranked (for the CLI's per-machine view);
    * ``machine_list_message`` / ``bit_vector_message``: the ``L`` and ``C`` messages;
    * ``candidate_message``: what is published this round (``C`` or ``D``).
    """

    computed_at: float
    machines: MachineList
    candidate_version: int
    membership: BoolArray
    ranked: tuple[str, ...]
    result: FilterResult
    windows: MachineWindows
    machine_list_message: bytes
    bit_vector_message: bytes
    candidate_message: bytes


def first_versions(start_time: float) -> tuple[int, int]:
    """``(ver_m, ver_c)`` before the first round: the start time in milliseconds."""
    base = int(start_time * 1000)
    return base, base


def compute_round(
    previous: Round | None,
    start_versions: tuple[int, int],
    node_ids: tuple[str, ...],
    windows: MachineWindows,
    ratings: MachineRatings,
    config: OversubscriptionConfig,
    ranking: Ranking,
    now: float,
    keyframe_every: int = DEFAULT_KEYFRAME_EVERY,
) -> Round:
    """Rank ``windows`` (one row per ``node_ids`` entry) and version the answer.

    ``start_versions`` are the versions the first round builds on (``first_versions``); later
    rounds build on ``previous``.
    """
    if windows.machine_count != len(node_ids):
        raise ValueError("windows: expected one row per machine id")
    if ratings.scores.shape != (len(node_ids),):
        raise ValueError("ratings: expected one score per machine id")
    if keyframe_every < 1:
        raise ValueError("keyframe_every: must be a positive integer")
    if previous is None:
        base_m, base_c = start_versions
        machines = MachineList(version=base_m + 1, names=node_ids)
        candidate_version = base_c + 1
    else:
        same = previous.machines.names == node_ids
        machines = (
            previous.machines
            if same
            else MachineList(version=previous.machines.version + 1, names=node_ids)
        )
        candidate_version = previous.candidate_version + 1

    result = ranking(windows, ratings, config)
    membership = np.zeros(len(node_ids), dtype=np.bool_)
    membership[result.candidates] = True
    bit_vector = encode_candidates(machines.version, candidate_version, membership)
    outgoing = bit_vector
    keyframe = (candidate_version - start_versions[1]) % keyframe_every == 0
    if previous is not None and previous.machines is machines and not keyframe:
        outgoing = encode_candidates(
            machines.version,
            candidate_version,
            membership,
            previous=(previous.candidate_version, previous.membership),
        )
    membership.flags.writeable = False
    return Round(
        computed_at=now,
        machines=machines,
        candidate_version=candidate_version,
        membership=membership,
        ranked=tuple(node_ids[int(i)] for i in result.candidates),
        result=result,
        windows=windows,
        machine_list_message=(
            previous.machine_list_message
            if previous is not None and previous.machines is machines
            else encode_machine_list(machines)
        ),
        bit_vector_message=bit_vector,
        candidate_message=outgoing,
    )
