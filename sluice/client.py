"""Finding the cluster and talking to it, for the CLI.

The RM address comes from ``--rm``, then ``$SLUICE_RM``, then the local cluster's
``cluster.json`` (in ``--dir``, ``$SLUICE_DIR`` or ``~/.sluice``).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import grpc

from plumbing.errors import UserError
from plumbing.rpc import channel
from sluice_pb import node_agent_pb2_grpc as agent_grpc
from sluice_pb import resource_manager_pb2_grpc as rm_grpc


def default_dir() -> Path:
    return Path(os.environ.get("SLUICE_DIR") or Path.home() / ".sluice")


def cluster_file(directory: Path) -> Path:
    return directory / "cluster.json"


def read_cluster(directory: Path) -> dict[str, object]:
    path = cluster_file(directory)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise UserError(
            f"no local cluster in {directory} (start one with `sluice local up`)"
        ) from None
    except (OSError, ValueError) as error:
        raise UserError(f"{path}: unreadable ({error})") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: not a cluster description")
    return data


def resolve_rm(flag: str | None, directory: Path) -> str:
    if flag:
        return flag
    env = os.environ.get("SLUICE_RM")
    if env:
        return env
    address = read_cluster(directory).get("rm")
    if not isinstance(address, str):
        raise UserError(f"{cluster_file(directory)}: has no 'rm' address")
    return address


@dataclass
class RMClient:
    """Stubs for the RM's client-facing service over one channel."""

    address: str
    channel: grpc.Channel
    jobs: rm_grpc.JobServiceStub

    @classmethod
    def connect(cls, address: str) -> RMClient:
        ch = channel(address)
        return cls(address, ch, rm_grpc.JobServiceStub(ch))

    def close(self) -> None:
        self.channel.close()


def agent_stub(address: str) -> tuple[grpc.Channel, agent_grpc.AgentServiceStub]:
    ch = channel(address)
    return ch, agent_grpc.AgentServiceStub(ch)
