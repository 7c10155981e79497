"""`sluice ca`: create a CA, issue TLS directories, check them; every mistake is one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from plumbing import tls
from sluice.cli import main


def sluice(*argv: str) -> int:
    return main(list(argv))


def test_init_issue_and_show(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    ca = tmp_path / "ca"
    assert sluice("ca", "init", "--ca-dir", str(ca), "--cluster", "lab") == 0
    assert sluice("ca", "issue", "--ca-dir", str(ca), "--role", "agent", "--name", "node-1") == 0
    out = ca / "agent-node-1"
    assert tls.load_tls_dir(out).identity == tls.Identity(tls.Role.AGENT, "node-1")
    assert sluice("ca", "show", str(out)) == 0
    assert "agent 'node-1' (sluice://agent/node-1), valid until" in capsys.readouterr().out


def test_the_ca_dir_defaults_to_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("SLUICE_CA_DIR", str(tmp_path / "ca"))
    assert sluice("ca", "init") == 0
    assert (
        sluice("ca", "issue", "--role", "client", "--name", "alice", "--out", str(tmp_path / "a"))
        == 0
    )
    assert tls.load_tls_dir(tmp_path / "a").identity.name == "alice"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["ca", "init"], "a CA exists already"),
        (["ca", "issue", "--role", "client", "--name", "a/b"], "name: 'a/b' must be"),
        (["ca", "issue", "--role", "client", "--name", "x", "--days", "0"], "days: must be"),
        (["ca", "issue", "--role", "rm", "--name", "rm", "--host", "a b"], "host: 'a b'"),
        (["ca", "show", "."], "ca.crt: missing"),
        (["ca", "token", "--name", "a/b"], "name: 'a/b' must be"),
        (["ca", "token", "--name", "x", "--days", "0"], "--days: must be positive"),
        (["ca", "token", "--name", "x", "--ca-dir", "nowhere"], "nowhere"),
    ],
)
def test_mistakes_are_one_line(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    message: str,
):
    monkeypatch.setenv("SLUICE_CA_DIR", str(tmp_path / "ca"))
    monkeypatch.chdir(tmp_path)
    assert sluice("ca", "init") == 0
    capsys.readouterr()
    assert sluice(*argv) != 0
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err
    assert not list(tmp_path.glob("ca/*-*"))  # no TLS directory half-written


def test_an_unknown_role_is_refused(capsys: pytest.CaptureFixture[str]):
    with pytest.raises(SystemExit):
        sluice("ca", "issue", "--role", "root", "--name", "x")
    assert "invalid choice: 'root'" in capsys.readouterr().err


def test_token_and_show(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    ca = tmp_path / "ca"
    assert sluice("ca", "init", "--ca-dir", str(ca)) == 0
    assert sluice("ca", "token", "--ca-dir", str(ca), "--name", "dana", "--role", "admin") == 0
    out = ca / "token-admin-dana"
    assert (out / "token").read_text().startswith("sluice1.")
    assert (out / "ca.crt").read_bytes() == (ca / "ca.crt").read_bytes()
    assert sluice("ca", "show", str(out)) == 0
    assert "admin 'dana' (sluice://admin/dana), bearer token" in capsys.readouterr().out
