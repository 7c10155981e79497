"""What the live oversubscription benchmarks share: a two-node local cluster on this machine
(process runtime, 2 cpu and 2 GiB per node, the aggregator ranking every second with its load
filter lifted), a phase
document, and the nodes the RM lists."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sluice import local_cluster
from sluice.client import RMClient, cluster_client_tls
from sluice_pb import resource_manager_pb2 as rm_pb


@contextmanager
def two_nodes(prefix: str, **spec: Any) -> Iterator[tuple[dict[str, Any], RMClient]]:
    """The cluster's info and a client to its RM; the cluster is stopped afterwards.
    ``spec``: more LocalClusterSpec fields (agent_args, oversubscription...)."""
    directory = Path(tempfile.mkdtemp(prefix=prefix))
    info = local_cluster.up(
        local_cluster.LocalClusterSpec(
            directory=directory,
            nodes=2,
            cpus_per_node=2.0,
            memory_mb_per_node=2048,
            aggregator_period=1.0,
            max_master_share=0.5,
            # Both "nodes" are this machine, which a benchmark may saturate: its load must not
            # take them off the aggregator's list (the agents' own thresholds still apply).
            aggregator_args=tuple(
                flag
                for metric in ("cpu_ut", "mem_ut", "load_avg_1")
                for flag in ("--load-threshold", f"{metric}=off")
            ),
            **spec,
        ),
        lambda _: None,
    )
    client = RMClient.connect(str(info["rm"]), cluster_client_tls(info))
    try:
        yield info, client
    finally:
        client.close()
        local_cluster.down(directory, lambda _: None)


def phase(name: str, tasks: int, script: str, cpu: float) -> dict[str, Any]:
    """A phase of ``tasks`` shell tasks of ``cpu`` and 64 MiB."""
    return {
        "name": name,
        "tasks": tasks,
        "command": ["sh", "-c", script],
        "resources": {"cpu": cpu, "memory_mb": 64},
    }


def nodes(client: RMClient) -> list[Any]:
    return list(client.jobs.ListNodes(rm_pb.ListNodesRequest(), timeout=10).nodes)
