"""The scan loop: seconds index → timing wheel → claim ahead → publish.

One `run_once()` is one iteration; the caller sleeps until the time it
returns or until `wake` is set (nudge, watch event, lease change). In order:

1. refresh: (re)load seconds that a watch event or nudge reported, list the
   non-empty seconds that entered the look-ahead window, and every ~10 s a
   safety poll of everything up to the window's end;
2. live: advance the wheel to now; every second with an expired entry gets one
   `claim_due(second, now + claim_ahead_ms + a coalescing window)`; publish it;
3. catch-up: at most `catchup_rate_per_s` jobs of seconds older than the
   takeover, oldest first, so a backlog never delays the live window;
4. save the time pointer when it moved.

The wheel (one entry per loaded pending job, fired `claim_ahead_ms` before
its next_attempt_at) is only a hint: the conditional claim in the store is
the truth. docs/architecture.md, "Scan daemon", has the rest.
"""

from __future__ import annotations

import asyncio
import bisect
import logging

from daemon.lease import Lead, Term, narrowed
from daemon.publisher import Publisher
from daemon.rounds import Rounds
from daemon.scan_state import BacklogSecond, ClaimPace, Held, ScanConfig, claim_limit
from daemon.wheel import TimingWheel
from timer_service.clock import Clock
from timer_service.dispatch import Claimed, SecondEntry
from timer_service.errors import LeaseLost
from timer_service.metrics import Metrics
from timer_service.model import second_of
from timer_service.partitions import pointer_name
from timer_service.store.ports.pointers import PointersPort
from timer_service.store.ports.scan import ScanPort

log = logging.getLogger(__name__)

# Beyond any due time the API accepts; "no non-empty second ahead".
END_OF_TIME_S = 2**53 // 1000
NOT_LEADER_RECHECK_MS = 1000


class Scanner:
    def __init__(
        self,
        config: ScanConfig,
        scan: ScanPort,
        pointers: PointersPort,
        publisher: Publisher,
        lease: Lead,
        clock: Clock,
        metrics: Metrics,
        claims: Rounds,
    ) -> None:
        self.config = config
        self._scan = scan
        self._pointers = pointers
        self._publisher = publisher
        self._lease = lease
        self._clock = clock
        self._metrics = metrics
        self._claims = claims
        self.wake = asyncio.Event()
        self.last_claim_ms = 0  # the last claim attempt: the reconciler sweeps after it
        # The term whose first iteration (window loaded, due jobs claimed) is done.
        self.settled_term: Term | None = None
        self._term: Term | None = None
        self._reset(0)

    # -- outside events ---------------------------------------------------------
    def nudge(self, second: int) -> None:
        """A job was written into `second`: (re)load it if it is already due or loaded."""
        if self._term is not None:
            self._dirty.add(second)
            self.wake.set()

    @property
    def loaded_jobs(self) -> int:
        """Jobs in the wheel (not its other timers: a swept second's claim rounds)."""
        return sum(len(held.jobs) for held in self._held.values())

    def has(self, second: int) -> bool:
        """Whether `second` is loaded, the catch-up's current one, or still to be listed."""
        return (
            second in self._held
            or second >= self._scan_from_s
            or (self._backlog is not None and self._backlog.entry.second == second)
        )

    # -- the loop body ----------------------------------------------------------------
    async def run_once(self) -> int:
        """One iteration; returns the wall-clock ms at which it wants to run again."""
        self.wake.clear()
        now = self._clock.now_ms()
        term = self._lease.current()
        if term != self._term and narrowed(self._term, term):
            # Partitions handed back under the same fence: the wheel and loaded seconds
            # stay; claims and releases now cover only what is still owned
            # (`ScanPort.own`), so what was loaded of the others is passed over.
            self._term = term
        if term != self._term:
            if term is None:
                log.info("scanner stopped: not leader")
                self._reset(now)
                self._term = None
            else:
                self._take_over(now, term)
        if self._term is None:
            return now + NOT_LEADER_RECHECK_MS  # a lease change sets `wake` sooner
        try:
            await self._find_lost_claims()
            if self._resume_pending:
                await self._resume()
            await self._refresh(now)
            await self._claim_live()
            await self._catch_up()
            await self._save_pointer()
        except LeaseLost:
            log.warning("lease lost mid-iteration; claims stopped")
            self._reset(now)
            self._term = None
            return self._clock.now_ms()
        self.settled_term = self._term
        return self._next_wake_ms(self._clock.now_ms())

    def _reset(self, now: int) -> None:
        self._wheel: TimingWheel[int] = TimingWheel(now)
        self._held: dict[int, Held] = {}
        self._dirty: set[int] = set()
        self._due_seconds: set[int] = set()  # fired in the wheel, claim still to do
        self._scan_from_s = second_of(now)  # live seconds below this are listed already
        self._next_nonempty_s: int | None = None  # first non-empty second >= _scan_from_s
        self._backlog_from_s: int | None = None  # next backlog second to visit
        self._resume_pending = False  # a new term's catch-up start is still to be read
        self._backlog_to_s = 0
        self._backlog: BacklogSecond | None = None
        self._tokens = 0.0
        self._tokens_at_ms = now
        self._last_claim_round_ms = -(10**12)
        self._pace = ClaimPace(self.config.coalesce_ms)
        self._last_poll_ms = now
        self._saved_pointer: int | None = None
        # Claims of this term that raised, (second, token), whose jobs are not found
        # yet: a term's successor leaves them to its reconciler (their rounds are open).
        self._lost_claims: list[tuple[int, str]] = []

    def _take_over(self, now: int, term: Term) -> None:
        self._reset(now)
        self._term = term
        live_from_s = second_of(now)
        # The catch-up resumes from the persisted pointer (read by `_resume`): every
        # second below it was done by an earlier leader. A second written below it
        # just before that leader died is found by the safety poll, which covers
        # everything below the backlog and runs first thing in a new term.
        self._resume_pending = True
        self._backlog_to_s = live_from_s - 1
        self._scan_from_s = live_from_s
        self._last_poll_ms = now - self.config.safety_poll_ms
        self.last_claim_ms = now  # the old leader's claims become stale from now on
        log.info("scanner took over", extra={"fence": term.fence, "live_from_s": live_from_s})

    async def _resume(self) -> None:
        # Every owned partition resumes from its own pointer; one catch-up from the
        # oldest covers them all (a partition already past a second has no entry left
        # in it to visit). A partition never scanned has none: from the start.
        names = self._pointer_names(self._require_term())
        pointers = await self._pointers.load_pointers(names)
        saved = None if len(pointers) < len(names) else min(pointers.values())
        self._backlog_from_s = 0 if saved is None else min(saved, self._backlog_to_s + 1)
        self._resume_pending = False
        log.info("catch-up resumes", extra={"from_s": self._backlog_from_s, "pointer": saved})

    # -- 1. refresh ---------------------------------------------------------------------
    async def _refresh(self, now: int) -> None:
        horizon_s = second_of(now + self.config.lookahead_ms)
        if now - self._last_poll_ms >= self.config.safety_poll_ms:
            await self._safety_poll(horizon_s)
            self._last_poll_ms = now
        if self._dirty:
            await self._reload_dirty(horizon_s)
        if self._next_nonempty_s is None or self._next_nonempty_s <= horizon_s:
            await self._scan_window(horizon_s)
        else:
            self._scan_from_s = max(self._scan_from_s, horizon_s + 1)

    async def _scan_window(self, horizon_s: int) -> None:
        """Load the non-empty seconds up to the horizon; learn the next one beyond it."""
        while True:
            entries = await self._scan.next_seconds(
                self._scan_from_s, END_OF_TIME_S, self.config.page
            )
            for entry in entries:
                if entry.second > horizon_s:
                    self._next_nonempty_s = entry.second
                    self._scan_from_s = horizon_s + 1
                    return
                await self._load(entry)
                self._scan_from_s = entry.second + 1
            if len(entries) < self.config.page:
                self._next_nonempty_s = END_OF_TIME_S
                self._scan_from_s = horizon_s + 1
                return

    async def _reload_dirty(self, horizon_s: int) -> None:
        for second in sorted(self._dirty):
            self._dirty.discard(second)
            if second >= self._scan_from_s:
                # Not listed yet: the window scan loads it when the horizon gets there.
                if self._next_nonempty_s is None or second < self._next_nonempty_s:
                    self._next_nonempty_s = second
                continue
            if self._in_unvisited_backlog(second):
                continue  # the catch-up reaches it in order
            held = self._held.get(second)
            if held is not None:
                self._start_sweep(held)
                continue
            try:
                entries = await self._scan.next_seconds(second, second, 1)
                if entries:
                    await self._load(entries[0])
                else:
                    self._forget(second)
            except Exception:
                self._dirty.add(second)
                raise

    async def _safety_poll(self, horizon_s: int) -> None:
        """Every listed second must be loaded at its current version: catches what a
        broken watch missed. Unvisited backlog is left to the catch-up."""
        # Seconds from _scan_from_s on are the window scan's job anyway.
        listed_upto_s = min(horizon_s, self._scan_from_s - 1)
        ranges = [(0, listed_upto_s)]
        if self._backlog_from_s is not None:
            ranges = [(0, self._backlog_from_s - 1), (self._backlog_to_s + 1, listed_upto_s)]
        for lo, hi in ranges:
            while lo <= hi:
                entries = await self._scan.next_seconds(lo, hi, self.config.page)
                for entry in entries:
                    if self._backlog is not None and entry.second == self._backlog.entry.second:
                        continue
                    held = self._held.get(entry.second)
                    if held is None or held.entry.version != entry.version:
                        await self._load(entry)
                if len(entries) < self.config.page:
                    break
                lo = entries[-1].second + 1
        self._next_nonempty_s = None  # re-learn it with the next window scan

    def _in_unvisited_backlog(self, second: int) -> bool:
        return (
            self._backlog_from_s is not None
            and self._backlog_from_s <= second <= self._backlog_to_s
        )

    async def _load(self, entry: SecondEntry) -> None:
        """Load a second read at `entry.version` and make the wheel match it."""
        pending = await self._scan.load_second(entry.second, self._require_term().fence)
        held = self._held.get(entry.second)
        if held is None:
            held = self._held[entry.second] = Held(entry)
        held.entry = entry
        second = entry.second
        known = held.jobs
        seen: set[str] = set()
        ahead = self.config.claim_ahead_ms
        for key, next_attempt_at in pending:
            seen.add(key)
            deadline = next_attempt_at - ahead
            timer = known.get(key)
            if timer is not None:
                if timer.deadline_ms == deadline:
                    continue
                timer.cancel()
            known[key] = self._wheel.schedule(deadline, second)
        if len(seen) != len(known):
            for key in [k for k in known if k not in seen]:
                known.pop(key).cancel()  # cancelled, moved or claimed meanwhile
        if not known:
            await self._release(held)

    async def _release(self, held: Held) -> None:
        """Drop a second whose jobs are all claimed; if it was written into since it
        was read (or the release failed), read it again instead."""
        second = held.entry.second
        fence = self._require_term().fence
        try:
            released = await self._scan.release_second(held.entry, fence)
        except LeaseLost:
            raise
        except Exception as exc:
            log.warning("release failed; the second is read again", extra={"error": repr(exc)})
            released = False
        if released:
            self._held.pop(second, None)
        else:
            self._dirty.add(second)
            self.wake.set()

    def _forget(self, second: int) -> None:
        held = self._held.pop(second, None)
        if held is not None:
            for timer in held.jobs.values():
                timer.cancel()
            for timer in held.sweep or ():
                timer.cancel()

    def _start_sweep(self, held: Held) -> None:
        """A loaded second was written into (a create, reschedule or retry).

        Re-reading all of its pending jobs on every write costs O(jobs) per write,
        O(n^2) for a second that fills while loaded. Instead the second gets claim
        rounds every `sweep_step_ms` across its range, each a conditional range
        claim that picks up whatever is due by then, so a new job is still claimed
        at least claim_ahead - sweep_step before it is due; the last round reads the
        version first and releases the second with it.
        """
        if held.sweep is not None:
            return
        now = self._clock.now_ms()
        first = held.entry.second * 1000 - self.config.claim_ahead_ms
        steps = range(first, first + 1000 + self.config.sweep_step_ms, self.config.sweep_step_ms)
        second = held.entry.second
        held.sweep = [self._wheel.schedule(max(now, t), second) for t in steps]

    # -- 2. live claims --------------------------------------------------------------------
    async def _claim_live(self) -> None:
        now = self._clock.now_ms()
        if now < self._wheel.current_ms:
            self._rewind(now)
        self._due_seconds.update(self._wheel.advance(now))
        if not self._due_seconds:
            return
        # And what falls due a little later (`ClaimPace`); `_finish` drops its timers.
        claimed_through = now + self._pace.window_ms(now)
        upto = claimed_through + self.config.claim_ahead_ms
        claimed: list[Claimed] = []
        done: list[int] = []
        swept: dict[int, SecondEntry | None] = {}
        try:
            for second in sorted(self._due_seconds):
                held = self._held.get(second)
                if held is not None and held.sweep is not None and upto >= second * 1000 + 999:
                    # The final round covers the whole second: read its version first,
                    # so a write that lands after this claim makes the release miss.
                    entries = await self._scan.next_seconds(second, second, 1)
                    swept[second] = entries[0] if entries else None
                got = await self._claim(second, upto, claim_limit(held, self.config.claim_batch))
                claimed.extend(got)
                if len(got) >= self.config.claim_batch:
                    # A herd: the rest is claimed next round, after the other seconds'
                    # claims of this one (the loop runs again at once).
                    swept.pop(second, None)
                    continue
                self._due_seconds.discard(second)
                done.append(second)
        finally:
            # What this round claimed goes out even when a later claim failed (a store
            # error, a lost lease): those jobs are dispatched now, and only this publish
            # sends them on time. Seconds not done stay due for the next round.
            self._last_claim_round_ms = now
            self._pace.claimed(now, len(claimed))
            if claimed:
                await self._publish(claimed)
            await self._finish(done, swept, claimed_through)

    def _rewind(self, now: int) -> None:
        """The host clock stepped back: file every timer anew on a wheel at `now`.

        A claim reaches `now + claim_ahead_ms` (and its window), so a timer must fire
        only once the clock is at its deadline. The wheel never moves back: left
        ahead, it fires (at once, as overdue) timers the claim does not reach, and
        `_finish` keeps them, fired, as still to claim; their second is then held for
        ever, never claimed nor released, and the overdue sweep passes it over as the
        scanner's (seed 1157 of the simulation). Fired timers are filed again too:
        those still in `jobs` or `sweep` are not done yet. O(timers), once per step.
        """
        wheel: TimingWheel[int] = TimingWheel(now)
        for held in self._held.values():
            held.jobs = {k: wheel.schedule(t.deadline_ms, t.item) for k, t in held.jobs.items()}
            if held.sweep is not None:
                held.sweep = [wheel.schedule(t.deadline_ms, t.item) for t in held.sweep]
        self._wheel = wheel
        log.warning("clock stepped back; wheel filed anew", extra={"now_ms": now})

    async def _finish(
        self, seconds: list[int], swept: dict[int, SecondEntry | None], claimed_through: int
    ) -> None:
        """Every entry of these seconds whose timer runs out by `claimed_through` is done:
        claimed, or no longer pending (cancelled; moved, which renews the second)."""
        for second in seconds:
            held = self._held.get(second)
            if held is None:
                continue
            for key in [k for k, t in held.jobs.items() if t.deadline_ms <= claimed_through]:
                held.jobs.pop(key).cancel()
            if second in swept:
                entry = swept[second]
                self._forget(second)  # everything in it is claimed
                if entry is not None:
                    await self._release(Held(entry))
            elif not held.jobs and held.sweep is None:
                await self._release(held)

    async def _claim(self, second: int, upto_ms: int, limit: int | None = None) -> list[Claimed]:
        term = self._require_term()
        token = await self._claims.take(term.fence)
        now = self._clock.now_ms()
        # Counted before the call: a claim whose reply is lost has applied all the
        # same; should its jobs not be found by the token either (below), they are the
        # reconciler's to find (see `Reconciler.maybe_run`).
        self.last_claim_ms = now
        try:
            claimed, _ = await asyncio.gather(
                self._scan.claim_due(second, upto_ms, token, term.fence, now, limit),
                self._claims.prepare(term.fence),
            )
        except Exception:
            # It may have applied all the same: a reply lost to a socket timeout or an
            # election (a multi-document update is not a retryable write). Its jobs are
            # found by the token at once and published, not left to the reconciler's
            # timeout (issue 30, break 8). The error still ends the round: the second
            # stays due, and its next claim takes what this one did not.
            self._lost_claims.append((second, token))
            await self._find_lost_claims()
            raise
        return claimed

    async def _find_lost_claims(self) -> None:
        """Publish what the claims that raised claimed, each found by its token. One
        whose read fails too is tried again next iteration, without holding up the
        scan (the reconciler's timeout stays the backstop: its round is open)."""
        while self._lost_claims:
            second, token = self._lost_claims[0]
            try:
                found = await self._scan.find_claim(second, token)
            except Exception as exc:
                self._metrics.store_error("find_claim")
                log.warning("finding a failed claim failed", extra={"error": repr(exc)})
                return
            self._lost_claims.pop(0)
            log.warning(
                "a claim failed; found by its token",
                extra={"claim": token, "second": second, "jobs": len(found)},
            )
            if found:
                await self._publish(found)

    async def _publish(self, claimed: list[Claimed]) -> None:
        term = self._term
        self._publisher.submit(claimed, lambda: self._lease.current() == term)

    def _require_term(self) -> Term:
        term = self._lease.current()
        if term is None or term != self._term:
            raise LeaseLost()
        return term

    # -- 3. catch-up -------------------------------------------------------------------------
    async def _catch_up(self) -> None:
        if self._backlog_from_s is None:
            return
        now = self._clock.now_ms()
        rate = self.config.catchup_rate_per_s
        burst = max(1.0, rate * 0.2)
        self._tokens = min(burst, self._tokens + rate * (now - self._tokens_at_ms) / 1000)
        self._tokens_at_ms = now
        visited = 0
        while visited < self.config.max_backlog_seconds_per_step:
            if self._backlog is None:
                # Finding the next backlog second costs no tokens, so the pointer
                # (and the lag metric) is right from the first iteration.
                entries = await self._scan.next_seconds(self._backlog_from_s, self._backlog_to_s, 1)
                if not entries:
                    log.info("catch-up done", extra={"upto_s": self._backlog_to_s})
                    self._backlog_from_s = None
                    return
                await self._open_backlog_second(entries[0])
                visited += 1
            if self._tokens < 1:
                return
            current = self._backlog
            assert current is not None
            remaining = len(current.due) - current.done
            if remaining > 0:
                take = min(int(self._tokens), remaining, self.config.claim_batch)
                upto = current.due[current.done + take - 1]
                claimed = await self._claim(current.entry.second, upto)
                current.done = bisect.bisect_right(current.due, upto)
                self._tokens -= max(1, len(claimed))
                if claimed:
                    await self._publish(claimed)
            if current.done >= len(current.due):
                await self._close_backlog_second(current)

    async def _open_backlog_second(self, entry: SecondEntry) -> None:
        pending = await self._scan.load_second(entry.second, self._require_term().fence)
        self._backlog = BacklogSecond(entry, sorted(due for _, due in pending))
        self._backlog_from_s = entry.second

    async def _close_backlog_second(self, current: BacklogSecond) -> None:
        second = current.entry.second
        if await self._scan.release_second(current.entry, self._require_term().fence):
            self._backlog = None
            self._backlog_from_s = second + 1
            return
        # Written into meanwhile: reread; what is claimed already no longer shows.
        entries = await self._scan.next_seconds(second, second, 1)
        if entries:
            await self._open_backlog_second(entries[0])
        else:
            self._backlog = None
            self._backlog_from_s = second + 1

    # -- 4. pointer -----------------------------------------------------------------------------
    async def _save_pointer(self) -> None:
        now_s = second_of(self._clock.now_ms())
        pointer = now_s
        if self._backlog_from_s is not None:
            pointer = min(pointer, self._backlog_from_s)
        if self._held:
            pointer = min(pointer, min(self._held))
        self._metrics.scan_lag(now_s - pointer)
        if pointer == self._saved_pointer:
            return
        term = self._require_term()
        if await self._pointers.save_pointers(self._pointer_names(term), pointer, term.fence):
            self._saved_pointer = pointer
        else:
            raise LeaseLost("a daemon with a higher fence saved the pointer")

    @staticmethod
    def _pointer_names(term: Term) -> list[str]:
        return [pointer_name(p) for p in sorted(term.partitions)]

    # -- when to run again ------------------------------------------------------------------------
    def _next_wake_ms(self, now: int) -> int:
        wake = self._last_poll_ms + self.config.safety_poll_ms
        if self._dirty or self._due_seconds:
            return now
        next_deadline = self._wheel.next_deadline()
        if next_deadline is not None:
            wake = min(
                wake, max(next_deadline, self._last_claim_round_ms + self.config.min_wake_ms)
            )
        if self._backlog_from_s is not None:
            wake = min(wake, now + self.config.min_wake_ms)
        if self._next_nonempty_s is not None and self._next_nonempty_s < END_OF_TIME_S:
            wake = min(wake, self._next_nonempty_s * 1000 - self.config.lookahead_ms)
        return wake
