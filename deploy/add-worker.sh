#!/usr/bin/env bash
# add-worker.sh NAME [--cpus N] [--memory-mb MB] [--runtime docker|process]
#                     [--remote ADDRESS] [--port PORT]
#
# Adds a worker: a container of its own on the deployment's network, running a node agent
# with node id NAME, reachable by the others at NAME:7072, with its own certificate
# (tls/agents/NAME), its own state (volume agent-NAME) and its own cgroup subtree.  Writes
# workers/NAME.yml, starts it, and waits until the RM lists NAME as ready.  In lab mode
# (lib.sh: SLUICE_HOST a routable address) it also publishes its agent on a host port of its
# own (PORT, or the first free one from SLUICE_AGENT_PORT) and is reached at SLUICE_HOST:PORT,
# which its certificate names.
#
#   --remote ADDRESS     a worker on another machine, whose address (name or IP) others dial
#                        (lab mode only): its certificate names NAME and ADDRESS; writes the
#                        bundle remote/NAME/ (compose file, .env, tls/) to copy there, prints
#                        how, and waits until the RM lists NAME ready (SLUICE_REMOTE_WAIT
#                        seconds, default 1800)
#   --port PORT          the port its agent is published on (remote: on its machine, default
#                        7072)
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

[ $# -ge 1 ] || die "usage: add-worker.sh NAME [--cpus N] [--memory-mb MB] [--runtime docker|process] [--remote ADDRESS] [--port PORT]"
name=$1
shift
[[ "$name" =~ ^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$ ]] \
    || die "NAME: $name: a worker's name is a DNS label (lowercase letters, digits, '-'; at most 63)"
case "$name" in rm | aggregator | kafka | mosquitto | influxdb | certs | cli)
    die "NAME: $name: the name of a control-plane service; choose another" ;;
esac
cpus="" memory="" runtime=docker remote="" port=""
while [ $# -gt 0 ]; do
    case "$1" in
    --cpus) [[ "${2:-}" =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "--cpus: ${2:-}: expected a number"; cpus=$2; shift 2 ;;
    --memory-mb) [[ "${2:-}" =~ ^[0-9]+$ ]] || die "--memory-mb: ${2:-}: expected a whole number"; memory=$2; shift 2 ;;
    --runtime) [[ "${2:-}" =~ ^(docker|process)$ ]] || die "--runtime: ${2:-}: expected docker or process"; runtime=$2; shift 2 ;;
    --remote) [[ "${2:-}" =~ ^[A-Za-z0-9]([A-Za-z0-9.:-]*[A-Za-z0-9])?$ ]] || die "--remote: ${2:-}: expected a host name or IP address"; remote=$2; shift 2 ;;
    --port) [[ "${2:-}" =~ ^[0-9]+$ ]] && [ "$2" -ge 1 ] && [ "$2" -le 65535 ] || die "--port: ${2:-}: expected a port"; port=$2; shift 2 ;;
    *) die "$1: unknown option (--cpus, --memory-mb, --runtime, --remote, --port)" ;;
    esac
done
file="$here/workers/$name.yml"
bundle="$here/remote/$name"
[ ! -e "$file" ] || die "$name: a worker of that name exists ($file); remove-worker.sh $name first"
[ ! -e "$bundle" ] || die "$name: a remote worker of that name exists ($bundle); move it aside first"
[ -z "$remote" ] || [ -n "$SLUICE_LAB" ] \
    || die "--remote: needs lab mode: SLUICE_HOST in .env must be an address of this host the other machines reach (it is $SLUICE_HOST), SLUICE_BIND one they reach it on"

# In lab mode a worker here publishes its agent on a port of this host: PORT, or the first one
# from SLUICE_AGENT_PORT that no other worker file names and nothing listens on (on
# SLUICE_BIND; an address this host cannot bind is left to Docker to report).
port_taken() {
    grep -qs -e ":$1:7072\"" "$here"/workers/*.yml && return 0
    python3 -c 'import errno, socket, sys
try:
    socket.socket().bind((sys.argv[1], int(sys.argv[2])))
except OSError as error:
    sys.exit(0 if error.errno == errno.EADDRINUSE else 1)
sys.exit(1)' "${SLUICE_BIND:-127.0.0.1}" "$1"
}
if [ -z "$remote" ] && [ -n "$SLUICE_LAB" ] && [ -z "$port" ]; then
    port=${SLUICE_AGENT_PORT:-7072}
    while port_taken "$port"; do
        port=$((port + 1))
        [ "$port" -lt $((${SLUICE_AGENT_PORT:-7072} + 1000)) ] || die "no free port from SLUICE_AGENT_PORT ${SLUICE_AGENT_PORT:-7072} on (1000 tried)"
    done
fi
if [ -n "$remote" ]; then
    port=${port:-7072} address=$remote:${port:-7072} also=$remote
elif [ -n "$SLUICE_LAB" ]; then
    address=$SLUICE_HOST:$port also=$SLUICE_HOST
else
    address=$name:7072 also=""
fi

started=$SECONDS
if [ ! -e "$here/tls/agents/$name/tls.crt" ]; then
    # shellcheck disable=SC2086 # (no HOST in single-host mode)
    "$compose" run --rm -T certs agent "$name" $also >/dev/null || die "issuing $name's certificate failed (above)"
fi

extra=()
[ -z "$cpus" ] || extra+=("      - --cpus" "      - \"$cpus\"")
[ -z "$memory" ] || extra+=("      - --memory-mb" "      - \"$memory\"")

# agent_service SERVICE RM ADVERTISE CLUSTER: the agent's service, as the worker file and the remote
# bundle's compose file have it (the rest of each file differs).
agent_service() {
    cat <<YAML
services:
  $1:
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
    entrypoint: ["sluice-agent-entrypoint"]
    environment:
      SLUICE_AGENT_OPTIONS: \${SLUICE_AGENT_OPTIONS:-}
    command:
      - --log-level
      - \${SLUICE_LOG_LEVEL:-info}
      - --rm
      - $2
      - --cluster-id
      - $4
      - --node-id
      - $name
      - --listen
      - 0.0.0.0:7072
      - --advertise
      - $3
      - --runtime
      - $runtime
      - --state-dir
      - /var/lib/sluice/agent
      - --tls-dir
      - /etc/sluice/tls
YAML
    for line in "${extra[@]}"; do echo "$line"; done
}
socket="      - /var/run/docker.sock:/var/run/docker.sock # tasks are containers beside this one"
[ "$runtime" = docker ] || socket=""

# The bundle of a worker on another machine, remote/NAME/: its compose file (the agent, its
# port published on that machine), its .env (where the RM is, which cluster, its own address)
# and tls/ (its certificate, key and the cluster CA's certificate), then how to start it.
bundle_of_remote_worker() {
    rm -rf "$bundle.new"
    mkdir -p "$bundle.new/tls"
    cp -a "$here/tls/agents/$name/." "$bundle.new/tls/"
    {
        cat <<YAML
# Worker $name of cluster $COMPOSE_PROJECT_NAME on another machine ($remote), written by
# add-worker.sh on the control host.  On $remote, in this directory: \`docker-compose up -d\`
# (or \`docker compose up -d\`); settings in .env.  Needs the image \${SLUICE_IMAGE} there
# (\`docker save\` on the control host, \`docker load\` here) and the control host's published
# ports reachable from here; others reach this agent at \${SLUICE_WORKER_ADDRESS}:\${SLUICE_WORKER_PORT}.
YAML
        agent_service agent '${SLUICE_RM}' '${SLUICE_WORKER_ADDRESS}:${SLUICE_WORKER_PORT:-7072}' '${SLUICE_CLUSTER_ID}'
        cat <<YAML
    ports:
      - "\${SLUICE_WORKER_BIND:-0.0.0.0}:\${SLUICE_WORKER_PORT:-7072}:7072"
    volumes:
      - agent-state:/var/lib/sluice/agent
      - ./tls:/etc/sluice/tls:ro
YAML
        [ -z "$socket" ] || echo "$socket"
        cat <<YAML
volumes:
  agent-state:
YAML
    } >"$bundle.new/docker-compose.yml"
    cat >"$bundle.new/.env" <<ENV
# Worker $name of cluster $COMPOSE_PROJECT_NAME (written by add-worker.sh on the control host).
# Its Compose project (names its container and volume on this machine).
COMPOSE_PROJECT_NAME=$COMPOSE_PROJECT_NAME-$name
SLUICE_IMAGE=${SLUICE_IMAGE:-sluice:latest}
SLUICE_LOG_LEVEL=${SLUICE_LOG_LEVEL:-info}
# The cluster it joins and where its RM is (the control host's SLUICE_HOST, published port).
SLUICE_CLUSTER_ID=$COMPOSE_PROJECT_NAME
SLUICE_RM=$SLUICE_RM_ADDRESS
# Where the others reach this agent (its certificate names $remote); the port is published on
# SLUICE_WORKER_BIND.
SLUICE_WORKER_ADDRESS=$remote
SLUICE_WORKER_PORT=$port
SLUICE_WORKER_BIND=0.0.0.0
SLUICE_AGENT_OPTIONS=${SLUICE_AGENT_OPTIONS:-}
ENV
    mv "$bundle.new" "$bundle"
    local image=${SLUICE_IMAGE:-sluice:latest}
    cat >&2 <<TEXT
add-worker: $name's bundle is $bundle; on $remote (Docker and Compose installed, root):
    scp -r $bundle $remote:sluice-$name       # or any way of copying it; tls/tls.key is secret
    docker save $image | ssh $remote docker load
    ssh $remote 'cd sluice-$name && (docker compose up -d || docker-compose up -d)'
  $remote must reach $SLUICE_HOST on ports ${SLUICE_RM_PORT:-7070}, ${SLUICE_AGGREGATOR_PORT:-7071}, ${SLUICE_MQTT_PORT:-8883} and ${SLUICE_KAFKA_PORT:-9093}, and the other workers reach $remote:$port.
add-worker: waiting until the RM lists $name ready (Ctrl-C stops waiting, not the worker)
TEXT
}

if [ -n "$remote" ]; then
    bundle_of_remote_worker
else
    mkdir -p "$here/workers"
    {
        echo "# Worker $name, written by add-worker.sh (remove it with remove-worker.sh $name)."
        agent_service "agent-$name" '${SLUICE_RM_ADDRESS:-rm:7070}' "$address" '${COMPOSE_PROJECT_NAME:-sluice}'
        cat <<YAML
    networks:
      default:
        aliases: [$name]
YAML
        [ -z "$SLUICE_LAB" ] || cat <<YAML
    # Lab mode: others (workers on other machines too) reach it at $address.
    ports:
      - "\${SLUICE_BIND:-127.0.0.1}:$port:7072"
YAML
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
    echo "add-worker: $name started at $address; waiting until the RM lists it ready" >&2
fi

if [ -n "$remote" ]; then
    wait_node "$name" ready "${SLUICE_REMOTE_WAIT:-1800}" \
        "on $remote, docker-compose logs agent (in the bundle's directory)"
else
    wait_node "$name" ready 120
fi
say "$name ready at $address (${runtime} runtime) in $(elapsed "$started")"
