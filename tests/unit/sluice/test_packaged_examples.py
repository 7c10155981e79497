"""The demo's job files are package data, found through ``importlib.resources`` wherever Sluice
is installed, and nothing an installed package runs reads files from the source tree."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from plumbing.spec_text import decode_spec_text, load_job_document
from policies.scheduling.jobspec import parse_job_spec
from sluice import cli, cli_examples, demo

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
        and not top.is_symlink()
        and not top.name.startswith(".")
        and top.name != "build"
        and not top.name.endswith(".egg-info")
    ]
    for name in demo.JOB_FILES:
        copies = [path for top in tops for path in top.rglob(name) if not _through_link(path)]
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


def _through_link(path: Path) -> bool:
    """Whether ``path`` is reached through a link (sluice/docs, sluice/examples/queues...)."""
    return any(parent.is_symlink() for parent in path.relative_to(ROOT).parents if parent.name)


# ---------------------------------------------------------------------------- what messages cite

CITED_DOC = re.compile(r"docs/([a-z][\w/-]*)\.md")  # not a placeholder: docs/X.md
CITED_EXAMPLE = re.compile(r"(?<![\w/])examples/([\w/-]+\.(?:yaml|json))")
CITING = ("sluice", "resource_manager", "node_agent", "aggregator", "simulator", "plumbing")


def _cited(pattern: re.Pattern[str], paths: list[Path]) -> set[str]:
    return {m.group(1) for path in paths for m in pattern.finditer(path.read_text())}


def _sources() -> list[Path]:
    return [
        path
        for package in CITING
        for path in sorted((ROOT / package).rglob("*.py"))
        if not _through_link(path)
    ]


def test_every_page_the_code_cites_is_found_by_sluice_docs() -> None:
    cited = _cited(CITED_DOC, _sources())
    assert "preemption" in cited  # the pattern finds what messages cite
    assert {page for page in cited if cli_examples.find_doc(page) is None} == set()
    assert cli_examples.find_doc("docs/model/dias.md") == "model/dias.md"


def test_every_example_the_readme_help_and_docs_name_is_shipped() -> None:
    cited = _cited(CITED_EXAMPLE, [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))])
    cited |= _cited(CITED_EXAMPLE, _sources())
    assert {"queues/bigc.yaml", "dias/dias.yaml"} <= cited
    assert cited - set(cli_examples.example_names()) == set()
    for name in cited:  # and the checkout's examples/ paths still work
        assert (ROOT / "examples" / name).is_file() or (
            ROOT / "sluice" / "examples" / name
        ).is_file()


def test_sluice_examples_lists_them_and_copies_them_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["examples"]) == 0
    listing = capsys.readouterr().out
    assert "examples/queues/bigc.yaml" in listing and "examples/dias/dias.yaml" in listing
    target = tmp_path / "mine"
    (target / "queues").mkdir(parents=True)
    (target / "queues" / "bigc.yaml").write_text("# my own\n")
    assert cli.main(["examples", "--copy", str(target)]) == 0
    out = capsys.readouterr()
    assert (target / "queues" / "bigc.yaml").read_text() == "# my own\n"  # kept
    assert "exists, left as it is" in out.err
    assert (target / "dias" / "dias.yaml").read_bytes() == (
        ROOT / "examples" / "dias" / "dias.yaml"
    ).read_bytes()
    assert (target / "analytics.yaml").is_file()
    assert (target / "model" / "preempt_snapshot.json").is_file()


@pytest.mark.parametrize(
    ("argv", "status", "expect"),
    [
        (["docs"], 0, "preemption"),
        (["docs", "preemption"], 0, "# Container preemption"),
        (["docs", "docs/preemption.md"], 0, "# Container preemption"),
        (["docs", "model/dias", "--path"], 0, "dias.md"),
        (["docs", "nope"], 2, "no page 'nope'"),
    ],
)
def test_sluice_docs_lists_prints_and_names_pages(
    argv: list[str], status: int, expect: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(argv) == status
    out = capsys.readouterr()
    assert expect in out.out + out.err
    assert "Traceback" not in out.err


def test_the_wheel_ships_the_examples_and_docs_that_messages_name(tmp_path: Path) -> None:
    """Built from a copy of the checkout (links kept as links, as git keeps them), the wheel
    holds what README, --help and the CLI's messages point an installed user to."""
    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.png")
    for name in (*INSTALLED_PACKAGES, "simulator", "examples", "docs"):
        shutil.copytree(ROOT / name, source / name, symlinks=True, ignore=ignore)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--disable-pip-version-check",
            "-w",
            str(tmp_path / "out"),
            str(source),
        ],
        check=True,
        capture_output=True,
        timeout=600,
    )
    (wheel,) = (tmp_path / "out").glob("sluice-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for example in cli_examples.example_names():
        assert f"sluice/examples/{example}" in names
    for page in cli_examples.doc_names():
        assert f"sluice/docs/{page}" in names
    assert {"sluice/examples/queues/bigc.yaml", "sluice/examples/dias/dias.yaml"} <= names
    assert {"sluice/docs/preemption.md", "sluice/docs/model/dias.md"} <= names


def test_help_says_where_cited_docs_and_examples_are(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "docs/X.md: `sluice docs X`" in text
    assert "`sluice examples`" in text
