"""Who may call the aggregator's RPCs (see :mod:`plumbing.authz`): its views are read-only and
hold no secret, so every daemon and every person of the cluster may read them.  A broker's
certificate (role ``broker``) proves a Kafka or MQTT broker to its clients and is no reader."""

from __future__ import annotations

from plumbing.authz import EVERY_HOLDER, table
from plumbing.tls import Role
from sluice_pb import aggregator_pb2 as apb

READERS = EVERY_HOLDER - {Role.BROKER}

ACCESS = table(
    apb.DESCRIPTOR.services_by_name["AggregatorService"].full_name,
    {"GetMachineList": READERS, "GetCandidates": READERS, "ListMachines": READERS},
)
