"""Helpers in another module, reached from the agents through plain calls and aliases."""

import datetime
import os
import random
import secrets
import socket
import subprocess as sp
import uuid
from datetime import date
from os import environ
from random import random as rnd
from time import perf_counter as pc

import numpy as np


def describe(topic: str) -> str:
    lang = environ.get("LANG", "C")  # expect: TL-ENV-001
    weight = rnd()  # expect: TL-RAND-001
    ident = uuid.uuid4()  # expect: TL-UUID-001
    home = os.environ["HOME"]  # expect: TL-ENV-001
    token = os.getenv("TOKEN")  # expect: TL-ENV-001
    os.environ["SEEN"] = "1"
    return f"{topic}:{lang}:{weight}:{ident}:{home}:{token}"


def identity() -> str:
    return f"{os.getpid()}@{socket.gethostname()}"  # expect: TL-ENV-002 TL-ENV-002


def entropy() -> bytes:
    key = secrets.token_hex(8)  # expect: TL-RAND-004
    return key.encode() + os.urandom(4)  # expect: TL-RAND-004


def generators() -> list[float]:
    fresh = random.Random()  # expect: TL-RAND-002
    system = random.SystemRandom()  # expect: TL-RAND-002
    seeded = random.Random(42)
    legacy = np.random.rand(3)  # expect: TL-RAND-003
    np.random.seed(7)  # expect: TL-RAND-003
    modern = np.random.default_rng(7)
    unseeded = np.random.default_rng()  # expect: TL-RAND-003
    return [fresh.random(), system.random(), seeded.random(), float(legacy[0]),
            modern.random(), unseeded.random()]


def dates() -> tuple[object, ...]:
    today = datetime.date.today()  # expect: TL-CLOCK-001
    again = date.today()  # expect: TL-CLOCK-001
    tick = pc()  # expect: TL-CLOCK-001
    fixed = datetime.datetime.fromtimestamp(0)
    return today, again, tick, fixed


def run_tools() -> int:
    done = sp.run(["true"], check=False)  # expect: TL-PROC-001
    return done.returncode + os.system("true")  # expect: TL-PROC-001


def keys(value: str, a: object, b: object) -> tuple[int, int, bool]:
    same = id(a) == id(b)
    seen: set[int] = set()
    seen.add(id(a))
    return hash(value), id(value), same  # expect: TL-HASH-001 TL-ID-001


class Token:
    def __init__(self, text: str) -> None:
        self.text = text

    def __hash__(self) -> int:
        return hash(self.text)


def unreachable_helper() -> float:
    return rnd()
