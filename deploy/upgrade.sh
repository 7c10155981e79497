#!/usr/bin/env bash
# upgrade.sh [--from-debian | --from-registry]
#
# A rolling upgrade to the Sluice source this directory is in (or SLUICE_SOURCE): rebuilds the
# image (images.sh, with the option given; seconds when nothing changed), then brings each
# control-plane service to it in turn (kafka, mosquitto, influxdb, aggregator, rm: `compose up
# -d --no-deps`, which recreates a service only if its image or settings changed), waiting
# until it is healthy; the RM restarts with its state (the rm-state volume), losing no job.
# Then each worker in turn: its agent's container is recreated (`compose up -d --no-deps
# --force-recreate agent-NAME`) and the next waits until the RM lists it ready again.  Running
# tasks survive: SIGTERM stops the agent, not its tasks; the docker runtime's task containers
# keep running and the new agent adopts them (as YARN's work-preserving NodeManager restart
# does): same attempt, same container.  A process-runtime worker's tasks end with its
# container and run again (a new attempt).
#
# Kafka (Tansu) keeps messages in memory: if its service is recreated, messages not yet
# consumed are lost (a few seconds of metrics and task events; the RM's record of each task
# comes from the agents' heartbeats).  Roll back by checking out the previous source and running upgrade.sh again.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
compose="$here/compose.sh"
case "${1:-}" in -h | --help) sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;; esac
# shellcheck source=deploy/lib.sh
source "$here/lib.sh"

build=()
case "${1:-}" in
"") ;;
--from-debian | --from-registry) build=("$1") ;;
*) die "$1: unknown option (--from-debian, --from-registry)" ;;
esac
[ $# -le 1 ] || die "usage: upgrade.sh [--from-debian | --from-registry]"
[ -n "$(container rm)" ] || die "the deployment is not up (up.sh first)"
image=${SLUICE_IMAGE:-sluice:latest}
started=$SECONDS

# 1. The image.
before=$(docker image inspect --format '{{.Id}}' "$image" 2>/dev/null || true)
"$here/images.sh" "${build[@]}"
after=$(docker image inspect --format '{{.Id}}' "$image")
if [ "$before" = "$after" ]; then
    say "image $image unchanged (${after:7:12})"
else
    say "image $image: ${before:7:12} -> ${after:7:12}"
fi

# 2. The control plane, one service at a time.
recreated=()
for service in "${CONTROL_PLANE[@]}"; do
    step=$SECONDS
    old=$(container "$service")
    "$compose" up -d --no-deps "$service" 2>&1 | grep -v -e 'is up-to-date' -e '^Recreating' >&2 || true
    wait_healthy "$service"
    if [ "$(container "$service")" != "$old" ]; then
        recreated+=("$service")
        say "$service recreated, healthy in $(elapsed "$step")"
    fi
done
say "control plane: ${recreated[*]:-nothing} recreated"

# 3. The workers, one at a time; their tasks keep running.
mapfile -t names < <(workers)
for name in "${names[@]}"; do recreate_worker "$name"; done
say "upgraded in $(elapsed "$started"): ${#recreated[@]} control-plane services and ${#names[@]} workers recreated, on image ${after:7:12}"
