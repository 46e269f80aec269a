"""The PostgreSQL store's schema: an ordered list of migrations and the version check.

``tracelock_meta`` holds ``schema_version`` (the number of migrations applied) and the
store's id. Migrations run in one transaction under an advisory lock, so two processes
opening a fresh database at once create the schema once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from tracelock.storage.errors import StoreFormatError, StoreNotFoundError, StoreSchemaTooNewError

if TYPE_CHECKING:
    import psycopg

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "prepare_schema"]

#: Migration ``n`` (0-based) brings the schema from version ``n`` to ``n + 1``. Append only:
#: a published migration never changes.
MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        "CREATE TABLE tracelock_meta (key text PRIMARY KEY, value text NOT NULL)",
        # The store-wide sequence: one row, locked FOR UPDATE by each append transaction.
        "CREATE TABLE tracelock_head ("
        " id smallint PRIMARY KEY CHECK (id = 1),"
        " next_seq bigint NOT NULL CHECK (next_seq >= 0))",
        "INSERT INTO tracelock_head (id, next_seq) VALUES (1, 0)",
        "CREATE TABLE tracelock_entries ("
        " seq bigint PRIMARY KEY,"
        " run text NOT NULL,"
        " i bigint NOT NULL,"
        " line bytea NOT NULL,"
        " leaf bytea NOT NULL,"
        " UNIQUE (run, i))",
        "CREATE TABLE tracelock_runs ("
        " run text PRIMARY KEY,"
        " agent text,"
        " parent text,"
        " status text NOT NULL,"
        " started_ts bigint NOT NULL,"
        " updated_ts bigint NOT NULL,"
        " entries bigint NOT NULL,"
        " first_seq bigint NOT NULL,"
        " last_seq bigint NOT NULL,"
        " last_hash text NOT NULL,"
        " closed boolean NOT NULL)",
        "CREATE INDEX tracelock_runs_newest ON tracelock_runs (started_ts DESC, first_seq DESC)",
        "CREATE TABLE tracelock_payloads ("
        " hash bytea PRIMARY KEY,"
        " data bytea,"
        " redacted boolean NOT NULL DEFAULT false,"
        " CHECK (redacted = (data IS NULL)))",
    ),
    (
        # The Merkle tree's perfect subtrees of 16 leaves and more (level >= 4): node
        # ``idx`` of ``level`` covers leaves [idx * 2**level, (idx + 1) * 2**level). A cache
        # of the entries' leaf hashes, grown by Merkle queries, never by appends.
        "CREATE TABLE tracelock_merkle_nodes ("
        " level smallint NOT NULL CHECK (level >= 4 AND level < 64),"
        " idx bigint NOT NULL CHECK (idx >= 0),"
        " hash bytea NOT NULL,"
        " PRIMARY KEY (level, idx))",
        # The signed checkpoints (C2SP signed notes), numbered from 1, with the consistency
        # proof from the previous one and the verifier keys of their signers.
        "CREATE TABLE tracelock_checkpoints ("
        " number bigint PRIMARY KEY CHECK (number >= 1),"
        " note bytea NOT NULL,"
        " consistency bytea,"
        " vkeys text NOT NULL)",
    ),
)

SCHEMA_VERSION = len(MIGRATIONS)

# pg_advisory_xact_lock key for schema changes: "tlschema" as an integer.
_MIGRATION_LOCK = int.from_bytes(b"tlschema", "big") - (1 << 63)


def prepare_schema(
    conn: psycopg.Connection[tuple[object, ...]],
    *,
    create: bool,
    read_only: bool,
    where: str,
    store_id: Callable[[], str],
) -> str:
    """Check the schema (creating or migrating it when allowed) and return the store id."""
    with conn.transaction():
        if not read_only:
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
        row = conn.execute("SELECT to_regclass('tracelock_meta') IS NOT NULL").fetchone()
        exists = bool(row and row[0])
        version = 0
        if exists:
            found = conn.execute("SELECT value FROM tracelock_meta WHERE key = 'schema_version'").fetchone()
            if found is None or not str(found[0]).isdigit():
                raise StoreFormatError(f"{where} has a tracelock_meta table without a schema version")
            version = int(str(found[0]))
        elif read_only or not create:
            raise StoreNotFoundError(f"no tracelock store in {where}")
        if version > SCHEMA_VERSION:
            raise StoreSchemaTooNewError(
                f"{where} has tracelock schema version {version}; this tracelock knows versions "
                f"up to {SCHEMA_VERSION}: upgrade tracelock to open it",
                details={"schema_version": version, "supported": SCHEMA_VERSION},
            )
        if version < SCHEMA_VERSION:
            if read_only:
                raise StoreFormatError(
                    f"{where} has tracelock schema version {version} and needs migrating to "
                    f"{SCHEMA_VERSION}: open it for writing once",
                    details={"schema_version": version, "supported": SCHEMA_VERSION},
                )
            for statements in MIGRATIONS[version:]:
                for statement in statements:
                    conn.execute(statement.encode())
            if version == 0:
                conn.execute(
                    "INSERT INTO tracelock_meta (key, value) VALUES ('store_id', %s)", (store_id(),)
                )
            conn.execute(
                "INSERT INTO tracelock_meta (key, value) VALUES ('schema_version', %s) "
                "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
                (str(SCHEMA_VERSION),),
            )
        found = conn.execute("SELECT value FROM tracelock_meta WHERE key = 'store_id'").fetchone()
        return "" if found is None else str(found[0])
