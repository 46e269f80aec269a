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

__all__ = ["FLUSH_WAIT", "MIGRATIONS", "SCHEMA_VERSION", "prepare_schema"]

# Parts of both append functions of migration 4 (published: never change them). In a
# function's body, with ``batch`` its jsonb argument and ``row jsonb``, ``held bigint`` declared:
# the queue leases' check (docs/storage-postgres.md), and the payload rows' insert.
_LEASE_CHECK = (
    "  IF batch ? 'l' THEN\n"
    "    FOR row IN SELECT value FROM jsonb_array_elements(batch->'l') ORDER BY value->>0 LOOP\n"
    "      SELECT token INTO held FROM tracelock_queue_leases WHERE run = row->>0 FOR SHARE;\n"
    "      IF held IS DISTINCT FROM (row->>1)::bigint THEN\n"
    "        RAISE EXCEPTION 'a queue lease changed hands' USING ERRCODE = 'serialization_failure';\n"
    "      END IF;\n"
    "    END LOOP;\n"
    "  END IF;\n"
)
_PAYLOAD_INSERT = (
    "  INSERT INTO tracelock_payloads (hash, data, redacted)"
    " SELECT decode(p->>0, 'hex'), decode(p->>1, 'base64'), p->>1 IS NULL"
    " FROM jsonb_array_elements(batch->'p') AS p ON CONFLICT (hash) DO NOTHING;\n"
)

#: Migration ``n`` (0-based) brings the schema from version ``n`` to ``n + 1``. Append only:
#: a published migration never changes.
MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        "CREATE TABLE tracelock_meta (key text PRIMARY KEY, value text NOT NULL)",
        # The store-wide sequence: one row, locked FOR UPDATE by each append transaction
        # (until its commit record is written: migration 5).
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
    (
        # One append transaction in one call (docs/storage-postgres.md, "How seq, i and prev
        # are assigned"): the entries were built on the heads the caller's handle left at its
        # last commit, valid only while next_seq is still ``expect``. Under the head row lock
        # it checks that, and either writes everything, or raises serialization_failure
        # (40001), which rolls the transaction back at once: the lock is let go without a
        # commit to wait for. A function with one JSON argument, not a string of statements:
        # its plans are prepared once per session, and the client sends one document made by
        # a C serializer instead of quoting every value. ``batch`` holds arrays of rows:
        # p (payloads: hash hex, canonical bytes base64 or null when redacted), e (entries:
        # seq, run, i, line base64, leaf hex), u (runs updated: run, status, agent,
        # updated_ts, last_seq, added entries, last_hash, closed) and n (runs inserted: every
        # column of tracelock_runs in table order), and l when the handle appends under
        # queue leases (run, token): the lease rows are locked FOR SHARE and must still
        # carry those tokens, else serialization_failure too, and the caller's locked path
        # refuses exactly the calls whose lease is lost (tracelock.storage.queue_backend).
        # Bytes travel as base64 so that they come back exactly whatever the database's
        # encoding.
        "CREATE FUNCTION tracelock_append(expect bigint, next bigint, batch json)"
        " RETURNS void LANGUAGE plpgsql AS $$\n"
        "DECLARE head bigint;\n"
        "BEGIN\n"
        "  SELECT next_seq INTO head FROM tracelock_head WHERE id = 1 FOR UPDATE;\n"
        "  IF head <> expect THEN\n"
        "    RAISE EXCEPTION 'next_seq is %, not %', head, expect USING ERRCODE = 'serialization_failure';\n"
        "  END IF;\n"
        # Nested: PL/pgSQL plans a statement when it first runs it, so a store without the
        # queue's tables never plans the lease check.
        "  IF batch->'l' IS NOT NULL THEN\n"
        "    IF EXISTS (SELECT 1 FROM json_array_elements(batch->'l') AS l"
        " LEFT JOIN (SELECT run, token FROM tracelock_queue_leases WHERE run IN"
        " (SELECT x->>0 FROM json_array_elements(batch->'l') AS x) FOR SHARE) AS q ON q.run = l->>0"
        " WHERE q.token IS DISTINCT FROM (l->>1)::bigint) THEN\n"
        "      RAISE EXCEPTION 'a queue lease changed hands' USING ERRCODE = 'serialization_failure';\n"
        "    END IF;\n"
        "  END IF;\n"
        "  INSERT INTO tracelock_payloads (hash, data, redacted)"
        " SELECT decode(p->>0, 'hex'), decode(p->>1, 'base64'), p->>1 IS NULL"
        " FROM json_array_elements(batch->'p') AS p ON CONFLICT (hash) DO NOTHING;\n"
        "  INSERT INTO tracelock_entries (seq, run, i, line, leaf)"
        " SELECT (e->>0)::bigint, e->>1, (e->>2)::bigint, decode(e->>3, 'base64'), decode(e->>4, 'hex')"
        " FROM json_array_elements(batch->'e') AS e;\n"
        "  UPDATE tracelock_runs r SET status = COALESCE(u->>1, r.status), agent = COALESCE(r.agent, u->>2),"
        " updated_ts = (u->>3)::bigint, last_seq = (u->>4)::bigint, entries = r.entries + (u->>5)::bigint,"
        " last_hash = u->>6, closed = (u->>7)::boolean"
        " FROM json_array_elements(batch->'u') AS u WHERE r.run = u->>0;\n"
        "  INSERT INTO tracelock_runs (run, agent, parent, status, started_ts, updated_ts, entries,"
        " first_seq, last_seq, last_hash, closed)"
        " SELECT n->>0, n->>1, n->>2, n->>3, (n->>4)::bigint, (n->>5)::bigint, (n->>6)::bigint,"
        " (n->>7)::bigint, (n->>8)::bigint, n->>9, (n->>10)::boolean"
        " FROM json_array_elements(batch->'n') AS n;\n"
        "  UPDATE tracelock_head SET next_seq = next WHERE id = 1;\n"
        "END $$",
    ),
    (
        # The same function, with what version 3 did in time that grows with the store
        # taken out. Its run-row UPDATE joined the batch's rows to tracelock_runs: the
        # planner counts 100 rows for any set-returning function, so it hashed them and
        # scanned the whole table (0.3 ms per append at 3,000 runs). Each run row is now
        # updated by its key, and so is each lease row checked. ``batch`` is jsonb, parsed
        # once per call where every ``->`` of a json value parses the text again. Same
        # ``batch`` layout as version 3. The json version stays, as a call of this one:
        # processes of an older tracelock still running against the store (a rolling
        # upgrade) call it, and it must neither vanish under them nor stay slow.
        "CREATE FUNCTION tracelock_append(expect bigint, next bigint, batch jsonb)"
        " RETURNS void LANGUAGE plpgsql AS $$\n"
        "DECLARE head bigint; row jsonb; held bigint;\n"
        "BEGIN\n"
        "  SELECT next_seq INTO head FROM tracelock_head WHERE id = 1 FOR UPDATE;\n"
        "  IF head <> expect THEN\n"
        "    RAISE EXCEPTION 'next_seq is %, not %', head, expect USING ERRCODE = 'serialization_failure';\n"
        "  END IF;\n"
        f"{_LEASE_CHECK}"
        f"{_PAYLOAD_INSERT}"
        "  INSERT INTO tracelock_entries (seq, run, i, line, leaf)"
        " SELECT (e->>0)::bigint, e->>1, (e->>2)::bigint, decode(e->>3, 'base64'), decode(e->>4, 'hex')"
        " FROM jsonb_array_elements(batch->'e') AS e;\n"
        "  FOR row IN SELECT value FROM jsonb_array_elements(batch->'u') LOOP\n"
        "    UPDATE tracelock_runs SET status = COALESCE(row->>1, status), agent = COALESCE(agent, row->>2),"
        " updated_ts = (row->>3)::bigint, last_seq = (row->>4)::bigint, entries = entries + (row->>5)::bigint,"
        " last_hash = row->>6, closed = (row->>7)::boolean WHERE run = row->>0;\n"
        "  END LOOP;\n"
        "  INSERT INTO tracelock_runs (run, agent, parent, status, started_ts, updated_ts, entries,"
        " first_seq, last_seq, last_hash, closed)"
        " SELECT n->>0, n->>1, n->>2, n->>3, (n->>4)::bigint, (n->>5)::bigint, (n->>6)::bigint,"
        " (n->>7)::bigint, (n->>8)::bigint, n->>9, (n->>10)::boolean"
        " FROM jsonb_array_elements(batch->'n') AS n;\n"
        "  UPDATE tracelock_head SET next_seq = next WHERE id = 1;\n"
        "END $$",
        "CREATE OR REPLACE FUNCTION tracelock_append(expect bigint, next bigint, batch json)"
        " RETURNS void LANGUAGE plpgsql AS $$\n"
        "BEGIN\n"
        "  PERFORM tracelock_append(expect, next, batch::jsonb);\n"
        "END $$",
        # The append of this version: the server gives the batch its seq values, so a
        # handle needs no guess of next_seq and several processes each append in one call
        # (docs/storage-postgres.md, "How seq, i and prev are assigned"). The client builds
        # each entry's line but for its prev and seq: e holds [run, i, prev, a, b, c] with
        # the line a || prev || b || seq || c (a, b, c base64), prev the run's committed last
        # hash (hex, checked here against its row: else serialization_failure), null for a
        # run's first entry, or the index in e of the entry before it in this batch. u and n
        # are version 3's run rows with batch indices in place of seq values and hashes:
        # u [run, status, agent, updated_ts, last index, added entries, closed], n [run,
        # agent, parent, status, started_ts, updated_ts, entries, first index, last index,
        # closed]. p and l as in version 3. Returns the first seq and the last entry's hash.
        "CREATE FUNCTION tracelock_append_entries(batch jsonb, OUT base_seq bigint, OUT tail_hash text)"
        " LANGUAGE plpgsql AS $$\n"
        "DECLARE row jsonb; held bigint; head record; k int := 0; lines bytea[] := '{}'; hashes text[] := '{}';\n"
        "BEGIN\n"
        "  SELECT next_seq INTO base_seq FROM tracelock_head WHERE id = 1 FOR UPDATE;\n"
        f"{_LEASE_CHECK}"
        # Few statements per entry (each costs the loop about a microsecond): the run's head
        # checked at its first entry, the line, its hash.
        "  FOR row IN SELECT value FROM jsonb_array_elements(batch->'e') LOOP\n"
        "    IF jsonb_typeof(row->2) = 'string' THEN\n"
        "      SELECT entries, last_hash, closed INTO head FROM tracelock_runs WHERE run = row->>0;\n"
        "      IF NOT FOUND OR head.closed OR head.entries <> (row->>1)::bigint OR head.last_hash <> row->>2 THEN\n"
        "        RAISE EXCEPTION 'run % moved on', row->>0 USING ERRCODE = 'serialization_failure';\n"
        "      END IF;\n"
        "    END IF;\n"
        "    lines := lines || (decode(row->>3, 'base64') || convert_to(CASE jsonb_typeof(row->2)"
        " WHEN 'number' THEN '\"' || hashes[(row->>2)::int + 1] || '\"'"
        " WHEN 'string' THEN '\"' || (row->>2) || '\"' ELSE 'null' END, 'UTF8')"
        " || decode(row->>4, 'base64') || convert_to((base_seq + k)::text, 'UTF8') || decode(row->>5, 'base64'));\n"
        "    k := k + 1;\n"
        "    hashes := hashes || encode(sha256(lines[k]), 'hex');\n"
        "  END LOOP;\n"
        f"{_PAYLOAD_INSERT}"
        "  INSERT INTO tracelock_entries (seq, run, i, line, leaf)"
        " SELECT base_seq + o - 1, e->>0, (e->>1)::bigint, lines[o], sha256('\\x00'::bytea || lines[o])"
        " FROM jsonb_array_elements(batch->'e') WITH ORDINALITY AS t(e, o);\n"
        "  FOR row IN SELECT value FROM jsonb_array_elements(batch->'u') LOOP\n"
        "    UPDATE tracelock_runs SET status = COALESCE(row->>1, status), agent = COALESCE(agent, row->>2),"
        " updated_ts = (row->>3)::bigint, last_seq = base_seq + (row->>4)::bigint,"
        " entries = entries + (row->>5)::bigint, last_hash = hashes[(row->>4)::int + 1],"
        " closed = (row->>6)::boolean WHERE run = row->>0;\n"
        "  END LOOP;\n"
        "  INSERT INTO tracelock_runs (run, agent, parent, status, started_ts, updated_ts, entries,"
        " first_seq, last_seq, last_hash, closed)"
        " SELECT n->>0, n->>1, n->>2, n->>3, (n->>4)::bigint, (n->>5)::bigint, (n->>6)::bigint,"
        " base_seq + (n->>7)::bigint, base_seq + (n->>8)::bigint, hashes[(n->>8)::int + 1], (n->>9)::boolean"
        " FROM jsonb_array_elements(batch->'n') AS n;\n"
        "  UPDATE tracelock_head SET next_seq = base_seq + k WHERE id = 1;\n"
        "  tail_hash := hashes[k];\n"
        "END $$",
    ),
    (
        # The append calls of this version: procedures that run one of version 4's
        # functions in a transaction of their own, commit it without waiting for its WAL
        # flush, and then, when ``durable``, wait for the flush in a second, tiny transaction
        # (docs/storage-postgres.md, "Durability"). The head row lock, held to the end of the
        # first transaction, is thus let go once its commit record is in the WAL, not after
        # the flush: the writers' transactions still commit in seq order (their commit
        # records are written in that order, so a crash keeps a prefix of them), and the
        # flushes of many writers are shared. The wait is a transactional logical message
        # (an id and one WAL record, no table) committed with the session's
        # synchronous_commit, so it also waits for synchronous standbys where the server has
        # them; flushing it flushes every commit written before it. Version 4's functions
        # stay for processes of an older tracelock (a rolling upgrade): they keep the lock to
        # the end of their flush, which only makes them slower.
        "CREATE PROCEDURE tracelock_append_commit(expect bigint, next bigint, batch jsonb, durable boolean)"
        " LANGUAGE plpgsql AS $$\n"
        "BEGIN\n"
        "  PERFORM set_config('synchronous_commit', 'off', true);\n"
        "  PERFORM tracelock_append(expect, next, batch);\n"
        "  COMMIT;\n"
        "  IF durable THEN\n"
        "    PERFORM pg_logical_emit_message(true, 'tracelock', '');\n"
        "  END IF;\n"
        "END $$",
        "CREATE PROCEDURE tracelock_append_entries_commit(batch jsonb, durable boolean,"
        " INOUT base_seq bigint DEFAULT NULL, INOUT tail_hash text DEFAULT NULL)"
        " LANGUAGE plpgsql AS $$\n"
        "BEGIN\n"
        "  PERFORM set_config('synchronous_commit', 'off', true);\n"
        "  SELECT a.base_seq, a.tail_hash INTO base_seq, tail_hash FROM tracelock_append_entries(batch) AS a;\n"
        "  COMMIT;\n"
        "  IF durable THEN\n"
        "    PERFORM pg_logical_emit_message(true, 'tracelock', '');\n"
        "  END IF;\n"
        "END $$",
    ),
)

#: What waits for the WAL flush of every commit written before it (migration 5): one
#: transaction with an id and one WAL record, committed with the session's
#: ``synchronous_commit``.
FLUSH_WAIT = "SELECT pg_logical_emit_message(true, 'tracelock', '')"

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
