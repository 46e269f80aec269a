"""The PostgreSQL backend: a store kept in one PostgreSQL database (``docs/storage-postgres.md``).

The driver (``psycopg`` 3 with ``psycopg_pool``) is imported when a store is opened, never
when this package is, so the rest of tracelock works without it.
"""

from tracelock.storage.postgres.location import is_postgres_location
from tracelock.storage.postgres.store import PostgresStore

__all__ = ["PostgresStore", "is_postgres_location"]
