"""The resource manager process: ``sluice rm``."""

from __future__ import annotations

import argparse
import logging
import threading
from pathlib import Path

from plumbing import data_plane
from plumbing.daemon import publish_address, serve_until_signalled
from plumbing.errors import UserError
from plumbing.rpc import start_server
from resource_manager.core import ResourceManagerCore
from resource_manager.service import (
    JobServicer,
    MasterServicer,
    NodeServicer,
    RMState,
    housekeeping_loop,
    wall_clock,
)
from resource_manager.store import Store
from sluice_pb import resource_manager_pb2 as rm_pb
from sluice_pb import resource_manager_pb2_grpc as rm_grpc

log = logging.getLogger("sluice.rm")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--listen", default="127.0.0.1:7070", help="host:port (port 0 = any free)")
    parser.add_argument(
        "--advertise", help="address job masters use to reach the RM (default: the bound one)"
    )
    parser.add_argument("--state-dir", type=Path, default=Path(".sluice/rm"))
    parser.add_argument(
        "--node-timeout", type=float, default=10.0, help="seconds of silence before a node is lost"
    )
    parser.add_argument("--address-file", type=Path, help="write the bound address here once up")
    data_plane.add_arguments(parser)


def run(args: argparse.Namespace) -> int:
    try:
        plane = data_plane.from_arguments(args)
    except ValueError as error:
        raise UserError(str(error)) from None
    state_dir: Path = args.state_dir
    state_dir.mkdir(parents=True, exist_ok=True)
    store = Store(state_dir / "rm.sqlite3")
    core = ResourceManagerCore(store, node_timeout=args.node_timeout)
    host = args.listen.rsplit(":", 1)[0]
    # The advertised address is only known once bound (port 0); servicers read it lazily.
    state = RMState(core, wall_clock, advertise_address="", data_plane=plane)
    names = rm_pb.DESCRIPTOR.services_by_name
    server, port, health = start_server(
        [
            (
                rm_grpc.add_JobServiceServicer_to_server,
                JobServicer(state),
                names["JobService"].full_name,
            ),
            (
                rm_grpc.add_NodeServiceServicer_to_server,
                NodeServicer(state),
                names["NodeService"].full_name,
            ),
            (
                rm_grpc.add_MasterServiceServicer_to_server,
                MasterServicer(state),
                names["MasterService"].full_name,
            ),
        ],
        args.listen,
    )
    address = f"{host}:{port}"
    state.advertise_address = args.advertise or address
    log.info(
        "resource manager listening on %s (state in %s, %d jobs recovered)",
        address,
        state_dir,
        len(core.jobs),
    )
    if plane.has_kafka:
        log.info(
            "data plane: kafka %s, mqtt %s, aggregator %s",
            plane.kafka_bootstrap,
            plane.mqtt_url or "-",
            plane.aggregator_address or "-",
        )
    else:
        log.info("no data plane configured (--kafka): agents publish no metrics")
    publish_address(args.address_file, address)
    stop = threading.Event()
    housekeeping = threading.Thread(
        target=housekeeping_loop, args=(state, stop), name="housekeeping", daemon=True
    )
    serve_until_signalled(stop, [housekeeping], server, health, log, "shutting down", grace=2)
    store.close()
    log.info("resource manager stopped")
    return 0
