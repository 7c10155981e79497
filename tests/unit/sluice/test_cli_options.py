"""``--rm`` and ``--dir`` are accepted before the command and after it (and after ``local``'s
action), with the same defaults: ``$SLUICE_RM``/the local cluster, and ``$SLUICE_DIR`` or
``~/.sluice``.  Given in several places, the one nearest the end of the line wins."""

from __future__ import annotations

from pathlib import Path

import pytest

from sluice import cli

DEFAULT_DIR = "/srv/sluice-default"
# (argv, expected args.rm, expected args.dir)
CASES: list[tuple[list[str], str | None, str]] = [
    # the local cluster: --dir before, between and after the command and its action
    (["local", "up"], None, DEFAULT_DIR),
    (["--dir", "D", "local", "up"], None, "D"),
    (["local", "--dir", "D", "up"], None, "D"),
    (["local", "up", "--dir", "D"], None, "D"),
    (["local", "up", "--nodes", "3", "--dir", "D", "--period", "2"], None, "D"),
    (["local", "down", "--dir", "D"], None, "D"),
    (["local", "status", "--dir", "D", "--json"], None, "D"),
    (["--dir", "A", "local", "--dir", "B", "up"], None, "B"),
    (["--dir", "A", "local", "down", "--dir", "B"], None, "B"),
    (["--dir", "A", "local", "--dir", "B", "status", "--dir", "C"], None, "C"),
    (["--rm", "h:1", "local", "down", "--dir", "D"], "h:1", "D"),
    # commands that talk to the cluster: --rm and --dir before or after
    (["jobs"], None, DEFAULT_DIR),
    (["--rm", "h:1", "jobs"], "h:1", DEFAULT_DIR),
    (["jobs", "--rm", "h:1"], "h:1", DEFAULT_DIR),
    (["jobs", "--json", "--dir", "D"], None, "D"),
    (["--rm", "h:1", "--dir", "A", "jobs", "--rm", "h:2"], "h:2", "A"),
    (["--rm", "h:1", "jobs", "--dir", "D"], "h:1", "D"),
    (["submit", "job.yaml", "--rm", "h:1", "--wait"], "h:1", DEFAULT_DIR),
    (["submit", "--dir", "D", "job.yaml"], None, "D"),
    (["run", "job.yaml", "--rm", "h:1", "--dir", "D"], "h:1", "D"),
    (["job", "job-000001", "--rm", "h:1"], "h:1", DEFAULT_DIR),
    (["kill", "job-000001", "--dir", "D"], None, "D"),
    (["logs", "job-000001", "map-0", "--rm", "h:1", "--attempt", "2"], "h:1", DEFAULT_DIR),
    (["nodes", "--rm", "h:1", "--aggregator", "h:2"], "h:1", DEFAULT_DIR),
    (["candidates", "--json", "--dir", "D"], None, "D"),
    # the node agent's own --rm (required) is the same option: where its RM is
    (["agent", "--rm", "h:1", "--node-id", "n1"], "h:1", DEFAULT_DIR),
    (["demo"], None, DEFAULT_DIR),
]


@pytest.fixture(autouse=True)
def default_dir(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLUICE_DIR", DEFAULT_DIR)


@pytest.mark.parametrize(("argv", "rm", "directory"), CASES, ids=[" ".join(c[0]) for c in CASES])
def test_cluster_options_before_or_after_the_command(
    argv: list[str], rm: str | None, directory: str
) -> None:
    args = cli.build_parser().parse_args(argv)
    assert (args.rm, args.dir) == (rm, Path(directory))
    assert callable(args.handler)


@pytest.mark.parametrize(
    "argv",
    [
        ["local", "up", "--dir"],  # a value is required wherever the option stands
        ["jobs", "--rm"],
        ["local", "up", "--rm", "h:1"],  # the local cluster is found by directory only
        ["demo", "--dir", "D"],  # the demo runs in a directory of its own
    ],
)
def test_misplaced_or_incomplete_options_are_refused(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stopped:
        cli.build_parser().parse_args(argv)
    assert stopped.value.code == 2
    assert capsys.readouterr().err.startswith("usage: sluice")
