"""A deployment of deploy/ for the end-to-end test: a copy of the directory with its own
project name, image tag and free ports, driven through its own scripts as an operator would,
and a CLI on the host with a person's certificate, as on a user's laptop."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sluice.brokers import free_port

REPO = Path(__file__).resolve().parents[2]
# What a copy of deploy/ leaves out: what its scripts make, and the wheels kept between runs.
MADE_HERE = ("tls", "workers", ".env", ".build")


def wait_until(condition: Callable[[], Any], timeout: float, what: str) -> Any:
    """``condition()``'s first truthy value, polled; AssertionError naming ``what`` after
    ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.5)


@dataclass
class Deployment:
    directory: Path
    settings: dict[str, str]
    person: str = "e2e"
    timings: dict[str, float] = field(default_factory=dict)

    @classmethod
    def prepare(cls, root: Path) -> Deployment:
        """deploy/ copied to ``root``/deploy with a .env of its own."""
        directory = root / "deploy"
        shutil.copytree(REPO / "deploy", directory, ignore=shutil.ignore_patterns(*MADE_HERE))
        project = f"e2e{secrets.token_hex(3)}"
        # scripts/test_deployment.sh removes what a run it started left up, by these names.
        if os.environ.get("SLUICE_E2E_PROJECTS"):
            with Path(os.environ["SLUICE_E2E_PROJECTS"]).open("a") as listed:
                listed.write(f"{project}\n")
        settings = {
            "COMPOSE_PROJECT_NAME": project,
            "SLUICE_IMAGE": f"sluice:{project}",
            "SLUICE_HOST": "127.0.0.1",
            "SLUICE_BIND": "127.0.0.1",
            "SLUICE_RM_PORT": str(free_port()),
            "SLUICE_AGGREGATOR_PORT": str(free_port()),
            "SLUICE_MQTT_PORT": str(free_port()),
            "SLUICE_NODE_TIMEOUT": "10",
            "SLUICE_AGGREGATOR_PERIOD": "2",
            "SLUICE_LOG_LEVEL": "info",
            # BIG-C's queues (the test writes config/queues.yaml) and ROSE's speculative tasks.
            "SLUICE_RM_OPTIONS": "--queues /etc/sluice/config/queues.yaml --oversubscription up",
            # The host's own load (CI's two busy cores) is not what the test is about: agents
            # admit speculative tasks and the aggregator lists machines whatever it is.
            "SLUICE_AGENT_OPTIONS": "--admission-thresholds 1,1,1 --throttle-hold 1",
            "SLUICE_AGGREGATOR_OPTIONS": " ".join(
                f"--load-threshold {metric}=off" for metric in ("cpu_ut", "mem_ut", "load_avg_1")
            ),
        }
        text = "".join(f"{key}={value}\n" for key, value in settings.items())
        (directory / ".env").write_text(text)
        return cls(directory, settings)

    def change_settings(self, **changes: str) -> None:
        """Rewrite .env with ``changes``, as an operator edits it."""
        self.settings |= changes
        text = "".join(f"{key}={value}\n" for key, value in self.settings.items())
        (self.directory / ".env").write_text(text)

    @property
    def project(self) -> str:
        return self.settings["COMPOSE_PROJECT_NAME"]

    def _environment(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SLUICE_", "COMPOSE_"))}
        env["SLUICE_SOURCE"] = str(REPO)
        env["SLUICE_BUILD_DIR"] = str(REPO / "deploy" / ".build")  # wheels kept between runs
        return env

    def script(self, name: str, *args: str, timeout: float = 600, check: bool = True) -> str:
        """Run deploy/``name`` ARGS as an operator would; its output (stdout and stderr)."""
        started = time.monotonic()
        done = subprocess.run(
            ["bash", str(self.directory / name), *args],
            check=False,
            env=self._environment(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=timeout,
        )
        self.timings[" ".join([name, *args])] = time.monotonic() - started
        if check and done.returncode != 0:
            raise AssertionError(f"deploy/{name} {' '.join(args)} failed:\n{done.stdout}")
        return done.stdout

    def compose(self, *args: str, timeout: float = 120) -> str:
        return self.script("compose.sh", *args, timeout=timeout)

    def container(self, service: str) -> str:
        container_id = self.compose("ps", "-q", service).strip()
        assert container_id, f"{service}: no container"
        return container_id

    def docker(self, *args: str, timeout: float = 120) -> str:
        done = subprocess.run(
            ["docker", *args], capture_output=True, text=True, timeout=timeout, check=False
        )
        assert done.returncode == 0, f"docker {' '.join(args)}: {done.stderr.strip()}"
        return done.stdout

    # ------------------------------------------------------------------ the user's CLI

    def cli_addresses(self) -> dict[str, str]:
        """Where the user's CLI finds the RM and the aggregator: their published ports."""
        return {
            "SLUICE_RM": f"127.0.0.1:{self.settings['SLUICE_RM_PORT']}",
            "SLUICE_AGGREGATOR": f"127.0.0.1:{self.settings['SLUICE_AGGREGATOR_PORT']}",
        }

    def cli(self, *args: str, timeout: float = 60, check: bool = True) -> str:
        """`sluice ARGS` on the host, with the person's certificate and the published ports."""
        env = self._environment()
        env |= {**self.cli_addresses(), "SLUICE_TLS_DIR": str(self.person_tls)}
        done = subprocess.run(
            [sys.executable, "-m", "sluice", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and done.returncode != 0:
            raise AssertionError(f"sluice {' '.join(args)}: {done.stderr.strip()}")
        return done.stdout

    @property
    def person_tls(self) -> Path:
        return self.directory / "tls" / "people" / self.person

    def submit(self, spec: str) -> str:
        path = self.directory / f"job-{secrets.token_hex(4)}.yaml"
        path.write_text(spec)
        return self.cli("submit", str(path)).strip().split()[-1]

    def job(self, job_id: str) -> dict[str, Any]:
        detail: dict[str, Any] = json.loads(self.cli("job", job_id, "--json"))
        return detail

    def nodes(self) -> list[dict[str, Any]]:
        listing: list[dict[str, Any]] = json.loads(self.cli("nodes", "--json"))
        return listing

    def ready_nodes(self) -> set[str]:
        try:
            return {n["node_id"] for n in self.nodes() if n["state"] == "ready"}
        except AssertionError:  # the RM restarting
            return set()


# ---------------------------------------------------------------------------- for the drills
# (tests/deployment/test_drills.py): jobs, their tasks and containers, certificates.

FINAL_JOB_STATES = frozenset({"succeeded", "failed", "killed"})


def job_spec(name: str, tasks: int, command: str, cpu: float) -> str:
    """A one-phase job of ``tasks`` tasks running ``sh -c command``, each ``cpu`` cores."""
    import yaml

    phase = {
        "name": "work",
        "tasks": tasks,
        "command": ["sh", "-c", command],
        "resources": {"cpu": cpu, "memory_mb": 32},
    }
    return str(yaml.safe_dump({"name": name, "phases": [phase]}))


def running_tasks(deployment: Deployment, job_id: str, count: int) -> list[dict[str, Any]] | None:
    """The job's running task attempts when there are exactly ``count``, else None."""
    tasks = [t for t in deployment.job(job_id)["tasks"] if t["state"] == "running"]
    return tasks if len(tasks) == count else None


def final_job_state(deployment: Deployment, job_id: str) -> str | None:
    state: str = deployment.job(job_id)["summary"]["state"]
    return state if state in FINAL_JOB_STATES else None


def task_containers(deployment: Deployment, *labels: str) -> list[str]:
    """The docker runtime's containers of this deployment with every ``label=value`` given."""
    filters = [f"label=sluice.cluster={deployment.project}", *(f"label={x}" for x in labels)]
    return deployment.docker("ps", "-aq", *(a for f in filters for a in ("--filter", f))).split()


def kill_job(deployment: Deployment, job_id: str) -> None:
    """Kill the job and wait until it is final and its task containers are gone."""
    deployment.cli("kill", job_id)
    wait_until(lambda: final_job_state(deployment, job_id), 60, f"{job_id} killed")
    wait_until(
        lambda: not task_containers(deployment, f"sluice.job={job_id}"),
        60,
        f"{job_id}'s containers gone",
    )


def certificate_serial(directory: Path) -> int:
    """The serial number of the certificate in a TLS directory (its tls.crt)."""
    from cryptography import x509

    pem = (directory / "tls.crt").read_bytes()
    return int(x509.load_pem_x509_certificate(pem).serial_number)


def presented_serial(port: int, tls: Path) -> int:
    """The serial number of the certificate the server on 127.0.0.1:``port`` presents, asked
    with the client certificate in ``tls`` (a gRPC server wants ALPN h2)."""
    import socket
    import ssl

    from cryptography import x509

    context = ssl.create_default_context(cafile=str(tls / "ca.crt"))
    context.check_hostname = False
    context.load_cert_chain(str(tls / "tls.crt"), str(tls / "tls.key"))
    context.set_alpn_protocols(["h2"])
    with (
        socket.create_connection(("127.0.0.1", port), 10) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as connection,
    ):
        der = connection.getpeercert(binary_form=True)
    assert der is not None
    return int(x509.load_der_x509_certificate(der).serial_number)


# ---------------------------------------------------------------------------- lab mode


def host_address() -> str:
    """This machine's own routable IPv4 address: the source of its route to the internet
    (``ip -4 route get 1.1.1.1``), the address other machines of a lab would dial."""
    route = subprocess.run(
        ["ip", "-4", "route", "get", "1.1.1.1"], capture_output=True, text=True, check=True
    ).stdout.split()
    return route[route.index("src") + 1]


def without_deployment_settings() -> dict[str, str]:
    """This process's environment without Compose's and the deployment's variables (one
    exported would override a .env)."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("SLUICE_", "COMPOSE_"))}


@dataclass
class LabDeployment(Deployment):
    """A deployment in lab mode: SLUICE_HOST (and SLUICE_BIND) is ``host``, a routable
    address of this machine, so every address the cluster hands out is ``host`` and a
    published port; the user's CLI dials ``host`` too."""

    @classmethod
    def prepare_lab(cls, root: Path, host: str) -> LabDeployment:
        base = Deployment.prepare(root)
        lab = cls(base.directory, base.settings)
        lab.change_settings(
            SLUICE_HOST=host,
            SLUICE_BIND=host,
            SLUICE_KAFKA_PORT=str(free_port()),
            SLUICE_AGENT_PORT=str(free_port()),
        )
        return lab

    @property
    def host(self) -> str:
        return self.settings["SLUICE_HOST"]

    def cli_addresses(self) -> dict[str, str]:
        """The RM at SLUICE_HOST; the aggregator as the RM hands it out, SLUICE_HOST's too."""
        return {"SLUICE_RM": f"{self.host}:{self.settings['SLUICE_RM_PORT']}"}

    def start_script(self, name: str, *args: str) -> subprocess.Popen[str]:
        """deploy/``name`` ARGS started, not waited for (its output: stdout, stderr joined)."""
        return subprocess.Popen(
            ["bash", str(self.directory / name), *args],
            env=self._environment(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )


@dataclass
class RemoteWorker:
    """A worker's bundle (deploy/remote/NAME, from add-worker.sh --remote), brought up as an
    operator would on the other machine: Docker Compose in its directory, with its .env."""

    directory: Path

    @property
    def project(self) -> str:
        for line in (self.directory / ".env").read_text().splitlines():
            if line.startswith("COMPOSE_PROJECT_NAME="):
                return line.partition("=")[2]
        raise AssertionError(f"{self.directory}/.env: no COMPOSE_PROJECT_NAME")

    def compose(self, *args: str, timeout: float = 180, check: bool = True) -> str:
        v2 = subprocess.run(["docker", "compose", "version"], capture_output=True, check=False)
        command = ["docker", "compose"] if v2.returncode == 0 else ["docker-compose"]
        done = subprocess.run(
            [*command, *args],
            cwd=self.directory,
            env=without_deployment_settings(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and done.returncode != 0:
            raise AssertionError(f"{' '.join(command)} {' '.join(args)}: {done.stdout}")
        return done.stdout


@contextlib.contextmanager
def brought_up(deployment: Deployment, *up_args: str) -> Iterator[Deployment]:
    """``deployment`` up (``up.sh UP_ARGS --from-debian``, a person's certificate issued) for
    a module's tests; afterwards down with its volumes and its image, whatever happened, and
    how long each step took printed."""
    try:
        deployment.script("up.sh", *up_args, "--from-debian", timeout=900)
        deployment.compose("run", "--rm", "-T", "certs", "client", deployment.person)
        yield deployment
    finally:
        if (deployment.directory / ".env").exists():
            deployment.script("down.sh", "--volumes", check=False)
        image = deployment.settings["SLUICE_IMAGE"]
        subprocess.run(["docker", "image", "rm", image], capture_output=True, check=False)
        for step, seconds in deployment.timings.items():
            print(f"{deployment.directory.parent.name}: {step}: {seconds:.1f} s")
