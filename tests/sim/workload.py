"""What the businesses ask of the service during a run, drawn from the seed: creates
(single, batch, and identical repeats, as a client's safe retry), cancels close to the
due moment, reschedules, replays of dead jobs, a biz type paused and resumed, biz
types deleted while creates race the delete; with `bursts`, herds of `alerts` jobs that
spend its whole bucket at once.

Each business is a task of its own in the "world" process, so that its requests
interleave with the service's work and with each other.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

from tests.sim.cluster import Cluster

# Biz types whose limits never change in a run: the checker holds their callbacks to
# the rate limit. `coupons` is paused and resumed.
BIZ_TYPES: dict[str, dict[str, Any]] = {
    "orders": {"rate_limit_per_s": 4.0, "burst": 3},
    "coupons": {"rate_limit_per_s": None, "burst": 1},
}
# With `bursts` only (simulation.Options): a bucket that takes far longer to refill
# (burst / rate = 6 s) than a broker takes to restart or hand over, fed herds of up to
# a burst, so that a second burst after a restart breaks the bound (issue 30, break 3).
BURSTY = "alerts"
BURSTY_LIMITS: dict[str, Any] = {"rate_limit_per_s": 1.0, "burst": 6}
BURSTY_EVERY_S = (3.0, 7.0)
BURSTY_HERD = (3, 6)  # jobs: under the rate on average, a whole burst now and then
BURSTY_DUE_IN_MS = (0, 1500, 3000)
RETRY = {"max_attempts": 5, "initial_backoff_ms": 500, "max_backoff_ms": 2000, "multiplier": 2}
TIMEOUT_MS = 1000
HERD = 15
# Each round of `_deletes` puts a new biz type of this prefix, then deletes it while
# creates of its jobs race the delete; once deleted it stays so.
RACED = "promo-"


def limits(bursts: bool) -> dict[str, dict[str, Any]]:
    """The biz types of a run, with their limits."""
    return {**BIZ_TYPES, BURSTY: BURSTY_LIMITS} if bursts else BIZ_TYPES


def biz_body(biz_type: str) -> dict[str, Any]:
    limits = limits_of(biz_type)
    return {
        "callback_url": f"http://{biz_type}.example/cb",
        "rate_limit_per_s": limits["rate_limit_per_s"],
        "burst": limits["burst"],
        "timeout_ms": TIMEOUT_MS,
        "retry": RETRY,
    }


def limits_of(biz_type: str) -> dict[str, Any]:
    """A biz type's limits; a raced one (`RACED`) has none."""
    return limits(True).get(biz_type, {"rate_limit_per_s": None, "burst": 1})


class Workload:
    def __init__(
        self, cluster: Cluster, seed: int, *, duration_ms: int, jobs: int, bursts: bool = False
    ) -> None:
        self.cluster = cluster
        self.rng = random.Random(f"workload/{seed}")
        # Its own draws: a run without bursts draws as it did before they existed.
        self.bursts = random.Random(f"bursts/{seed}") if bursts else None
        self.duration_ms = duration_ms
        self.jobs = jobs
        self.created: dict[tuple[str, str], dict[str, Any]] = {}  # identity -> create body
        self.raced: dict[tuple[str, str], dict[str, Any]] = {}  # the racing creates' jobs
        # The deletes draw from a generator and name jobs of their own, so that adding
        # them left the other requests of a seed as they were.
        self._deleting = random.Random(f"deletes/{seed}")
        self._raced_ids = 0
        self._ids = 0

    async def setup(self) -> None:
        for biz_type in limits(self.bursts is not None):
            while (
                await self.cluster.call("PUT", f"/v1/biz-types/{biz_type}", biz_body(biz_type))
            ).status not in (200, 201):
                await self.cluster.clock.sleep(0.5)

    async def run(self) -> None:
        tasks = [asyncio.create_task(self._client(i)) for i in range(3)]
        tasks.append(asyncio.create_task(self._pauses()))
        tasks.append(asyncio.create_task(self._deletes()))
        if self.bursts is not None:
            tasks.append(asyncio.create_task(self._bursts(self.bursts)))
        await asyncio.gather(*tasks)

    def _new_job(self) -> dict[str, Any]:
        self._ids += 1
        biz_type = self.rng.choice(sorted(BIZ_TYPES))
        due_at = self.cluster.clock.now_ms() + self.rng.choice((0, 50, 500, 2000, 5000, 12_000))
        return {
            "biz_type": biz_type,
            "job_id": f"j{self._ids}",
            "due_at": due_at,
            "payload": self._ids,
        }

    async def _client(self, n: int) -> None:
        clock = self.cluster.clock
        end_ms = clock.now_ms() + self.duration_ms
        share = self.jobs // 3
        made = 0
        while clock.now_ms() < end_ms and made < share:
            await clock.sleep(self.rng.uniform(0, 2 * self.duration_ms / max(share, 1)) / 1000)
            roll = self.rng.random()
            if roll < 0.45:
                made += await self._create()
            elif roll < 0.56:
                made += await self._batch()
            elif roll < 0.6:
                made += await self._herd()
            elif roll < 0.7:
                await self._repeat()
            elif roll < 0.82:
                await self._cancel()
            elif roll < 0.92:
                await self._reschedule()
            else:
                await self._replay()

    async def _create(self) -> int:
        body = self._new_job()
        call = await self.cluster.call("POST", "/v1/jobs", body)
        if call.status in (200, 201):
            self.created[(body["biz_type"], body["job_id"])] = body
        return 1

    async def _batch(self) -> int:
        return await self._post_batch([self._new_job() for _ in range(self.rng.randint(2, 5))])

    async def _herd(self) -> int:
        """Many `orders` jobs due at one moment: the rate limit binds for seconds, across
        whatever crash or handover the faults bring meanwhile."""
        due_at = self.cluster.clock.now_ms() + self.rng.choice((0, 1000, 3000))
        jobs = []
        for _ in range(HERD):
            self._ids += 1
            jobs.append({"biz_type": "orders", "job_id": f"j{self._ids}", "due_at": due_at})
        return await self._post_batch(jobs)

    async def _bursts(self, rng: random.Random) -> None:
        """Every few seconds, a herd of `alerts` jobs due at one moment: a whole burst
        now and then, which the owner spends at once and holds nothing after."""
        clock = self.cluster.clock
        end_ms = clock.now_ms() + self.duration_ms
        while clock.now_ms() < end_ms:
            await clock.sleep(rng.uniform(*BURSTY_EVERY_S))
            due_at = clock.now_ms() + rng.choice(BURSTY_DUE_IN_MS)
            jobs = []
            for _ in range(rng.randint(*BURSTY_HERD)):
                self._ids += 1
                jobs.append({"biz_type": BURSTY, "job_id": f"a{self._ids}", "due_at": due_at})
            await self._post_batch(jobs)

    async def _post_batch(self, jobs: list[dict[str, Any]]) -> int:
        call = await self.cluster.call("POST", "/v1/jobs:batch", {"jobs": jobs})
        if call.status == 200:
            for body, result in zip(jobs, call.answer["results"], strict=True):
                if result["status"] in (200, 201):
                    self.created[(body["biz_type"], body["job_id"])] = body
        return len(jobs)

    async def _repeat(self) -> None:
        if self.created:
            body = self.created[self.rng.choice(sorted(self.created))]
            await self.cluster.call("POST", "/v1/jobs", body)

    def _near_due(self) -> tuple[str, str] | None:
        now = self.cluster.clock.now_ms()
        soon = sorted(i for i, b in self.created.items() if 0 <= b["due_at"] - now < 1500)
        if soon:
            return self.rng.choice(soon)
        return self.rng.choice(sorted(self.created)) if self.created else None

    async def _cancel(self) -> None:
        identity = self._near_due()
        if identity is not None:
            await self.cluster.call("DELETE", "/v1/jobs/{}/{}".format(*identity))

    async def _reschedule(self) -> None:
        identity = self._near_due()
        if identity is None:
            return
        due_at = self.cluster.clock.now_ms() + self.rng.choice((0, 300, 3000))
        call = await self.cluster.call(
            "PATCH", "/v1/jobs/{}/{}".format(*identity), {"due_at": due_at}
        )
        if call.status == 200:
            self.created[identity] = {**self.created[identity], "due_at": due_at}

    async def _replay(self) -> None:
        if self.created:
            identity = self.rng.choice(sorted(self.created))
            await self.cluster.call("POST", "/v1/jobs/{}/{}/replay".format(*identity))

    async def _pauses(self) -> None:
        """`coupons` paused for a while now and then; its resume is retried until it
        is answered, so that it ends resumed and its jobs can settle."""
        clock = self.cluster.clock
        end_ms = clock.now_ms() + self.duration_ms
        while clock.now_ms() < end_ms:
            await clock.sleep(self.rng.uniform(3, 10))
            await self.cluster.call("PATCH", "/v1/biz-types/coupons", {"paused": True})
            await clock.sleep(self.rng.uniform(1, 4))
            while (
                await self.cluster.call("PATCH", "/v1/biz-types/coupons", {"paused": False})
            ).status != 200:
                await clock.sleep(0.5)

    async def _deletes(self) -> None:
        """Rounds of: put a new biz type, give it a job or two, then delete it while
        creates of its jobs and replays of them race the delete (each a task of its
        own); a delete refused (409: jobs still pending) is tried again a few times as
        they settle; then a replay of its dead jobs. A biz type deleted
        stays deleted: a job accepted of it and left pending would be republished for
        ever, which the checker looks for."""
        clock, rng = self.cluster.clock, self._deleting
        end_ms = clock.now_ms() + self.duration_ms
        round_no = 0
        while clock.now_ms() < end_ms:
            await clock.sleep(rng.uniform(1, 6))
            round_no += 1
            biz_type = f"{RACED}{round_no}"
            put = await self.cluster.call("PUT", f"/v1/biz-types/{biz_type}", biz_body(biz_type))
            if put.status not in (200, 201):
                continue
            for _ in range(rng.randint(0, 2)):
                await self._create_raced(biz_type, 0.0)
            for _ in range(rng.randint(1, 3)):
                await clock.sleep(rng.uniform(2, 8))  # what it has settles first
                # At one virtual moment: the seeded loop interleaves their commands.
                racers = [
                    self._create_raced(biz_type, rng.choice((0, 0, 0.001)))
                    for _ in range(rng.randint(1, 3))
                ]
                racers += [self._replay_raced(biz_type) for _ in range(rng.randint(0, 2))]
                delete = self._delete_biz_type(biz_type, rng.choice((0, 0.001)))
                results = await asyncio.gather(delete, *racers)
                if results[0] == 204:
                    break
            # Its dead jobs replayed, deleted or not: pending for ever, if let.
            await clock.sleep(rng.uniform(0, 2))
            listed = await self.cluster.call("GET", f"/v1/jobs?biz_type={biz_type}&state=dead")
            if listed.status == 200:
                for job in listed.answer["items"]:
                    await self.cluster.call(
                        "POST", "/v1/jobs/{}/{}/replay".format(biz_type, job["job_id"])
                    )

    async def _delete_biz_type(self, biz_type: str, after_s: float) -> int:
        await self.cluster.clock.sleep(after_s)
        return (await self.cluster.call("DELETE", f"/v1/biz-types/{biz_type}")).status

    async def _replay_raced(self, biz_type: str) -> int:
        mine = sorted(i for i in self.raced if i[0] == biz_type)
        if not mine:
            return 0
        identity = self._deleting.choice(mine)
        return (await self.cluster.call("POST", "/v1/jobs/{}/{}/replay".format(*identity))).status

    async def _create_raced(self, biz_type: str, after_s: float) -> int:
        await self.cluster.clock.sleep(after_s)
        self._raced_ids += 1
        due_at = self.cluster.clock.now_ms() + self._deleting.choice((0, 300, 2000, 5000))
        body = {"biz_type": biz_type, "job_id": f"r{self._raced_ids}", "due_at": due_at}
        call = await self.cluster.call("POST", "/v1/jobs", body)
        if call.status in (200, 201):
            self.raced[(biz_type, body["job_id"])] = body
        return call.status
