#!/usr/bin/env bash
# up.sh [--workers N] [--from-debian | --from-registry]
#
# Brings the deployment up, or back: builds the image if anything changed (images.sh; seconds
# when nothing did), starts the control plane and every worker already added, waits until the
# RM and the aggregator are healthy, adds workers worker-1 ... worker-N that do not exist yet
# (default 2), and issues you a certificate (tls/people/$USER) for the CLI on this host.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
compose="$here/compose.sh"
# shellcheck source=deploy/lib.sh
source "$here/lib.sh"

workers=2 build=()
while [ $# -gt 0 ]; do
    case "$1" in
    --workers) [[ "${2:-}" =~ ^[0-9]+$ ]] || die "--workers: ${2:-}: expected a whole number"; workers=$2; shift 2 ;;
    --from-debian | --from-registry) build=("$1"); shift ;;
    *) die "$1: unknown option (--workers N, --from-debian, --from-registry)" ;;
    esac
done

started=$SECONDS
"$here/images.sh" "${build[@]}"
say "control plane"
"$compose" up -d --remove-orphans 2>&1 | grep -v -e 'is up-to-date' >&2 || true
wait_healthy rm
wait_healthy aggregator
say "control plane healthy in $((SECONDS - started))s"

for i in $(seq "$workers"); do
    [ -e "$here/workers/worker-$i.yml" ] || "$here/add-worker.sh" "worker-$i"
done

person=$(deploy_person)
if [ ! -e "$here/tls/people/$person/tls.crt" ]; then
    "$compose" run --rm -T certs client "$person" >/dev/null
fi
host=${SLUICE_HOST:-127.0.0.1}
say "$COMPOSE_PROJECT_NAME is up in $((SECONDS - started))s; as $person:"
cat >&2 <<TEXT
    deploy/sluice nodes
    deploy/sluice submit sluice/examples/analytics.yaml --wait
  or with a sluice CLI of your own:
    export SLUICE_RM=$host:${SLUICE_RM_PORT:-7070} SLUICE_AGGREGATOR=$host:${SLUICE_AGGREGATOR_PORT:-7071}
    export SLUICE_TLS_DIR=$here/tls/people/$person
TEXT
