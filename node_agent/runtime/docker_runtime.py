"""The ``docker`` runtime: one container per task on the local Docker Engine.

Containers are named ``sluice-<cluster>_<node>-<task>-<hash>`` and labelled ``sluice.cluster``,
``sluice.node``, ``sluice.job``, ``sluice.task``, ``sluice.attempt``, ``sluice.allocation`` and
``sluice.task_key``; a restarted runtime adopts every container labelled with its cluster and
node (and never touches another cluster's, whatever its node ids).  Limits map to ``cpu_period``/
``cpu_quota``, ``cpuset_cpus`` and ``mem_limit`` (swap disallowed).  Containers run with Docker's
init (``init=True``), so SIGTERM reaches the task as it would outside a container (a shell loop
as PID 1 would ignore it) and exit codes match the process runtime's.

Suspend and resume are ``pause``/``unpause`` (Docker's cgroup freezer).  A task's directory under
``<state_dir>/tasks/`` keeps its launch record; :meth:`DockerRuntime.cleanup` saves the container's
logs and exit code there before removing the container, so both stay readable afterwards.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import math
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import docker
import docker.errors

from node_agent.preemption import swap_bytes_v1, swap_bytes_v2
from node_agent.runtime import cgroups
from node_agent.runtime.base import (
    ResourceLimits,
    RunObservation,
    RunState,
    RuntimeError_,
    RuntimeUnavailableError,
    TaskExistsError,
    TaskLaunch,
    TaskUsage,
    UnknownTaskError,
    scope_name,
)
from node_agent.runtime.task_image import DEFAULT_IMAGE, ensure_image
from node_agent.runtime.task_state import StateStore, TaskDir
from plumbing.errors import UserError

LABEL_CLUSTER = "sluice.cluster"
LABEL_NODE = "sluice.node"
LABEL_JOB = "sluice.job"
LABEL_TASK = "sluice.task"
LABEL_ATTEMPT = "sluice.attempt"
LABEL_ALLOCATION = "sluice.allocation"
LABEL_TASK_KEY = "sluice.task_key"
PAUSE_TIMEOUT_S = 5.0
LOST_EXIT_CODE = 137
"""Recorded for a task whose container disappeared before its exit code was saved."""
_POLL_S = 0.02
DEFAULT_CPU_SHARES = 1024
"""A regular container's CPU weight (Docker's and the kernel's default)."""


def container_name(scope: str, task_key: str) -> str:
    """A valid, readable Docker name, unique per (cluster and node, key) thanks to the hash."""
    digest = hashlib.sha256(f"{scope}\0{task_key}".encode()).hexdigest()[:10]

    def safe(text: str) -> str:
        return re.sub(r"[^a-zA-Z0-9_.-]", "_", text)[:40]

    return f"sluice-{safe(scope)}-{safe(task_key)}-{digest}"


def container_labels(cluster_id: str, node_id: str, launch: TaskLaunch) -> dict[str, str]:
    return {
        LABEL_CLUSTER: cluster_id,
        LABEL_NODE: node_id,
        LABEL_JOB: launch.job_id,
        LABEL_TASK: launch.task_id,
        LABEL_ATTEMPT: str(launch.attempt),
        LABEL_ALLOCATION: launch.allocation_id,
        LABEL_TASK_KEY: launch.task_key,
    }


def docker_limits(
    limits: ResourceLimits, all_cpus: Sequence[int], *, swap: bool = False
) -> dict[str, Any]:
    """Keyword arguments for ``containers.run``/``container.update`` granting ``limits``.

    An empty cpuset means all of the node's CPUs, spelled out so that a resize can widen it.
    A task runs without swap on top of its memory limit, except while preempted (``swap``):
    its memory is then cut below what it uses, and the pages must have somewhere to go.
    """
    memory = cgroups.memory_limit_bytes(limits.memory_mb)
    return {
        "cpu_period": cgroups.CFS_PERIOD_US,
        "cpu_quota": cgroups.cfs_quota_us(limits.cpu),
        "cpuset_cpus": cgroups.format_cpuset(limits.cpuset or all_cpus),
        "mem_limit": memory,
        "memswap_limit": -1 if swap else memory,  # -1: unlimited swap
    }


def limits_from_host_config(host_config: dict[str, Any]) -> ResourceLimits:
    """Inverse of :func:`docker_limits` for an adopted container (``attrs["HostConfig"]``)."""
    period = host_config.get("CpuPeriod") or cgroups.CFS_PERIOD_US
    return ResourceLimits(
        cpu=(host_config.get("CpuQuota") or period) / period,
        memory_mb=(host_config.get("Memory") or 0) // (1024 * 1024),
        cpuset=cgroups.parse_cpuset(host_config.get("CpusetCpus") or ""),
    )


def parse_docker_time(text: str | None) -> float | None:
    """Docker's RFC 3339 timestamps (nanoseconds) as epoch seconds; ``None`` for "never"."""
    if not text or text.startswith("0001-"):
        return None
    match = re.fullmatch(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)", text)
    if match is None:
        return None
    whole, fraction, zone = match.groups()
    stamp = datetime.datetime.fromisoformat(whole + ("+00:00" if zone == "Z" else zone))
    return stamp.timestamp() + float("0." + (fraction or "0"))


@contextlib.contextmanager
def _docker_errors(action: str) -> Iterator[None]:
    """Turn Docker SDK errors into one-line :class:`RuntimeError_`."""
    try:
        yield
    except docker.errors.APIError as e:
        raise RuntimeError_(f"docker: {action}: {e.explanation or e}") from e
    except docker.errors.DockerException as e:
        raise RuntimeError_(f"docker: {action}: {e}") from e


@dataclass
class _Task:
    launch: TaskLaunch
    started_at: float
    dir: TaskDir
    container_id: str | None  # None once removed (or lost)
    final: RunObservation | None = None  # once it exited: never asked of the engine again


class DockerRuntime:
    """Tasks as containers; see the module docstring.  ``client`` is a ``docker.DockerClient``."""

    name = "docker"

    def __init__(
        self,
        node_id: str,
        state_dir: Path,
        client: Any,
        *,
        cluster_id: str = "sluice",
        default_image: str = DEFAULT_IMAGE,
        pause_timeout: float = PAUSE_TIMEOUT_S,
        clock: Callable[[], float] = time.time,
        cgroup_root: Path = Path("/sys/fs/cgroup"),
    ) -> None:
        self._node_id = node_id
        self._cluster_id = cluster_id
        self._scope = scope_name(cluster_id, node_id)
        self._client = client
        self._store = StateStore.under(state_dir)
        self._default_image = default_image
        self._pause_timeout = pause_timeout
        self._clock = clock
        self._lock = threading.RLock()
        self._tasks: dict[str, _Task] = {}
        self._unreadable: list[str] = []
        self._images_ready: set[str] = set()
        self._cpus = cgroups.host_cpus()
        self._cgroup_root = cgroup_root
        self._granted_mb: dict[str, int] = {}  # each task's memory as started
        with _docker_errors("reading the engine's version"):
            self._engine = client.version()
        self._adopt()

    @classmethod
    def connect(
        cls, node_id: str, state_dir: Path, docker_url: str | None, **kwargs: Any
    ) -> DockerRuntime:
        """Connect to the engine at ``docker_url`` (default: the environment, as ``docker``
        does) and create the runtime; raises :class:`RuntimeUnavailableError` if unreachable."""
        where = docker_url or "the default Docker socket"
        try:
            client = docker.DockerClient(base_url=docker_url) if docker_url else docker.from_env()
            client.ping()
        except docker.errors.DockerException as e:
            raise RuntimeUnavailableError(f"docker: cannot reach the engine at {where}: {e}") from e
        try:
            return cls(node_id, state_dir, client, **kwargs)
        except RuntimeError_ as e:
            client.close()
            raise RuntimeUnavailableError(str(e)) from e

    # -- TaskRuntime -------------------------------------------------------------------------

    def describe(self) -> str:
        text = (
            f"docker runtime for node {self._node_id!r} of cluster {self._cluster_id!r}: Docker "
            "Engine "
            f"{self._engine.get('Version', '?')} at {self._client.api.base_url}; default image "
            f"{self._default_image} (built locally); adopted {len(self._tasks)} task(s)"
        )
        if self._unreadable:
            text += f"; ignored unreadable state in {', '.join(self._unreadable)}"
        return text

    def start(self, launch: TaskLaunch) -> None:
        cgroups.validate_limits(launch.limits, self._cpus)
        if not launch.argv:
            raise UserError("argv: must name a program to run")
        with self._lock:
            # The claimed directory reserves the key: a second start of it fails here.
            task_dir = self._store.claim(launch, self._tasks)
            try:
                self._ensure_image(launch)
            except BaseException:
                task_dir.remove()
                raise
        # Creating and starting a container takes the engine ~0.2 s: done outside the lock, so
        # that several tasks (a speculative pass's admitted ones, concurrent grants) start at
        # once rather than one after another.  Until it is registered below, the task is not
        # observed, stopped or adopted by this runtime: nobody else knows its key yet.
        try:
            task = _Task(launch, self._clock(), task_dir, container_id=None)
            task_dir.write_launch(launch, task.started_at)
            task.container_id = self._run(launch)
        except BaseException:
            task_dir.remove()
            raise
        with self._lock:
            self._tasks[launch.task_key] = task
            self._granted_mb[launch.task_key] = launch.limits.memory_mb

    def observe(self) -> Sequence[RunObservation]:
        with self._lock:
            containers = self._containers_by_key()
            return [
                self._observe(self._tasks[key], containers.get(key)) for key in sorted(self._tasks)
            ]

    def stop(self, task_key: str, grace_seconds: float = 5.0) -> None:
        with self._lock:
            container = self._container(self._get(task_key))
            if container is None or container.status in ("exited", "dead", "created"):
                return
            with _docker_errors(f"stopping task {task_key!r}"):
                if container.status == "paused":
                    container.unpause()
                # Docker's grace period is whole seconds; round up rather than cut it short.
                container.stop(timeout=math.ceil(grace_seconds))
                container.wait()

    def suspend(self, task_key: str) -> None:
        with self._lock:
            container = self._live_container(task_key, "suspend")
            if container.status == "paused":
                return
            with _docker_errors(f"pausing task {task_key!r}"):
                container.pause()
                self._await_status(container, "paused")

    def resume(self, task_key: str) -> None:
        with self._lock:
            container = self._container(self._get(task_key))
            if container is None or container.status != "paused":
                return
            with _docker_errors(f"unpausing task {task_key!r}"):
                container.unpause()
                self._await_status(container, "running")

    def resize(self, task_key: str, limits: ResourceLimits) -> None:
        cgroups.validate_limits(limits, self._cpus)
        with self._lock:
            task = self._get(task_key)
            container = self._live_container(task_key, "resize")
            granted = self._granted_mb.setdefault(task_key, task.launch.limits.memory_mb)
            swap = limits.memory_mb < granted  # preempted: its pages may go to swap
            with _docker_errors(f"resizing task {task_key!r}"):
                container.update(**docker_limits(limits, self._cpus, swap=swap))
            task.dir.update_limits(limits)
            task.launch = replace(task.launch, limits=limits)

    def promote(self, task_key: str, allocation_id: str, limits: ResourceLimits) -> None:
        cgroups.validate_limits(limits, self._cpus)
        with self._lock:
            task = self._get(task_key)
            container = self._live_container(task_key, "promote")
            with _docker_errors(f"promoting task {task_key!r}"):
                container.update(cpu_shares=DEFAULT_CPU_SHARES)
            regular = replace(task.launch, speculative=False, allocation_id=allocation_id)
            task.launch = regular
            task.dir.write_launch(regular, task.started_at)
            self._granted_mb[task_key] = limits.memory_mb
        self.resize(task_key, limits)

    def usage(self, task_key: str) -> TaskUsage:
        with self._lock:
            container = self._live_container(task_key, "measure")
            pid = int(container.attrs.get("State", {}).get("Pid") or 0)
            direct = cgroup_usage_of(pid, self._cgroup_root) if pid > 0 else None
            if direct is not None:
                return direct
            # The engine's stats endpoint often takes ~0.5 s even with one_shot, hence last.
            with _docker_errors(f"reading stats of task {task_key!r}"):
                stats = container.stats(stream=False, one_shot=True)
            cpu_ns = stats.get("cpu_stats", {}).get("cpu_usage", {}).get("total_usage", 0)
            return TaskUsage(
                cpu_seconds=cpu_ns / 1e9,
                memory_bytes=int(stats.get("memory_stats", {}).get("usage", 0)),
            )

    def logs(self, task_key: str) -> bytes:
        with self._lock:
            task = self._get(task_key)
            container = self._container(task)
            if container is None:
                return task.dir.read_log()
            with _docker_errors(f"reading logs of task {task_key!r}"):
                return bytes(container.logs(stdout=True, stderr=True))

    def cleanup(self, task_key: str) -> None:
        with self._lock:
            task = self._get(task_key)
            container = self._container(task)
            if container is None:
                self._settle(task)
                return
            if container.status not in ("exited", "dead", "created"):
                raise RuntimeError_(f"task {task_key!r} is still running; stop it first")
            with _docker_errors(f"removing the container of task {task_key!r}"):
                task.dir.save_log(bytes(container.logs(stdout=True, stderr=True)))
                state = container.attrs.get("State", {})
                task.dir.write_exit(
                    int(state.get("ExitCode", LOST_EXIT_CODE)),
                    parse_docker_time(state.get("FinishedAt")),
                )
                container.remove(force=True)
            task.container_id = None

    def forget(self, task_key: str) -> None:
        with self._lock:
            self.cleanup(task_key)
            self._tasks.pop(task_key).dir.remove()

    def close(self) -> None:
        self._client.close()

    # -- beyond the protocol -----------------------------------------------------------------

    def pressure_dir(self, task_key: str) -> Path | None:
        # The container's cgroup depends on the engine's cgroup driver and version; per-task
        # PSI for containers is not reported yet (the machine-wide PSI always is).
        return None

    def service_host(self, task_key: str) -> str | None:
        """The container's address on its network (the engine's default bridge)."""
        with self._lock:
            try:
                container = self._live_container(task_key, "probe")
            except RuntimeError_:
                return None
            networks = container.attrs.get("NetworkSettings", {})
        address = networks.get("IPAddress") or next(
            (
                n.get("IPAddress")
                for n in (networks.get("Networks") or {}).values()
                if n.get("IPAddress")
            ),
            None,
        )
        return str(address) if address else None

    def swap_bytes(self, task_key: str) -> int | None:
        with self._lock:
            try:
                container = self._live_container(task_key, "measure")
            except RuntimeError_:
                return None
            pid = int(container.attrs.get("State", {}).get("Pid") or 0)
        return cgroup_swap_of(pid, self._cgroup_root) if pid > 0 else None

    def purge(self, grace_seconds: float = 1.0) -> None:
        """Stop and remove every container of this node (known or not) and all task state."""
        with self._lock, _docker_errors("purging the node's containers"):
            for key in sorted(self._tasks):
                self.stop(key, grace_seconds)
            for container in self._client.containers.list(
                all=True, filters={"label": self._label_filter()}
            ):
                container.remove(force=True)
            self._tasks.clear()
            self._store.remove_all()

    # -- internals ---------------------------------------------------------------------------

    def _ensure_image(self, launch: TaskLaunch) -> None:
        """Build the default image if this engine lacks it (once; under the lock)."""
        image = launch.image or self._default_image
        if image == self._default_image and image not in self._images_ready:
            ensure_image(self._client, image)
            self._images_ready.add(image)

    def _run(self, launch: TaskLaunch) -> str:
        try:
            container = self._client.containers.run(
                launch.image or self._default_image,
                command=list(launch.argv),
                name=container_name(self._scope, launch.task_key),
                labels=container_labels(self._cluster_id, self._node_id, launch),
                environment={
                    **launch.env,
                    "SLUICE_TASK_KEY": launch.task_key,
                    "SLUICE_JOB_ID": launch.job_id,
                    "SLUICE_TASK_ID": launch.task_id,
                    "SLUICE_ATTEMPT": str(launch.attempt),
                },
                detach=True,
                auto_remove=False,
                init=True,
                # A speculative task's lower CPU weight (ROSE's oversubscribed group); Docker
                # keeps every container under its own parent, so the weight is per container.
                cpu_shares=cgroups.SPECULATIVE_SHARES_V1 if launch.speculative else 0,
                **docker_limits(launch.limits, self._cpus),
            )
        except docker.errors.APIError as e:
            if e.status_code == 409:
                raise TaskExistsError(
                    f"task {launch.task_key!r}: a container of that name already exists"
                ) from e
            self._remove_named(container_name(self._scope, launch.task_key))
            raise RuntimeError_(f"docker: starting {launch.task_key!r}: {e.explanation}") from e
        except docker.errors.DockerException as e:
            self._remove_named(container_name(self._scope, launch.task_key))
            raise RuntimeError_(f"docker: starting {launch.task_key!r}: {e}") from e
        return str(container.id)

    def _remove_named(self, name: str) -> None:
        """Remove a container a failed ``run`` may have created (create succeeded, start not)."""
        with contextlib.suppress(docker.errors.DockerException):
            self._client.containers.get(name).remove(force=True)

    def _adopt(self) -> None:
        """Take over state directories and containers of this node left by an earlier instance."""
        for task_dir in self._store.existing():
            try:
                launch, started_at = task_dir.read_launch()
            except (OSError, ValueError, KeyError, TypeError):
                self._unreadable.append(str(task_dir.path))
                continue
            self._tasks[launch.task_key] = _Task(launch, started_at, task_dir, container_id=None)
        for key, container in self._containers_by_key().items():
            task = self._tasks.get(key)
            if task is None:  # the agent died between creating the container and its record
                launch = _launch_from_container(container)
                started_at = _started_at(container) or self._clock()
                task = _Task(launch, started_at, self._store.task(key), container_id=None)
                task.dir.path.mkdir(parents=True, exist_ok=True)
                task.dir.write_launch(launch, task.started_at)
                self._tasks[key] = task
            task.container_id = str(container.id)
            if container.status == "created":  # the agent died between create and start
                with _docker_errors(f"starting adopted task {key!r}"):
                    container.start()

    def _label_filter(self) -> list[str]:
        """This runtime's containers: its cluster's and its node's (both labels must match)."""
        return [f"{LABEL_CLUSTER}={self._cluster_id}", f"{LABEL_NODE}={self._node_id}"]

    def _containers_by_key(self) -> dict[str, Any]:
        with _docker_errors("listing containers"):
            containers = self._client.containers.list(
                all=True, filters={"label": self._label_filter()}
            )
        return {c.labels[LABEL_TASK_KEY]: c for c in containers if LABEL_TASK_KEY in c.labels}

    def _get(self, task_key: str) -> _Task:
        try:
            return self._tasks[task_key]
        except KeyError:
            raise UnknownTaskError(f"no task {task_key!r} on this node") from None

    def _container(self, task: _Task) -> Any | None:
        """The task's container, freshly inspected, or ``None`` if it is gone."""
        if task.container_id is None:
            return None
        try:
            return self._client.containers.get(task.container_id)
        except docker.errors.NotFound:
            task.container_id = None
            return None
        except docker.errors.DockerException as e:
            raise RuntimeError_(f"docker: inspecting {task.launch.task_key!r}: {e}") from e

    def _live_container(self, task_key: str, action: str) -> Any:
        container = self._container(self._get(task_key))
        if container is None or container.status not in ("running", "paused", "restarting"):
            raise RuntimeError_(f"cannot {action} task {task_key!r}: it has exited")
        return container

    def _await_status(self, container: Any, status: str) -> None:
        """Docker's pause is synchronous, but confirm it from the engine, within a bound."""
        deadline = time.monotonic() + self._pause_timeout
        container.reload()
        while container.status != status:
            if time.monotonic() > deadline:
                raise RuntimeError_(
                    f"docker: container {container.name} is {container.status!r}, not {status!r}, "
                    f"after {self._pause_timeout:g} s"
                )
            time.sleep(_POLL_S)
            container.reload()

    def _settle(self, task: _Task) -> None:
        """A task without container and without saved exit code was lost: record it so."""
        if task.dir.read_exit() is None:
            with task.dir.log_file.open("ab") as log:
                log.write(b"sluice: the task's container disappeared; exit status unknown\n")
            task.dir.write_exit(LOST_EXIT_CODE)

    def _observe(self, task: _Task, container: Any | None) -> RunObservation:
        if task.final is not None:
            return task.final
        exit_code: int | None = None
        finished_at: float | None = None
        if container is None:
            task.container_id = None
            self._settle(task)
            saved = task.dir.read_exit()
            assert saved is not None  # _settle guarantees it
            state = RunState.EXITED
            exit_code, finished_at = saved
        elif container.status == "paused":
            state = RunState.SUSPENDED
        elif container.status in ("exited", "dead"):
            state = RunState.EXITED
            docker_state = container.attrs.get("State", {})
            exit_code = int(docker_state.get("ExitCode", LOST_EXIT_CODE))
            finished_at = parse_docker_time(docker_state.get("FinishedAt"))
        else:  # running, restarting, created (being started)
            state = RunState.RUNNING
        launch = task.launch
        observation = RunObservation(
            task_key=launch.task_key,
            job_id=launch.job_id,
            task_id=launch.task_id,
            attempt=launch.attempt,
            allocation_id=launch.allocation_id,
            state=state,
            limits=launch.limits,
            exit_code=exit_code,
            started_at=task.started_at,
            finished_at=finished_at,
            speculative=launch.speculative,
        )
        if state is RunState.EXITED:
            task.final = observation  # an ended task's result never changes: remember it
        return observation


def cgroup_swap_of(pid: int, cgroup_root: Path) -> int | None:
    """The memory in swap of process ``pid``'s cgroup (a container's init), or None."""
    try:
        for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            if "memory" in controllers.split(","):  # v1
                stat = (cgroup_root / "memory" / path.lstrip("/") / "memory.stat").read_text()
                return swap_bytes_v1(stat)
            if not controllers:  # v2
                current = cgroup_root / path.lstrip("/") / "memory.swap.current"
                return swap_bytes_v2(current.read_text())
    except (OSError, ValueError):
        return None
    return None


def cgroup_usage_of(pid: int, cgroup_root: Path) -> TaskUsage | None:
    """Usage read straight from the cgroup files of process ``pid`` (the container's init), or
    ``None`` if they cannot be found -- e.g. the engine runs on another host or namespace."""
    try:
        paths: dict[str, str] = {}  # controller ("" for v2) -> cgroup path of pid
        for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            for controller in controllers.split(",") if controllers else [""]:
                paths[controller] = path.lstrip("/")
        if "cpuacct" in paths and "memory" in paths:  # v1
            cpuacct = cgroup_root / "cpuacct"
            if not cpuacct.is_dir():
                cpuacct = cgroup_root / "cpu,cpuacct"
            cpu_ns = int((cpuacct / paths["cpuacct"] / "cpuacct.usage").read_text())
            memory_dir = cgroup_root / "memory" / paths["memory"]
            memory = int((memory_dir / "memory.usage_in_bytes").read_text())
            return TaskUsage(cpu_seconds=cpu_ns / 1e9, memory_bytes=memory)
        if "" in paths:  # v2
            directory = cgroup_root / paths[""]
            cpu_stat = (directory / "cpu.stat").read_text().splitlines()
            usec = dict(line.split(" ", 1) for line in cpu_stat)["usage_usec"]
            memory = int((directory / "memory.current").read_text())
            return TaskUsage(cpu_seconds=int(usec) / 1e6, memory_bytes=memory)
    except (OSError, ValueError, KeyError):
        return None
    return None


def _launch_from_container(container: Any) -> TaskLaunch:
    labels = container.labels
    config = container.attrs.get("Config", {})
    return TaskLaunch(
        task_key=labels[LABEL_TASK_KEY],
        job_id=labels.get(LABEL_JOB, ""),
        task_id=labels.get(LABEL_TASK, ""),
        attempt=int(labels.get(LABEL_ATTEMPT, "0")),
        allocation_id=labels.get(LABEL_ALLOCATION, ""),
        argv=tuple(config.get("Cmd") or ()),
        limits=limits_from_host_config(container.attrs.get("HostConfig", {})),
        image=config.get("Image"),
        speculative=container.attrs.get("HostConfig", {}).get("CpuShares")
        == cgroups.SPECULATIVE_SHARES_V1,
    )


def _started_at(container: Any) -> float | None:
    return parse_docker_time(container.attrs.get("State", {}).get("StartedAt"))
