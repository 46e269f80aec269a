"""Fixtures of the runtime tests: the PostgreSQL test server's, and ``location`` (a new
store's location, once per backend)."""

from __future__ import annotations

from tests.pg_server import location, pg_cluster, pg_database, pg_url  # noqa: F401  (the fixtures)
