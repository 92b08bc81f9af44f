"""The clocks: waits on a FakeClock end when time is moved past them, never before."""

from __future__ import annotations

import asyncio

import pytest

from timer_service.clock import FakeClock, SystemClock


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_advance_and_set_move_wall_and_monotonic_time_together() -> None:
    clock = FakeClock(1_000_000)
    clock.advance(250)
    assert (clock.now_ms(), clock.monotonic_s()) == (1_000_250, 0.25)
    clock.set(1_002_000)
    assert (clock.now_ms(), clock.monotonic_s()) == (1_002_000, 2.0)


async def test_a_sleeper_wakes_when_time_passes_its_deadline_not_before() -> None:
    clock = FakeClock()
    woke: list[int] = []

    async def sleeper(seconds: float) -> None:
        await clock.sleep(seconds)
        woke.append(clock.now_ms() - 1_767_225_600_000)

    tasks = [asyncio.create_task(sleeper(s)) for s in (0.3, 0.1, 0.2)]
    await settle()
    clock.advance(99)
    await settle()
    assert woke == [], "woke before its deadline"
    clock.advance(1)
    await settle()
    assert woke == [100]
    clock.set(clock.now_ms() + 500)
    await settle()
    assert sorted(woke) == [100, 600, 600]
    await asyncio.gather(*tasks)


async def test_sleep_of_nothing_still_yields() -> None:
    clock = FakeClock()
    ran: list[str] = []
    asyncio.get_running_loop().call_soon(lambda: ran.append("soon"))
    await clock.sleep(0)
    assert ran == ["soon"], "sleep(0) should let the loop run once"


async def test_a_sliver_of_a_wait_still_takes_time() -> None:
    clock = FakeClock()
    task = asyncio.create_task(clock.sleep(1e-9))
    await settle()
    assert not task.done(), "a positive wait ended with no time passing"
    clock.advance(1)
    await settle()
    assert task.done()


async def test_wait_for_returns_the_result_or_times_out_in_fake_time() -> None:
    clock = FakeClock()
    event = asyncio.Event()

    async def answer() -> str:
        await event.wait()
        return "yes"

    quick = asyncio.create_task(clock.wait_for(answer(), 1.0))
    await settle()
    event.set()
    assert await quick == "yes"

    event.clear()
    slow = asyncio.create_task(clock.wait_for(answer(), 1.0))
    await settle()
    clock.advance(999)
    await settle()
    assert not slow.done(), "timed out early"
    clock.advance(1)
    with pytest.raises(TimeoutError):
        await slow


async def test_wait_for_cancels_what_it_waited_for_on_timeout() -> None:
    clock = FakeClock()
    waited: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(clock.wait_for(waited, 0.05))
    await settle()
    clock.advance(50)
    with pytest.raises(TimeoutError):
        await task
    assert waited.cancelled()


async def test_wait_for_without_a_timeout_waits_as_long_as_it_takes() -> None:
    clock = FakeClock()
    waited: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(clock.wait_for(waited, None))
    clock.advance(3_600_000)
    await settle()
    assert not task.done()
    waited.set_result(7)
    assert await task == 7


async def test_run_for_lets_each_sleeper_run_and_sleep_again_on_the_way() -> None:
    clock = FakeClock()
    ticks: list[int] = []

    async def every_100ms() -> None:
        while True:
            ticks.append(round(clock.monotonic_s() * 1000))
            await clock.sleep(0.1)

    task = asyncio.create_task(every_100ms())
    await clock.run_for(350)
    assert ticks == [0, 100, 200, 300], ticks
    assert clock.monotonic_s() == 0.35
    task.cancel()


async def test_run_until_stops_when_done_or_gives_up() -> None:
    clock = FakeClock()
    done = asyncio.create_task(clock.sleep(2.5))

    async def finished() -> bool:
        return done.done()

    assert await clock.run_until(finished, 10_000)
    assert clock.monotonic_s() == 2.5, "should stop at the moment it is done"
    assert not await clock.run_until(lambda: False, 1000)
    assert clock.monotonic_s() == 3.5


async def test_max_step_caps_each_move() -> None:
    clock = FakeClock(max_step_ms=10)
    seen: list[float] = []

    def look() -> bool:
        seen.append(clock.monotonic_s())
        return False

    await clock.run_until(look, 30)
    assert seen == [0.0, 0.01, 0.02, 0.03], seen


async def test_drive_awaits_while_time_passes_and_bounds_it() -> None:
    clock = FakeClock()

    async def slow() -> str:
        await clock.sleep(5)
        return "done"

    assert await clock.drive(slow()) == "done"
    assert clock.monotonic_s() == 5
    with pytest.raises(TimeoutError):
        await clock.drive(slow(), within_ms=1000)


async def test_the_system_clock_waits_in_real_time() -> None:
    clock = SystemClock()
    await clock.sleep(0)
    assert await clock.wait_for(asyncio.sleep(0, "ok"), 1.0) == "ok"
    never: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    with pytest.raises(TimeoutError):
        await clock.wait_for(never, 0)
    assert never.cancelled()
