"""The CLI reads its TLS directory unchecked and checks it only when a call fails (issue 28).

Whatever is wrong with the directory, a command that could not reach the RM says so in one line
naming the file and the problem, as when the directory was checked before every call."""

from __future__ import annotations

import datetime
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from plumbing import tls
from plumbing.tls import Identity, Role
from sluice.client import resolve_tls, tls_problem

ANN = Identity(Role.CLIENT, "ann")


def _ca(root: Path, name: str = "ca") -> tls.Authority:
    tls.init_ca(root / name, "lab")
    return tls.load_ca(root / name)


def expired(root: Path) -> Path:
    past = datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=3)
    return tls.issue(_ca(root), ANN, root / "ann", days=1, now=past).directory


def foreign(root: Path) -> Path:
    out = tls.issue(_ca(root, "other"), ANN, root / "ann").directory
    shutil.copy(tls.issue(_ca(root), ANN, root / "mine").directory / tls.CA_CERT, out)
    return out


def another_key(root: Path) -> Path:
    authority = _ca(root)
    out = tls.issue(authority, ANN, root / "ann").directory
    (out / tls.KEY).unlink()
    shutil.copy(tls.issue(authority, ANN, root / "bob").directory / tls.KEY, out / tls.KEY)
    return out


def no_key(root: Path) -> Path:
    out = tls.issue(_ca(root), ANN, root / "ann").directory
    (out / tls.KEY).unlink()
    return out


CASES: list[tuple[str, Callable[[Path], Path], str]] = [
    ("expired", expired, r"ann/tls\.crt: expired on \d{4}-\d\d-\d\d \d\d:\d\d UTC$"),
    ("foreign", foreign, r"ann/tls\.crt: not issued by .*ann/ca\.crt"),
    ("another's key", another_key, r"ann/tls\.key: does not match .*ann/tls\.crt$"),
    ("no key", no_key, r"ann/tls\.key: missing$"),
]


@pytest.mark.parametrize(("make", "problem"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_refused_call_names_what_is_wrong_with_the_tls_directory(
    tmp_path: Path, make: Callable[[Path], Path], problem: str
) -> None:
    directory = make(tmp_path)
    argv = ["--rm", "127.0.0.1:1", "--tls-dir", str(directory), "--dir", str(tmp_path), "jobs"]
    result = subprocess.run(
        [sys.executable, "-m", "sluice", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    (line,) = result.stderr.splitlines()
    assert line.startswith("sluice: error: ")
    assert re.search(problem, line), line
    assert result.returncode == 2


def test_a_sound_directory_is_read_unchecked_and_has_no_problem(tmp_path: Path) -> None:
    directory = tls.issue(_ca(tmp_path), ANN, tmp_path / "ann").directory
    read = resolve_tls(directory, tmp_path / "none")
    assert read is not None
    assert (read.ca_pem, read.cert_pem, read.key_pem, read.unchecked) == (
        (directory / tls.CA_CERT).read_bytes(),
        (directory / tls.CERT).read_bytes(),
        (directory / tls.KEY).read_bytes(),
        directory,
    )
    assert tls_problem(directory, tmp_path / "none") is None
    assert tls_problem(None, tmp_path / "none") is None  # plaintext: nothing to check
