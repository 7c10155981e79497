"""Who may call the aggregator's RPCs (see :mod:`plumbing.authz`): its views are read-only and
hold no secret, so every holder of a certificate of the cluster may read them."""

from __future__ import annotations

from plumbing.authz import EVERY_HOLDER, table
from sluice_pb import aggregator_pb2 as apb

ACCESS = table(
    apb.DESCRIPTOR.services_by_name["AggregatorService"].full_name,
    {"GetMachineList": EVERY_HOLDER, "GetCandidates": EVERY_HOLDER, "ListMachines": EVERY_HOLDER},
)
