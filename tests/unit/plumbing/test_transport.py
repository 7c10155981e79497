"""The daemons' --tls-dir / --insecure flags."""

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


def test_a_tls_dir_of_the_right_role_is_used(agent_dir: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv(transport.TLS_DIR_ENV, raising=False)
    loaded = transport.from_arguments(parse("--tls-dir", str(agent_dir)), Role.AGENT)
    assert loaded is not None and loaded.identity == Identity(Role.AGENT, "node-1")
    monkeypatch.setenv(transport.TLS_DIR_ENV, str(agent_dir))
    from_env = transport.from_arguments(parse(), Role.AGENT)
    assert from_env is not None and from_env.directory == agent_dir


def test_a_certificate_of_another_role_is_refused(agent_dir: Path):
    with pytest.raises(TlsError, match=r"^--tls-dir: .* is issued to agent 'node-1', not to a rm"):
        transport.from_arguments(parse("--tls-dir", str(agent_dir)), Role.RM)


@pytest.mark.parametrize(
    ("argv", "why"), [(["--insecure"], "--insecure"), ([], "no --tls-dir and no $SLUICE_TLS_DIR")]
)
def test_without_tls_the_log_says_so_loudly(
    argv: list[str], why: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
):
    monkeypatch.delenv(transport.TLS_DIR_ENV, raising=False)
    with caplog.at_level(logging.WARNING, logger="plumbing.transport"):
        assert transport.from_arguments(parse(*argv), Role.RM) is None
    assert [r.getMessage() for r in caplog.records] == [f"{transport.INSECURE_WARNING} ({why})"]


def test_insecure_wins_over_the_environment(agent_dir: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv(transport.TLS_DIR_ENV, str(agent_dir))
    assert transport.from_arguments(parse("--insecure"), Role.AGENT) is None


def test_both_flags_are_refused(agent_dir: Path, capsys: pytest.CaptureFixture[str]):
    with pytest.raises(SystemExit):
        parse("--insecure", "--tls-dir", str(agent_dir))
    assert "not allowed with argument" in capsys.readouterr().err
