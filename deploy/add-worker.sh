#!/usr/bin/env bash
# add-worker.sh NAME [--cpus N] [--memory-mb MB] [--runtime docker|process]
#
# Adds a worker: a container of its own on the deployment's network, running a node agent
# with node id NAME, reachable by the others at NAME:7072, with its own certificate
# (tls/agents/NAME), its own state (volume agent-NAME) and its own cgroup subtree.  Writes
# workers/NAME.yml, starts it, and waits until the RM lists NAME as ready.
#
#   --cpus, --memory-mb  what the agent offers (default: all of this host's; several workers on
#                        one host then share its cores, each judging load by its own tasks
#                        when it offers less than the host has)
#   --runtime            docker (default): each task a container beside the agent's on this
#                        host's engine, labelled with the node, so tasks outlive an agent's
#                        restart or upgrade; process: tasks in cgroups inside the agent's
#                        container (they end with it)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
compose="$here/compose.sh"
# shellcheck source=deploy/lib.sh
source "$here/lib.sh"

[ $# -ge 1 ] || die "usage: add-worker.sh NAME [--cpus N] [--memory-mb MB] [--runtime docker|process]"
name=$1
shift
[[ "$name" =~ ^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$ ]] \
    || die "NAME: $name: a worker's name is a DNS label (lowercase letters, digits, '-'; at most 63)"
case "$name" in rm | aggregator | kafka | mosquitto | influxdb | certs | cli)
    die "NAME: $name: the name of a control-plane service; choose another" ;;
esac
cpus="" memory="" runtime=docker
while [ $# -gt 0 ]; do
    case "$1" in
    --cpus) [[ "${2:-}" =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "--cpus: ${2:-}: expected a number"; cpus=$2; shift 2 ;;
    --memory-mb) [[ "${2:-}" =~ ^[0-9]+$ ]] || die "--memory-mb: ${2:-}: expected a whole number"; memory=$2; shift 2 ;;
    --runtime) [[ "${2:-}" =~ ^(docker|process)$ ]] || die "--runtime: ${2:-}: expected docker or process"; runtime=$2; shift 2 ;;
    *) die "$1: unknown option (--cpus, --memory-mb, --runtime)" ;;
    esac
done
file="$here/workers/$name.yml"
[ ! -e "$file" ] || die "$name: a worker of that name exists ($file); remove-worker.sh $name first"

started=$SECONDS
if [ ! -e "$here/tls/agents/$name/tls.crt" ]; then
    "$compose" run --rm -T certs agent "$name" >/dev/null || die "issuing $name's certificate failed (above)"
fi

extra=()
[ -z "$cpus" ] || extra+=("      - --cpus" "      - \"$cpus\"")
[ -z "$memory" ] || extra+=("      - --memory-mb" "      - \"$memory\"")
socket=""
[ "$runtime" != docker ] || socket="      - /var/run/docker.sock:/var/run/docker.sock # tasks are containers beside this one"
mkdir -p "$here/workers"
{
    cat <<YAML
# Worker $name, written by add-worker.sh (remove it with remove-worker.sh $name).
services:
  agent-$name:
    image: \${SLUICE_IMAGE:-sluice:latest}
    hostname: $name
    init: true
    restart: unless-stopped
    # Only to make its own cgroup subtree writable (sluice-agent-entrypoint), so that job
    # masters and process tasks run in cgroups of their own under the container's.
    cap_add: [SYS_ADMIN]
    # SIGTERM stops the agent, not its tasks: a new container adopts them (docker runtime).
    stop_grace_period: 15s
    labels:
      sluice.worker: $name
    # Its gRPC server over mutual TLS with its own certificate, which names $name (its hostname).
    healthcheck:
      test: ["CMD", "sluice-health", "grpc", "127.0.0.1:7072"]
      interval: 5s
      timeout: 5s
      retries: 12
    logging:
      driver: json-file
      options:
        max-size: 20m
        max-file: "5"
    networks:
      default:
        aliases: [$name]
    entrypoint: ["sluice-agent-entrypoint"]
    environment:
      SLUICE_AGENT_OPTIONS: \${SLUICE_AGENT_OPTIONS:-}
    command:
      - --log-level
      - \${SLUICE_LOG_LEVEL:-info}
      - --rm
      - rm:7070
      - --cluster-id
      - \${COMPOSE_PROJECT_NAME:-sluice}
      - --node-id
      - $name
      - --listen
      - 0.0.0.0:7072
      - --advertise
      - $name:7072
      - --runtime
      - $runtime
      - --state-dir
      - /var/lib/sluice/agent
      - --tls-dir
      - /etc/sluice/tls
YAML
    for line in "${extra[@]}"; do echo "$line"; done
    cat <<YAML
    volumes:
      - agent-$name:/var/lib/sluice/agent
      - ./tls/agents/$name:/etc/sluice/tls:ro
YAML
    [ -z "$socket" ] || echo "$socket"
    cat <<YAML
volumes:
  agent-$name:
YAML
} >"$file.new"
mv "$file.new" "$file"

"$compose" up -d --no-deps "agent-$name" 2>&1 | grep -v -e '^Creating volume' -e 'is up-to-date' >&2 || true
echo "add-worker: $name started; waiting until the RM lists it ready" >&2
for _ in $(seq 60); do
    if "$compose" run --rm -T cli sluice nodes --json 2>/dev/null | python3 -c '
import json, sys
name = sys.argv[1]
nodes = json.load(sys.stdin)
nodes = nodes.get("nodes", nodes) if isinstance(nodes, dict) else nodes
sys.exit(0 if any(n.get("node_id") == name and str(n.get("state", "")).lower().endswith("ready") for n in nodes) else 1)
' "$name"; then
        echo "add-worker: $name ready (${runtime} runtime) in $((SECONDS - started))s" >&2
        exit 0
    fi
    sleep 2
done
die "$name did not register with the RM within 2 minutes: deploy/compose.sh logs agent-$name"
