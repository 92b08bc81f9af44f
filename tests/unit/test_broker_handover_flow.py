"""A planned handover of a biz type between two live brokers (broker/ownership.py):
the old owner lets go only once its callbacks in flight have finished and their
outcomes are stored, so the new owner never sends any of them again."""

from __future__ import annotations

from broker.app import Broker
from broker.ownership import owner
from tests.unit.broker_harness import World, wait_for_states, world_with
from timer_service.model import JobState
from timer_service.settings import Settings
from timer_service.store.faulty import faulty
from timer_service.store.memory import MemoryStore


def moving_to(new: str, old: str) -> str:
    """A biz type that `new` owns once it is live beside `old`."""
    return next(f"biz{i}" for i in range(1000) if owner(f"biz{i}", [old, new]) == new)


async def test_callbacks_in_flight_at_a_handover_are_not_sent_again(world: World) -> None:
    biz = moving_to("b2", "b1")
    # Slow callbacks whose outcomes are still on their way when b2 appears.
    world.receiver.responder = lambda r: (200, {}, 1.5)
    await world.put_biz(biz, max_concurrency=8)
    await world.broker.start()
    due = world.clock.now_ms() + 300
    jobs = await world.create(biz, [f"h{i}" for i in range(8)], due)
    world.daemon.watch([due])
    world.daemon.run(jobs)
    while len(world.receiver.received) < 8:
        await world.clock.run_for(20)
    settings = Settings(shutdown_grace_s=3)  # type: ignore[call-arg]
    newcomer = Broker(settings, world.store, world.queue, world.metrics, world.clock, "b2")
    await newcomer.start()  # subscribes beside b1, which then hands the biz type over
    try:
        await wait_for_states(world.store, jobs, {JobState.DELIVERED}, 15, world.clock)
        await world.clock.run_for(3000)  # a second copy would go out now
        counts = {job_id: len(world.receiver.for_job(job_id)) for _, job_id in jobs}
        assert counts == dict.fromkeys(counts, 1), f"called back more than once: {counts}"
        assert newcomer.biz_types == [biz] and world.broker.biz_types == []
    finally:
        await world.clock.drive(newcomer.stop())


async def test_a_handover_while_outcome_writes_stall_sends_nothing_twice() -> None:
    """Issue 30, break 4: the old owner's outcome writes hang past its let-go bound
    (grace + the callback timeout); cancelling its consumer then handed the sent
    messages to the new owner, which took their marks over and sent each again. A
    planned let-go acks them instead; their outcomes are stored once the store answers."""
    store = faulty(MemoryStore(buckets=60, retention_ms=86_400_000))
    await store.setup()
    async with world_with(store) as world:
        biz = moving_to("b2", "b1")
        await world.put_biz(biz, max_concurrency=8, timeout_ms=1000)
        await world.broker.start()
        due = world.clock.now_ms() + 300
        jobs = await world.create(biz, [f"s{i}" for i in range(8)], due)
        store.stall("record_outcomes", times=100)  # the store stops answering outcomes
        world.daemon.watch([due])
        world.daemon.run(jobs)
        while len(world.receiver.received) < 8:
            await world.clock.run_for(20)
        settings = Settings(shutdown_grace_s=3)  # type: ignore[call-arg]
        newcomer = Broker(settings, store, world.queue, world.metrics, world.clock, "b2")
        await newcomer.start()
        try:
            while world.broker.biz_types or newcomer.biz_types != [biz]:
                await world.clock.run_for(100)
            # Letting go, b1 still says what it holds (break 2: else the leader's stale
            # sweep takes it for lost).
            assert world.broker.letting_go == [biz]
            await world.clock.run_for(2100)  # a heartbeat
            beats = {b.broker_id: b for b in await store.brokers.broker_beats()}
            assert [h.biz_type for h in beats["b1"].held] == [biz], beats["b1"]
            await world.clock.run_for(6000)  # past b1's let-go: a second copy goes out now
            store.resume()
            await wait_for_states(store, jobs, {JobState.DELIVERED}, 15, world.clock)
            counts = {job_id: len(world.receiver.for_job(job_id)) for _, job_id in jobs}
            assert counts == dict.fromkeys(counts, 1), f"called back more than once: {counts}"
        finally:
            store.heal()
            await world.clock.drive(newcomer.stop())


async def test_a_lease_lapsed_in_an_election_sends_nothing_twice() -> None:
    """Issue 30, seed 1016 with clock steps and rolling restarts (found by the seed1157
    triage among 80 extra seeds): a store election holds the outcome writes and the
    heartbeats alike; the broker's lease lapses and it lets go of its biz types,
    cancelling their consumers, which handed its sent messages back to the queue. Once
    a beat landed it consumed again, took its own marks over and sent each job again.
    A lapsed let-go now acks what was sent, as a planned one does."""
    store = faulty(MemoryStore(buckets=60, retention_ms=86_400_000))
    await store.setup()
    async with world_with(store) as world:
        await world.put_biz("orders", max_concurrency=8, timeout_ms=1000)
        await world.broker.start()
        due = world.clock.now_ms() + 300
        jobs = await world.create("orders", [f"e{i}" for i in range(8)], due)
        store.stall("record_outcomes", times=100)  # the election: outcomes hang ...
        world.daemon.watch([due])
        world.daemon.run(jobs)
        while len(world.receiver.received) < 8:
            await world.clock.run_for(20)
        store.fail("broker_heartbeat", times=5)  # ... and so do the heartbeats, ~10 s
        try:
            assert await world.clock.run_until(lambda: not world.broker.biz_types, 10_000), (
                "still consuming with its lease lapsed"
            )
            # A beat lands again while the outcomes still hang: it consumes anew.
            assert await world.clock.run_until(lambda: world.broker.biz_types == ["orders"], 8_000)
            await world.clock.run_for(3000)  # a redelivered copy would go out by now
            store.resume()  # the outcomes land
            await wait_for_states(store, jobs, {JobState.DELIVERED}, 15, world.clock)
            await world.clock.run_for(3000)  # a redelivered copy would go out by now
            counts = {job_id: len(world.receiver.for_job(job_id)) for _, job_id in jobs}
            assert counts == dict.fromkeys(counts, 1), f"called back more than once: {counts}"
        finally:
            store.heal()
