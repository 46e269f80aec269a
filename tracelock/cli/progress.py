"""Progress of long commands on stderr: a bar with a count and an ETA on a terminal, plain
lines otherwise (CI logs, pipes), and never on stdout, which stays the command's document.

Lines are written at fixed fractions of the work (every tenth when the total is known), so
what is printed depends on the counts only; the clock feeds the ETA and nothing else.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any, Self

import click

__all__ = ["Progress", "stderr_is_terminal"]


def stderr_is_terminal() -> bool:
    return sys.stderr.isatty()


def _monotonic() -> float:
    return time.monotonic()


def _duration(seconds: float) -> str:
    whole = int(seconds + 0.5)
    if whole < 60:
        return f"{whole}s"
    minutes, rest = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes}m{rest:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


class Progress:
    """``with Progress("replay", "runs", total) as bar: bar.update(done)``.

    ``total`` may be unknown (None) or be given later with :meth:`update`. On a terminal
    click's progress bar is drawn; elsewhere a line ``replay: 3/10 runs (30%), eta 2s`` is
    written when the count crosses a tenth of the total (every update when the total is
    unknown, also on a terminal), and one closing line when the work is done.
    """

    def __init__(
        self,
        label: str,
        unit: str,
        total: int | None = None,
        *,
        terminal: bool | None = None,
        clock: Callable[[], float] = _monotonic,
    ) -> None:
        self.label = label
        self.unit = unit
        self.total = total
        self.done = 0
        self._clock = clock
        self._started = clock()
        self._terminal = stderr_is_terminal() if terminal is None else terminal
        self._bar: Any = None
        self._printed_tenth = -1
        self._closed = False

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close(finished=kind is None)

    def update(self, done: int, total: int | None = None, note: str | None = None) -> None:
        """The work has reached ``done`` items (of ``total``, when it is known now)."""
        if total is not None:
            self.total = total
        advanced = done - self.done
        self.done = done
        if self._terminal and (self.total or self._bar is not None):
            self._draw(advanced)
            return
        if self.total:
            tenth = min(10, done * 10 // self.total)
            if tenth <= self._printed_tenth and done != self.total:
                return
            self._printed_tenth = tenth
            if done == self.total and not note:
                return  # the closing line says it
        self._line(self._count() + self._eta() + (f": {note}" if note else ""))

    def close(self, *, finished: bool = True) -> None:
        if self._closed:
            return
        self._closed = True
        if self._bar is not None:
            self._bar.render_finish()
            return
        if finished:
            if self.done or self.total:
                self._line(f"{self._count()}, done in {_duration(self._clock() - self._started)}")
        else:
            self._line(f"{self._count()}, stopped")

    def _count(self) -> str:
        if self.total:
            return f"{self.done}/{self.total} {self.unit} ({self.done * 100 // self.total}%)"
        return f"{self.done} {self.unit}"

    def _eta(self) -> str:
        if not self.total or not self.done or self.done >= self.total:
            return ""
        elapsed = self._clock() - self._started
        return f", eta {_duration(elapsed * (self.total - self.done) / self.done)}"

    def _line(self, text: str) -> None:
        click.echo(f"{self.label}: {text}", err=True)

    def _draw(self, advanced: int) -> None:
        if self._bar is None:
            self._bar = click.progressbar(
                length=self.total,
                label=self.label,
                show_pos=True,
                show_eta=True,
                file=sys.stderr,
            )
            self._bar.render_progress()
        self._bar.update(max(advanced, 0))

