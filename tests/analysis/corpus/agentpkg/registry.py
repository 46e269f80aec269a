"""A stand-in runtime whose ``agent`` and ``tool`` methods register functions."""

from collections.abc import Callable
from typing import Any


class Runtime:
    def __init__(self) -> None:
        self.registry: dict[str, Callable[..., Any]] = {}

    def agent(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        self.registry[fn.__name__] = fn
        return fn

    def tool(self, name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        def register(fn: Callable[..., Any]) -> Callable[..., Any]:
            self.registry[name] = fn
            return fn

        return register


rt = Runtime()


def agent(fn: Callable[..., Any]) -> Callable[..., Any]:
    return rt.agent(fn)


class Toolkit:
    """Registration by name: ``kit.agent("name")(handler)`` without decorator syntax."""

    def agent(self, name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        def register(fn: Callable[..., Any]) -> Callable[..., Any]:
            return fn

        return register


kit = Toolkit()
