"""The hierarchical timing wheel, against its contract and a sorted-list model."""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, field

import pytest

from daemon.wheel import Timer, TimingWheel

START_MS = 1_700_000_000_000  # an epoch-ms "now", so bucket arithmetic sees realistic numbers
YEAR_MS = 365 * 24 * 3600 * 1000


def expect(got: object, expected: object, what: str = "") -> None:
    assert got == expected, f"{what}expected {expected!r}, got {got!r}"


# --- ordering and timing ---------------------------------------------------------------


def test_advance_returns_items_in_deadline_order() -> None:
    wheel: TimingWheel[str] = TimingWheel(START_MS)
    for offset, item in [(50, "c"), (10, "a"), (30, "b"), (70_000, "e"), (300, "d")]:
        wheel.schedule(START_MS + offset, item)

    expect(wheel.advance(START_MS + 100_000), ["a", "b", "c", "d", "e"])


def test_equal_deadlines_come_out_in_schedule_order() -> None:
    wheel: TimingWheel[str] = TimingWheel(START_MS)
    deadline = START_MS + 70_000
    wheel.schedule(deadline, "first, filed at a coarse level")
    wheel.schedule(deadline, "second, same level")
    wheel.advance(deadline - 100)
    wheel.schedule(deadline, "third, filed straight into the 1 ms level")

    expect(
        wheel.advance(deadline),
        [
            "first, filed at a coarse level",
            "second, same level",
            "third, filed straight into the 1 ms level",
        ],
    )


def test_equal_deadlines_keep_schedule_order_across_a_long_jump() -> None:
    wheel: TimingWheel[int] = TimingWheel(START_MS)
    deadlines = [START_MS + offset for offset in (5, YEAR_MS, 300, 5, 70_000, 300, YEAR_MS)]
    for item, deadline in enumerate(deadlines):
        wheel.schedule(deadline, item)

    expected = sorted(range(len(deadlines)), key=lambda item: (deadlines[item], item))
    expect(wheel.advance(START_MS + 2 * YEAR_MS), expected)


def test_expires_exactly_at_the_deadline_never_a_millisecond_before() -> None:
    wheel: TimingWheel[int] = TimingWheel(START_MS)
    offsets = [0, 1, 2, 255, 256, 257, 1000, 65_535, 65_536, 65_537, 70_000]
    for offset in offsets:
        wheel.schedule(START_MS + offset, offset)

    fired_at: dict[int, int] = {}
    for now in range(START_MS, START_MS + 70_001):
        for offset in wheel.advance(now):
            fired_at[offset] = now - START_MS
    expect(fired_at, {offset: offset for offset in offsets})


@pytest.mark.parametrize(
    "delay_ms",
    [1, 300, 70_000, 5 * 3600 * 1000, 60 * 24 * 3600 * 1000, YEAR_MS],
    ids=["1ms", "300ms", "70s", "5h", "60d", "1y"],
)
def test_cascades_down_the_levels_and_fires_on_time(delay_ms: int) -> None:
    wheel: TimingWheel[str] = TimingWheel(START_MS)
    deadline = START_MS + delay_ms
    wheel.schedule(deadline, "job")

    # Creep up on the deadline with ever shorter jumps, crossing every level boundary.
    now = START_MS
    while deadline - now > 1:
        now += (deadline - now) // 2
        expect(wheel.advance(now), [], f"at deadline-{deadline - now} ms: ")
    expect(wheel.advance(deadline - 1), [], "1 ms before the deadline: ")
    expect(wheel.advance(deadline), ["job"], "at the deadline: ")
    expect(len(wheel), 0)


@pytest.mark.parametrize("delay_ms", [1, 300, 70_000, YEAR_MS, 1000 * YEAR_MS])
def test_sleeping_until_next_deadline_reaches_the_timer_in_a_few_wakeups(delay_ms: int) -> None:
    wheel: TimingWheel[str] = TimingWheel(START_MS)
    wheel.schedule(START_MS + delay_ms, "job")

    wakeups = 0
    fired: list[str] = []
    while not fired:
        next_ms = wheel.next_deadline()
        assert next_ms is not None, "next_deadline() is None with a timer pending"
        assert next_ms <= START_MS + delay_ms, f"next_deadline {next_ms} after the deadline"
        fired = wheel.advance(next_ms)
        wakeups += 1
    expect(fired, ["job"])
    expect(wheel.current_ms, START_MS + delay_ms)
    expect(wakeups, 1, "wakeups: ")


def test_a_long_jump_returns_everything_due_and_keeps_the_rest() -> None:
    rng = random.Random(7)
    wheel: TimingWheel[int] = TimingWheel(START_MS)
    deadlines = [START_MS + rng.randrange(0, 2 * YEAR_MS) for _ in range(5000)]
    for item, deadline in enumerate(deadlines):
        wheel.schedule(deadline, item)

    by_deadline = sorted(range(len(deadlines)), key=lambda item: (deadlines[item], item))
    halfway = START_MS + YEAR_MS
    first_half = [item for item in by_deadline if deadlines[item] <= halfway]
    expect(wheel.advance(halfway), first_half)
    expect(len(wheel), len(deadlines) - len(first_half))
    expect(wheel.next_deadline(), min(d for d in deadlines if d > halfway))
    expect(wheel.advance(START_MS + 10 * YEAR_MS), by_deadline[len(first_half) :])
    expect(len(wheel), 0)


def test_a_cascade_inside_one_advance_does_not_share_a_bucket_still_to_be_flushed() -> None:
    # A 65 s bucket flushed mid-jump must refile relative to its own time, not the jump's
    # end: relative to the end, the 70_300 timer would share the 1 ms slot of 70_044
    # (256 ms apart), still unflushed, and fire with it 256 ms early.
    wheel: TimingWheel[str] = TimingWheel(0)
    wheel.schedule(70_000, "coarse, due")
    wheel.schedule(70_300, "coarse, not due")
    wheel.advance(69_900)
    wheel.schedule(70_044, "fine, due")

    expect(wheel.advance(70_100), ["coarse, due", "fine, due"])
    expect(wheel.advance(70_299), [])
    expect(wheel.advance(70_300), ["coarse, not due"])


def test_a_past_deadline_expires_on_the_next_advance() -> None:
    wheel: TimingWheel[str] = TimingWheel(START_MS)
    wheel.advance(START_MS + 1000)
    wheel.schedule(START_MS + 10, "long overdue")
    wheel.schedule(START_MS + 1000, "due now")
    wheel.schedule(START_MS + 1001, "not yet")

    expect(wheel.next_deadline(), START_MS + 10)
    expect(wheel.advance(START_MS + 1000), ["long overdue", "due now"])
    expect(wheel.advance(START_MS + 1001), ["not yet"])


def test_a_clock_stepping_back_does_not_move_the_wheel_back() -> None:
    wheel: TimingWheel[str] = TimingWheel(START_MS)
    wheel.advance(START_MS + 500)
    wheel.schedule(START_MS + 400, "overdue")
    wheel.schedule(START_MS + 600, "future")

    expect(wheel.advance(START_MS), ["overdue"])
    expect(wheel.current_ms, START_MS + 500)
    expect(wheel.advance(START_MS + 599), [])
    expect(wheel.advance(START_MS + 600), ["future"])


def test_deadlines_beyond_every_level_are_kept() -> None:
    wheel: TimingWheel[str] = TimingWheel(0, wheel_size=2)
    far = 2**70
    wheel.schedule(far, "far")
    wheel.schedule(3, "near")

    expect(wheel.advance(far - 1), ["near"])
    expect(wheel.next_deadline(), far)
    expect(wheel.advance(far), ["far"])


# --- cancel, len, next_deadline --------------------------------------------------------


def test_cancel_before_expiry_removes_the_timer() -> None:
    wheel: TimingWheel[str] = TimingWheel(START_MS)
    keep = wheel.schedule(START_MS + 300, "keep")
    drop = wheel.schedule(START_MS + 200, "drop")
    drop_far = wheel.schedule(START_MS + YEAR_MS, "drop far")

    expect(wheel.cancel(drop), True)
    expect(drop_far.cancel(), True, "Timer.cancel(): ")
    expect(len(wheel), 1)
    expect(wheel.advance(START_MS + 2 * YEAR_MS), ["keep"])
    expect(keep.cancel(), False, "cancel after expiry: ")


def test_cancel_after_expiry_or_twice_returns_false() -> None:
    wheel: TimingWheel[str] = TimingWheel(START_MS)
    fired = wheel.schedule(START_MS + 5, "fired")
    cancelled = wheel.schedule(START_MS + 5, "cancelled")
    wheel.schedule(START_MS + 5, "other")  # shares fired's bucket, which must stay coherent

    expect(wheel.cancel(cancelled), True)
    expect(wheel.cancel(cancelled), False, "second cancel: ")
    expect(cancelled.cancel(), False, "Timer.cancel() after wheel.cancel(): ")
    expect(wheel.advance(START_MS + 5), ["fired", "other"])
    expect(wheel.cancel(fired), False, "cancel after expiry: ")
    expect(fired.cancel(), False)
    expect(len(wheel), 0)


def test_cancel_after_cascade_still_finds_the_timer() -> None:
    wheel: TimingWheel[str] = TimingWheel(START_MS)
    timer = wheel.schedule(START_MS + 70_000, "job")
    wheel.advance(START_MS + 69_999)  # moved down to the 1 ms level by now

    expect(timer.cancel(), True)
    expect(wheel.advance(START_MS + 80_000), [])


def test_timer_handle_exposes_deadline_and_item() -> None:
    wheel: TimingWheel[dict[str, str]] = TimingWheel(START_MS)
    item = {"job_id": "j1"}
    timer = wheel.schedule(START_MS + 42, item)

    assert isinstance(timer, Timer)
    expect(timer.deadline_ms, START_MS + 42)
    assert timer.item is item
    assert not hasattr(timer, "__dict__"), "Timer should use __slots__"
    assert "pending" in repr(timer)


def test_len_counts_pending_timers_only() -> None:
    wheel: TimingWheel[int] = TimingWheel(START_MS)
    timers = [wheel.schedule(START_MS + offset, offset) for offset in (1, 2, 300, 70_000)]
    expect(len(wheel), 4)
    timers[2].cancel()
    expect(len(wheel), 3)
    wheel.advance(START_MS + 2)
    expect(len(wheel), 1)
    wheel.advance(START_MS + 70_000)
    expect(len(wheel), 0)


def test_next_deadline_is_none_when_empty_and_exact_otherwise() -> None:
    wheel: TimingWheel[str] = TimingWheel(START_MS)
    expect(wheel.next_deadline(), None)
    wheel.schedule(START_MS + 70_123, "coarse")
    expect(wheel.next_deadline(), START_MS + 70_123, "single coarse timer: ")
    wheel.schedule(START_MS + 300, "middle")
    expect(wheel.next_deadline(), START_MS + 300)
    wheel.schedule(START_MS + 7, "fine")
    expect(wheel.next_deadline(), START_MS + 7)
    wheel.advance(START_MS + 7)
    expect(wheel.next_deadline(), START_MS + 300)


def test_next_deadline_stays_a_lower_bound_after_cancels() -> None:
    wheel: TimingWheel[str] = TimingWheel(START_MS)
    earliest = wheel.schedule(START_MS + 70_000, "earliest")
    wheel.schedule(START_MS + 70_500, "later, same coarse bucket")
    only = wheel.schedule(START_MS + 10, "alone in its bucket")

    only.cancel()
    expect(wheel.next_deadline(), START_MS + 70_000, "after emptying a bucket: ")
    earliest.cancel()
    next_ms = wheel.next_deadline()
    assert next_ms is not None and next_ms <= START_MS + 70_500, f"got {next_ms}"
    # Waking at a stale bound only cascades; the next answer is exact.
    expect(wheel.advance(next_ms), [])
    expect(wheel.next_deadline(), START_MS + 70_500)
    wheel.schedule(START_MS + 80_000, "x").cancel()
    expect(wheel.next_deadline(), START_MS + 70_500)


def test_next_deadline_is_none_once_everything_is_cancelled() -> None:
    wheel: TimingWheel[int] = TimingWheel(START_MS)
    timers = [wheel.schedule(START_MS + offset, offset) for offset in (5, 500, 50_000, YEAR_MS)]
    for timer in timers:
        timer.cancel()
    expect(wheel.next_deadline(), None)
    expect(wheel.advance(START_MS + 2 * YEAR_MS), [])


@pytest.mark.parametrize("tick_ms", [0, -1])
def test_rejects_a_tick_below_one_ms(tick_ms: int) -> None:
    with pytest.raises(ValueError, match="tick_ms"):
        TimingWheel(START_MS, tick_ms=tick_ms)


def test_rejects_a_wheel_of_one_bucket() -> None:
    with pytest.raises(ValueError, match="wheel_size"):
        TimingWheel(START_MS, wheel_size=1)


def test_coarse_ticks_still_fire_exactly_at_the_deadline() -> None:
    wheel: TimingWheel[str] = TimingWheel(START_MS, tick_ms=10)
    wheel.schedule(START_MS + 13, "a")
    wheel.schedule(START_MS + 17, "b")

    expect(wheel.advance(START_MS + 12), [])
    expect(wheel.advance(START_MS + 13), ["a"])
    expect(wheel.next_deadline(), START_MS + 17)
    expect(wheel.advance(START_MS + 16), [])
    expect(wheel.advance(START_MS + 17), ["b"])


# --- randomized, against a sorted-list model -------------------------------------------


@dataclass
class Model:
    """The obvious O(n) timer: a list of pending (deadline, seq, item)."""

    now_ms: int
    pending: list[tuple[int, int, int]] = field(default_factory=list)

    def schedule(self, deadline_ms: int, seq: int) -> None:
        self.pending.append((deadline_ms, seq, seq))

    def cancel(self, seq: int) -> bool:
        for entry in self.pending:
            if entry[1] == seq:
                self.pending.remove(entry)
                return True
        return False

    def advance(self, now_ms: int) -> list[int]:
        self.now_ms = max(self.now_ms, now_ms)
        due = sorted(entry for entry in self.pending if entry[0] <= self.now_ms)
        self.pending = [entry for entry in self.pending if entry[0] > self.now_ms]
        return [item for _, _, item in due]

    def earliest(self) -> int | None:
        return min((entry[0] for entry in self.pending), default=None)


def reaches(tick_ms: int, wheel_size: int) -> list[int]:
    """Distances that straddle each level's span of this wheel, plus real-world ones."""
    span = tick_ms * wheel_size
    return [0, 1, 3, tick_ms, span, span * wheel_size, span * wheel_size**2, 300, 70_000]


def random_deadline(rng: random.Random, now_ms: int, near: list[int]) -> int:
    reach = rng.choice([*near, 20_000_000, 5_000_000_000, 2 * YEAR_MS])
    if rng.random() < 0.1:
        return now_ms - rng.randint(0, max(reach, 1))  # in the past
    return now_ms + rng.randint(0, reach)


def random_advance(
    rng: random.Random, wheel: TimingWheel[int], now_ms: int, near: list[int]
) -> int:
    kind = rng.random()
    if kind < 0.3:
        next_ms = wheel.next_deadline()
        return now_ms if next_ms is None else next_ms
    if kind < 0.35:
        return now_ms - rng.randint(0, 1000)  # a clock stepping back
    if kind < 0.9:
        return now_ms + rng.randint(0, rng.choice(near))
    return now_ms + rng.choice([30_000_000, YEAR_MS])


CONFIGS = [(1, 256), (1, 2), (1, 16), (7, 3), (10, 64), (1000, 60)]


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize(("tick_ms", "wheel_size"), CONFIGS)
def test_matches_the_model_under_random_schedule_cancel_advance(
    seed: int, tick_ms: int, wheel_size: int
) -> None:
    rng = random.Random(seed * 1000 + tick_ms * 10 + wheel_size)
    start_ms = START_MS + rng.randrange(10_000)
    wheel: TimingWheel[int] = TimingWheel(start_ms, tick_ms=tick_ms, wheel_size=wheel_size)
    model = Model(start_ms)
    near = reaches(tick_ms, wheel_size)
    timers: list[Timer[int]] = []

    for step in range(1500):
        where = f"seed {seed}, step {step}: "
        op = rng.random()
        if op < 0.5:
            timers.append(wheel.schedule(random_deadline(rng, model.now_ms, near), len(timers)))
            model.schedule(timers[-1].deadline_ms, timers[-1].item)
        elif op < 0.7 and timers:
            victim = rng.choice(timers)
            expect(victim.cancel(), model.cancel(victim.item), f"{where}cancel({victim}): ")
        else:
            now_ms = random_advance(rng, wheel, model.now_ms, near)
            expect(wheel.advance(now_ms), model.advance(now_ms), f"{where}advance({now_ms}): ")
            expect(wheel.current_ms, model.now_ms, where)

        expect(len(wheel), len(model.pending), f"{where}len: ")
        earliest = model.earliest()
        next_ms = wheel.next_deadline()
        if earliest is None:
            expect(next_ms, None, f"{where}next_deadline: ")
        else:
            assert next_ms is not None and next_ms <= earliest, (
                f"{where}next_deadline: expected <= {earliest}, got {next_ms}"
            )

    expect(wheel.advance(model.now_ms + 3 * YEAR_MS), model.advance(model.now_ms + 3 * YEAR_MS))


@pytest.mark.parametrize(("tick_ms", "wheel_size"), CONFIGS)
def test_without_cancels_next_deadline_is_exact_and_every_wakeup_fires(
    tick_ms: int, wheel_size: int
) -> None:
    rng = random.Random(tick_ms * 1000 + wheel_size)
    wheel: TimingWheel[int] = TimingWheel(START_MS, tick_ms=tick_ms, wheel_size=wheel_size)
    model = Model(START_MS)
    near = reaches(tick_ms, wheel_size)
    items = itertools.count()
    for item in itertools.islice(items, 2000):
        model.schedule(wheel.schedule(random_deadline(rng, START_MS, near), item).deadline_ms, item)

    while model.pending:
        earliest = model.earliest()
        next_ms = wheel.next_deadline()
        expect(next_ms, earliest, "next_deadline: ")
        assert next_ms is not None
        fired = wheel.advance(next_ms)
        assert fired, f"woke at {next_ms} for nothing"
        expect(fired, model.advance(next_ms), f"advance({next_ms}): ")
        if rng.random() < 0.2:  # timers filed mid-drain, relative to a moved clock
            item = next(items)
            deadline = random_deadline(rng, wheel.current_ms, near)
            model.schedule(wheel.schedule(deadline, item).deadline_ms, item)
    expect(wheel.next_deadline(), None)


@pytest.mark.parametrize(("tick_ms", "wheel_size"), [(1, 2), (1, 3), (1, 4), (3, 3)])
def test_matches_the_model_on_a_tiny_wheel_crowded_with_short_timers(
    tick_ms: int, wheel_size: int
) -> None:
    # Many timers a few levels out and short steps make cascades and 1 ms buckets meet
    # inside one advance(), where a misfiled timer would share a bucket and fire early.
    for seed in range(100):
        rng = random.Random(seed)
        wheel: TimingWheel[int] = TimingWheel(0, tick_ms=tick_ms, wheel_size=wheel_size)
        model = Model(0)
        timers: list[Timer[int]] = []
        for step in range(500):
            op = rng.random()
            if op < 0.55:
                deadline = model.now_ms + rng.randint(0, tick_ms * wheel_size**3)
                timers.append(wheel.schedule(deadline, len(timers)))
                model.schedule(deadline, timers[-1].item)
            elif op < 0.65 and timers:
                victim = rng.choice(timers)
                expect(victim.cancel(), model.cancel(victim.item), f"seed {seed}, step {step}: ")
            else:
                now_ms = model.now_ms + rng.randint(0, tick_ms * wheel_size)
                expect(
                    wheel.advance(now_ms),
                    model.advance(now_ms),
                    f"seed {seed}, step {step}, advance({now_ms}): ",
                )
