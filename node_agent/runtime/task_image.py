"""The default task image ``sluice-task:latest``, built locally because there is no registry.

The image is a root filesystem holding Debian's static busybox (package ``busybox-static``) as
``/bin/busybox`` plus a symlink per applet (``sh``, ``sleep``, ``echo``, ``cat``, ``yes``, ``dd``,
``seq``, ...), imported with ``docker import`` through the SDK -- no network needed.

The image carries a label with a digest of its recipe (recipe version, busybox binary, applet
list), so a changed recipe or an upgraded busybox makes :func:`ensure_image` build it again.
"""

from __future__ import annotations

import hashlib
import io
import subprocess
import tarfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import docker.errors

from node_agent.runtime.base import RuntimeUnavailableError

DEFAULT_IMAGE = "sluice-task:latest"
RECIPE_VERSION = 1
RECIPE_LABEL = "org.sluice.task-image.recipe"
BUSYBOX = Path("/bin/busybox")
_DIRS = ("bin", "dev", "etc", "proc", "root", "sys", "tmp")
_FILES = {
    "etc/passwd": b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n",
    "etc/group": b"root:x:0:\nnogroup:x:65534:\n",
}


def busybox_applets(busybox: Path = BUSYBOX) -> tuple[str, ...]:
    """The applets this busybox binary provides (``busybox --list``)."""
    try:
        listing = subprocess.run(
            [str(busybox), "--list"], capture_output=True, check=True, text=True, timeout=10
        ).stdout
    except (OSError, subprocess.SubprocessError) as e:
        raise RuntimeUnavailableError(
            f"task image: cannot run {busybox} (install the busybox-static package): {e}"
        ) from e
    return tuple(sorted({name for name in listing.split() if name and "/" not in name}))


def recipe_digest(busybox_bytes: bytes, applets: Sequence[str]) -> str:
    """Identifies what :func:`rootfs_tar` would build; stored in the image's label."""
    h = hashlib.sha256(f"sluice-task-image v{RECIPE_VERSION}\n".encode())
    h.update(hashlib.sha256(busybox_bytes).digest())
    h.update("\n".join(sorted(applets)).encode())
    return h.hexdigest()[:32]


def rootfs_tar(busybox_bytes: bytes, applets: Sequence[str]) -> bytes:
    """A root filesystem tar: ``/bin/busybox``, ``/bin/<applet> -> busybox``, minimal ``/etc``.

    Deterministic (fixed owners and timestamps), so equal inputs give equal bytes.
    """
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as tar:

        def add(name: str, kind: bytes, mode: int, data: bytes = b"", target: str = "") -> None:
            info = tarfile.TarInfo(name)
            info.type, info.mode, info.mtime, info.linkname = kind, mode, 0, target
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data else None)

        for directory in _DIRS:
            add(directory, tarfile.DIRTYPE, 0o1777 if directory == "tmp" else 0o755)
        add("bin/busybox", tarfile.REGTYPE, 0o755, busybox_bytes)
        for applet in sorted(set(applets) - {"busybox"}):
            add(f"bin/{applet}", tarfile.SYMTYPE, 0o777, target="busybox")
        for name, data in sorted(_FILES.items()):
            add(name, tarfile.REGTYPE, 0o644, data)
    return buffer.getvalue()


def split_reference(image: str) -> tuple[str, str]:
    """``"repo:tag"`` -> ``("repo", "tag")``; the tag defaults to ``latest``.

    A colon before the last ``/`` belongs to a registry port, not to the tag.
    """
    repository, colon, tag = image.rpartition(":")
    if not colon or "/" in tag:
        return image, "latest"
    return repository, tag


def ensure_image(client: Any, image: str = DEFAULT_IMAGE, busybox: Path = BUSYBOX) -> str:
    """Make sure ``image`` exists with the current recipe, building it if needed; its id.

    ``client`` is a ``docker.DockerClient``.  Raises :class:`RuntimeUnavailableError` if busybox
    is missing or Docker refuses the import.
    """
    try:
        busybox_bytes = busybox.read_bytes()
    except OSError as e:
        raise RuntimeUnavailableError(
            f"task image: cannot read {busybox} (install the busybox-static package): {e}"
        ) from e
    applets = busybox_applets(busybox)
    digest = recipe_digest(busybox_bytes, applets)
    try:
        existing = client.images.get(image)
        if existing.labels.get(RECIPE_LABEL) == digest:
            return str(existing.id)
    except docker.errors.ImageNotFound:
        pass
    repository, tag = split_reference(image)
    try:
        client.api.import_image_from_data(
            rootfs_tar(busybox_bytes, applets),
            repository=repository,
            tag=tag,
            changes=[f"LABEL {RECIPE_LABEL}={digest}", "ENV PATH=/bin", 'CMD ["/bin/sh"]'],
        )
        return str(client.images.get(image).id)
    except docker.errors.DockerException as e:
        raise RuntimeUnavailableError(f"task image: importing {image} failed: {e}") from e
