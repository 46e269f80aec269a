"""Runs: the engine that starts, drives and resumes runs, a fork child's prefix, crash
recovery and the run lifecycle."""
