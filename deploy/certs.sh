#!/bin/bash
# The deployment's certificates (deploy/README.md, "Certificates").  The one-shot `certs`
# service runs this in the Sluice image, in /tls, where deploy/tls is mounted:
#
#   (no arguments)     the cluster CA and the control plane's certificates, each only if it is
#                      missing; `compose.sh up` runs it before any service starts
#   agent NODE [HOST]  a worker's agent certificate, into agents/NODE, naming NODE (its address
#                      on the compose network) and HOST if given (deploy/add-worker.sh: in lab
#                      mode SLUICE_HOST for a worker here, its own ADDRESS for a remote one)
#   client|admin NAME  a person's certificate, into people/NAME
#
# Layout: ca/ (ca.crt, ca.key: mounted by this service only), rm/ (with the job master CA),
# aggregator/, kafka/, mosquitto/, influxdb/, admin/ (the `cli` service's), agents/NODE/,
# people/NAME/.  Keys are written
# 0600 in directories 0700 (umask 077).  Mosquitto reads its key as the user it drops to
# (mosquitto, of this same image), so its directory is handed to that user.
set -euo pipefail
umask 077

die() {
    echo "certs: $*" >&2
    exit 1
}

# issue DIR ROLE NAME [HOST...]: a certificate into DIR, unless DIR has one already.
issue() {
    local dir=$1 role=$2 name=$3
    shift 3
    [ ! -e "$dir/tls.crt" ] || return 0
    [ -f ca/ca.key ] || die "ca/ca.key: missing, and $dir needs a certificate (put the CA's key back in deploy/tls/ca)"
    local hosts=()
    for address in "$@"; do hosts+=(--host "$address"); done
    sluice ca issue --ca-dir ca --role "$role" --name "$name" --out "$dir" "${hosts[@]}" >/dev/null
}

# inspect HOST DIR...: says whose each DIR's certificate is and until when; with a HOST, first
# fails unless each names it (clients check that the certificate names the address they dial).
inspect() {
    python - "$@" <<'PY'
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
PY
}

# What the host's users dial (SLUICE_HOST, published ports) besides the service's own name.
published() {
    local host=$1
    echo "$host"
    [ "$host" = 127.0.0.1 ] || echo 127.0.0.1
    [ "$host" = localhost ] || echo localhost
}

control_plane() {
    local host=${SLUICE_HOST:-127.0.0.1}
    chmod 700 .
    if [ ! -f ca/ca.crt ]; then
        for dir in rm aggregator kafka mosquitto influxdb; do
            [ ! -e "$dir/ca.crt" ] || die "ca/ca.crt: missing, but $dir/ holds certificates of a CA: put the CA back in deploy/tls/ca (or move deploy/tls away to start a new CA, then issue every worker's certificate again)"
        done
        sluice ca init --ca-dir ca --cluster sluice >/dev/null
        echo "certs: a new cluster CA in deploy/tls/ca" >&2
    fi
    inspect "$host" rm aggregator mosquitto kafka
    mapfile -t outside < <(published "$host")
    issue rm rm rm rm "${outside[@]}"
    issue aggregator aggregator aggregator aggregator "${outside[@]}"
    issue mosquitto broker mosquitto mosquitto "${outside[@]}"
    issue kafka broker kafka kafka "${outside[@]}" # lab mode: workers elsewhere dial SLUICE_HOST
    issue influxdb broker influxdb influxdb
    issue admin admin admin
    chown -R mosquitto:mosquitto mosquitto
    inspect "" rm aggregator kafka mosquitto influxdb admin
}

case "${1:-}" in
"")
    control_plane
    ;;
agent)
    [ $# -ge 2 ] || die "usage: agent NODE_ID [HOST...]"
    node=$2
    shift 2
    [[ "$node" =~ ^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$ ]] || die "$node: a node id here is a DNS label: lowercase letters, digits and '-', at most 63"
    [ ! -e "agents/$node" ] || die "agents/$node: exists already (move it aside to issue it anew)"
    issue "agents/$node" agent "$node" "$node" "$@"
    inspect "" "agents/$node"
    ;;
client | admin)
    [ $# -eq 2 ] || die "usage: $1 NAME"
    [ ! -e "people/$2" ] || die "people/$2: exists already (move it aside to issue it anew)"
    issue "people/$2" "$1" "$2"
    inspect "" "people/$2"
    ;;
*)
    die "$1: unknown (no arguments, agent NODE_ID [HOST...], client NAME or admin NAME)"
    ;;
esac
