"""An installation that is not the checkout: the wheel holds every package with its data (the
demo's job files, the ``.pyi`` stubs, ``py.typed``), and the installed commands find what they
need from the installed copy, not from the source tree.

The wheel is built from a copy of what ``pip install .`` reads (so the working tree gets no
``build/``), without build isolation (setuptools from this environment, no network), and
installed with ``pip install --target`` into a directory that a child interpreter puts first on
its path, started outside the checkout.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
PACKAGES = [p.rstrip("*") for p in PYPROJECT["tool"]["setuptools"]["packages"]["find"]["include"]]
TIMEOUT = 120


def _pip(*args: str, cwd: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def _source_files() -> set[str]:
    """Every file of the packages pyproject.toml names, as paths relative to the root, those
    under a link too (sluice/docs and sluice/examples/queues... are links to docs/, examples/)."""
    return {
        path.relative_to(ROOT).as_posix()
        for package in PACKAGES
        for directory, _, files in os.walk(ROOT / package, followlinks=True)
        for path in (Path(directory) / name for name in files)
        if "__pycache__" not in path.parts and path.suffix != ".pyc"
    }


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if importlib.util.find_spec("setuptools") is None:  # the build backend, without isolation
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true but setuptools is not installed")
        pytest.skip("setuptools is not installed")
    source = tmp_path_factory.mktemp("source")
    shutil.copy2(ROOT / "pyproject.toml", source)
    shutil.copy2(ROOT / PYPROJECT["project"]["readme"], source)
    for package in PACKAGES:
        shutil.copytree(
            ROOT / package, source / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    dist = tmp_path_factory.mktemp("dist")
    _pip(
        "wheel", "--no-deps", "--no-build-isolation", "--no-index", ".", "-w", str(dist), cwd=source
    )
    (built,) = dist.glob("sluice-*.whl")
    return built


def test_the_wheel_holds_every_file_of_every_package(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = {n for n in archive.namelist() if ".dist-info/" not in n}
    expected = _source_files()
    # The checks below are what a regression would lose first; the set comparison says what.
    assert {
        "sluice/examples/analytics.yaml",
        "sluice/examples/batch.yaml",
        "sluice_pb/py.typed",
        "sluice_pb/common_pb2.pyi",
        "plumbing/__init__.py",
    } <= expected
    assert sorted(expected - names) == []
    assert sorted(names - expected) == []


def test_the_installed_copy_runs_outside_the_checkout(wheel: Path, tmp_path: Path) -> None:
    target = tmp_path / "site"
    _pip("install", "--no-deps", "--no-index", "--target", str(target), str(wheel), cwd=tmp_path)
    check = """
import importlib.resources, pathlib, sys
import sluice, sluice.demo
from sluice.cli import build_parser, load_spec_file
target = pathlib.Path(sys.argv[1]).resolve()
assert pathlib.Path(sluice.__file__).resolve().parent == target / "sluice", sluice.__file__
for name in sluice.demo.JOB_FILES:
    with importlib.resources.as_file(sluice.demo.example(name)) as path:
        assert path.resolve().is_relative_to(target), path
        load_spec_file(path)
build_parser().parse_args(["local", "up", "--dir", "d"])
from sluice import cli_examples  # what README, --help and messages name: `sluice examples`, `docs`
assert {"queues/bigc.yaml", "dias/dias.yaml"} <= set(cli_examples.example_names())
assert cli_examples.find_doc("docs/preemption.md") == "preemption.md"
for root in (cli_examples.examples_root(), cli_examples.docs_root()):
    assert pathlib.Path(str(root)).resolve().is_relative_to(target), root
print("ok")
"""
    environment = {**os.environ, "PYTHONPATH": str(target)}
    result = subprocess.run(
        [sys.executable, "-c", check, str(target)],
        cwd=tmp_path,
        env=environment,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert (result.returncode, result.stdout) == (0, "ok\n"), result.stderr
    for module in ("sluice", "job_master"):
        result = subprocess.run(
            [sys.executable, "-m", module, "--help"],
            cwd=tmp_path,
            env=environment,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            check=False,
        )
        assert result.returncode == 0, result.stderr
