"""Rules for the names that travel between components and become file, cgroup and container
names: node ids and cluster ids.

They come from the network (an agent's registration) or from flags, so they are checked before
anything is created from them: printable ASCII only, no path separators, no control characters.
"""

from __future__ import annotations

import re

MAX_NODE_ID = 253  # a fully qualified host name, the usual node id
MAX_CLUSTER_ID = 63

_NODE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_CLUSTER_ID = re.compile(r"[a-z0-9][a-z0-9-]*")


def node_id_problem(node_id: str) -> str | None:
    """Why ``node_id`` cannot name a node, or None when it can.

    A node id is 1-253 letters, digits, '.', '_' or '-', starting with a letter or digit: host
    names qualify; control characters, spaces and '/' do not."""
    if not node_id:
        return "must not be empty"
    if len(node_id) > MAX_NODE_ID:
        return f"must be at most {MAX_NODE_ID} characters, got {len(node_id)}"
    if not _NODE_ID.fullmatch(node_id):
        return (
            f"{node_id!r} must be letters, digits, '.', '_' or '-', starting with a letter or digit"
        )
    return None


def cluster_id_problem(cluster_id: str) -> str | None:
    """Why ``cluster_id`` cannot name a cluster, or None when it can: 1-63 lower-case letters,
    digits or '-', starting with a letter or digit (it becomes part of Docker container names
    and cgroup paths)."""
    if not cluster_id:
        return "must not be empty"
    if len(cluster_id) > MAX_CLUSTER_ID:
        return f"must be at most {MAX_CLUSTER_ID} characters, got {len(cluster_id)}"
    if not _CLUSTER_ID.fullmatch(cluster_id):
        return f"{cluster_id!r} must be lower-case letters, digits or '-', starting with either"
    return None
