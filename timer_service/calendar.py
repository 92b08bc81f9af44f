"""The load calendar and flexible windows (docs/api.md, "Load calendar and flexible
windows"): pure rules, no I/O.

The calendar counts, for each second, the `pending` jobs whose next attempt falls in
it. The stores keep those counts beside the index of non-empty seconds, changed by
every write that makes a job pending in a second or takes it out of one
(`pending_moves`); `GET /v1/calendar` sums them per step and never reads a job.

A flexible job (`window_ms` > 0) may fire at any moment of `[due_at, due_at +
window_ms]`; the service picks, when it is created, the least-loaded second of that
window by the calendar (`pick_offset`): a whole number of seconds after `due_at`, so
that the job keeps its millisecond within the second and each candidate is one
second of the index.
"""

from __future__ import annotations

import math
import zlib
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from timer_service.constants import RESERVED_BIZ_TYPE_PREFIX
from timer_service.errors import InvalidInput
from timer_service.model import Job, JobState, second_of

MAX_STEPS = 2000
MAX_WINDOW_MS = 3_600_000
SECOND_MS = 1000

# (second, biz type) -> change of its pending count
Moves = Counter[tuple[int, str]]


@dataclass(frozen=True, slots=True)
class CalendarQuery:
    """`[from_ms, to_ms)` in steps of `step_ms`, all whole seconds (the index's
    resolution); the last step may end early, at `to_ms`."""

    from_ms: int
    to_ms: int
    step_ms: int
    biz_type: str | None = None

    @property
    def steps(self) -> int:
        return -(-(self.to_ms - self.from_ms) // self.step_ms)

    @property
    def from_s(self) -> int:
        return self.from_ms // SECOND_MS

    @property
    def to_s(self) -> int:
        """The first second after the range."""
        return self.to_ms // SECOND_MS

    def step_of(self, second: int) -> int:
        return (second * SECOND_MS - self.from_ms) // self.step_ms

    def buckets(self, due_per_step: Sequence[int]) -> list[dict[str, int]]:
        return [
            {"at": self.from_ms + i * self.step_ms, "due": n} for i, n in enumerate(due_per_step)
        ]


def calendar_query(
    from_ms: int, to_ms: int, step_ms: int, biz_type: str | None = None
) -> CalendarQuery:
    """The query, or InvalidInput naming the parameter at fault. `from` is taken down
    and `to` up to a whole second: the index counts by the second, so a step holds
    whole seconds."""
    if step_ms <= 0 or step_ms % SECOND_MS:
        raise InvalidInput(
            "step_ms must be a positive multiple of 1000 (the calendar counts whole seconds)",
            ("query", "step_ms"),
        )
    start = from_ms - from_ms % SECOND_MS
    end = to_ms + (-to_ms) % SECOND_MS
    if end <= start:
        raise InvalidInput("to must be after from", ("query", "to"))
    query = CalendarQuery(start, end, step_ms, biz_type)
    if query.steps > MAX_STEPS:
        raise InvalidInput(
            f"[from, to) holds {query.steps} steps of {step_ms} ms; at most {MAX_STEPS}",
            ("query", "step_ms"),
        )
    return query


def per_step(query: CalendarQuery, due_by_second: Mapping[int, int]) -> list[int]:
    """Seconds' counts summed into the query's steps (seconds outside it ignored)."""
    steps = [0] * query.steps
    for second, n in due_by_second.items():
        if query.from_s <= second < query.to_s:
            steps[query.step_of(second)] += n
    return steps


# --------------------------------------------------------------------------- counts


def counts_biz(biz_type: str) -> bool:
    """Reserved biz types (the canary) are nobody's load."""
    return not biz_type.startswith(RESERVED_BIZ_TYPE_PREFIX)


def counted(job: Job | None) -> tuple[int, str] | None:
    """The (second, biz type) a job counts in: a pending business job with a next
    attempt."""
    if (
        job is None
        or job.state != JobState.PENDING
        or job.next_attempt_at is None
        or not counts_biz(job.biz_type)
    ):
        return None
    return second_of(job.next_attempt_at), job.biz_type


def pending_moves(before: Job | None, after: Job | None, moves: Moves | None = None) -> Moves:
    """What a write from `before` to `after` (None: no job) does to the counts, added to
    `moves`: -1 where the job was counted, +1 where it now is (nothing when the same)."""
    moves = Counter() if moves is None else moves
    old, new = counted(before), counted(after)
    if old != new:
        if old is not None:
            moves[old] -= 1
        if new is not None:
            moves[new] += 1
    return moves


# --------------------------------------------------------------------------- windows


def window_seconds(due_at: int, window_ms: int) -> range:
    """The seconds a job of this window may fire in: `due_at` plus k whole seconds."""
    first = second_of(due_at)
    return range(first, first + window_ms // SECOND_MS + 1)


def pick_offset(loads: Sequence[int], key: str) -> int:
    """The index of the least-loaded entry of `loads`; among equals, one chosen by the
    job's identity (crc32, the same in every process), so that a herd spreads evenly
    over the tied seconds and the same state and job always give the same answer."""
    least = min(loads)
    ties = [i for i, n in enumerate(loads) if n == least]
    return ties[zlib.crc32(key.encode()) % len(ties)]


# How much more than its even share of a batch one second may take from it: what
# keeps creates that decide at the same time from all filling the same gap.
BATCH_SPREAD = 1.5


def place(windows: Sequence[tuple[str, int, int]], load: Mapping[int, int]) -> list[int]:
    """The fire moment of each (key, due_at, window_ms), in order: each job takes the
    least-loaded second of its window by `load`, the ones placed before it included
    (a batch spreads by itself).

    A second takes at most `BATCH_SPREAD` times its even share of the batch while
    another second of the window has room: creates deciding at the same time read
    the same `load`, and if each filled a gap in it entirely, c of them would
    overfill it c times, and the next ones the gap that leaves. So a gap fills over
    a few batches, and a second ends at most (c x 0.5 x the batch's share) above
    the level, whatever came before (docs/api.md, "Load calendar and flexible
    windows")."""
    taken: Counter[int] = Counter()
    out = []
    for key, due_at, window_ms in windows:
        seconds = window_seconds(due_at, window_ms)
        if len(seconds) == 1:
            out.append(due_at)
            continue
        cap = max(1, math.ceil(BATCH_SPREAD * len(windows) / len(seconds)))
        room = [i for i, s in enumerate(seconds) if taken[s] < cap]
        while not room:
            cap += max(1, cap // 2)
            room = [i for i, s in enumerate(seconds) if taken[s] < cap]
        k = room[pick_offset([load.get(seconds[i], 0) + taken[seconds[i]] for i in room], key)]
        taken[seconds[k]] += 1
        out.append(due_at + k * SECOND_MS)
    return out
