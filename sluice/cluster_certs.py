"""The certificates of a local cluster: a CA of its own and a TLS directory per daemon.

``sluice local up`` (and the demo) call :func:`ensure_certificates`: the first time it creates
``DIR/tls/ca`` and issues ``rm``, ``aggregator``, one ``agent-node-N`` per node,
``admin-USER`` for the person who started the cluster (it is theirs) and ``broker-mqtt`` for the
embedded MQTT broker's TLS listener; later it keeps what is there and still valid, and issues
only what is missing (a cluster grown by a node, an expired certificate).  The embedded Kafka
broker (Tansu) speaks no TLS, so it gets none.
"""

from __future__ import annotations

import getpass
import shutil
from dataclasses import dataclass
from pathlib import Path

from plumbing import tls
from plumbing.tls import Identity, Role, TlsError


@dataclass(frozen=True)
class ClusterCerts:
    ca: Path
    rm: Path
    aggregator: Path
    agents: dict[str, Path]  # node id -> its TLS directory
    client: Path
    mqtt_broker: Path  # the embedded MQTT broker's (role broker)


def local_user() -> str:
    """The name in the starting user's client certificate."""
    try:
        name = getpass.getuser()
    except (KeyError, OSError):
        name = "operator"
    try:
        return tls.check_name(name)
    except TlsError:
        return "operator"


def ensure_certificates(root: Path, cluster_id: str, node_ids: list[str]) -> ClusterCerts:
    """The cluster's CA and TLS directories under ``root``, created or renewed as needed."""
    ca_dir = root / "ca"
    authority = tls.load_ca(ca_dir) if (ca_dir / tls.CA_CERT).exists() else None
    if authority is None:
        authority = tls.init_ca(ca_dir, cluster_id)
    ca_pem = (ca_dir / tls.CA_CERT).read_bytes()
    user = local_user()
    wanted = {
        "rm": Identity(Role.RM, "rm"),
        "aggregator": Identity(Role.AGGREGATOR, "aggregator"),
        f"admin-{user}": Identity(Role.ADMIN, user),  # the cluster is theirs
        "broker-mqtt": Identity(Role.BROKER, "mqtt"),  # names localhost and 127.0.0.1
        **{f"agent-{node}": Identity(Role.AGENT, node) for node in node_ids},
    }
    for name, identity in wanted.items():
        directory = root / name
        if directory.exists():
            try:
                held = tls.load_tls_dir(directory)
                complete = identity.role is not Role.RM or (
                    (directory / tls.JOB_MASTER_CA_CERT).exists()
                )
                if held.identity == identity and held.ca_pem == ca_pem and complete:
                    continue
            except TlsError:
                pass  # expired or damaged: issue it again
            shutil.rmtree(directory)
        tls.issue(authority, identity, directory)
    return ClusterCerts(
        ca=ca_dir,
        rm=root / "rm",
        aggregator=root / "aggregator",
        agents={node: root / f"agent-{node}" for node in node_ids},
        client=root / f"admin-{user}",
        mqtt_broker=root / "broker-mqtt",
    )
