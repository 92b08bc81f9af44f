"""Send marks, shared by a broker's lanes: what the lanes ask at the same moment goes
in one store call.

Lanes mark on a common beat (multiples of ``MARK_SPAN_MS`` on the send clock,
broker/lane.py), so at a steady flow every busy biz type asks at the same instants;
asked one by one, each lane's mark would be a store call of its own, about ten a
second per busy biz type (bench/batching_bench.py: 500 jobs/s over 4 biz types cost
0.084 marks per fired job, one biz type 0.022). `MarkWriter.mark` joins what is asked
within a few turns of the event loop (in a broker, also within 2 ms) into one
`start_sending` under one send token, and answers each lane with its own jobs. Two
asks that name the same job never share a call: the store answers by job key.

The call is retried for up to ``give_up_after_s`` (a lost reply is answered by the
same token again); past that, every lane in it gets the error and hands its
messages back.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

from broker.storecalls import retried
from timer_service.clock import Clock
from timer_service.constants import TASK_STOP_TIMEOUT_S
from timer_service.dispatch import SendRef, new_send_token
from timer_service.errors import StaleEpoch
from timer_service.metrics import Metrics
from timer_service.model import Job, job_key
from timer_service.runtime import cancel_and_wait
from timer_service.store.ports.outcomes import OutcomesPort

GATHER_TURNS = 3  # event-loop turns the first ask waits for the others of its moment
# ... and, in a broker, this long: lanes wake for the same beat up to a millisecond or
# so apart (each computed its wait at its own moment). A mark goes out at least 80 ms
# before its first send (CHECK_AHEAD_MS), so this costs no lateness.
BROKER_GATHER_S = 0.002
GIVE_UP_AFTER_S = 10.0  # a mark's store call retried this long; then its lanes hand back


@dataclass(slots=True)
class _Ask:
    refs: list[SendRef]
    keys: set[str]
    answer: asyncio.Future[dict[str, Job]]


class MarkWriter:
    def __init__(
        self,
        outcomes: OutcomesPort,
        metrics: Metrics,
        clock: Clock,
        broker_id: str,
        give_up_after_s: float = GIVE_UP_AFTER_S,
        gather_s: float = 0.0,
    ) -> None:
        self._outcomes = outcomes
        self._metrics = metrics
        self._clock = clock
        self._broker_id = broker_id
        self._give_up_after_s = give_up_after_s
        self._gather_s = gather_s
        self._asks: list[_Ask] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._gathering = False

    async def mark(self, refs: Sequence[SendRef]) -> dict[str, Job]:
        """`start_sending` of these messages' jobs: those now marked as being sent, by
        job key (the others are not to be sent). Raises what the store call raised
        once it gave up."""
        keys = {job_key(r.biz_type, r.job_id) for r in refs}
        ask = _Ask(list(refs), keys, asyncio.get_running_loop().create_future())
        self._asks.append(ask)
        if not self._gathering:
            self._gathering = True
            task = asyncio.create_task(self._gather(), name="broker-marks")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return await ask.answer

    async def stop(self) -> None:
        await cancel_and_wait(list(self._tasks), TASK_STOP_TIMEOUT_S, "marks", self._clock)

    async def _gather(self) -> None:
        if self._gather_s:
            await self._clock.sleep(self._gather_s)
        for _ in range(GATHER_TURNS):
            await asyncio.sleep(0)
        self._gathering = False
        asks, self._asks = self._asks, []
        calls: list[list[_Ask]] = []
        for ask in asks:
            call = next((c for c in calls if not any(ask.keys & a.keys for a in c)), None)
            if call is None:
                calls.append([ask])
            else:
                call.append(ask)
        await asyncio.gather(*(self._call(call) for call in calls))

    async def _call(self, asks: list[_Ask]) -> None:
        asks = [a for a in asks if not a.answer.done()]  # a lane closed meanwhile
        if not asks:
            return
        refs = [ref for a in asks for ref in a.refs]
        token = new_send_token(self._broker_id)
        try:
            jobs = await retried(
                "start_sending",
                lambda: self._outcomes.start_sending(refs, token, self._clock.now_ms()),
                self._metrics,
                self._clock,
                self._give_up_after_s,
                final=(StaleEpoch,),
            )
        except StaleEpoch as exc:
            # Nothing was marked: the lanes of those biz types lost their stream and
            # hear so; the others' asks go again, without them.
            lost = [a for a in asks if any(r.biz_type in exc.biz_types for r in a.refs)]
            for a in lost:
                if not a.answer.done():
                    a.answer.set_exception(exc)
            rest = [a for a in asks if a not in lost]
            if rest:
                await self._call(rest)
            return
        except Exception as exc:
            for a in asks:
                if not a.answer.done():
                    a.answer.set_exception(exc)
            return
        for a in asks:
            if not a.answer.done():
                a.answer.set_result({k: job for k in a.keys if (job := jobs.get(k)) is not None})
