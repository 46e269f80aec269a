"""The directory backend: a store kept in one directory of files (the journal, its sealed
segments, the SQLite index, the Merkle node files, the run queue and the leases), one
writer process at a time per commit (``docs/architecture.md``, ``docs/spec.md``)."""

from tracelock.storage.directory.store import STORE_FORMAT, STORE_VERSION, DirectoryStore

__all__ = ["STORE_FORMAT", "STORE_VERSION", "DirectoryStore"]
