"""Progress as printed lines, for work that runs minutes: a line after the first piece (with an estimate of the
rest), then at most one a minute, and one at the end.

    lines = ProgressLines("evaluation", total=900, unit="replies")
    for batch in batches:
        ...
        lines.advance(len(batch))

A tqdm bar shows nothing under papermill or in a saved notebook until it ends (docs/measurements.md#notebook-01,
the slow-CPU entry); printed lines show in every front end and stay in the executed notebook.
"""

from __future__ import annotations

import time


def minutes_and_seconds(seconds: float) -> str:
    """'42 s', '3 min 05 s'."""
    seconds = int(round(seconds))
    return f"{seconds} s" if seconds < 60 else f"{seconds // 60} min {seconds % 60:02d} s"


class ProgressLines:
    """Counts `total` pieces of work and prints where it stands; `every` seconds at most between lines."""

    def __init__(self, label: str, total: int, *, unit: str = "rows", every: float = 60.0, clock=time.perf_counter,
                 echo=print):
        self.label, self.total, self.unit, self.every = label, total, unit, every
        self.clock, self.echo = clock, echo
        self.started = clock()
        self.done = 0
        self.last_line: float | None = None

    def advance(self, pieces: int) -> None:
        self.done += pieces
        now = self.clock()
        if self.done < self.total and self.last_line is not None and now - self.last_line < self.every:
            return
        elapsed = now - self.started
        if self.done >= self.total:
            line = f"{self.label}: {self.total} {self.unit} in {minutes_and_seconds(elapsed)}"
        else:
            left = elapsed / self.done * (self.total - self.done)
            line = (f"{self.label}: {self.done} of {self.total} {self.unit} in {minutes_and_seconds(elapsed)}, "
                    f"about {minutes_and_seconds(left)} left")
        if self.done < self.total or self.last_line is not None:   # a one-piece job prints nothing
            self.echo(line, flush=True)
        self.last_line = now
