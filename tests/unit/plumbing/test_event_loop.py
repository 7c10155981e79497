"""The daemons' event loop: uvloop when installed (it is a dependency), asyncio's otherwise."""

from __future__ import annotations

import asyncio
import builtins
from typing import Any

import pytest

from plumbing import event_loop


async def which_loop() -> str:
    return type(asyncio.get_running_loop()).__module__


def test_the_daemons_run_on_uvloop():
    assert event_loop.run(which_loop()).startswith("uvloop")


def test_without_uvloop_they_run_on_asyncios_loop(monkeypatch: pytest.MonkeyPatch):
    real_import = builtins.__import__

    def no_uvloop(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "uvloop":
            raise ImportError("not installed")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_uvloop)
    assert event_loop.loop_factory() is None
    assert event_loop.run(which_loop()).startswith("asyncio")
