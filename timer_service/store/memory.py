"""In-memory job store: the same semantics as the MongoDB adapter, for `dev`
without a database, unit tests and benchmarks. Ships in the package on purpose
(STYLE.md: the fake lives beside the real adapter and one contract suite keeps
it honest). Every method runs without awaiting in the middle, so each call is
atomic on the event loop, as one MongoDB round trip is for one document.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
from collections import Counter
from collections.abc import AsyncIterator, Collection, Sequence
from dataclasses import dataclass

from timer_service.dispatch import Claimed, Outcome, OutcomeKind, SecondEntry, SendRef
from timer_service.errors import Conflict, NotFound
from timer_service.model import (
    ACTIVE_STATES,
    BizType,
    Job,
    JobState,
    job_key,
    same_payload,
    second_of,
)
from timer_service.store.base import CreateResult, CreateStatus, NewJob


@dataclass(slots=True)
class _Lease:
    holder: str
    token: int
    expires_at: int


WATCH_IDLE_S = 1.0  # how often a watch with nothing to say checks its stop event


class MemoryStore:
    def __init__(self, buckets: int = 60, retention_ms: int = 30 * 86_400_000) -> None:
        self.buckets = buckets
        self.retention_ms = retention_ms
        self.ops: Counter[str] = Counter()  # calls by method, for tests and benchmarks
        self._jobs: dict[str, Job] = {}
        self._second_of_job: dict[str, int] = {}
        self._jobs_in_second: dict[int, dict[str, None]] = {}
        self._versions: dict[int, int] = {}  # the non-empty seconds index
        self._sorted_seconds: list[int] = []
        self._dispatched: dict[str, None] = {}
        self._biz: dict[str, BizType] = {}
        self._leases: dict[str, _Lease] = {}
        self._pointers: dict[str, tuple[int, int]] = {}
        self._brokers: dict[str, tuple[frozenset[str], int]] = {}
        self._watchers: list[asyncio.Queue[int]] = []
        self.closed = False

    # -- lifecycle ---------------------------------------------------------
    async def setup(self) -> None:
        self.ops["setup"] += 1

    async def close(self) -> None:
        self.closed = True

    async def ping(self) -> None:
        self.ops["ping"] += 1
        if self.closed:
            raise ConnectionError("store is closed")

    # -- biz types -----------------------------------------------------------
    async def put_biz_type(self, biz: BizType) -> bool:
        self.ops["put_biz_type"] += 1
        old = self._biz.get(biz.biz_type)
        if old is not None:
            biz = _replace_biz(biz, created_at=old.created_at)
        self._biz[biz.biz_type] = biz
        return old is None

    async def get_biz_type(self, name: str) -> BizType | None:
        self.ops["get_biz_type"] += 1
        return self._biz.get(name)

    async def get_biz_types(self, names: Sequence[str]) -> dict[str, BizType]:
        self.ops["get_biz_types"] += 1
        return {n: self._biz[n] for n in set(names) if n in self._biz}

    async def list_biz_types(self) -> list[BizType]:
        self.ops["list_biz_types"] += 1
        return [self._biz[k] for k in sorted(self._biz)]

    async def delete_biz_type(self, name: str) -> bool:
        self.ops["delete_biz_type"] += 1
        if name not in self._biz:
            return False
        if any(j.biz_type == name and j.state in ACTIVE_STATES for j in self._jobs.values()):
            raise Conflict(f"biz type {name!r} still has pending or dispatched jobs")
        del self._biz[name]
        return True

    # -- jobs: API -------------------------------------------------------------
    async def create_jobs(self, jobs: Sequence[NewJob], now_ms: int) -> list[CreateResult]:
        self.ops["create_jobs"] += 1
        results = []
        for new in jobs:
            key = job_key(new.biz_type, new.job_id)
            existing = self._jobs.get(key)
            if existing is not None:
                results.append(CreateResult(_compare(existing, new), existing))
                continue
            job = Job(
                biz_type=new.biz_type,
                job_id=new.job_id,
                due_at=new.due_at,
                payload_json=new.payload_json,
                state=JobState.PENDING,
                attempts=0,
                next_attempt_at=new.due_at,
                created_at=now_ms,
                updated_at=now_ms,
            )
            self._put(job, second_of(new.due_at))
            results.append(CreateResult(CreateStatus.CREATED, job))
        return results

    async def get_job(self, biz_type: str, job_id: str) -> Job | None:
        self.ops["get_job"] += 1
        return self._jobs.get(job_key(biz_type, job_id))

    async def cancel_job(self, biz_type: str, job_id: str, now_ms: int) -> Job:
        self.ops["cancel_job"] += 1
        job = self._existing(biz_type, job_id)
        if job.state == JobState.CANCELLED:
            return job
        if job.state not in ACTIVE_STATES:
            raise Conflict(f"job is {job.state.value}")
        cancelled = job.evolve(
            state=JobState.CANCELLED, next_attempt_at=None, claim=None, updated_at=now_ms
        )
        self._set(cancelled)
        return cancelled

    async def reschedule_job(
        self, biz_type: str, job_id: str, due_at: int, payload_json: str | None, now_ms: int
    ) -> Job:
        self.ops["reschedule_job"] += 1
        job = self._existing(biz_type, job_id)
        if job.state != JobState.PENDING:
            raise Conflict(f"only a pending job can be rescheduled; this one is {job.state.value}")
        moved = job.evolve(
            due_at=due_at,
            next_attempt_at=due_at,
            payload_json=job.payload_json if payload_json is None else payload_json,
            updated_at=now_ms,
        )
        self._put(moved, second_of(due_at))
        return moved

    async def replay_job(self, biz_type: str, job_id: str, now_ms: int) -> Job:
        self.ops["replay_job"] += 1
        job = self._existing(biz_type, job_id)
        if job.state != JobState.DEAD:
            raise Conflict(f"only a dead job can be replayed; this one is {job.state.value}")
        replayed = job.evolve(
            state=JobState.PENDING,
            next_attempt_at=now_ms,
            budget_base=job.attempts,
            claim=None,
            updated_at=now_ms,
        )
        self._put(replayed, second_of(now_ms))
        return replayed

    async def list_jobs(
        self, biz_type: str | None, state: JobState | None, limit: int, cursor: str | None
    ) -> tuple[list[Job], str | None]:
        self.ops["list_jobs"] += 1
        keys = sorted(self._jobs)
        start = bisect.bisect_right(keys, cursor) if cursor else 0
        if biz_type is not None:
            start = max(start, bisect.bisect_left(keys, biz_type + "/"))
        items: list[Job] = []
        last: str | None = None
        for key in keys[start:]:
            job = self._jobs[key]
            if biz_type is not None and job.biz_type != biz_type:
                break
            last = key
            if state is None or job.state == state:
                items.append(job)
                if len(items) == limit:
                    break
        more = False
        if last is not None:
            following = bisect.bisect_right(keys, last)
            more = following < len(keys)
            if more and biz_type is not None:
                more = keys[following].startswith(biz_type + "/")
        return items, (last if more and len(items) == limit else None)

    # -- daemon ------------------------------------------------------------------
    async def next_seconds(self, from_s: int, to_s: int, limit: int) -> list[SecondEntry]:
        self.ops["next_seconds"] += 1
        i = bisect.bisect_left(self._sorted_seconds, from_s)
        out = []
        for s in self._sorted_seconds[i : i + limit]:
            if s > to_s:
                break
            out.append(SecondEntry(s, self._versions[s]))
        return out

    async def load_second(self, second: int) -> list[tuple[str, int]]:
        self.ops["load_second"] += 1
        out = []
        for key in self._jobs_in_second.get(second, ()):
            job = self._jobs[key]
            if job.state == JobState.PENDING and job.next_attempt_at is not None:
                out.append((key, job.next_attempt_at))
        return out

    async def claim_due(
        self, second: int, upto_ms: int, claim: str, fence: int, now_ms: int
    ) -> list[Claimed]:
        self.ops["claim_due"] += 1
        claimed = []
        for key in list(self._jobs_in_second.get(second, ())):
            job = self._jobs[key]
            if (
                job.state == JobState.PENDING
                and job.next_attempt_at is not None
                and job.next_attempt_at <= upto_ms
                and job.fence <= fence
            ):
                self._set(
                    job.evolve(
                        state=JobState.DISPATCHED,
                        claim=claim,
                        fence=fence,
                        claimed_at=now_ms,
                        published=False,
                        updated_at=now_ms,
                    )
                )
                claimed.append(_claimed(job, second, claim))
        return claimed

    async def mark_published(self, second: int, claim: str) -> None:
        self.ops["mark_published"] += 1
        for key in self._jobs_in_second.get(second, ()):
            job = self._jobs[key]
            if job.claim == claim and job.state == JobState.DISPATCHED:
                self._jobs[key] = job.evolve(published=True)

    async def release_second(self, entry: SecondEntry) -> bool:
        self.ops["release_second"] += 1
        version = self._versions.get(entry.second)
        if version is None:
            return True
        if version != entry.version:
            return False
        del self._versions[entry.second]
        i = bisect.bisect_left(self._sorted_seconds, entry.second)
        del self._sorted_seconds[i]
        return True

    async def find_stale_dispatched(
        self,
        claimed_before_ms: int,
        limit: int,
        *,
        published: bool | None = None,
        skip_biz_types: Collection[str] = (),
    ) -> list[Job]:
        self.ops["find_stale_dispatched"] += 1
        skip = set(skip_biz_types)
        out = []
        for key in self._dispatched:
            job = self._jobs[key]
            if (
                job.claimed_at is not None
                and job.claimed_at < claimed_before_ms
                and (published is None or job.published == published)
                and job.biz_type not in skip
            ):
                out.append(job)
        out.sort(key=lambda j: j.claimed_at or 0)
        return out[:limit]

    async def count_jobs(self, states: Collection[JobState]) -> dict[tuple[str, JobState], int]:
        self.ops["count_jobs"] += 1
        wanted = set(states)
        counts: Counter[tuple[str, JobState]] = Counter(
            (job.biz_type, job.state) for job in self._jobs.values() if job.state in wanted
        )
        return dict(counts)

    async def reclaim(
        self, jobs: Sequence[Job], claim: str, fence: int, now_ms: int
    ) -> list[Claimed]:
        self.ops["reclaim"] += 1
        out = []
        for old in jobs:
            job = self._jobs.get(old.key)
            if (
                job is None
                or job.state != JobState.DISPATCHED
                or job.claim != old.claim
                or job.fence > fence
                or job.next_attempt_at is None
            ):
                continue
            self._set(job.evolve(claim=claim, fence=fence, claimed_at=now_ms, published=False))
            out.append(_claimed(job, self._second_of_job[job.key], claim))
        return out

    async def watch_seconds(  # type: ignore[override]
        self, stop: asyncio.Event | None = None
    ) -> AsyncIterator[int]:
        queue: asyncio.Queue[int] = asyncio.Queue()
        self._watchers.append(queue)
        stop = stop or asyncio.Event()
        try:
            while not stop.is_set():
                with contextlib.suppress(TimeoutError):
                    yield await asyncio.wait_for(queue.get(), WATCH_IDLE_S)
        finally:
            self._watchers.remove(queue)

    # -- lease and pointer ---------------------------------------------------
    async def acquire_lease(self, name: str, holder: str, ttl_ms: int, now_ms: int) -> int | None:
        self.ops["acquire_lease"] += 1
        lease = self._leases.get(name)
        if lease is not None and lease.holder != holder and lease.expires_at >= now_ms:
            return None
        if lease is None:
            lease = self._leases[name] = _Lease(holder, 1, now_ms + ttl_ms)
        elif lease.holder != holder:
            lease.holder, lease.token = holder, lease.token + 1
        lease.expires_at = now_ms + ttl_ms
        return lease.token

    async def renew_lease(
        self, name: str, holder: str, token: int, ttl_ms: int, now_ms: int
    ) -> bool:
        self.ops["renew_lease"] += 1
        lease = self._leases.get(name)
        if lease is None or lease.holder != holder or lease.token != token:
            return False
        lease.expires_at = now_ms + ttl_ms
        return True

    async def release_lease(self, name: str, holder: str, token: int) -> None:
        self.ops["release_lease"] += 1
        lease = self._leases.get(name)
        if lease is not None and lease.holder == holder and lease.token == token:
            lease.expires_at = 0

    async def load_pointer(self, name: str) -> int | None:
        self.ops["load_pointer"] += 1
        found = self._pointers.get(name)
        return found[0] if found else None

    async def save_pointer(self, name: str, second: int, fence: int) -> bool:
        self.ops["save_pointer"] += 1
        found = self._pointers.get(name)
        if found is not None and found[1] > fence:
            return False
        self._pointers[name] = (second, fence)
        return True

    # -- broker --------------------------------------------------------------------
    async def fetch_for_send(self, refs: Sequence[SendRef]) -> dict[str, Job]:
        self.ops["fetch_for_send"] += 1
        out = {}
        for ref in refs:
            job = self._jobs.get(job_key(ref.biz_type, ref.job_id))
            if job is not None and job.state == JobState.DISPATCHED and job.claim == ref.claim:
                out[job.key] = job
        return out

    async def record_outcomes(self, outcomes: Sequence[Outcome], now_ms: int) -> None:
        self.ops["record_outcomes"] += 1
        for outcome in outcomes:
            key = job_key(outcome.ref.biz_type, outcome.ref.job_id)
            job = self._jobs.get(key)
            if job is None:
                continue
            recorded = job.evolve(
                attempts=job.attempts + 1,
                history=(*job.history, outcome.attempt),
                last_error=outcome.attempt.error,
                updated_at=now_ms,
            )
            if job.state != JobState.DISPATCHED:
                self._jobs[key] = recorded  # cancelled meanwhile: keep the state, keep the record
                continue
            if outcome.kind == OutcomeKind.RETRY:
                assert outcome.next_attempt_at is not None
                pending = recorded.evolve(
                    state=JobState.PENDING, next_attempt_at=outcome.next_attempt_at, claim=None
                )
                self._put(pending, second_of(outcome.next_attempt_at))
            elif outcome.kind == OutcomeKind.DELIVERED:
                self._set(
                    recorded.evolve(
                        state=JobState.DELIVERED,
                        next_attempt_at=None,
                        delivered_at=now_ms,
                        last_error=None,
                        claim=None,
                    )
                )
            else:
                self._set(recorded.evolve(state=JobState.DEAD, next_attempt_at=None, claim=None))

    async def broker_heartbeat(
        self, broker_id: str, holding: Sequence[str], expires_at_ms: int
    ) -> None:
        self.ops["broker_heartbeat"] += 1
        self._brokers[broker_id] = (frozenset(holding), expires_at_ms)

    async def held_biz_types(self, now_ms: int) -> set[str]:
        self.ops["held_biz_types"] += 1
        held: set[str] = set()
        for holding, expires_at in self._brokers.values():
            if expires_at >= now_ms:
                held |= holding
        return held

    async def broker_gone(self, broker_id: str) -> None:
        self._brokers.pop(broker_id, None)

    # -- internals -------------------------------------------------------------------
    def _existing(self, biz_type: str, job_id: str) -> Job:
        job = self._jobs.get(job_key(biz_type, job_id))
        if job is None:
            raise NotFound(f"no job {job_id!r} of biz type {biz_type!r}")
        return job

    def _set(self, job: Job) -> None:
        """Replace a job in place (same second)."""
        self._jobs[job.key] = job
        if job.state == JobState.DISPATCHED:
            self._dispatched[job.key] = None
        else:
            self._dispatched.pop(job.key, None)

    def _put(self, job: Job, second: int) -> None:
        """Write a job into `second`, then bump that second's entry (the order matters)."""
        key = job.key
        old_second = self._second_of_job.get(key)
        if old_second is not None and old_second != second:
            jobs = self._jobs_in_second[old_second]
            jobs.pop(key, None)
            if not jobs:
                del self._jobs_in_second[old_second]
        self._set(job)
        self._second_of_job[key] = second
        self._jobs_in_second.setdefault(second, {})[key] = None
        self._bump(second)

    def _bump(self, second: int) -> None:
        version = self._versions.get(second)
        if version is None:
            bisect.insort(self._sorted_seconds, second)
            self._versions[second] = 1
        else:
            self._versions[second] = version + 1
        for queue in self._watchers:
            queue.put_nowait(second)


def _compare(existing: Job, new: NewJob) -> CreateStatus:
    same_due = not new.compare_due or existing.due_at == new.due_at
    if same_due and same_payload(existing.payload_json, new.payload_json):
        return CreateStatus.EXISTS
    return CreateStatus.CONFLICT


def _claimed(job: Job, second: int, claim: str) -> Claimed:
    assert job.next_attempt_at is not None
    return Claimed(
        biz_type=job.biz_type,
        job_id=job.job_id,
        second=second,
        due_at=job.due_at,
        next_attempt_at=job.next_attempt_at,
        attempt=job.attempts + 1,
        claim=claim,
    )


def _replace_biz(biz: BizType, **changes: object) -> BizType:
    from dataclasses import replace

    return replace(biz, **changes)  # type: ignore[arg-type]
