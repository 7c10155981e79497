#!/usr/bin/env bash
# rotate-certs.sh
#
# Re-issues every server's and worker's certificate (rm with its job master CA, aggregator,
# kafka, mosquitto, influxdb, admin: the scripts' `cli` service, and agents/NAME of each
# worker), with new keys, from the same cluster CA (tls/ca), and puts them in use without
# losing a job: the old directories are moved aside to tls/rotated-YYYYmmdd-HHMMSS/ and
# certs.sh issues the missing ones anew; then each control-plane service is recreated in
# turn (kafka, mosquitto, influxdb, aggregator, rm: the RM keeps its state), waiting until it
# is healthy, and each worker's agent is recreated in turn, waiting until the RM lists it
# ready (its running tasks are adopted, as by upgrade.sh).  Old and new certificates are of the
# same CA, so every link keeps working while some services have the new one and some the old.
# The RM's new key changes the secret of its grant tokens and passes: those handed out before
# are refused by the agents afterwards (deploy/DRILLS.md says what that costs).
#
# Not touched: the CA itself, and people's certificates (tls/people/NAME).  To re-issue a
# person's:  mv deploy/tls/people/NAME deploy/tls/rotated-NAME-$(date +%F)
#            deploy/compose.sh run --rm certs client NAME    (or: admin NAME)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
compose="$here/compose.sh"
case "${1:-}" in -h | --help) sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;; esac
# shellcheck source=deploy/lib.sh
source "$here/lib.sh"

[ $# -eq 0 ] || die "$1: unknown argument (rotate-certs.sh takes none)"
[ -f "$here/tls/ca/ca.key" ] || die "tls/ca/ca.key: missing: the CA's key is needed to issue certificates (put it back in deploy/tls/ca)"
started=$SECONDS
aside=rotated-$(date -u +%Y%m%d-%H%M%S)
[ ! -e "$here/tls/$aside" ] || die "tls/$aside: exists already; run again in a second"

mapfile -t names < <(workers)
directories=()
for directory in rm aggregator kafka mosquitto influxdb admin; do
    [ ! -d "$here/tls/$directory" ] || directories+=("$directory")
done
for name in "${names[@]}"; do
    [ ! -d "$here/tls/agents/$name" ] || directories+=("agents/$name")
done
[ ${#directories[@]} -gt 0 ] || die "tls/: no certificate to rotate (has up.sh run?)"

# 1. Aside, then issued anew, in the certs container (the only one that sees the CA's key; it
# runs as root, so the key files keep their owners and modes).  If issuing fails, the old
# directories are put back and nothing else changes.
say "re-issuing ${#directories[@]} certificates (${directories[*]}); the old ones go to tls/$aside"
"$compose" run --rm -T --entrypoint bash certs -c '
set -euo pipefail
umask 077
aside=$1
shift
mkdir -p "$aside/agents"
for directory in "$@"; do mv "$directory" "$aside/$directory"; done
undo() {
    for directory in "$@"; do
        rm -rf "$directory"
        mv "$aside/$directory" "$directory"
    done
    echo "rotate-certs: issuing failed; the old certificates are back in place" >&2
}
trap "undo $*" ERR
bash /usr/local/bin/sluice-certs
for directory in "$@"; do
    case "$directory" in agents/*) bash /usr/local/bin/sluice-certs agent "${directory#agents/}" ;; esac
done
' rotate "$aside" "${directories[@]}" >&2 || die "issuing the new certificates failed (above); nothing else changed"

# 2. Each service recreated in turn, so that it reads its new certificate.
for service in "${CONTROL_PLANE[@]}"; do
    step=$SECONDS
    recreate "$service"
    wait_healthy "$service"
    say "$service recreated with its new certificate, healthy in $(elapsed "$step")"
done
# 3. Each worker in turn; its tasks keep running.
for name in "${names[@]}"; do recreate_worker "$name"; done
say "${#directories[@]} certificates rotated in $(elapsed "$started"); the old ones are in deploy/tls/$aside (delete them once you are satisfied)"
