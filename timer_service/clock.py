"""Time, injected: the system clock in production, a hand-driven one in tests."""

import time
from typing import Protocol


class Clock(Protocol):
    def now_ms(self) -> int:
        """Wall-clock epoch milliseconds."""
        ...

    def monotonic_s(self) -> float:
        """Monotonic seconds, for measuring intervals."""
        ...


class SystemClock:
    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic_s(self) -> float:
        return time.monotonic()


class FakeClock:
    """A clock that moves only when told to."""

    def __init__(self, now_ms: int = 1_767_225_600_000) -> None:
        self._now_ms = now_ms
        self._mono = 0.0

    def now_ms(self) -> int:
        return self._now_ms

    def monotonic_s(self) -> float:
        return self._mono

    def advance(self, ms: int) -> None:
        self._now_ms += ms
        self._mono += ms / 1000

    def set(self, now_ms: int) -> None:
        self._mono += (now_ms - self._now_ms) / 1000
        self._now_ms = now_ms
