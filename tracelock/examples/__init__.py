"""Example agents, runnable with ``tracelock run tracelock.examples.<module>:agent``."""
