"""The pure core: canonical form, hashing, entry layout, Merkle trees, fingerprints. No I/O."""
