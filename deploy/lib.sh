# Shared by the deploy/ scripts (sourced, not run): the settings, from .env.
#
# .env is made from .env.example on first use.  Its KEY=VALUE lines are exported unless the
# variable is already set in the environment, which wins, as it does for Compose.  Compose
# reads the same file, since compose.sh runs it with this directory as the project directory.

deploy_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
deploy_script=$(basename "$0" .sh)

# One line on stderr naming the script: an error (then exit 1), or progress.
die() {
    echo "$deploy_script: $*" >&2
    exit 1
}
say() { echo "== $deploy_script: $*" >&2; }

[ -f "$deploy_dir/.env" ] || cp "$deploy_dir/.env.example" "$deploy_dir/.env"
while IFS= read -r line || [ -n "$line" ]; do
    case "$line" in '' | '#'*) continue ;; esac
    key=${line%%=*}
    [[ "$key" =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] || continue
    [ -n "${!key+set}" ] || export "$key=${line#*=}"
done <"$deploy_dir/.env"
unset line key
export COMPOSE_PROJECT_NAME=${COMPOSE_PROJECT_NAME:-sluice}

# The person up.sh issues a certificate for, and deploy/sluice acts as: whoever runs it (the
# user behind sudo, if any), as a certificate name.
deploy_person() {
    local person=${SUDO_USER:-${USER:-$(id -un)}}
    echo "$person" | tr 'A-Z' 'a-z' | tr -c 'a-z0-9\n-' '-'
}

# The addresses the deployment hands out, derived from SLUICE_HOST (docker-compose.yml and the
# worker files interpolate them; each default there is the single-host value):
#
#   single-host mode (SLUICE_HOST 127.0.0.1 or localhost, the default): every worker is a
#     container on this host's network, so the RM hands out the services' names: rm:7070,
#     kafka:9093, mqtts://mosquitto:8883, aggregator:7071; a worker is NAME:7072.
#   lab mode (SLUICE_HOST a routable address of this host): workers may be other machines,
#     where those names do not resolve, so every address handed out is SLUICE_HOST and a port
#     published on SLUICE_BIND, for every client alike (the containers here included); a
#     worker here publishes its agent on a host port of its own (add-worker.sh).
case "${SLUICE_HOST:=127.0.0.1}" in
127.0.0.1 | localhost | ::1 | "") SLUICE_LAB="" ;;
*) SLUICE_LAB=1 ;;
esac
if [ -n "$SLUICE_LAB" ]; then
    SLUICE_RM_ADDRESS=$SLUICE_HOST:${SLUICE_RM_PORT:-7070}
    SLUICE_AGGREGATOR_ADDRESS=$SLUICE_HOST:${SLUICE_AGGREGATOR_PORT:-7071}
    SLUICE_KAFKA_ADDRESS=$SLUICE_HOST:${SLUICE_KAFKA_PORT:-9093}
    SLUICE_MQTT_URL=mqtts://$SLUICE_HOST:${SLUICE_MQTT_PORT:-8883}
else
    SLUICE_RM_ADDRESS=rm:7070
    SLUICE_AGGREGATOR_ADDRESS=aggregator:7071
    SLUICE_KAFKA_ADDRESS=kafka:9093
    SLUICE_MQTT_URL=mqtts://mosquitto:8883
fi
export SLUICE_HOST SLUICE_LAB SLUICE_RM_ADDRESS SLUICE_AGGREGATOR_ADDRESS SLUICE_KAFKA_ADDRESS SLUICE_MQTT_URL
