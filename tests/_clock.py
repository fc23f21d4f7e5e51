"""A fake monotonic clock for time-limit tests: it moves only when the test (or a fake solve) says so."""

from __future__ import annotations


class FakeClock:
    """A clock that starts at ``start`` and advances only through :meth:`advance`."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        """Let ``seconds`` pass."""
        self.now += seconds
