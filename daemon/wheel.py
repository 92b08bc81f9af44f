"""Hierarchical timing wheel: millisecond timers with O(1) schedule and cancel.

Why hierarchical: a flat wheel with 1 ms ticks needs one bucket per millisecond
of its horizon, so holding timers a year out would take ~3e10 buckets. A heap
holds any horizon but pays O(log n) to expire each timer and cannot remove one
cheaply: cancel either searches (O(n)) or leaves a dead entry in memory until
its deadline passes, and a timer service cancels most of what it parks.
Levels of `wheel_size` buckets, each level's tick the span of the level below
(1 ms, 256 ms, 65.5 s, 4.7 h, 49.7 days, 34.8 years with the defaults), hold
any horizon in a few hundred buckets per level; a timer is filed once at the
finest level whose window covers it and moves down at most once per level as
its deadline comes near (Kafka's `TimingWheel`, Netty's `HashedWheelTimer`).

Time only moves when the caller says so (`advance(now_ms)`): the wheel owns no
clock and no thread, so the daemon drives it from its event loop and tests
drive it by hand.

Instead of stepping tick by tick, a small heap holds the occupied buckets,
each keyed by the earliest deadline filed into it (Kafka's DelayQueue
of buckets): a jump of hours pops only the buckets that hold timers, and the
heap's top answers `next_deadline()` for the sleeping daemon. The heap holds
buckets, not timers, so it stays small (a few entries per occupied bucket for
millions of timers) and schedule touches it only when a bucket gets a new
earliest deadline.

Measured against heapq and asyncio's call_at in bench/wheel_bench.py.
"""

from __future__ import annotations

from heapq import heappop, heappush
from operator import attrgetter
from typing import Generic, TypeVar

T = TypeVar("T")

# Larger than every int, so any deadline files a fresh heap entry for an idle bucket.
_IDLE = float("inf")

_by_deadline = attrgetter("deadline_ms")
_by_schedule_order = attrgetter("_seq")


class Timer(Generic[T]):
    """A scheduled item; hold on to it to cancel."""

    # Five slots and no __dict__: ~72 bytes per timer, the bulk of a parked job's cost.
    __slots__ = ("_bucket", "_seq", "_wheel", "deadline_ms", "item")

    deadline_ms: int
    item: T
    # The bucket the timer is filed in. Expiry clears the bucket instead of
    # touching every timer, so "pending" means "still a key of this dict".
    _bucket: dict[Timer[T], None]
    _seq: int
    _wheel: TimingWheel[T]

    def cancel(self) -> bool:
        """Same as `wheel.cancel(self)`: True if the timer was still pending."""
        try:
            del self._bucket[self]
        except KeyError:
            return False
        self._wheel._done += 1
        return True

    @property
    def pending(self) -> bool:
        return self in self._bucket

    def __repr__(self) -> str:
        state = "pending" if self.pending else "done"
        return f"Timer(deadline_ms={self.deadline_ms}, item={self.item!r}, {state})"


# Building a Timer field by field skips the Python-level __init__ call, a third of
# the cost of constructing one.
_new_timer = object.__new__


class TimingWheel(Generic[T]):
    """Timers at `tick_ms` resolution, driven by explicit `advance(now_ms)` calls.

    Not thread-safe: one owner (the daemon's event loop) schedules, cancels and
    advances. `advance` never returns an item before its deadline and returns
    every item whose deadline has passed, however long the jump.
    """

    __slots__ = (
        "_buckets",
        "_done",
        "_heap",
        "_levels",
        "_marks",
        "_now_ms",
        "_now_tick",
        "_origin_ms",
        "_overdue_filed",
        "_seq",
        "_size",
        "_tick_ms",
    )

    def __init__(self, start_ms: int, tick_ms: int = 1, wheel_size: int = 256) -> None:
        if tick_ms < 1:
            raise ValueError(f"tick_ms must be >= 1, got {tick_ms}")
        if wheel_size < 2:
            raise ValueError(f"wheel_size must be >= 2, got {wheel_size}")
        self._tick_ms = tick_ms
        self._size = wheel_size
        # Ticks count from the start, not the epoch: CPython's int arithmetic has a
        # fast path for values below 2**30 (12 days of 1 ms ticks), and epoch
        # milliseconds are above it.
        self._origin_ms = start_ms
        self._now_ms = start_ms
        self._now_tick = 0
        # All levels' buckets in one flat list (level L owns [L*size, (L+1)*size)),
        # so a heap entry is a plain (key, index) pair of ints.
        self._buckets: list[dict[Timer[T], None]] = []
        # The key of each bucket's live heap entry, _IDLE if it has none. An entry
        # whose key differs from its bucket's mark was superseded and is skipped.
        self._marks: list[float] = []
        self._heap: list[tuple[int, int]] = []
        self._levels = 0
        self._done = 0  # timers expired or cancelled
        self._seq = 0
        self._overdue_filed = False
        # Level 1 always exists: schedule() files into it without checking.
        self._add_levels(2)

    @property
    def current_ms(self) -> int:
        return self._now_ms

    def __len__(self) -> int:
        return self._seq - self._done

    def schedule(self, deadline_ms: int, item: T) -> Timer[T]:
        """File `item` to expire at `deadline_ms`; a deadline already passed expires
        on the next `advance()`."""
        timer: Timer[T] = _new_timer(Timer)
        timer.deadline_ms = deadline_ms
        timer.item = item
        timer._wheel = self
        # The schedule counter doubles as the tie-breaker and, less the timers done,
        # as len(): one increment instead of two on the hottest path.
        self._seq = timer._seq = self._seq + 1

        # Inlined copy of _file(), with level 1 (256 ms .. 65 s by default, where most
        # jobs of a look-ahead window land) unrolled: calls cost ~15% of schedule here.
        size = self._size
        tick = (deadline_ms - self._origin_ms) // self._tick_ms
        now_tick = self._now_tick
        if tick - now_tick < size:
            if tick < now_tick:
                # Overdue: the current tick's bucket, already flushed, gets it with
                # its own deadline as key, so the next advance() returns it.
                tick = now_tick
                self._overdue_filed = True
            index = tick % size
        else:
            coarse = tick // size
            if coarse - now_tick // size < size:
                index = size + coarse % size
            else:
                index = self._coarse_index(tick)
        bucket = self._buckets[index]
        bucket[timer] = None
        timer._bucket = bucket
        marks = self._marks
        if deadline_ms < marks[index]:
            marks[index] = deadline_ms
            heappush(self._heap, (deadline_ms, index))
        return timer

    def cancel(self, timer: Timer[T]) -> bool:
        """Remove a pending timer in O(1); False if it had expired or was cancelled."""
        try:
            del timer._bucket[timer]
        except KeyError:
            return False
        # The timer's own wheel, so a handle passed to the wrong wheel cannot skew a count.
        timer._wheel._done += 1
        # The bucket's heap entry may now be earlier than anything left in it; it is
        # left alone: popped early it only cascades the bucket early, never fires it.
        return True

    def advance(self, now_ms: int) -> list[T]:
        """Move time to `now_ms` and return the items of every timer with a deadline
        at or before it, by deadline, ties in schedule order.

        A clock that steps back does not move the wheel back; the call then only
        returns overdue items.
        """
        if now_ms < self._now_ms:
            now_ms = self._now_ms
        heap = self._heap
        if not heap or heap[0][0] > now_ms:
            self._move_to(now_ms)
            return []

        buckets = self._buckets
        marks = self._marks
        size = self._size
        one_ms_ticks = self._tick_ms == 1
        # The usual batch is one 1 ms bucket: a single deadline, only ties to order.
        mixed_deadlines = self._overdue_filed
        self._overdue_filed = False
        expired: list[Timer[T]] = []
        while heap and heap[0][0] <= now_ms:
            key, index = heappop(heap)
            if marks[index] != key:
                continue
            marks[index] = _IDLE
            bucket = buckets[index]
            if not bucket:
                continue
            if one_ms_ticks and index < size:
                # A 1 ms bucket holds a single deadline (or overdue ones), all due.
                mixed_deadlines = mixed_deadlines or bool(expired)
                expired.extend(bucket)
                bucket.clear()
                continue
            mixed_deadlines = True
            timers = list(bucket)
            bucket.clear()
            # Refile relative to the bucket's key, not now_ms: buckets keyed between
            # the two are still unflushed, and filing relative to now_ms could put a
            # later timer into one of their slots, to be expired with them.
            if key > self._now_ms:
                self._move_to(key)
            for timer in timers:
                if timer.deadline_ms <= now_ms:
                    expired.append(timer)
                else:
                    self._file(timer)
        self._move_to(now_ms)
        self._done += len(expired)
        if len(expired) > 1:
            # A timer cascaded into a 1 ms bucket lands after one filed there directly;
            # a coarse bucket flushed by a long jump and the overdue bucket mix
            # deadlines. Two stable sorts, each linear on the nearly sorted input.
            expired.sort(key=_by_schedule_order)
            if mixed_deadlines:
                expired.sort(key=_by_deadline)
        return [timer.item for timer in expired]

    def next_deadline(self) -> int | None:
        """A time at or before the earliest pending deadline, None when empty.

        Exact unless the earliest timer of a coarse bucket was cancelled; then it is
        that cancelled deadline, and advancing to it cascades the bucket, after which
        the answer is exact again. Amortized O(1): each call drops only heap entries
        of buckets emptied by cancels.
        """
        if self._seq == self._done:
            return None
        heap = self._heap
        marks = self._marks
        buckets = self._buckets
        while heap:
            key, index = heap[0]
            if marks[index] == key:
                if buckets[index]:
                    return key
                marks[index] = _IDLE
            heappop(heap)
        return None  # unreachable while timers are pending

    def __repr__(self) -> str:
        return (
            f"TimingWheel(current_ms={self._now_ms}, pending={len(self)}, "
            f"tick_ms={self._tick_ms}, wheel_size={self._size}, levels={self._levels})"
        )

    def _file(self, timer: Timer[T]) -> None:
        """File a timer due after the current time (see schedule)."""
        deadline_ms = timer.deadline_ms
        tick = (deadline_ms - self._origin_ms) // self._tick_ms
        if tick - self._now_tick < self._size:
            index = tick % self._size
        else:
            index = self._coarse_index(tick)
        bucket = self._buckets[index]
        bucket[timer] = None
        timer._bucket = bucket
        marks = self._marks
        if deadline_ms < marks[index]:
            marks[index] = deadline_ms
            heappush(self._heap, (deadline_ms, index))

    def _coarse_index(self, tick: int) -> int:
        """The bucket of the finest level >= 1 whose window, counted in that level's
        ticks from the current one, covers `tick`."""
        size = self._size
        now_tick = self._now_tick
        level = 1
        span = size
        while tick // span - now_tick // span >= size:
            level += 1
            span *= size
        if level >= self._levels:
            self._add_levels(level + 1)
        return level * size + tick // span % size

    def _move_to(self, now_ms: int) -> None:
        self._now_ms = now_ms
        self._now_tick = (now_ms - self._origin_ms) // self._tick_ms

    def _add_levels(self, levels: int) -> None:
        # Coarse levels come into being only when a deadline needs them.
        while self._levels < levels:
            self._buckets.extend({} for _ in range(self._size))
            self._marks.extend([_IDLE] * self._size)
            self._levels += 1
