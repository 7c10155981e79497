"""The demo's job files are package data, found through ``importlib.resources`` wherever Sluice
is installed, and nothing an installed package runs reads files from the source tree."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from plumbing.spec_text import decode_spec_text, load_job_document
from policies.scheduling.jobspec import parse_job_spec
from sluice import demo

ROOT = Path(__file__).resolve().parents[3]
INSTALLED_PACKAGES = (
    "sluice",
    "sluice_pb",
    "plumbing",
    "resource_manager",
    "node_agent",
    "job_master",
    "aggregator",
    "policies",
)


@pytest.mark.parametrize("name", demo.JOB_FILES)
def test_the_demo_job_files_are_package_data_and_valid(name: str) -> None:
    resource = demo.example(name)
    assert resource.is_file(), f"{name} is not in the sluice package"
    spec = parse_job_spec(load_job_document(decode_spec_text(resource.read_bytes())))
    assert spec.phases


def test_each_job_file_has_one_copy_in_the_repository() -> None:
    """README, docs and tests name ``sluice/examples/``: no second copy to drift apart."""
    tops = [
        top
        for top in ROOT.iterdir()
        if top.is_dir()
        and not top.name.startswith(".")
        and top.name != "build"
        and not top.name.endswith(".egg-info")
    ]
    for name in demo.JOB_FILES:
        copies = [path for top in tops for path in top.rglob(name)]
        assert copies == [ROOT / "sluice" / "examples" / name]


def test_no_installed_module_finds_files_from_its_own_location() -> None:
    """``Path(__file__).parents[...]`` reaches into the checkout, which an installation lacks;
    package data is read with ``importlib.resources``."""
    source_tree = re.compile(r"__file__|\.parents\[")
    offenders = [
        f"{path.relative_to(ROOT)}:{number}"
        for package in INSTALLED_PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if source_tree.search(line)
    ]
    assert offenders == []
