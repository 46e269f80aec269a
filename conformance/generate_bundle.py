"""Generate the golden evidence bundle vectors in ``conformance/bundle/``.

    python conformance/generate_bundle.py           # (re)write conformance/bundle
    python conformance/generate_bundle.py --check   # exit 1 if the files are not up to date

Two runs of the fingerprint conformance agent (``fingerprint_cases.py``) are recorded in a
fresh store with a fixed clock and fixed run ids; the ``args`` of the first run's LLM call
(step 0) are redacted by field; a checkpoint is signed with the secret of RFC 8032 section
7.1, TEST 1; both runs are exported as a directory, a zip and a tar. Everything is
deterministic. ``tests/evidence/test_bundle_conformance.py`` checks the files with its own
code and records the case again to check the bytes are unchanged.
"""

from __future__ import annotations

import hashlib
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from fingerprint_cases import POLICY, FixedClock, agent, case_seed, kit  # noqa: E402
from generated_files import generator_main  # noqa: E402

from tracelock.evidence.bundle import archive_bytes, collect_bundle  # noqa: E402
from tracelock.evidence.history import CheckpointHistory, SigningKey  # noqa: E402
from tracelock.evidence.keys import PrivateKey  # noqa: E402
from tracelock.evidence.note import NoteSigner  # noqa: E402
from tracelock.evidence.redaction import redact  # noqa: E402
from tracelock.runtime.provenance.record import NO_PROVENANCE  # noqa: E402
from tracelock.runtime.runtime import Runtime  # noqa: E402
from tracelock.storage.directory import DirectoryStore  # noqa: E402

#: RFC 8032 section 7.1, TEST 1: SECRET KEY.
RFC8032_TEST1_SEED = "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60"
ORIGIN = "example.com/tracelock-conformance"
RUNS = {
    "run-bundle-1": {"question": "what is k1? (asked by Jane Doe, jane@example.com)", "key": "k1"},
    "run-bundle-2": {"question": "what is k22?", "key": "k22"},
}
REDACTION = {"run": "run-bundle-1", "step": 0, "fields": ["args"], "by": "dpo@example.com",
             "reason": "the prompt names a person (GDPR art. 17)"}


def _json(value: Any) -> bytes:
    return (json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")


def record(directory: Path) -> dict[str, bytes]:
    """Record the case in ``directory`` and return the bundle's files."""
    clock = FixedClock()
    ids = iter(RUNS)
    store = DirectoryStore(directory, clock=clock, store_id=lambda: "conformance")
    try:
        with Runtime(store, POLICY, toolkits=(kit,), clock=clock, ids=lambda: next(ids), provenance=NO_PROVENANCE) as runtime:
            for payload in RUNS.values():
                runtime.run(agent, payload, seed=case_seed(agent, payload))
        redact(
            store,
            REDACTION["run"],
            REDACTION["step"],
            fields=REDACTION["fields"],
            by=REDACTION["by"],
            reason=REDACTION["reason"],
        )
        key = PrivateKey.from_seed(bytes.fromhex(RFC8032_TEST1_SEED))
        history = CheckpointHistory(directory)
        stored, _ = history.sign(store, SigningKey(key, ORIGIN))
        return collect_bundle(store, list(RUNS), stored, signer_vkeys=history.signer_vkeys(stored.number))
    finally:
        store.close()


def all_files() -> dict[str, bytes]:
    with tempfile.TemporaryDirectory() as tmp:
        files = record(Path(tmp) / "store")
    manifest = json.loads(files["manifest.json"])
    key = PrivateKey.from_seed(bytes.fromhex(RFC8032_TEST1_SEED))
    signer = NoteSigner(ORIGIN, key)
    archives = {kind: archive_bytes(files, kind) for kind in ("zip", "tar")}
    vectors = {
        "description": (
            "An evidence bundle of two runs of the fingerprint conformance agent, one LLM "
            "prompt redacted by field, signed with the RFC 8032 test 1 key (docs/spec.md 8)."
        ),
        "key": {
            "seed": RFC8032_TEST1_SEED,
            "public_key": key.public_key.hex(),
            "name": ORIGIN,
            "key_id": f"{signer.key_id:08x}",
            "vkey": signer.verifier().vkey,
        },
        "runs": {run["run"]: run["fingerprint"] for run in manifest["runs"]},
        "redaction": REDACTION,
        "redacted_payloads": [item["payload"] for item in manifest["redacted"]],
        "checkpoint": manifest["checkpoint"],
        "archives": {f"bundle.{kind}": hashlib.sha256(data).hexdigest() for kind, data in archives.items()},
    }
    out = {f"bundle/bundle/{path}": data for path, data in files.items()}
    out.update({f"bundle/bundle.{kind}": data for kind, data in archives.items()})
    out["bundle/vectors.json"] = _json(vectors)
    return out


def main(argv: list[str] | None = None) -> int:
    return generator_main(__doc__.splitlines()[0] if __doc__ else None, HERE, "bundle", all_files, argv)


if __name__ == "__main__":
    sys.exit(main())
