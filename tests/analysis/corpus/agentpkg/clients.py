"""Module-level objects whose methods agents call."""

import random
import time as t

import requests


class Clock:
    def read(self) -> float:
        return t.monotonic()  # expect: TL-CLOCK-001


class Http:
    def __init__(self) -> None:
        self.session = requests.Session()

    def get(self, url: str) -> bytes:
        return self.session.get(url).content  # expect: TL-NET-001


clock = Clock()
http = Http()

_rng = random.Random()
_seeded = random.Random(1234)


def roll() -> float:
    return _rng.random()  # expect: TL-RAND-002


def stable_roll() -> float:
    return _seeded.random()
