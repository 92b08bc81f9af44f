"""What happened in a run, on the true virtual clock: every request to the API and its
answer, every fault, and (from the endpoints) every callback. The checker reads it;
a failure prints its tail."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tests.sim.endpoints import Callback
from timer_service.clock import Clock


@dataclass
class Call:
    """One API request: when it was sent and answered, what it asked and got."""

    method: str
    path: str
    body: Any
    started_ms: int
    ended_ms: int = -1
    status: int = 0
    answer: Any = None

    def brief(self) -> str:
        asked = "" if self.body is None else " " + _short(self.body)
        return f"{self.method} {self.path}{asked} -> {self.status} {_short(self.answer)}"


@dataclass
class Fault:
    at_ms: int
    kind: str  # crash, stop, freeze, thaw, restart, queue-lost, queue-back, store-faults
    process: str


@dataclass
class LostClaim:
    """A claim whose reply was lost after it applied: when, its token, and the jobs it
    claimed, each with the moment it was due to fire."""

    at_ms: int
    token: str
    jobs: list[tuple[tuple[str, str], int]]


@dataclass
class History:
    clock: Clock
    calls: list[Call] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    callbacks: list[Callback] = field(default_factory=list)
    notes: list[tuple[int, str]] = field(default_factory=list)
    lost_claims: list[LostClaim] = field(default_factory=list)

    def fault(self, kind: str, process: str) -> None:
        self.faults.append(Fault(self.clock.now_ms(), kind, process))
        self.note(f"FAULT {kind} {process}")

    def note(self, text: str) -> None:
        self.notes.append((self.clock.now_ms(), text))

    def lines(self) -> list[str]:
        """The whole run, one line per event, in time order: what two runs of one seed
        must agree on byte for byte."""
        return [line for line, _ in self._events()]

    def about(self, identity: tuple[str, str]) -> list[str]:
        """The trace lines that name one job, and every fault: a violation's shortened
        trace."""
        biz_type, job_id = identity
        names = (f"'{job_id}'", f"/{job_id} ", f"/{job_id}/")
        return [
            line
            for line, whole in self._events()
            if "FAULT" in line or (biz_type in whole and any(n in whole for n in names))
        ]

    def about_biz(self, biz_type: str) -> list[str]:
        """The callbacks of one biz type, every fault and every process start: a rate
        limit violation's shortened trace."""
        marks = (f"callback {biz_type}/", "FAULT", "  start ", "  up ")
        return [line for line, _ in self._events() if any(m in line for m in marks)]

    def _events(self) -> list[tuple[str, str]]:
        """(line, the untruncated text it was cut from) of every event, in time order."""
        events: list[tuple[int, str, str]] = []
        for call in self.calls:
            line = f"api {call.brief()} (sent {call.started_ms})"
            events.append((call.ended_ms, line, f"{line} {call.body} {call.answer}"))
        for cb in self.callbacks:
            answer = "hung" if cb.answered_ms is None else f"{cb.status}@{cb.answered_ms}"
            line = f"callback {cb.biz_type}/{cb.job_id} #{cb.attempt} by {cb.broker} -> {answer}"
            events.append((cb.sent_ms, line, line + " "))
        for at_ms, text in self.notes:
            events.append((at_ms, text, text))
        events.sort(key=lambda e: e[0])  # stable: ties keep their kind's order
        start = min((e[0] for e in events), default=0)
        return [(f"{(at - start) / 1000:10.3f}  {line}", whole) for at, line, whole in events]


def _short(value: Any, width: int = 140) -> str:
    text = str(value)
    return text if len(text) <= width else text[: width - 3] + "..."
