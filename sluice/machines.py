"""What the CLI shows of the data plane: each machine's approximated load and latest indicators
(``sluice nodes``) and the aggregator's candidate list with its versions (``sluice candidates``).

The aggregator is found through ``--aggregator``, else ``$SLUICE_AGGREGATOR``, else the data
plane the resource manager names (``GetClusterInfo``).
"""

from __future__ import annotations

import math
import os
import time
from typing import Any

import grpc

from plumbing.errors import UserError
from plumbing.rpc import channel, describe_rpc_error
from plumbing.tls import ClientTls
from sluice.client import RMClient
from sluice.render import table
from sluice_pb import aggregator_pb2 as apb
from sluice_pb import aggregator_pb2_grpc as agrpc
from sluice_pb import metrics_pb2 as mpb
from sluice_pb import resource_manager_pb2 as rm_pb

TIMEOUT = 10.0


def aggregator_address(flag: str | None, client: RMClient) -> str:
    """``flag``, else ``$SLUICE_AGGREGATOR``, else the aggregator the RM names; UserError when
    there is none.  (The RM names it as its agents and job masters reach it, which a user
    outside the cluster's network may not: deploy/ names it by service name.)"""
    if flag:
        return flag
    if os.environ.get("SLUICE_AGGREGATOR"):
        return os.environ["SLUICE_AGGREGATOR"]
    info = client.jobs.GetClusterInfo(rm_pb.GetClusterInfoRequest(), timeout=TIMEOUT)
    address: str = info.data_plane.aggregator_address
    if not address:
        raise UserError(
            "the resource manager names no aggregator (start it with --aggregator, "
            "or pass --aggregator HOST:PORT)"
        )
    return address


def list_machines(address: str, tls: ClientTls | None = None) -> apb.ListMachinesReply:
    reply: apb.ListMachinesReply = _ask(address, "ListMachines", apb.ListMachinesRequest(), tls)
    return reply


def get_candidates(address: str, tls: ClientTls | None = None) -> apb.CandidatesReply:
    reply: apb.CandidatesReply = _ask(address, "GetCandidates", apb.GetCandidatesRequest(), tls)
    return reply


def _ask(address: str, method: str, request: object, tls: ClientTls | None) -> Any:
    """One call to the aggregator; an RPC failure becomes a one-line UserError."""
    ch = channel(address, tls)
    try:
        return getattr(agrpc.AggregatorServiceStub(ch), method)(request, timeout=TIMEOUT)
    except grpc.RpcError as error:
        raise UserError(describe_rpc_error(error, f"the aggregator at {address}")) from None
    finally:
        ch.close()


# ---------------------------------------------------------------------------- rendering


def _percent(value: float) -> str:
    return f"{100 * value:.0f}%" if math.isfinite(value) else "-"


def _decimal(value: float) -> str:
    return f"{value:.1f}" if math.isfinite(value) else "-"


def load_summary(status: apb.MachineStatus, load_metrics: list[str]) -> str:
    """The approximated CPU and memory utilisation and 1-minute load, e.g. ``12% 40% 0.8``."""
    values = dict(zip(load_metrics, status.approximated_load, strict=False))
    if not values:
        return "-"
    return (
        f"{_percent(values.get('cpu_ut', math.nan))} {_percent(values.get('mem_ut', math.nan))} "
        f"{_decimal(values.get('load_avg_1', math.nan))}"
    )


def indicators(sample: mpb.NodeMetrics) -> str:
    """PSI (CPU "some", 10 s average) and CPI/MPKI, "-" where the machine has none."""
    psi = f"{sample.pressure.cpu.some_avg10:.1f}" if sample.pressure.HasField("cpu") else "-"
    cpi = f"{sample.cpi:.2f}" if sample.HasField("cpi") else "-"
    mpki = f"{sample.mpki:.2f}" if sample.HasField("mpki") else "-"
    return f"{psi} {cpi}/{mpki}"


def energy(sample: mpb.NodeMetrics) -> str:
    """Power over the last interval, the energy since the agent started and where both come
    from, e.g. ``41.5 W 12.3 kJ (model)``; "-" before the agent reported any."""
    if not sample.energy_source:
        return "-"
    return f"{sample.power_w:.1f} W {sample.energy_j / 1000:.1f} kJ ({sample.energy_source})"


def candidacy(status: apb.MachineStatus) -> str:
    if status.candidate:
        return f"#{status.rank}"
    return status.excluded_by or "-"


def machine_columns(status: apb.MachineStatus | None, load_metrics: list[str]) -> list[str]:
    """LOAD, PSI CPU / CPI/MPKI, CANDIDATE, DROPPED, POWER for one node (dashes when unknown)."""
    if status is None:
        return ["-"] * len(MACHINE_HEADERS)
    sample = status.latest
    return [
        load_summary(status, load_metrics),
        indicators(sample) if status.last_seen else "-",
        candidacy(status),
        str(sample.dropped_samples),
        energy(sample) if status.last_seen else "-",
    ]


MACHINE_HEADERS = ["LOAD CPU MEM LA1", "PSI CPI/MPKI", "CANDIDATE", "DROPPED", "POWER ENERGY"]


def node_columns(
    listing: apb.ListMachinesReply | None,
) -> tuple[list[str], dict[str, list[str]]] | None:
    """The extra columns of ``sluice nodes``: headers and cells by node id."""
    if listing is None:
        return None
    load_metrics = list(listing.load_metrics)
    return MACHINE_HEADERS, {m.node_id: machine_columns(m, load_metrics) for m in listing.machines}


def why_none(reply: apb.CandidatesReply, machines: int) -> str:
    """Why an empty candidate list is empty, as the aggregator summarised it, e.g. ``2 nodes
    overloaded (cpu_ut)``."""
    if machines == 0 and not reply.excluded_summary:
        return "the aggregator knows no machine yet (no agent's metrics have arrived)"
    if not reply.excluded_summary:
        return "the aggregator did not say why (an older aggregator)"
    return reply.excluded_summary


def candidates_text(
    reply: apb.CandidatesReply, listing: apb.ListMachinesReply, now: float | None = None
) -> str:
    """The versions line, one row per candidate (best first), then why the others are not."""
    now = time.time() if now is None else now
    if not reply.candidate_version:
        return "no candidate list yet (the aggregator has not ranked any machine)"
    load_metrics = list(listing.load_metrics)
    machines = {m.node_id: m for m in listing.machines}
    age = max(0.0, now - reply.computed_at)
    head = (
        f"candidates v{reply.candidate_version} over machine list v{reply.machine_version} "
        f"({reply.ranking}, {age:.0f} s ago): {len(reply.candidates)} of {len(machines)} machines"
    )
    rows = []
    for rank, node_id in enumerate(reply.candidates, start=1):
        status = machines.get(node_id)
        rows.append(
            [
                str(rank),
                node_id,
                load_summary(status, load_metrics) if status else "-",
                indicators(status.latest) if status and status.last_seen else "-",
            ]
        )
    excluded = sorted(
        [s.node_id, s.excluded_by or "-"] for s in machines.values() if not s.candidate
    )
    parts = [head]
    if not reply.candidates:
        parts.append(f"no candidates: {why_none(reply, len(machines))}")
    if rows:
        parts.append(table(["RANK", "NODE", *MACHINE_HEADERS[:2]], rows))
    if excluded:
        parts.append(table(["NOT A CANDIDATE", "WHY"], excluded))
    return "\n".join(parts)
