"""The in-memory store's data, shared by its ports, and how a `Change` is applied.

Every port method runs without awaiting in the middle, so each call is atomic
on the event loop, as one MongoDB round trip is for one document.
"""

from __future__ import annotations

import asyncio
import bisect
import builtins
from dataclasses import dataclass, field

from timer_service.calendar import pending_moves
from timer_service.clock import Clock
from timer_service.dispatch import BrokerBeat, SendRef
from timer_service.errors import StoreUnavailable
from timer_service.jobs import Change
from timer_service.model import BizType, Job, JobState, job_key
from timer_service.partitions import partition_of, second_of_slot, slot
from timer_service.schedules import Schedule


@dataclass(slots=True)
class Lease:
    holder: str
    token: int
    expires_at: int


@dataclass(slots=True)
class MemoryState:
    buckets: int
    partitions: int = 1
    jobs: dict[str, Job] = field(default_factory=dict)
    # Each job's home bucket, as the MongoDB store's: that of its first second, for
    # life (a job never moves); the scan reads only the buckets an entry names.
    home: dict[str, int] = field(default_factory=dict)
    second_of_job: dict[str, int] = field(default_factory=dict)
    jobs_in_second: dict[int, dict[str, None]] = field(default_factory=dict)
    # Each second's pending jobs as sorted (next_attempt_at, key): what MongoDB's claim
    # index gives, so that a claim of K jobs from a herd's second costs about K, not the
    # whole second (100 claims of 1,000 from a 100,000-job second scanned 10M jobs).
    pending_in_second: dict[int, list[tuple[int, str]]] = field(default_factory=dict)
    # The non-empty seconds index, by slot (partition and second, timer_service/partitions.py).
    versions: dict[int, str] = field(default_factory=dict)
    named: dict[int, set[int]] = field(default_factory=dict)  # the buckets each entry names
    stamps: dict[int, int] = field(default_factory=dict)  # fence that last loaded a slot
    writes: int = 0  # makes every entry version unique
    sorted_seconds: list[int] = field(default_factory=list)  # the slots of `versions`
    # The load calendar's counts of pending jobs, by slot as the index (and by biz type
    # and slot): kept in step by `_store`, the one place a job is written.
    due: dict[int, int] = field(default_factory=dict)
    due_by_biz: dict[str, dict[int, int]] = field(default_factory=dict)
    dispatched: dict[str, None] = field(default_factory=dict)
    rounds: dict[str, tuple[int, int]] = field(default_factory=dict)  # open: (opened at, fence)
    biz: dict[str, BizType] = field(default_factory=dict)
    # biz type -> (taker, left_at, tokens) of its token bucket (BrokersPort.take_bucket)
    rate_states: dict[str, tuple[str, int | None, float | None]] = field(default_factory=dict)
    leases: dict[str, Lease] = field(default_factory=dict)
    pointers: dict[str, tuple[int, int]] = field(default_factory=dict)
    fence_counter: int = 0
    brokers: dict[str, BrokerBeat] = field(default_factory=dict)
    epochs: dict[str, int] = field(default_factory=dict)  # each biz type's ownership epoch
    schedules: dict[str, Schedule] = field(default_factory=dict)  # by schedule key
    # The store's own clock, which writes report back (a test may skew it against the
    # callers'); None: a caller's clock stands in for it.
    clock: Clock | None = None
    watchers: list[asyncio.Queue[int]] = field(default_factory=list)
    closed: bool = False
    # For fault tests: the next `torn` writes of a job into a second stop after the job
    # and raise, their index bump lost, as a process killed between the two writes
    # leaves them on MongoDB (two statements there, one call here).
    torn: int = 0

    def job(self, biz_type: str, job_id: str) -> Job | None:
        return self.jobs.get(job_key(biz_type, job_id))

    def job_at(self, ref: SendRef) -> Job | None:
        """The job a message names, if it is in the bucket the message says (as on
        MongoDB, where that is the only place a write by message looks)."""
        key = job_key(ref.biz_type, ref.job_id)
        named = ref.second % self.buckets if ref.bucket is None else ref.bucket
        return self.jobs.get(key) if self.home.get(key) == named else None

    def apply(self, job: Job, change: Change) -> Job | None:
        """Apply `change` if its guard holds; the changed job, or None."""
        if not change.guard.holds(job):
            return None
        changed = change.apply(job)
        second = change.next_second
        if second is None:
            self.set(changed)
        else:
            self.put(changed, second)
        return changed

    def set(self, job: Job) -> None:
        """Replace a job in place (same second)."""
        self._store(job, self.second_of_job[job.key])

    def _store(self, job: Job, second: int) -> None:
        key = job.key
        old = self.jobs.get(key)
        if old is not None:
            self._unindex_pending(old, self.second_of_job[key])
        for (at_s, biz), n in pending_moves(old, job).items():
            self.count(self.slot(key, at_s), biz, n)
        self.jobs[key] = job
        self.second_of_job[key] = second
        if job.state == JobState.DISPATCHED:
            self.dispatched[key] = None
        else:
            self.dispatched.pop(key, None)
        if job.state == JobState.PENDING and job.next_attempt_at is not None:
            bisect.insort(self.pending_in_second.setdefault(second, []), (job.next_attempt_at, key))

    def count(self, at: int, biz_type: str, n: int) -> None:
        for counts in (self.due, self.due_by_biz.setdefault(biz_type, {})):
            left = counts.get(at, 0) + n
            if left:
                counts[at] = left
            else:
                counts.pop(at, None)

    def _unindex_pending(self, job: Job, second: int) -> None:
        if job.state != JobState.PENDING or job.next_attempt_at is None:
            return
        entries = self.pending_in_second.get(second, [])
        entry = (job.next_attempt_at, job.key)
        i = bisect.bisect_left(entries, entry)
        if i < len(entries) and entries[i] == entry:
            del entries[i]
            if not entries:
                del self.pending_in_second[second]

    def put(self, job: Job, second: int) -> None:
        """Write a job into `second`, then bump that second's entry (the order matters)."""
        key = job.key
        old_second = self.second_of_job.get(key)
        if old_second is not None and old_second != second:
            jobs = self.jobs_in_second[old_second]
            jobs.pop(key, None)
            if not jobs:
                del self.jobs_in_second[old_second]
        home = self.home.setdefault(key, second % self.buckets)
        self._store(job, second)
        self.jobs_in_second.setdefault(second, {})[key] = None
        if self.torn > 0:
            self.torn -= 1
            raise StoreUnavailable(f"torn write: job {key} written, its index bump lost")
        self.bump(self.slot(key, second), home)

    def drop_entry(self, at: int) -> None:
        del self.versions[at]
        self.named.pop(at, None)
        self.stamps.pop(at, None)
        i = bisect.bisect_left(self.sorted_seconds, at)
        del self.sorted_seconds[i]

    def buckets_named(self, slots: list[int], second: int) -> builtins.set[int]:
        """The buckets the entries at these slots of `second` name (none: its own)."""
        named = {b for at in slots if at in self.versions for b in self.named.get(at, ())}
        return named or {second % self.buckets}

    def partition(self, key: str) -> int:
        return partition_of(key, self.partitions)

    def slot(self, key: str, second: int) -> int:
        return slot(self.partition(key), second)

    def bump(self, at: int, bucket: int | None = None) -> None:
        """Renew the index entry of slot `at` (creating it), naming `bucket` (default:
        the bucket of its second)."""
        if at not in self.versions:
            bisect.insort(self.sorted_seconds, at)
        own = second_of_slot(at) % self.buckets
        self.named.setdefault(at, set()).add(own if bucket is None else bucket)
        self.writes += 1
        self.versions[at] = f"{self.writes:016x}"
        for queue in self.watchers:
            queue.put_nowait(at)
