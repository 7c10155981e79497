#!/usr/bin/env bash
# down.sh [--volumes]
#
# Takes the deployment down: drains every worker's agent (its tasks and job masters stopped,
# their containers and cgroups removed), removes the project's containers and network, and any
# task container a killed agent left behind, then checks that nothing of the project is left:
# containers, network, (with --volumes) volumes, and the workers' cgroups.  Keeps deploy/tls,
# deploy/workers and .env, so up.sh brings the same cluster back; with --volumes also deletes
# the RM's state (every job), the metrics in InfluxDB and the workers' task state.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
compose="$here/compose.sh"
volumes=()
case "${1:-}" in
"") ;;
--volumes) volumes=(--volumes) ;;
*) die "$1: unknown option (--volumes)" ;;
esac

# shellcheck source=deploy/lib.sh
source "$here/lib.sh"
project=$COMPOSE_PROJECT_NAME

# The workers' agents still up, drained in one call (the others are gone or stopped already).
shopt -s nullglob
addresses=()
for file in "$here"/workers/*.yml; do
    name=$(basename "$file" .yml)
    id=$("$compose" ps -q "agent-$name" 2>/dev/null || true)
    [ -z "$id" ] || [ "$(docker inspect --format '{{.State.Running}}' "$id" 2>/dev/null)" != true ] \
        || addresses+=("$name:7072")
done
if [ ${#addresses[@]} -gt 0 ]; then
    "$compose" run --rm -T --entrypoint sluice-drain cli "${addresses[@]}" >&2 \
        || echo "down: some agents did not drain (above); their task containers are removed below" >&2
fi
# Cgroups of the workers' containers, to check after (removing a container removes them).
cgroups=()
for id in $("$compose" ps -q 2>/dev/null); do
    for hierarchy in /sys/fs/cgroup/*/ /sys/fs/cgroup/; do
        [ ! -d "${hierarchy}docker/$id" ] || cgroups+=("${hierarchy}docker/$id")
    done
done

"$compose" down --remove-orphans "${volumes[@]}" 2>&1 | grep -v -e '^Removing network' -e '^Stopping' >&2 || true
# Task containers a killed agent left running (the docker runtime's, labelled with the cluster).
leftover=$(docker ps -aq --filter "label=sluice.cluster=$project")
[ -z "$leftover" ] || docker rm -f $leftover >/dev/null

left=()
for id in $(docker ps -aq --filter "label=com.docker.compose.project=$project"); do left+=("container $id"); done
docker network inspect "${project}_default" >/dev/null 2>&1 && left+=("network ${project}_default")
if [ ${#volumes[@]} -gt 0 ]; then
    for volume in $(docker volume ls -q --filter "label=com.docker.compose.project=$project"); do left+=("volume $volume"); done
fi
for cgroup in "${cgroups[@]}"; do [ ! -d "$cgroup" ] || left+=("cgroup $cgroup"); done
if [ ${#left[@]} -gt 0 ]; then
    printf 'down: left behind: %s\n' "${left[@]}" >&2
    exit 1
fi
echo "down: $project is down; nothing of it is left${volumes[*]:+ (volumes deleted)}" >&2
