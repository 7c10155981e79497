"""Task runtimes of the node agent: ``make_runtime`` picks one; see ``base`` for the contract."""

from __future__ import annotations

from pathlib import Path

from node_agent.runtime.base import RuntimeUnavailableError, TaskRuntime

KINDS = ("process", "docker")


def make_runtime(
    kind: str,
    node_id: str,
    state_dir: Path,
    *,
    cluster_id: str = "sluice",
    docker_url: str | None = None,
    default_image: str = "sluice-task:latest",  # task_image.DEFAULT_IMAGE; docker loads lazily
    cgroup_root: Path | None = Path("/sys/fs/cgroup"),
) -> TaskRuntime:
    """The runtime ``kind`` (``"process"`` or ``"docker"``) for node ``node_id``.

    Tasks already started by an earlier runtime with the same ``cluster_id``, ``node_id`` and
    ``state_dir`` are adopted; another cluster's tasks are never seen.  ``cgroup_root`` only
    matters for ``process`` (``None``: plain processes).  Raises :class:`RuntimeUnavailableError`
    with a one-line reason if the runtime cannot work here (no Docker Engine, unknown kind,
    unusable state directory).
    """
    if not node_id:
        raise RuntimeUnavailableError("node_id: must not be empty")
    try:
        state_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise RuntimeUnavailableError(f"state_dir: cannot create {state_dir}: {e.strerror}") from e
    if kind == "process":
        from node_agent.runtime.process_runtime import ProcessRuntime

        return ProcessRuntime(node_id, state_dir, cluster_id=cluster_id, cgroup_root=cgroup_root)
    if kind == "docker":
        from node_agent.runtime.docker_runtime import DockerRuntime

        runtime: TaskRuntime = DockerRuntime.connect(
            node_id, state_dir, docker_url, cluster_id=cluster_id, default_image=default_image
        )
        return runtime
    raise RuntimeUnavailableError(f"runtime: unknown kind {kind!r} (expected one of {KINDS})")


__all__ = ["KINDS", "make_runtime"]
