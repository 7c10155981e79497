#!/usr/bin/env bash
# The deployment's end-to-end test (issue 30): builds the image as a host without a registry
# must (deploy/images.sh --from-debian), brings deploy/ up with three workers (and, in lab mode,
# with a worker started from its remote bundle: test_lab.py), uses it from this
# host, breaks it on purpose, and tears it down to nothing (tests/deployment/).  Called by
# scripts/test.sh; the tests are bounded to 12 minutes, the image build before them to 15.  Needs root (mmdebstrap, cgroups) and Docker.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

install_system_packages
start_docker
ensure_venv '.[dev]'

# The image first, as a host without a registry builds it (the Debian base from the mirror, the
# Python packages through this host's pip): on a fresh machine a few minutes, then cached, so
# the tests' own builds (one image tag per deployment) take seconds.  Under a tag of its own,
# kept as the cache, so that an operator's sluice:latest on this machine is left alone.
echo "== deployment: the image"
started=$SECONDS
SLUICE_IMAGE=sluice:e2e-cache timeout --kill-after 30 900 bash deploy/images.sh --from-debian
echo "== deployment: the image: $((SECONDS - started)) s"

echo "== deployment end to end"
started=$SECONDS
timeout --kill-after 30 720 .venv/bin/python -m pytest -q -p no:cacheprovider -m deployment \
    -o addopts="-ra --strict-markers" -o timeout=600 -s tests/deployment "$@"
echo "== deployment end to end: $((SECONDS - started)) s"
