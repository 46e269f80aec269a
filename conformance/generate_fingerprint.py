"""Write the golden fingerprint vectors: ``python conformance/generate_fingerprint.py``."""

from __future__ import annotations

import hashlib
import json
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from fingerprint_cases import ALL_CASES, DIVERGENCES, record_case, replay_case  # noqa: E402


def main() -> None:
    out = HERE / "fingerprint"
    out.mkdir(exist_ok=True)
    for name in ALL_CASES:
        with tempfile.TemporaryDirectory() as tmp:
            lines, run_id = record_case(name, Path(tmp) / "store")
        entries = [line for line in lines if line.startswith(b"{")]
        end = next(json.loads(line) for line in reversed(entries) if json.loads(line)["run"] == run_id)
        assert end["kind"] == "run.end"
        payloads = {line[1:65].decode(): line[66:] for line in lines if line.startswith(b"=")}
        fingerprint = json.loads(payloads[end["payload"]])["fingerprint"]
        vector = {
            "description": f"case {name}: the journal of one run and its expected fingerprint",
            "run": run_id,
            "journal": [line.decode("utf-8") for line in lines],
            "entry_hashes": [hashlib.sha256(line).hexdigest() for line in entries],
            "fingerprint": fingerprint,
        }
        (out / f"{name}.json").write_text(json.dumps(vector, indent=2, ensure_ascii=False) + "\n")
        print(f"{name}: {fingerprint}")
    replays = HERE / "replay"
    replays.mkdir(exist_ok=True)
    for name, (base, changed) in DIVERGENCES.items():
        with tempfile.TemporaryDirectory() as tmp:
            report = replay_case(name, Path(tmp) / "store")
        vector = {
            "description": (
                f"case {name}: the recording fingerprint/{base}.json replayed with "
                f"fingerprint_cases:{changed.__name__}; the replay report it gives"
            ),
            "recording": f"fingerprint/{base}.json",
            "agent": f"fingerprint_cases:{changed.__name__}",
            "report": report,
        }
        (replays / f"{name}.json").write_text(json.dumps(vector, indent=2, ensure_ascii=False, sort_keys=True) + "\n")
        print(f"{name}: diverged at step {report['divergence']['step']}")


if __name__ == "__main__":
    main()
