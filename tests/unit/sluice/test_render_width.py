"""`sluice nodes` fits the terminal: columns are left out, least useful first, and said; with no
width (``--wide``, or output to a pipe) every column is shown."""

from __future__ import annotations

import io
import sys

import pytest

from sluice import machines, render
from sluice_pb import common_pb2 as pb
from sluice_pb import resource_manager_pb2 as rm_pb

ALWAYS = ["NODE", "STATE", "CPU ALLOC", "TASKS", "LOAD CPU MEM LA1", "CANDIDATE"]


def nodes() -> list[rm_pb.NodeInfo]:
    return [
        rm_pb.NodeInfo(
            node_id=f"node-{i}",
            state=rm_pb.NODE_READY,
            runtime="process",
            address=f"127.0.0.1:4{i}123",
            capacity=pb.Resources(cpu=2, memory_mb=2048),
            allocated=pb.Resources(cpu=1.5, memory_mb=1024),
            speculative_tasks=2,
            opportunistic=pb.Resources(cpu=0.5, memory_mb=128),
            speculative=pb.SpeculativeQueueState(
                queued=1, admitted=3, blocked="cpu utilisation 0.95 over 0.9"
            ),
        )
        for i in (1, 2)
    ]


def extra() -> tuple[list[str], dict[str, list[str]]]:
    cells = ["cpu 0.93 mem 0.41 1.9", "psi 12% cpi 1.2/3.4", "no: cpu_ut", "0", "12 W 3 kJ"]
    return machines.MACHINE_HEADERS, {"node-1": cells, "node-2": cells}


def headers_of(text: str) -> str:
    return text.splitlines()[0]


@pytest.mark.parametrize("width", [60, 80, 120, 160])
def test_nodes_fit_the_width_and_say_what_they_leave_out(width: int) -> None:
    wide = render.nodes_table(nodes(), extra(), width=None)
    assert max(map(len, wide.splitlines())) > 200  # what the issue saw: 235 columns
    text = render.nodes_table(nodes(), extra(), width=width)
    table_lines, hint = text.splitlines()[:-1], text.splitlines()[-1]
    hidden = [h for h in render.NODE_DROP_ORDER if h not in headers_of(text)]
    assert hidden == list(render.NODE_DROP_ORDER[: len(hidden)])  # the first ones first
    everything_droppable_dropped = len(hidden) == len(render.NODE_DROP_ORDER)
    assert everything_droppable_dropped or all(len(line) <= width for line in table_lines)
    assert len(hint) <= width
    assert hint.startswith(f"(--wide shows {len(hidden)} more columns: {hidden[0]}")
    for header in ALWAYS:
        assert header in headers_of(text)


def test_wide_shows_every_column_and_no_hint() -> None:
    text = render.nodes_table(nodes(), extra(), width=None)
    for header in [*render.NODE_DROP_ORDER, *ALWAYS]:
        assert header in headers_of(text)
    assert "shows all" not in text


def test_a_table_that_fits_is_left_whole() -> None:
    wide = render.nodes_table(nodes(), extra(), width=None)
    width = max(map(len, wide.splitlines()))
    assert render.nodes_table(nodes(), extra(), width=width) == wide


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_nodes_width_comes_from_the_terminal_or_is_unlimited_in_a_pipe(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", "77")
    monkeypatch.setattr(sys, "stdout", _Terminal())
    assert render.terminal_width() == 77
    monkeypatch.setattr(sys, "stdout", io.StringIO())  # a pipe: every column, $COLUMNS or not
    assert render.terminal_width() is None


def test_the_cli_takes_wide() -> None:
    from sluice import cli

    args = cli.build_parser("nodes").parse_args(["nodes", "--wide"])
    assert args.wide is True
    assert cli.build_parser("nodes").parse_args(["nodes"]).wide is False
