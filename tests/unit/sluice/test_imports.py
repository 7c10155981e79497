"""Commands answer at once: each path imports only what it uses (issue 28).

``sluice --help`` and the cluster commands import no daemon, no simulator and no numeric or
plotting library; the daemons' and the job master's start paths import no scipy and no
matplotlib (the RM reads a DiAS configuration without the phase-type models; only the drop-ratio
search and the simulator compute with them).  Each is checked in a fresh interpreter, as the
command runs; a missing optional library ends in one line naming the extra to install."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

from sluice.cli import command_of

# What a path must not import, by top-level module or exact module name.
NUMERIC = ("numpy", "scipy", "matplotlib", "pandas")
# A client's call needs neither certificate parsing (gRPC's handshake checks certificates; the
# CLI checks them itself only once a call failed) nor protobuf's JSON (only --json prints it),
# nor plumbing.wire (the job spec's parser, for a listing that only names states).
CLIENT_CALL = ("cryptography", "google.protobuf.json_format", "uuid", "plumbing.wire")
PLOTTING = ("scipy", "matplotlib", "pandas")
SERVICES = ("simulator", "resource_manager", "node_agent", "job_master", "aggregator")
# The aggregator's flags, which `local up` takes and passes on, are argparse and arithmetic only.
ALLOWED = ("aggregator", "aggregator.flags")

PROBE = """
import json, sys
{setup}
print(json.dumps(sorted(sys.modules)))
"""

CLI = """
from sluice.cli import main
for argv in {argvs!r}:
    try:
        main(argv)
    except SystemExit:
        pass
"""

CASES = [
    # (name, setup code, forbidden modules)
    ("import sluice.cli", "import sluice.cli", NUMERIC + SERVICES),
    ("sluice --help", CLI.format(argvs=[["--help"]]), NUMERIC + SERVICES),
    (
        "the cluster commands' parsers",
        CLI.format(
            argvs=[
                [command, "--help"]
                for command in ("submit", "jobs", "job", "kill", "task", "logs", "nodes")
            ]
            + [["queues", "--help"], ["sprint", "--help"], ["local", "up", "--help"]]
        ),
        NUMERIC + SERVICES,
    ),
    ("sluice --version", CLI.format(argvs=[["--version"]]), NUMERIC + SERVICES),
    (
        "sluice jobs, its call refused",
        CLI.format(argvs=[["--rm", "127.0.0.1:1", "--dir", "/nonexistent", "jobs"]]),
        NUMERIC + SERVICES + CLIENT_CALL,
    ),
    (
        "the RM daemon's start path",
        CLI.format(argvs=[["rm", "--help"]])
        + "import resource_manager.server, resource_manager.service, resource_manager.core\n"
        + "import plumbing.queue_file, policies.approximation.dias_config",
        (*PLOTTING, "simulator"),
    ),
    (
        "the node agent's start path",
        CLI.format(argvs=[["agent", "--help"]]) + "import node_agent.daemon",
        (*NUMERIC, "simulator"),
    ),
    ("the job master's entry", "import job_master.master", (*PLOTTING, "simulator")),
]


def loaded_modules(setup: str) -> list[str]:
    result = subprocess.run(
        [sys.executable, "-c", PROBE.format(setup=setup)],
        capture_output=True,
        text=True,
        timeout=180,
        check=True,
    )
    return list(json.loads(result.stdout.strip().splitlines()[-1]))


@pytest.mark.parametrize(("setup", "forbidden"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_path_imports_only_what_it_uses(setup: str, forbidden: tuple[str, ...]) -> None:
    loaded = loaded_modules(setup)
    assert forbidden_among(loaded, forbidden) == []


def forbidden_among(loaded: list[str], forbidden: tuple[str, ...]) -> list[str]:
    return [
        m for m in loaded if (m.split(".")[0] in forbidden or m in forbidden) and m not in ALLOWED
    ]


def test_sluice_jobs_with_a_certificate_reads_it_without_cryptography(tmp_path: Path) -> None:
    # The channel a certificate's directory makes, before any call (a failed call checks the
    # certificate, and imports cryptography to do it).
    from plumbing import tls

    tls.init_ca(tmp_path / "ca", "lab")
    tls.issue(tls.load_ca(tmp_path / "ca"), tls.Identity(tls.Role.CLIENT, "ann"), tmp_path / "ann")
    loaded = loaded_modules(
        "from pathlib import Path\n"
        "import sluice.cli, sluice.render\n"
        "from sluice.client import RMClient, resolve_tls\n"
        f"tls = resolve_tls(Path({str(tmp_path / 'ann')!r}), Path('/nonexistent'))\n"
        "assert tls is not None and tls.cert_pem and tls.key_pem\n"
        "RMClient.connect('127.0.0.1:1', tls).close()\n"
    )
    assert forbidden_among(loaded, CLIENT_CALL) == []


def test_the_cluster_commands_do_not_build_the_daemons_parsers() -> None:
    loaded = loaded_modules(CLI.format(argvs=[["jobs", "--help"]]))
    assert "node_agent.daemon" not in loaded
    assert "resource_manager.server" not in loaded


def run_cli(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=180, check=False
    )


@pytest.mark.parametrize("argv", [["sim", "run", "--help"], ["sim", "dias", "--help"]])
def test_a_missing_extra_is_one_line_naming_it(argv: list[str]) -> None:
    # None in sys.modules makes `import matplotlib` fail as if it were not installed.
    result = run_cli(
        "import sys; sys.modules['matplotlib'] = None\n"
        f"from sluice.cli import main\nsys.exit(main({argv!r}))"
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stderr.splitlines() == [
        "sluice: error: no module 'matplotlib': the simulator needs `pip install 'sluice[sim]'`"
    ]


def test_a_missing_library_of_no_extra_keeps_its_traceback() -> None:
    result = run_cli(
        "import sys; sys.modules['simulator.engine'] = None\n"
        "from sluice.cli import main\nsys.exit(main(['sim', 'run', '--help']))"
    )
    assert result.returncode != 0
    assert "ModuleNotFoundError" in result.stderr


def test_version_prints_the_installed_distributions_version() -> None:
    result = run_cli("import sys; from sluice.cli import main; sys.exit(main(['--version']))")
    assert (result.returncode, result.stdout) == (0, f"sluice {version('sluice')}\n")


@pytest.mark.parametrize(
    ("argv", "command"),
    [
        ([], ""),
        (["--help"], ""),
        (["--version"], ""),
        (["jobs"], "jobs"),
        (["--rm", "h:1", "rm", "--listen", "x"], "rm"),
        (["--dir", "D", "--tls-dir", "T", "agent"], "agent"),
        (["--rm=h:1", "sim", "run"], "sim"),
        (["--tls", "T", "--d", "D", "ca", "init"], "ca"),  # argparse's abbreviations
        (["--", "model"], "model"),
        (["--dir"], ""),
    ],
)
def test_the_command_is_found_past_the_top_level_options(argv: list[str], command: str) -> None:
    assert command_of(argv) == command


def test_the_parsers_written_out_choices_are_the_modules_own() -> None:
    from policies.approximation.dispatch import DispatchMode
    from sluice import cli, local_cluster

    assert tuple(mode.value for mode in DispatchMode) == cli.DISPATCH_MODES
    assert cli.LOCAL_DAEMONS == local_cluster.DAEMONS
