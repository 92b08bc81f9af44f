"""The promises of the contract, checked over the whole history of a run.

Each check reads only what a business could see (the API's answers, the callbacks
its endpoint received, on the true virtual clock) and, for one live document per
identity, the store's documents at the end. A check returns violations, each with
the job it is about, so that the report shows that job's trace.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from tests.sim.endpoints import RETRY_AFTER_S, Callback
from tests.sim.history import Call, History

Identity = tuple[str, str]
FINAL = ("delivered", "dead")
# A job of a claim whose reply was lost fires within this of its due moment (or of the
# fault): the claim is found by its token at once. Far below the reconcile timeout,
# which is what it waited for before (issue 30, break 8).
LOST_CLAIM_BOUND_MS = 2000
# Another fault this close before a lost claim (or during its bound) may delay its jobs:
# a killed broker's biz types are taken over within 7 s, a daemon's lease within 4 s.
FAULT_MARGIN_MS = 8000
# A freeze this long is a stall: past a broker's heartbeat TTL (6 s) and the daemon's
# 2 s more before it judges it dead (broker/app.py, daemon/holders.py).
STALL_MS = 8_000


@dataclass(frozen=True)
class Violation:
    promise: str
    identity: Identity | None
    detail: str
    biz_type: str | None = None  # a promise about a biz type as a whole (the rate limit)

    def __str__(self) -> str:
        about = "" if self.identity is None else " {}/{}".format(*self.identity)
        return f"[{self.promise}]{about}: {self.detail}"


@dataclass(frozen=True)
class Write:
    """An accepted create or reschedule: the job's due moment from `ended_ms` on (and
    perhaps already from `started_ms`: the write applied somewhere in between)."""

    started_ms: int
    ended_ms: int
    due_at: int
    certain: bool = True  # False: answered 5xx, so it may or may not have applied


def _job_calls(calls: Iterable[Call]) -> Iterable[tuple[Identity, Call, dict[str, Any]]]:
    """Every accepted answer about one job, with the job it answered."""
    for call in calls:
        if call.method == "POST" and call.path == "/v1/jobs:batch" and call.status == 200:
            for result in call.answer["results"]:
                if result["status"] in (200, 201):
                    job = result["job"]
                    yield (job["biz_type"], job["job_id"]), call, job
        elif _about_one_job(call.path) and call.status in (200, 201):
            job = call.answer
            yield (job["biz_type"], job["job_id"]), call, job


def _about_one_job(path: str) -> bool:
    """A create, or a call on one job (not a listing, `/v1/jobs?...`)."""
    return path == "/v1/jobs" or path.startswith("/v1/jobs/")


def _unknown_writes(calls: Iterable[Call]) -> Iterable[tuple[Identity, Call, int]]:
    """Creates and reschedules answered 5xx: applied or not, the client cannot know (a
    reply lost after the store applied it), so the job may fire at what they asked."""
    for call in calls:
        if call.status < 500 or not call.path.startswith("/v1/jobs"):
            continue
        if call.method == "POST" and call.path == "/v1/jobs:batch":
            for job in call.body["jobs"]:
                yield (job["biz_type"], job["job_id"]), call, job["due_at"]
        elif call.method == "POST" and call.path == "/v1/jobs":
            yield (call.body["biz_type"], call.body["job_id"]), call, call.body["due_at"]
        elif call.method == "PATCH":
            biz_type, job_id = call.path.split("/")[-2:]
            yield (biz_type, job_id), call, call.body["due_at"]


def _possible_dues(writes: list[Write], at_ms: int) -> list[int]:
    """The due moments a job may have at `at_ms`: the last certain write's, any answered
    5xx since (applied or not), and any write in flight (it applied somewhere between
    its request and its answer)."""
    done = [w for w in writes if w.ended_ms <= at_ms]
    last = max((i for i, w in enumerate(done) if w.certain), default=-1)
    since = done[max(last, 0) :]
    in_flight = [w.due_at for w in writes if w.started_ms <= at_ms < w.ended_ms]
    return [w.due_at for w in since] + in_flight


class Checker:
    def __init__(self, history: History, rates: dict[str, tuple[float, int]]) -> None:
        self.history = history
        self.rates = rates  # biz type -> (rate per s, burst), for those with a fixed limit
        self.writes: dict[Identity, list[Write]] = defaultdict(list)
        self.cancels: dict[Identity, int] = {}  # the first 200 cancel's answer time
        self.accepted: set[Identity] = set()
        self.replays: dict[Identity, list[Write]] = defaultdict(list)
        for identity, call, job in _job_calls(history.calls):
            if call.method == "POST" and call.path.endswith("/replay"):
                replay = Write(call.started_ms, call.ended_ms, call.started_ms)
                self.writes[identity].append(replay)
                self.replays[identity].append(replay)
            elif call.method in ("POST", "PATCH"):
                self.accepted.add(identity)
                self.writes[identity].append(Write(call.started_ms, call.ended_ms, job["due_at"]))
            elif call.method == "DELETE" and job["state"] == "cancelled":
                self.cancels.setdefault(identity, call.ended_ms)
        for identity, call, due_at in _unknown_writes(history.calls):
            self.writes[identity].append(
                Write(call.started_ms, call.ended_ms, due_at, certain=False)
            )
        for writes in self.writes.values():
            writes.sort(key=lambda w: w.ended_ms)
        self.callbacks: dict[Identity, list[Callback]] = defaultdict(list)
        for cb in history.callbacks:
            self.callbacks[cb.identity].append(cb)

    def during(self, kinds: tuple[str, ...], from_ms: int, to_ms: int) -> bool:
        return any(f.kind in kinds and from_ms <= f.at_ms <= to_ms for f in self.history.faults)

    # -- during the run --------------------------------------------------------------------
    def never_early(self) -> list[Violation]:
        found = []
        for identity, calls in self.callbacks.items():
            writes = self.writes.get(identity, [])
            for cb in calls:
                dues = _possible_dues(writes, cb.sent_ms)
                if not dues:
                    found.append(
                        Violation(
                            "accepted",
                            identity,
                            f"callback of a job never accepted at {cb.sent_ms}",
                        )
                    )
                elif cb.sent_ms < min(dues):
                    found.append(
                        Violation(
                            "never early",
                            identity,
                            f"attempt {cb.attempt} sent {min(dues) - cb.sent_ms} ms early",
                        )
                    )
        return found

    def retries_wait(self) -> list[Violation]:
        """A retry after a 429 waits for its Retry-After."""
        found = []
        for identity, calls in self.callbacks.items():
            for before, after in itertools.pairwise(calls):
                if before.status != 429 or after.attempt != before.attempt + 1:
                    continue
                assert before.answered_ms is not None
                earliest = before.answered_ms + RETRY_AFTER_S * 1000
                moved = [
                    w for w in self.writes.get(identity, []) if w.started_ms >= before.answered_ms
                ]
                if after.sent_ms < earliest and not moved:
                    found.append(
                        Violation(
                            "never early",
                            identity,
                            f"retry {earliest - after.sent_ms} ms before Retry-After",
                        )
                    )
        return found

    def cancelled_stays_cancelled(self) -> list[Violation]:
        found = []
        for identity, cancelled_ms in self.cancels.items():
            late = [cb for cb in self.callbacks.get(identity, []) if cb.sent_ms > cancelled_ms]
            if late:
                found.append(
                    Violation(
                        "cancelled",
                        identity,
                        f"called back at {late[0].sent_ms} after a 200 cancel at {cancelled_ms}",
                    )
                )
        return found

    def no_second_callback(self) -> list[Violation]:
        """A callback after the job's delivery, or a second one of the same attempt, only
        when a process or a connection died in between."""
        deaths = ("crash", "stop", "freeze", "thaw", "queue-lost", "store")
        found = []
        for identity, calls in self.callbacks.items():
            for i, cb in enumerate(calls):
                first = next(
                    (c for c in calls[:i] if c.attempt == cb.attempt or c.status == 200), None
                )
                if first is None or self.during(deaths, first.sent_ms, cb.sent_ms):
                    continue
                replays = self.replays.get(identity, [])
                if not any(
                    r.started_ms <= cb.sent_ms and r.ended_ms >= first.sent_ms for r in replays
                ):
                    found.append(
                        Violation(
                            "at most once without a death",
                            identity,
                            f"attempt {cb.attempt} at {cb.sent_ms} after attempt {first.attempt} "
                            f"({first.status}) at {first.sent_ms}, no fault between",
                        )
                    )
        return found

    def stalls(self) -> list[tuple[str, int, int]]:
        """(process, frozen at, thawed at) of every freeze longer than a broker's
        heartbeat TTL and the daemon's judgement of it dead: its work went to others."""
        frozen: dict[str, int] = {}
        found = []
        for fault in self.history.faults:
            if fault.kind == "freeze":
                frozen[fault.process] = fault.at_ms
            elif fault.kind == "thaw" and fault.process in frozen:
                at = frozen.pop(fault.process)
                if fault.at_ms - at > STALL_MS:
                    found.append((fault.process, at, fault.at_ms))
        return found

    def stale_owner(self) -> list[Violation]:
        """A broker that comes back from a stall sends no callback for work it no longer
        owns: nothing that was called back (the same attempt, or a 2xx) since it froze."""
        found = []
        for process, frozen_ms, thawed_ms in self.stalls():
            for identity, calls in self.callbacks.items():
                for i, cb in enumerate(calls):
                    if cb.broker != process or cb.sent_ms < thawed_ms:
                        continue
                    first = next(
                        (
                            c
                            for c in calls[:i]
                            if (c.attempt == cb.attempt or c.status == 200)
                            and c.sent_ms >= frozen_ms
                        ),
                        None,
                    )
                    if first is not None:
                        found.append(
                            Violation(
                                "stalled broker sends nothing it lost",
                                identity,
                                f"attempt {cb.attempt} by {process} at {cb.sent_ms}, frozen "
                                f"{frozen_ms}-{thawed_ms}; {first.broker} sent attempt "
                                f"{first.attempt} at {first.sent_ms}",
                            )
                        )
        return found

    def rate_limits(self) -> list[Violation]:
        """Over any interval of length W: at most burst + rate x W callbacks, whichever
        brokers sent them (across crashes, stops, restarts and handovers)."""
        found = []
        for biz_type, (rate, burst) in self.rates.items():
            sent = sorted(cb.sent_ms for cb in self.history.callbacks if cb.biz_type == biz_type)
            worst: tuple[float, int, int] | None = None
            for i in range(len(sent)):
                for j in range(i + burst, len(sent)):
                    excess = (j - i + 1) - (burst + rate * (sent[j] - sent[i]) / 1000)
                    if excess > 1e-6 and (worst is None or excess > worst[0]):
                        worst = (excess, i, j)
            if worst is not None:
                _, i, j = worst
                found.append(
                    Violation(
                        "rate limit",
                        None,
                        f"{biz_type}: {j - i + 1} callbacks in {sent[j] - sent[i]} ms "
                        f"(rate {rate}/s, burst {burst}) from {sent[i]}",
                        biz_type,
                    )
                )
        return found

    # -- at the end -------------------------------------------------------------------------
    def at_least_once(self, final: dict[Identity, dict[str, Any]]) -> list[Violation]:
        """Every accepted job not cancelled ends delivered or dead; delivered means its
        endpoint answered 2xx."""
        found = []
        for identity in sorted(self.accepted):
            job = final.get(identity)
            state = None if job is None else job["state"]
            if identity in self.cancels:
                if state != "cancelled":
                    found.append(Violation("cancelled", identity, f"a 200 cancel, then {state}"))
            elif state not in FINAL and state != "cancelled":
                found.append(Violation("at least once", identity, f"ends {state} after the run"))
            elif state == "delivered" and not any(
                cb.status == 200 for cb in self.callbacks.get(identity, [])
            ):
                found.append(Violation("at least once", identity, "delivered, never answered 2xx"))
        return found

    def deleted_biz_types(self, final: dict[Identity, dict[str, Any]]) -> list[Violation]:
        """A biz type deleted (204) had no pending or dispatched job then, and none can
        be accepted after: a create racing the delete either was accepted before it (and
        the delete answered 409) or was refused. So every accepted job of a biz type
        deleted at the end is final: one left pending or dispatched would be
        republished for ever into a queue nobody consumes."""
        deleted = self._deleted_at_end()
        found = []
        for identity in sorted(self.accepted):
            if identity[0] not in deleted:
                continue
            job = final.get(identity)
            state = None if job is None else job["state"]
            if state not in (*FINAL, "cancelled"):
                found.append(
                    Violation(
                        "deleted biz type",
                        identity,
                        f"{state} after its biz type was deleted at {deleted[identity[0]]}",
                    )
                )
        return found

    def _deleted_at_end(self) -> dict[str, int]:
        """The biz types whose last successful put or delete was a delete: when."""
        last: dict[str, tuple[str, int]] = {}
        for call in sorted(self.history.calls, key=lambda c: c.ended_ms):
            if not call.path.startswith("/v1/biz-types/") or call.status not in (200, 201, 204):
                continue
            if call.method in ("PUT", "DELETE"):
                last[call.path.rsplit("/", 1)[1]] = (call.method, call.ended_ms)
        return {b: at for b, (method, at) in last.items() if method == "DELETE"}

    def lost_claims_on_time(self, reconcile_after_ms: int) -> list[Violation]:
        """A claim whose reply was lost costs no more than a retry: its jobs are found
        by the claim's token at once, not by the reconciler after its timeout
        (docs/architecture.md, "Across a replica-set election"), so each fires within
        `LOST_CLAIM_BOUND_MS` of its due moment (or of the fault, if later). Passed
        over: a job whose biz type is rate limited or paused meanwhile, that was
        cancelled, rescheduled or replayed meanwhile, or near another fault."""
        assert LOST_CLAIM_BOUND_MS < reconcile_after_ms / 4, "a bound far below the timeout"
        found = []
        for lost in self.history.lost_claims:
            for identity, due_ms in lost.jobs:
                deadline = max(lost.at_ms, due_ms) + LOST_CLAIM_BOUND_MS
                sent = [
                    cb.sent_ms
                    for cb in self.callbacks.get(identity, [])
                    if lost.at_ms <= cb.sent_ms <= deadline
                ]
                if sent or self._excused(identity, lost.at_ms, deadline):
                    continue
                later = [cb.sent_ms for cb in self.callbacks.get(identity, [])]
                first = min((t for t in later if t > deadline), default=None)
                when = "never" if first is None else f"{first - max(lost.at_ms, due_ms)} ms late"
                found.append(
                    Violation(
                        "lost claim on time",
                        identity,
                        f"claimed by {lost.token} at {lost.at_ms}, reply lost; called back {when}",
                    )
                )
        return found

    def _excused(self, identity: Identity, from_ms: int, to_ms: int) -> bool:
        if identity[0] in self.rates:
            return True
        if self.cancels.get(identity, to_ms + 1) <= to_ms:
            return True
        if any(from_ms <= w.started_ms <= to_ms for w in self.writes.get(identity, [])):
            return True
        others = [f for f in self.history.faults if f.kind != "lost-claim"]
        if any(from_ms - FAULT_MARGIN_MS <= f.at_ms <= to_ms for f in others):
            return True
        return any(a <= to_ms and b >= from_ms for a, b in self._paused(identity[0]))

    def _paused(self, biz_type: str) -> list[tuple[int, int]]:
        """When the biz type may have been paused: from a pause asked (whatever its
        answer) to the answer of the next resume that succeeded."""
        spans, since = [], None
        for call in self.history.calls:
            if call.method != "PATCH" or call.path != f"/v1/biz-types/{biz_type}":
                continue
            if call.body.get("paused") is True and since is None:
                since = call.started_ms
            elif call.body.get("paused") is False and call.status == 200 and since is not None:
                spans.append((since, call.ended_ms))
                since = None
        if since is not None:
            spans.append((since, 2**62))
        return spans

    def one_document(self, documents: Iterable[dict[str, Any]]) -> list[Violation]:
        """One job document per identity in the store; every accepted job has one."""
        seen: dict[Identity, int] = defaultdict(int)
        for doc in documents:
            seen[(doc["biz_type"], doc["job_id"])] += 1
        found = [
            Violation("one document", i, f"{n} job documents") for i, n in seen.items() if n > 1
        ]
        found += [
            Violation("one document", i, "no job document")
            for i in sorted(self.accepted)
            if i not in seen
        ]
        return found

    def counts_equal_jobs(
        self, counts: dict[tuple[int, str], int], jobs: dict[tuple[int, str], int]
    ) -> list[Violation]:
        """The load calendar's count of every (second, biz type) equals its pending jobs,
        at the end, once every self-healing path has had its time."""
        off = sorted(
            (key, counts.get(key, 0), jobs.get(key, 0))
            for key in counts.keys() | jobs.keys()
            if counts.get(key, 0) != jobs.get(key, 0)
        )
        return [
            Violation("calendar counts", None, f"slot {at} {biz}: counted {n}, {m} pending jobs")
            for (at, biz), n, m in off
        ]

    def during_run(self) -> list[Violation]:
        return (
            self.never_early()
            + self.retries_wait()
            + self.cancelled_stays_cancelled()
            + self.no_second_callback()
            + self.stale_owner()
            + self.rate_limits()
        )
