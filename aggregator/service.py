"""The aggregator's gRPC face (``AggregatorService``): the machine list and the candidate list of
the latest round, for job masters whose replica is stale, and each machine's state for the CLI.
A thin translation of ``AggregatorState`` and ``Round`` into protobuf."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable

import grpc

from aggregator.state import AggregatorState
from policies.oversubscription.candidates import approximate_machines
from policies.oversubscription.config import OversubscriptionConfig
from policies.oversubscription.machine_filter import FilterPhase
from policies.oversubscription.rounds import Round
from sluice_pb import aggregator_pb2 as apb
from sluice_pb import aggregator_pb2_grpc as agrpc


class AggregatorServicer(agrpc.AggregatorServiceServicer):
    def __init__(self, state: AggregatorState, *, period_s: float, influxdb: bool) -> None:
        self._state = state
        self._period_s = period_s
        self._influxdb = influxdb

    def GetMachineList(
        self, request: apb.GetMachineListRequest, context: grpc.ServicerContext
    ) -> apb.MachineListReply:
        latest = self._state.latest
        if latest is None:
            return apb.MachineListReply()
        return apb.MachineListReply(
            machine_version=latest.machines.version,
            machines=latest.machines.names,
            message=latest.machine_list_message,
        )

    def GetCandidates(
        self, request: apb.GetCandidatesRequest, context: grpc.ServicerContext
    ) -> apb.CandidatesReply:
        latest = self._state.latest
        settings = self._state.settings
        if latest is None:
            return apb.CandidatesReply(ranking=settings.ranking_name)
        return candidates_reply(latest, settings.ranking_name, settings.config)

    def ListMachines(
        self, request: apb.ListMachinesRequest, context: grpc.ServicerContext
    ) -> apb.ListMachinesReply:
        settings = self._state.settings
        reply = apb.ListMachinesReply(
            load_metrics=settings.config.load_metrics,
            period_s=self._period_s,
            influxdb=self._influxdb,
        )
        latest = self._state.latest
        if latest is None:
            return reply
        reply.machine_version = latest.machines.version
        reply.candidate_version = latest.candidate_version
        loads = approximate_machines(latest.windows, settings.config).load
        rank = {name: position + 1 for position, name in enumerate(latest.ranked)}
        for index, node_id in enumerate(latest.machines.names):
            status = reply.machines.add(
                node_id=node_id,
                connected=bool(latest.windows.connected[index]),
                window_samples=self._state.window_length(node_id),
                approximated_load=[v if math.isfinite(v) else 0.0 for v in loads[index]],
                candidate=node_id in rank,
                rank=rank.get(node_id, 0),
                excluded_by=excluded_by(latest, index, settings.config),
                rating=self._state.score(node_id),
            )
            newest = self._state.newest_sample(node_id)
            if newest is not None:
                status.last_seen = newest.timestamp
                status.latest.CopyFrom(newest)
        return reply


def candidates_reply(
    latest: Round, ranking: str, config: OversubscriptionConfig | None = None
) -> apb.CandidatesReply:
    """The round as ``GetCandidates`` answers it; with ``config``, why the others are not
    candidates (``excluded_summary``)."""
    return apb.CandidatesReply(
        machine_version=latest.machines.version,
        candidate_version=latest.candidate_version,
        candidates=latest.ranked,
        message=latest.bit_vector_message,
        computed_at=latest.computed_at,
        ranking=ranking,
        excluded_summary=""
        if config is None
        else exclusion_summary(
            excluded_by(latest, index, config) for index in range(len(latest.machines.names))
        ),
    )


def exclusion_summary(reasons: Iterable[str]) -> str:
    """Machines' reasons for not being candidates (``excluded_by``; "" for a candidate)
    grouped, most common first: ``2 nodes overloaded (cpu_ut), 1 node disconnected``."""
    counts = Counter(reason for reason in reasons if reason)
    parts = []
    for reason, count in sorted(counts.items(), key=lambda item: (-item[1], item[0])):
        phase, _, dimension = reason.partition(": ")
        nodes = f"{count} node{'s' if count != 1 else ''}"
        parts.append(f"{nodes} {phase}" + (f" ({dimension})" if dimension else ""))
    return ", ".join(parts)


def excluded_by(latest: Round, index: int, config: OversubscriptionConfig) -> str:
    """Why machine ``index`` is not a candidate ("" if it is), naming the dimension over its
    threshold for an overloaded machine, e.g. ``overloaded: cpu_ut``."""
    phase = FilterPhase(int(latest.result.phase[index]))
    if phase is FilterPhase.CANDIDATE:
        return ""
    reason = phase.name.lower().replace("_", " ")
    dimension = int(latest.result.overloaded_dimension[index])
    if phase is FilterPhase.OVERLOADED and dimension >= 0:
        names = (*config.load_metrics, *config.queue_metrics)
        reason += f": {names[dimension]}"
    return reason
