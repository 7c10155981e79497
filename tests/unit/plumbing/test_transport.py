"""The daemons' --tls-dir / --insecure flags: every daemon starts with a decision."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import pytest

from plumbing import tls, transport
from plumbing.tls import Identity, Role, TlsError


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    transport.add_arguments(parser)
    return parser.parse_args(list(argv))


@pytest.fixture
def agent_dir(tmp_path: Path) -> Path:
    tls.init_ca(tmp_path / "ca", "lab")
    tls.issue(tls.load_ca(tmp_path / "ca"), Identity(Role.AGENT, "node-1"), tmp_path / "agent")
    return tmp_path / "agent"


# (case, argv, $SLUICE_TLS_DIR, role, outcome): "tls" the agent's directory is used, "insecure"
# None and one warning, else the start of the one-line refusal.  "DIR" stands for the agent's
# TLS directory.
DECISIONS = [
    ("--tls-dir", ["--tls-dir", "DIR"], None, Role.AGENT, "tls"),
    ("the environment", [], "DIR", Role.AGENT, "tls"),
    ("--tls-dir over the environment", ["--tls-dir", "DIR"], "/nowhere", Role.AGENT, "tls"),
    ("--insecure", ["--insecure"], None, Role.AGENT, "insecure"),
    ("--insecure over the environment", ["--insecure"], "DIR", Role.AGENT, "insecure"),
    ("neither", [], None, Role.AGENT, "--tls-dir or --insecure: one is required"),
    ("an empty environment", [], "", Role.RM, "--tls-dir or --insecure: one is required"),
    ("another role", ["--tls-dir", "DIR"], None, Role.RM, "--tls-dir: "),
    ("another role by environment", [], "DIR", Role.AGGREGATOR, "--tls-dir: "),
    ("no such directory", ["--tls-dir", "/nowhere"], None, Role.AGENT, "--tls-dir: /nowhere"),
]


@pytest.mark.parametrize(
    ("argv", "env", "role", "outcome"),
    [case[1:] for case in DECISIONS],
    ids=[case[0] for case in DECISIONS],
)
def test_a_daemon_starts_only_with_a_decision(
    agent_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    argv: list[str],
    env: str | None,
    role: Role,
    outcome: str,
):
    def resolve(text: str) -> str:
        return str(agent_dir) if text == "DIR" else text

    if env is None:
        monkeypatch.delenv(transport.TLS_DIR_ENV, raising=False)
    else:
        monkeypatch.setenv(transport.TLS_DIR_ENV, resolve(env))
    args = parse(*map(resolve, argv))
    with caplog.at_level(logging.WARNING, logger="plumbing.transport"):
        if outcome == "tls":
            loaded = transport.from_arguments(args, role)
            assert loaded is not None
            assert (loaded.directory, loaded.identity) == (agent_dir, Identity(role, "node-1"))
        elif outcome == "insecure":
            assert transport.from_arguments(args, role) is None
        else:
            with pytest.raises(TlsError) as refused:
                transport.from_arguments(args, role)
            assert str(refused.value).startswith(outcome)
            assert "\n" not in str(refused.value)
    warnings = [r.getMessage() for r in caplog.records]
    expected = f"{transport.INSECURE_WARNING} (--insecure)"
    assert warnings == ([expected] if outcome == "insecure" else [])


@pytest.mark.parametrize("role", list(Role), ids=lambda r: r.value)
def test_the_refusal_names_both_flags_and_how_to_get_a_certificate(role: Role):
    line = transport.no_decision(role)
    assert "--tls-dir" in line and "--insecure" in line and "$SLUICE_TLS_DIR" in line
    assert f"sluice ca issue --role {role.value}" in line


def test_a_certificate_of_another_role_is_refused_naming_it(agent_dir: Path):
    with pytest.raises(TlsError, match=r"^--tls-dir: .* is issued to agent 'node-1', not to a rm"):
        transport.from_arguments(parse("--tls-dir", str(agent_dir)), Role.RM)


def test_both_flags_are_refused(agent_dir: Path, capsys: pytest.CaptureFixture[str]):
    with pytest.raises(SystemExit):
        parse("--insecure", "--tls-dir", str(agent_dir))
    assert "not allowed with argument" in capsys.readouterr().err
