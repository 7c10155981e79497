"""``sluice local restart``: which recorded command line a daemon name picks, the port pinned
into a recorded command line, and the one-line refusals (issue 27, item 12)."""

from __future__ import annotations

from pathlib import Path

import pytest

from plumbing.errors import UserError
from sluice import local_cluster

CLUSTER: dict[str, object] = {
    "rm": "127.0.0.1:7000",
    "rm_pid": 11,
    "rm_argv": ["python", "-m", "sluice", "rm", "--listen", "127.0.0.1:0"],
    "nodes": [
        {"node_id": "node-1", "pid": 12, "address": "127.0.0.1:7001", "argv": ["a", "node-1"]},
        {"node_id": "node-2", "pid": 13, "address": "127.0.0.1:7002", "argv": ["a", "node-2"]},
    ],
    "services": [
        {"name": "kafka", "pid": 14, "address": "127.0.0.1:9092", "argv": ["tansu", "broker"]},
        {"name": "aggregator", "pid": 15, "address": "127.0.0.1:7071", "argv": ["agg"]},
    ],
    "data_plane": {"kafka": "127.0.0.1:9092", "mqtt": "mqtts://broker.lab:8883"},
}


@pytest.mark.parametrize(
    ("words", "name", "argv", "address_file"),
    [
        (["rm"], "rm", CLUSTER["rm_argv"], "rm.addr"),
        (["agent", "node-2"], "agent node-2", ["a", "node-2"], "node-2.addr"),
        (["aggregator"], "aggregator", ["agg"], "aggregator.addr"),
        (["kafka"], "kafka", ["tansu", "broker"], None),
    ],
)
def test_a_daemon_name_picks_its_recorded_command_line(
    tmp_path: Path, words: list[str], name: str, argv: list[str], address_file: str | None
) -> None:
    daemon = local_cluster._find_daemon(CLUSTER, tmp_path, words)
    assert (daemon.name, daemon.argv) == (name, argv)
    assert daemon.address_file == (tmp_path / address_file if address_file else None)
    assert daemon.log_path.parent == tmp_path / "logs"


@pytest.mark.parametrize(
    ("words", "message"),
    [
        (["nonsense"], "unknown daemon 'nonsense': expected one of rm, aggregator, kafka, mqtt"),
        (["agent"], "unknown daemon 'agent'"),
        (["node-1"], "unknown daemon 'node-1'"),
        (["agent", "node-9"], "agent 'node-9': no such node (nodes: node-1, node-2)"),
        (["mqtt"], "mqtt: not started by `sluice local up` (this cluster uses mqtts://broker.lab"),
    ],
)
def test_an_unknown_or_foreign_daemon_is_refused_in_one_line(
    tmp_path: Path, words: list[str], message: str
) -> None:
    with pytest.raises(UserError) as refused:
        local_cluster._find_daemon(CLUSTER, tmp_path, words)
    assert message in str(refused.value) and "\n" not in str(refused.value)


def test_a_cluster_recorded_without_command_lines_says_how_to_get_them(tmp_path: Path) -> None:
    old = {**CLUSTER, "services": [{"name": "kafka", "pid": 14, "address": "127.0.0.1:9092"}]}
    with pytest.raises(UserError, match="kafka: its command line is not recorded"):
        local_cluster._find_daemon(old, tmp_path, ["kafka"])


@pytest.mark.parametrize(
    ("argv", "pinned"),
    [
        (["agg", "--listen", "127.0.0.1:0", "--x"], ["agg", "--listen", "127.0.0.1:5", "--x"]),
        (["agent", "--rm", "r"], ["agent", "--rm", "r", "--listen", "127.0.0.1:5"]),
    ],
)
def test_a_recorded_command_line_names_the_port_bound_first(
    argv: list[str], pinned: list[str]
) -> None:
    assert local_cluster.pinned_argv(argv, "127.0.0.1:5") == pinned
