"""The SQLite schema of the resource manager's store, and its migrations.

Schema history (a newer RM opens an older state directory and migrates it in place):

* version 1 marked a job master's container with the phase name ``__master__``;
* version 2 has a typed ``kind`` column, each job's ``master_attempt`` and ``idempotency_key``;
* version 3 stores each job's spec once, in ``job_specs``, apart from its mutable state;
* version 4 adds each container's goal and what its node showed (suspended, shrunk), and marks
  the task attempts a preemption killed;
* version 5 records who submitted each job;
* version 6 records when each container was preempted, and each task attempt's preemption
  steps (docs/preemption.md);
* version 7 records slot reservations (a container kept for a downstream phase, until when);
* version 8 records DiAS's state (which execution of a job, what evicted ones cost, how it is
  approximated);
* version 9 records which containers an operator holds (``sluice task suspend``/``resize``).

:func:`migrate` brings a database of any of these versions to :data:`SCHEMA_VERSION`, in one
transaction.
"""

from __future__ import annotations

import sqlite3

from resource_manager.store import StoreError

SCHEMA_VERSION = 9

_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    job_id TEXT PRIMARY KEY,
    seq INTEGER NOT NULL UNIQUE,
    state TEXT NOT NULL,
    submit_time REAL NOT NULL,
    client_mode INTEGER NOT NULL,
    kill_requested INTEGER NOT NULL,
    start_time REAL NOT NULL,
    finish_time REAL NOT NULL,
    message TEXT NOT NULL,
    progress TEXT NOT NULL,
    master_node TEXT NOT NULL,
    master_allocation TEXT NOT NULL,
    master_attempt INTEGER NOT NULL DEFAULT 0,
    idempotency_key TEXT NOT NULL DEFAULT '',
    owner TEXT NOT NULL DEFAULT '',
    dias TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS jobs_by_state ON jobs (state);
CREATE TABLE IF NOT EXISTS job_specs (
    job_id TEXT PRIMARY KEY,
    spec TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS tasks (
    job_id TEXT NOT NULL,
    task_id TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    phase TEXT NOT NULL,
    state TEXT NOT NULL,
    node_id TEXT NOT NULL,
    allocation_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    exit_code INTEGER NOT NULL,
    start_time REAL NOT NULL,
    finish_time REAL NOT NULL,
    message TEXT NOT NULL,
    preempted INTEGER NOT NULL DEFAULT 0,
    preemptions TEXT NOT NULL DEFAULT '',
    execution INTEGER NOT NULL DEFAULT 1,
    PRIMARY KEY (job_id, task_id, attempt)
);
CREATE INDEX IF NOT EXISTS tasks_by_seq ON tasks (job_id, seq);
CREATE TABLE IF NOT EXISTS allocations (
    allocation_id TEXT PRIMARY KEY,
    job_id TEXT NOT NULL,
    phase TEXT NOT NULL,
    node_id TEXT NOT NULL,
    cpu REAL NOT NULL,
    memory_mb INTEGER NOT NULL,
    granted_time REAL NOT NULL,
    delivered INTEGER NOT NULL,
    kind TEXT NOT NULL DEFAULT 'task',
    goal TEXT NOT NULL DEFAULT 'run',
    limit_cpu REAL,
    limit_memory_mb INTEGER,
    goal_reason TEXT NOT NULL DEFAULT '',
    shown TEXT NOT NULL DEFAULT 'idle',
    shown_cpu REAL,
    shown_memory_mb INTEGER,
    preempted_at REAL NOT NULL DEFAULT 0,
    kept_for TEXT NOT NULL DEFAULT '',
    kept_until REAL NOT NULL DEFAULT 0,
    held_by TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS counters (
    name TEXT PRIMARY KEY,
    value INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS settings (
    name TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
"""

# Version 1 -> 2: typed job master containers, master attempts, idempotent submissions.
_MIGRATE_1_TO_2 = """
ALTER TABLE jobs ADD COLUMN master_attempt INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN idempotency_key TEXT NOT NULL DEFAULT '';
ALTER TABLE allocations ADD COLUMN kind TEXT NOT NULL DEFAULT 'task';
UPDATE allocations SET kind = 'job_master', phase = '' WHERE phase = '__master__';
UPDATE jobs SET master_attempt = 1 WHERE master_allocation != '' OR client_mode = 1;
"""
# Version 2 -> 3: the spec moves to job_specs, written once; jobs keeps the mutable state.
_MIGRATE_2_TO_3 = """
CREATE TABLE job_specs (job_id TEXT PRIMARY KEY, spec TEXT NOT NULL);
INSERT INTO job_specs (job_id, spec) SELECT job_id, spec FROM jobs;
ALTER TABLE jobs DROP COLUMN spec;
"""
# Version 3 -> 4: container goals and what nodes showed; preempted task attempts.  Columns are
# added to the tables that exist (a table created afresh below has them already).
_MIGRATE_3_TO_4 = {
    "tasks": ["preempted INTEGER NOT NULL DEFAULT 0"],
    "allocations": [
        "goal TEXT NOT NULL DEFAULT 'run'",
        "limit_cpu REAL",
        "limit_memory_mb INTEGER",
        "goal_reason TEXT NOT NULL DEFAULT ''",
        "shown TEXT NOT NULL DEFAULT 'idle'",
        "shown_cpu REAL",
        "shown_memory_mb INTEGER",
    ],
}
# Version 4 -> 5: who submitted each job (jobs from before have no owner: admins only).
_MIGRATE_4_TO_5 = {"jobs": ["owner TEXT NOT NULL DEFAULT ''"]}
# Version 5 -> 6: preemption times and steps.
_MIGRATE_5_TO_6 = {
    "tasks": ["preemptions TEXT NOT NULL DEFAULT ''"],
    "allocations": ["preempted_at REAL NOT NULL DEFAULT 0"],
}
# Version 6 -> 7: slot reservations (a container kept for a downstream phase, until when).
_MIGRATE_6_TO_7 = {
    "allocations": ["kept_for TEXT NOT NULL DEFAULT ''", "kept_until REAL NOT NULL DEFAULT 0"]
}
# Version 7 -> 8: DiAS (which execution of a job, what evicted ones cost, how it is
# approximated: JSON).
_MIGRATE_7_TO_8 = {
    "jobs": ["dias TEXT NOT NULL DEFAULT ''"],
    "tasks": ["execution INTEGER NOT NULL DEFAULT 1"],
}
# Version 8 -> 9: the containers an operator holds (suspended or resized by `sluice task`).
_MIGRATE_8_TO_9 = {"allocations": ["held_by TEXT NOT NULL DEFAULT ''"]}


def migrate(db: sqlite3.Connection, path: str) -> None:
    """Create the schema in a new database, or migrate an older one in place, in one
    transaction (``db`` in autocommit mode).  Raises StoreError for a version this RM cannot
    read (a newer RM's)."""
    version = db.execute("PRAGMA user_version").fetchone()[0]
    if version not in (0, 1, 2, 3, 4, 5, 6, 7, 8, SCHEMA_VERSION):
        raise StoreError(f"{path}: state schema version {version}, expected {SCHEMA_VERSION}")
    db.execute("BEGIN IMMEDIATE")
    if version == 1:
        # 1 -> 2: the old tables exist; add what version 2 has (CREATE IF NOT EXISTS below
        # leaves them alone, so the columns must come first).
        for statement in _MIGRATE_1_TO_2.strip().split(";\n"):
            db.execute(statement)
    if version in (1, 2):
        for statement in _MIGRATE_2_TO_3.strip().split(";\n"):
            db.execute(statement)
    for before, columns_of in _ADDED_COLUMNS:
        if 0 < version <= before:
            _add_columns(db, columns_of)
    for statement in _SCHEMA.strip().split(";\n"):
        db.execute(statement)
    db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
    db.execute("COMMIT")


_ADDED_COLUMNS = (
    (3, _MIGRATE_3_TO_4),
    (4, _MIGRATE_4_TO_5),
    (5, _MIGRATE_5_TO_6),
    (6, _MIGRATE_6_TO_7),
    (7, _MIGRATE_7_TO_8),
    (8, _MIGRATE_8_TO_9),
)
"""(the last version without them, the columns a migration adds per table), in order."""


def _add_columns(db: sqlite3.Connection, columns_of: dict[str, list[str]]) -> None:
    """A migration's new columns, added to the tables that exist (a table created afresh
    by the schema has them already)."""
    for table, columns in columns_of.items():
        have = {row[1] for row in db.execute(f"PRAGMA table_info({table})")}
        for column in columns:
            if have and column.split()[0] not in have:
                db.execute(f"ALTER TABLE {table} ADD COLUMN {column}")
