"""The businesses' endpoints: a `Sender` in place of the broker's HTTP client, which
records every callback and answers as a seeded plan says.

An answer depends only on the run's seed, the job and the attempt number (not on the
order callbacks arrive in): 2xx, 5xx, 429 with Retry-After, a permanent 4xx, or no
answer until the broker's timeout.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass

from broker.callback import CallbackRequest, Response
from broker.sender import Sender
from timer_service.callback_targets import TargetPolicy
from timer_service.clock import Clock

RETRY_AFTER_S = 2
HANG_S = 3600.0


@dataclass
class Callback:
    biz_type: str
    job_id: str
    attempt: int
    sent_ms: int  # on the service's (true) virtual clock
    answered_ms: int | None  # None: hung until the broker gave up
    status: int | None
    broker: str

    @property
    def identity(self) -> tuple[str, str]:
        return (self.biz_type, self.job_id)


class Endpoints:
    """Every endpoint of the run: one log of callbacks, one plan of answers."""

    def __init__(
        self,
        seed: int,
        clock: Clock,
        *,
        failing: float = 0.25,
        dying: dict[str, float] | None = None,
    ) -> None:
        self.seed = seed
        self.clock = clock  # the true one, whatever a broker's host clock says
        self.failing = failing  # share of attempts that do not answer 2xx
        # Biz type prefix -> share of its jobs whose first attempt answers 400 (dead at
        # once): jobs for the workload to replay.
        self.dying = dying or {}
        self.callbacks: list[Callback] = []

    def answer(self, biz_type: str, job_id: str, attempt: int) -> int | None:
        rng = random.Random(f"{self.seed}/{biz_type}/{job_id}/{attempt}")
        dying = next((p for prefix, p in self.dying.items() if biz_type.startswith(prefix)), 0)
        if attempt == 1 and dying and rng.random() < dying:
            return 400
        if attempt >= 4 or rng.random() >= self.failing:
            return 200
        return rng.choice((500, 503, 429, 429, 400, None))

    def client(self, broker: str) -> EndpointFactory:
        return EndpointFactory(self, broker)


class EndpointFactory:
    def __init__(self, endpoints: Endpoints, broker: str) -> None:
        self.endpoints = endpoints
        self.broker = broker

    def __call__(self, clock: Clock, policy: TargetPolicy) -> Sender:
        return SimSender(self.endpoints, self.broker, clock, policy)


class SimSender(Sender):
    def __init__(
        self, endpoints: Endpoints, broker: str, clock: Clock, policy: TargetPolicy
    ) -> None:
        super().__init__(clock, policy)
        self._endpoints = endpoints
        self._broker = broker

    async def start(self) -> None:
        pass

    async def close(self) -> None:
        pass

    @property
    def is_open(self) -> bool:
        return True

    async def post(self, url: str, request: CallbackRequest, timeout_s: float) -> Response:
        body = json.loads(request.body)
        endpoints = self._endpoints
        status = endpoints.answer(body["biz_type"], body["job_id"], body["attempt"])
        call = Callback(
            body["biz_type"],
            body["job_id"],
            body["attempt"],
            endpoints.clock.now_ms(),
            None,
            status,
            self._broker,
        )
        endpoints.callbacks.append(call)
        if status is None:
            try:
                await self._clock.wait_for(self._clock.sleep(HANG_S), timeout_s)
            except TimeoutError:
                return Response(None, error="timeout")
        call.answered_ms = endpoints.clock.now_ms()
        # A small body, so that the runs write and read the attempts' answers too.
        answer = (("Content-Type", "text/plain"),)
        said = f"attempt {body['attempt']}: {status}".encode()
        if status == 429:
            return Response(429, retry_after=str(RETRY_AFTER_S), headers=answer, body=said)
        return Response(status, headers=answer, body=said)
