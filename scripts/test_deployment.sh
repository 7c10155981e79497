#!/usr/bin/env bash
# The deployment's end-to-end test (issue 30): builds the image as a host without a registry
# must (deploy/images.sh --from-debian), brings deploy/ up with three workers (and, in lab mode,
# with a worker started from its remote bundle: test_lab.py), uses it from this host, breaks it
# on purpose, and tears it down to nothing (tests/deployment/).  Called by scripts/test.sh; the
# tests' budget is 12 minutes, the image build before them has 15.  Needs root (mmdebstrap,
# cgroups) and Docker.
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

# Whatever happens to the tests (a failure, the time limit), no deployment of theirs stays up:
# each Compose project they make (and a remote worker's, <project>-<name>) is listed in
# $SLUICE_E2E_PROJECTS, with an image tag of the same name; only those are removed, so a run
# beside another on the same machine leaves the other's alone.
export SLUICE_E2E_PROJECTS
SLUICE_E2E_PROJECTS=$(mktemp --tmpdir sluice-e2e-projects.XXXXXX)
leftovers() {
    local listed project projects
    listed=$(cat "$SLUICE_E2E_PROJECTS")
    projects=$(docker ps -a --format '{{.Label "com.docker.compose.project"}}' | sort -u)
    for project in $projects; do
        grep -qxF "${project%%-*}" <<<"$listed" || continue
        echo "== deployment: removing what the tests left of $project" >&2
        docker ps -aq --filter "label=com.docker.compose.project=$project" | xargs -r docker rm -f >/dev/null
        docker ps -aq --filter "label=sluice.cluster=$project" | xargs -r docker rm -f >/dev/null
        docker network rm "${project}_default" >/dev/null 2>&1 || true
        docker volume ls -q --filter "label=com.docker.compose.project=$project" | xargs -r docker volume rm >/dev/null
    done
    for project in $listed; do docker image rm "sluice:$project" >/dev/null 2>&1 || true; done
    rm -f "$SLUICE_E2E_PROJECTS"
}
trap leftovers EXIT

# The tests' budget is 12 minutes (about 7 here on 2 quiet cores).  The hard limit is longer:
# on overloaded cores (the suite must pass at a load of 4 and more) they take longer without
# being wrong, and then the run says by how much they went over.
echo "== deployment end to end"
started=$SECONDS
timeout --kill-after 30 1500 .venv/bin/python -m pytest -q -p no:cacheprovider -m deployment \
    -o addopts="-ra --strict-markers" -o timeout=600 -s tests/deployment "$@"
took=$((SECONDS - started))
echo "== deployment end to end: $took s (budget 720 s$([ "$took" -le 720 ] || echo ", over it: load average $(cut -d' ' -f1-3 /proc/loadavg)"))"
