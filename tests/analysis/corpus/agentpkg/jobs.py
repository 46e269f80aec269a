"""Entry points named only in the scan configuration (no decorator)."""

import uuid


def nightly_report() -> str:
    return str(uuid.uuid1())  # expect-entry: TL-UUID-001


def helper_not_entry() -> str:
    return str(uuid.uuid4())
