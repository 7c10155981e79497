"""The per-task state directory both runtimes keep under ``<state_dir>/tasks/``.

A task's directory holds what must outlive the agent and the task's container or cgroup:

* ``launch.json`` -- the :class:`~node_agent.runtime.base.TaskLaunch` (with the limits currently
  granted) and the wall-clock start time, written before the task starts, so a restarted agent
  knows every task it may find;
* ``output.log`` -- stdout and stderr, interleaved;
* ``exit_code`` -- the exit status, written atomically (temporary file, then rename) once the task
  ended; its modification time is the finish time;
* runtime-specific files (``pid.json`` of the process runtime).

Directory names are task keys percent-encoded into one safe path component, because keys come
from the network and become file and cgroup names.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Container, Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

from node_agent.runtime.base import ResourceLimits, RuntimeError_, TaskExistsError, TaskLaunch

LAUNCH_FILE = "launch.json"
LOG_FILE = "output.log"
EXIT_FILE = "exit_code"


def encode_name(text: str) -> str:
    """Percent-encode ``text`` into a non-empty path component that is neither ``.`` nor ``..``.

    The mapping is injective (``decode_name`` inverts it), so two keys never share a directory.
    """
    if not text:
        raise RuntimeError_("task key: must not be empty")
    # quote() always leaves "." and "~" alone; escaping "." rules out "." and ".." and hidden
    # names, escaping "~" keeps the alphabet to [A-Za-z0-9_%-].
    return quote(text, safe="-_").replace(".", "%2E").replace("~", "%7E")


def decode_name(name: str) -> str:
    """Invert :func:`encode_name`."""
    return unquote(name)


def atomic_write(path: Path, text: str) -> None:
    """Replace ``path`` by ``text`` so readers see either the old or the new content, never half."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def launch_to_json(launch: TaskLaunch, started_at: float) -> str:
    """Serialise a launch and its start time (inverse: :func:`launch_from_json`)."""
    record = asdict(launch)
    record["env"] = dict(launch.env)
    record["started_at"] = started_at
    return json.dumps(record, indent=1, sort_keys=True)


def launch_from_json(text: str) -> tuple[TaskLaunch, float]:
    """Parse what :func:`launch_to_json` wrote; raises ``ValueError``/``KeyError`` if malformed."""
    record: dict[str, Any] = json.loads(text)
    limits = record.pop("limits")
    started_at = float(record.pop("started_at"))
    launch = TaskLaunch(
        task_key=str(record["task_key"]),
        job_id=str(record["job_id"]),
        task_id=str(record["task_id"]),
        attempt=int(record["attempt"]),
        allocation_id=str(record["allocation_id"]),
        argv=tuple(str(a) for a in record["argv"]),
        limits=ResourceLimits(
            cpu=float(limits["cpu"]),
            memory_mb=int(limits["memory_mb"]),
            cpuset=tuple(int(c) for c in limits["cpuset"]),
        ),
        image=None if record.get("image") is None else str(record["image"]),
        env={str(k): str(v) for k, v in record.get("env", {}).items()},
        speculative=bool(record.get("speculative", False)),
    )
    return launch, started_at


@dataclass(frozen=True)
class TaskDir:
    """One task's state directory (the directory may not exist yet)."""

    path: Path

    @property
    def log_file(self) -> Path:
        return self.path / LOG_FILE

    @property
    def exit_file(self) -> Path:
        return self.path / EXIT_FILE

    def create(self) -> None:
        """Create the directory; raises ``FileExistsError`` if it exists (key already in use)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.mkdir()

    def write_launch(self, launch: TaskLaunch, started_at: float) -> None:
        atomic_write(self.path / LAUNCH_FILE, launch_to_json(launch, started_at))

    def read_launch(self) -> tuple[TaskLaunch, float]:
        """The stored launch and start time; raises ``OSError``/``ValueError`` if unreadable."""
        return launch_from_json((self.path / LAUNCH_FILE).read_text())

    def update_limits(self, limits: ResourceLimits) -> None:
        launch, started_at = self.read_launch()
        self.write_launch(replace(launch, limits=limits), started_at)

    def write_exit(self, code: int, finished_at: float | None = None) -> None:
        """Record the exit status; ``finished_at`` (default: now) becomes the file's mtime."""
        atomic_write(self.exit_file, f"{code}\n")
        if finished_at is not None:
            os.utime(self.exit_file, (finished_at, finished_at))

    def save_log(self, data: bytes) -> None:
        """Replace the log by ``data`` (the docker runtime saves a container's logs here)."""
        tmp = self.log_file.with_name(LOG_FILE + ".tmp")
        tmp.write_bytes(data)
        tmp.replace(self.log_file)

    def read_exit(self) -> tuple[int, float] | None:
        """``(exit_code, finished_at)`` once the task has ended, else ``None``."""
        try:
            text = self.exit_file.read_text()
            finished_at = self.exit_file.stat().st_mtime
        except FileNotFoundError:
            return None
        try:
            return int(text.strip()), finished_at
        except ValueError:
            # Only a torn write could produce this, and atomic_write rules that out.
            raise RuntimeError_(f"{self.exit_file}: not an exit status: {text!r}") from None

    def read_log(self) -> bytes:
        try:
            return self.log_file.read_bytes()
        except FileNotFoundError:
            return b""

    def remove(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


@dataclass(frozen=True)
class StateStore:
    """All task directories of one runtime: ``<state_dir>/tasks/<encoded task key>/``."""

    root: Path

    @classmethod
    def under(cls, state_dir: Path) -> StateStore:
        return cls(state_dir / "tasks")

    def task(self, task_key: str) -> TaskDir:
        return TaskDir(self.root / encode_name(task_key))

    def claim(self, launch: TaskLaunch, known: Container[str]) -> TaskDir:
        """Create the state directory of a new task; TaskExistsError if the key is taken.

        ``known`` holds the keys the runtime already manages (a directory may also exist on disk
        from a task the runtime could not read back)."""
        if launch.task_key in known:
            raise TaskExistsError(f"task {launch.task_key!r} already exists on this node")
        task_dir = self.task(launch.task_key)
        try:
            task_dir.create()
        except FileExistsError:
            raise TaskExistsError(
                f"task {launch.task_key!r}: state directory {task_dir.path} already exists"
            ) from None
        return task_dir

    def existing(self) -> Iterator[TaskDir]:
        """Every task directory present, in name order (a stable adoption order)."""
        if not self.root.is_dir():
            return
        for entry in sorted(os.scandir(self.root), key=lambda e: e.name):
            if entry.is_dir() and not entry.name.endswith(".tmp"):
                yield TaskDir(Path(entry.path))

    def remove_all(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)
