"""Benchmarks: one module per area, ``bench/<name>.py``, each exposing ``run(quick: bool) -> dict``."""
