#!/bin/sh
# The compose deployment's certificates (deploy/README.md, "Certificates").  The one-shot `certs`
# service runs this in the Sluice image, in /tls, where deploy/tls is mounted:
#
#   (no arguments)            the cluster CA and the control plane's certificates, each only if
#                             it is missing; `docker compose up` runs it before any service
#   agent NODE HOST [HOST...] a worker's agent certificate, into agents/NODE; HOST is the
#                             worker's SLUICE_NODE_HOST (job masters dial it)
#   client|admin NAME         a person's certificate, into people/NAME
#
# Layout: ca/ (ca.crt, ca.key: mounted by this service only), rm/ (with the job master CA),
# aggregator/, kafka/, mosquitto/, admin/ (the `cli` service's), agents/NODE/, people/NAME/.
# Keys are written 0600 in directories 0700 (umask 077).  The brokers read their keys as the
# user their image runs as, not root (Mosquitto 2 drops root before loading its certificates;
# apache/kafka runs as appuser), so their directories are handed to that user.
set -eu
umask 077

MOSQUITTO_UID=1883 # eclipse-mosquitto:2, user mosquitto
KAFKA_UID=1000     # apache/kafka, user appuser
SERVERS="rm aggregator kafka mosquitto"

die() {
    echo "certs: $*" >&2
    exit 1
}

# issue DIR ROLE NAME [HOST...]: a certificate into DIR, unless DIR has one already.
issue() {
    dir=$1 role=$2 name=$3
    shift 3
    [ ! -e "$dir/tls.crt" ] || return 0
    [ -f ca/ca.key ] || die "ca/ca.key: missing, and $dir needs a certificate (put the CA's key back in deploy/tls/ca)"
    for address in "$@"; do
        shift
        set -- "$@" --host "$address"
    done
    sluice ca issue --ca-dir ca --role "$role" --name "$name" --out "$dir" "$@"
}

# inspect HOST DIR...: says whose each DIR's certificate is and until when; with a HOST, first
# fails unless each names it (clients check that the certificate names the address they dial).
inspect() {
    python - "$@" <<'EOF'
import ipaddress
import sys
from pathlib import Path

from cryptography import x509

host, *directories = sys.argv[1:]
for directory in directories:
    path = Path(directory) / "tls.crt"
    if not path.exists():
        continue
    certificate = x509.load_pem_x509_certificate(path.read_bytes())
    names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    if host:
        try:
            found = ipaddress.ip_address(host) in names.get_values_for_type(x509.IPAddress)
        except ValueError:
            found = host in names.get_values_for_type(x509.DNSName)
        if not found:
            sys.exit(
                f"certs: {path}: does not name SLUICE_HOST {host}: move deploy/tls/{directory} "
                "aside and run again to issue it anew"
            )
    else:
        identity = " ".join(names.get_values_for_type(x509.UniformResourceIdentifier))
        until = f"{certificate.not_valid_after_utc:%Y-%m-%d}"
        print(f"certs: {directory}: {identity}, valid until {until}", file=sys.stderr)
EOF
}

control_plane() {
    host=${SLUICE_HOST:?set SLUICE_HOST in deploy/.env}
    chmod 700 .
    if [ ! -f ca/ca.crt ]; then
        for dir in $SERVERS admin; do
            [ ! -e "$dir/ca.crt" ] || die "ca/ca.crt: missing, but $dir/ holds certificates of a CA: put the CA back in deploy/tls/ca (or move deploy/tls away to start a new CA, then issue every agent's certificate again)"
        done
        sluice ca init --ca-dir ca --cluster sluice
    fi
    # shellcheck disable=SC2086 # (word splitting wanted)
    inspect "$host" $SERVERS
    issue rm rm rm "$host"
    issue aggregator aggregator aggregator "$host" aggregator
    issue kafka broker kafka "$host" kafka
    issue mosquitto broker mosquitto "$host" mosquitto
    issue admin admin admin
    # Kafka reads its key and certificate chain from one PEM file.
    cat kafka/tls.key kafka/tls.crt >kafka/keystore.pem.new
    mv kafka/keystore.pem.new kafka/keystore.pem
    chown -R "$KAFKA_UID:$KAFKA_UID" kafka
    chown -R "$MOSQUITTO_UID:$MOSQUITTO_UID" mosquitto
    # shellcheck disable=SC2086
    inspect "" $SERVERS admin
}

case "${1:-}" in
"")
    control_plane
    ;;
agent)
    [ $# -ge 3 ] || die "usage: agent NODE_ID HOST [HOST...] (HOST: the worker's SLUICE_NODE_HOST)"
    node=$2
    shift 2
    [ ! -e "agents/$node" ] || die "agents/$node: exists already (move it aside to issue it anew)"
    issue "agents/$node" agent "$node" "$@"
    ;;
client | admin)
    [ $# -eq 2 ] || die "usage: $1 NAME"
    [ ! -e "people/$2" ] || die "people/$2: exists already (move it aside to issue it anew)"
    issue "people/$2" "$1" "$2"
    ;;
*)
    die "$1: unknown (no arguments, agent NODE_ID HOST..., client NAME or admin NAME)"
    ;;
esac
