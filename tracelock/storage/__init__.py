"""Storage: the backend interface, the embedded directory store, payloads, index, Merkle node files."""
