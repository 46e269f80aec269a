"""Checks and tools shared by the PostgreSQL concurrency and fault tests."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import psycopg

from tracelock.core.entry import ChainChecker, Entry
from tracelock.core.merkle import leaf_hash, root
from tracelock.storage.postgres import PostgresStore


def check_journal(store: PostgresStore, expected: int) -> list[Entry]:
    """Every entry, with seq dense, each run's chain valid, and the Merkle root the one
    computed from the entries' own bytes."""
    entries = list(store.iter_entries())
    assert len(entries) == expected
    assert [entry.seq for entry in entries] == list(range(expected))
    checker = ChainChecker()
    for entry in entries:
        assert checker.check(entry) is None
    assert store.tree_root() == root([leaf_hash(entry.line) for entry in entries])
    return entries


@contextmanager
def head_locked(url: str) -> Iterator[psycopg.Connection[tuple[object, ...]]]:
    """Hold the store-wide writer lock (the head row) from another session: appends queue
    up behind it until the block ends."""
    with psycopg.connect(url) as conn:
        conn.execute("SELECT next_seq FROM tracelock_head WHERE id = 1 FOR UPDATE")
        yield conn
        conn.rollback()


def waiting_on_lock(url: str, count: int = 1) -> None:
    """Return once ``count`` sessions wait for a lock (the writers are queued behind it)."""
    with psycopg.connect(url, autocommit=True) as conn:
        while True:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()"
            ).fetchone()
            if row is not None and row[0] >= count:
                return
            conn.execute("SELECT pg_sleep(0.005)")
