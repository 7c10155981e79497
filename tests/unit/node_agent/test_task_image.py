"""The default task image recipe: rootfs contents, versioning, import through the SDK."""

from __future__ import annotations

import io
import stat
import tarfile
from pathlib import Path
from typing import Any

import docker.errors
import pytest

from node_agent.runtime import task_image
from node_agent.runtime.base import RuntimeUnavailableError

APPLETS = ("sh", "sleep", "echo", "cat", "yes", "dd", "seq")


def members(data: bytes) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return {m.name: m for m in tar.getmembers()}


def test_rootfs_has_busybox_and_an_applet_symlink_each() -> None:
    data = task_image.rootfs_tar(b"\x7fELF-busybox", APPLETS)
    entries = members(data)
    busybox = entries["bin/busybox"]
    assert busybox.isfile() and busybox.mode == 0o755
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        extracted = tar.extractfile("bin/busybox")
        assert extracted is not None and extracted.read() == b"\x7fELF-busybox"
    for applet in APPLETS:
        assert entries[f"bin/{applet}"].issym()
        assert entries[f"bin/{applet}"].linkname == "busybox"
    assert entries["tmp"].mode & stat.S_ISVTX
    assert "etc/passwd" in entries


def test_rootfs_is_deterministic() -> None:
    assert task_image.rootfs_tar(b"x", APPLETS) == task_image.rootfs_tar(b"x", APPLETS[::-1])


@pytest.mark.parametrize(
    ("busybox", "applets"),
    [(b"other binary", APPLETS), (b"busybox", (*APPLETS, "awk")), (b"busybox", APPLETS[:-1])],
)
def test_recipe_digest_changes_with_binary_or_applets(busybox: bytes, applets) -> None:
    assert task_image.recipe_digest(busybox, applets) != task_image.recipe_digest(
        b"busybox", APPLETS
    )


@pytest.mark.parametrize(
    ("image", "expected"),
    [
        ("sluice-task:latest", ("sluice-task", "latest")),
        ("sluice-task", ("sluice-task", "latest")),
        ("registry:5000/team/img", ("registry:5000/team/img", "latest")),
        ("registry:5000/team/img:v2", ("registry:5000/team/img", "v2")),
    ],
)
def test_split_reference(image: str, expected: tuple[str, str]) -> None:
    assert task_image.split_reference(image) == expected


class FakeImage:
    def __init__(self, labels: dict[str, str]) -> None:
        self.labels, self.id = labels, "sha256:abc"


class FakeClient:
    """The slice of docker.DockerClient that ensure_image uses."""

    def __init__(self, labels: dict[str, str] | None) -> None:
        self.stored = None if labels is None else FakeImage(labels)
        self.imports: list[dict[str, Any]] = []
        self.images = self
        self.api = self

    def get(self, name: str) -> FakeImage:
        if self.stored is None:
            raise docker.errors.ImageNotFound(name)
        return self.stored

    def import_image_from_data(self, data: bytes, **kwargs: Any) -> None:
        self.imports.append({"data": data, **kwargs})
        label = kwargs["changes"][0].removeprefix(f"LABEL {task_image.RECIPE_LABEL}=")
        self.stored = FakeImage({task_image.RECIPE_LABEL: label})


@pytest.fixture
def fake_busybox(tmp_path: Path) -> Path:
    script = tmp_path / "busybox"
    script.write_text("#!/bin/sh\nprintf 'sh\\nsleep\\necho\\n'\n")
    script.chmod(0o755)
    return script


def current_digest(busybox: Path) -> str:
    return task_image.recipe_digest(busybox.read_bytes(), ("echo", "sh", "sleep"))


@pytest.mark.parametrize(
    ("stored_label", "imports"), [(None, 1), ("stale-recipe", 1), ("current", 0)]
)
def test_ensure_image_builds_only_when_missing_or_stale(
    fake_busybox: Path, stored_label: str | None, imports: int
) -> None:
    labels = None
    if stored_label is not None:
        value = current_digest(fake_busybox) if stored_label == "current" else stored_label
        labels = {task_image.RECIPE_LABEL: value}
    client = FakeClient(labels)
    task_image.ensure_image(client, "sluice-task:latest", busybox=fake_busybox)
    assert len(client.imports) == imports
    if imports:
        made = client.imports[0]
        assert (made["repository"], made["tag"]) == ("sluice-task", "latest")
        assert f"LABEL {task_image.RECIPE_LABEL}={current_digest(fake_busybox)}" in made["changes"]
        assert {"bin/sh", "bin/sleep", "bin/echo", "bin/busybox"} <= set(members(made["data"]))


def test_missing_busybox_is_one_clear_line(tmp_path: Path) -> None:
    with pytest.raises(RuntimeUnavailableError, match="install the busybox-static"):
        task_image.ensure_image(FakeClient(None), busybox=tmp_path / "nope")
