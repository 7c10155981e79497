#!/usr/bin/env bash
# restore.sh FILE
#
# Puts a backup of the RM's state (backup.sh) back: checks that FILE is a sound SQLite database
# of Sluice's RM (its tables, a schema version this image's RM reads, this cluster's id), backs
# up the current state to deploy/backups/rm-before-restore-YYYYmmdd-HHMMSS.db (if the RM runs),
# stops the RM, replaces its database in the rm-state volume with FILE, starts the RM and
# waits until it is healthy.
#
# What it loses: everything the RM learnt after the backup was taken.  Jobs submitted since
# are gone, and jobs, tasks and containers are as the backup had them; but the counters of ids
# are kept from the state it replaces, so no job, container or event id is given out twice.  The agents register again with the restarted RM and report what they
# run: tasks the backup believes running that no agent reports are LOST and run again; tasks
# an agent runs that the backup does not know are stopped by it.  The workers, certificates
# and metrics are not touched.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
compose="$here/compose.sh"
case "${1:-}" in -h | --help) sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;; esac
# shellcheck source=deploy/lib.sh
source "$here/lib.sh"

[ $# -eq 1 ] || die "usage: restore.sh FILE (a backup.sh file, e.g. deploy/backups/rm-...db)"
[ -f "$1" ] && [ -r "$1" ] || die "$1: no such readable file"
file=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
started=$SECONDS
state=/var/lib/sluice/rm/rm.sqlite3

# 1. Is it the RM's state, of a version this image reads, of this cluster?  Checked by the
# image's own Python and schema (read-only: immutable=1, the file is mounted read-only).
summary=$("$compose" run --rm -T --no-deps -v "$file:/restore.db:ro" --entrypoint python cli -c '
import sqlite3, sys
from resource_manager.sqlite_schema import SCHEMA_VERSION
path, cluster = sys.argv[1:]
try:
    db = sqlite3.connect("file:/restore.db?immutable=1", uri=True)
    check = db.execute("PRAGMA quick_check").fetchone()[0]
except sqlite3.DatabaseError as error:
    sys.exit(f"{path}: not a SQLite database ({error})")
if check != "ok":
    sys.exit(f"{path}: fails its integrity check: {check}")
tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = ?", ("table",))}
missing = {"jobs", "job_specs", "tasks", "allocations", "counters", "settings"} - tables
if missing:
    sys.exit(f"{path}: not the RM state of Sluice (no table " + ", ".join(sorted(missing)) + ")")
version = db.execute("PRAGMA user_version").fetchone()[0]
if not 1 <= version <= SCHEMA_VERSION:
    sys.exit(f"{path}: schema version {version}; this image reads 1 to {SCHEMA_VERSION}")
row = db.execute("SELECT value FROM settings WHERE name = ?", ("cluster_id",)).fetchone()
if row and row[0] != cluster:
    sys.exit(f"{path}: the state of cluster {row[0]!r}, not of this one ({cluster!r})")
jobs, last = db.execute("SELECT count(*), max(job_id) FROM jobs").fetchone()
print(f"schema version {version}, {jobs} jobs, the last", last or "none")
' "$1" "$COMPOSE_PROJECT_NAME") || die "$1: refused (above); nothing changed"
say "$1: $summary"

# 2. The current state kept, in case this restore was a mistake.
id=$(container rm)
if [ -n "$id" ] && [ "$(docker inspect --format '{{.State.Running}}' "$id" 2>/dev/null)" = true ]; then
    "$here/backup.sh" "$here/backups/rm-before-restore-$(date -u +%Y%m%d-%H%M%S).db" >/dev/null \
        || die "backing up the current state first failed (above); nothing changed"
else
    say "the RM is not running: the current state is not backed up first"
fi

# 3. The RM stopped, its database replaced (the write-ahead log of the old one with it).  The
# counters the RM numbers jobs, containers and events by are carried over from the state
# replaced when it had gone further: an id given out after the backup is never given out again
# (an agent still knows job-000042's containers, a user still holds the id).
say "stopping the RM"
"$compose" stop rm 2>&1 | grep -v '^Stopping' >&2 || true
carried=$("$compose" run --rm -T --no-deps -v "$file:/restore.db:ro" --entrypoint python rm -c '
import os, shutil, sqlite3, sys
state = sys.argv[1]
current = {}
if os.path.exists(state):
    try:
        db = sqlite3.connect(state)
        current = dict(db.execute("SELECT name, value FROM counters"))
        db.close()
    except sqlite3.Error as error:
        print(f"restore: the state replaced is unreadable ({error}): its counters are not carried over", file=sys.stderr)
staged = state + ".restoring"
shutil.copyfile("/restore.db", staged)
db = sqlite3.connect(staged)
before = dict(db.execute("SELECT name, value FROM counters"))
with db:
    db.executemany(
        "INSERT INTO counters(name, value) VALUES (?, ?) "
        "ON CONFLICT(name) DO UPDATE SET value = max(value, excluded.value)",
        current.items(),
    )
db.execute("PRAGMA journal_mode=DELETE")
db.close()
for suffix in ("-wal", "-shm", ""):
    if os.path.exists(state + suffix):
        os.remove(state + suffix)
os.rename(staged, state)
ahead = [f"{name} {before.get(name, 0)}->{value}" for name, value in sorted(current.items()) if value > before.get(name, 0)]
print(", ".join(ahead) or "none")
' "$state") || die "putting $1 in place failed (above); the RM is stopped: deploy/compose.sh start rm"
say "$1 in place; counters carried over from the state it replaced: $carried"

# 4. Started again: it reads the restored state; the agents register again.
"$compose" start rm 2>&1 | grep -v '^Starting' >&2 || true
wait_healthy rm
say "restored $1 in $(elapsed "$started"); the RM is healthy, the agents register again within seconds"
