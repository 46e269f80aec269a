"""Answering for recorded runs: replay, the replay gate, forks, drift and run comparison."""
