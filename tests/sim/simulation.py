"""One run of the simulation: a seed in, a history and its violations out.

A run: the cluster starts; the workload and the faults run together for a while;
then the faults stop, every process down is started again, and time runs past the
reconcile bound, so that every accepted job has had the time to settle; then the
checker reads the whole history and the final state of every job.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from tests.sim.checker import Checker, Identity, Violation
from tests.sim.cluster import Cluster, sim_settings
from tests.sim.faults import Faults
from tests.sim.history import History
from tests.sim.loop import SeededLoop, run
from tests.sim.store_faults import StoreFaults, store_faults
from tests.sim.workload import Workload, limits
from timer_service.clock import FakeClock


@dataclass(frozen=True)
class Options:
    mongo: bool = True  # the real MongoStore on the fake driver; else the MemoryStore
    duration_ms: int = 30_000  # the workload's and the faults' time
    jobs: int = 60
    faults_every_s: float = 4.0  # mean time between two faults; 0: none
    # After the last fault: past the slowest self-healing path. A write that failed
    # half-way leaves an overdue pending job for the overdue sweep, which runs every
    # 60 s and takes jobs 10 s overdue (daemon/sweeper.py); the reconciler's bound is
    # shorter (10 s here). 100 s leaves room for one sweep, its margin and retries.
    settle_ms: int = 100_000
    # Host wall-clock steps: off by default while the skew guard lets a step forward
    # make callbacks early (issue 30, break 6; test_simulation's known_bug seed).
    clock_steps: bool = False
    # Each claim loses its reply with this probability until the faults end, beside
    # the other faults (the windows of store faults lose some claims' replies too). With
    # no other fault (`faults_every_s=0`) the checker holds a lost claim's jobs to a
    # bound (`Checker.lost_claims_on_time`); near another fault it passes them over.
    # Only with `mongo`.
    lose_claims: float = 0.0
    # A biz type whose bucket takes 6 s to refill, spent whole by herds every few
    # seconds, and brokers stopped and restarted one after the other: what a second
    # burst after a restart would break (issue 30, break 3).
    bursts: bool = False


@dataclass
class Outcome:
    seed: int
    history: History
    violations: list[Violation]

    def report(self, lines: int = 60) -> str:
        """The seed, every violation, and the trace of the first violation's job."""
        seed = self.seed
        out = [f"seed {seed}: {len(self.violations)} violation(s); replay: TIMER_SIM_SEED={seed}"]
        out += [f"  {v}" for v in self.violations[:20]]
        first = self.violations[0] if self.violations else None
        if first is not None and first.identity is not None:
            trace = self.history.about(first.identity)
        elif first is not None and first.biz_type is not None:
            trace = self.history.about_biz(first.biz_type)
        else:
            trace = self.history.lines()
        out += ["  trace (shortened):"] + [f"    {line}" for line in trace[-lines:]]
        return "\n".join(out)


def simulate(seed: int, options: Options = Options()) -> Outcome:
    return run(seed, _simulate(seed, options))


async def _simulate(seed: int, options: Options) -> Outcome:
    loop = asyncio.get_running_loop()
    assert isinstance(loop, SeededLoop)
    clock = FakeClock()
    history = History(clock)
    faults_plan: StoreFaults | None = None
    if options.mongo:
        faults_plan = store_faults(seed, history, lose_claim=options.lose_claims)
    cluster = Cluster(seed, loop, clock, history, mongo=options.mongo, store_faults=faults_plan)
    if faults_plan is not None and cluster.mongo is not None:
        faults_plan.engine = cluster.mongo.engine
    await cluster.setup()
    await cluster.start_all()
    workload = Workload(
        cluster, seed, duration_ms=options.duration_ms, jobs=options.jobs, bursts=options.bursts
    )
    await cluster.drive(workload.setup())
    parts = [workload.run()]
    if faults_plan is not None and options.lose_claims > 0:
        faults_plan.claims_on = True  # until the cluster heals
    if options.faults_every_s > 0:
        faults = Faults(
            cluster,
            seed,
            duration_ms=options.duration_ms,
            every_s=options.faults_every_s,
            store=faults_plan,
            clock_steps=options.clock_steps,
            rolling_restarts=options.bursts,
        )
        parts.append(faults.run())
    await cluster.drive(asyncio.gather(*parts), within_ms=10 * options.duration_ms)
    await cluster.drive(cluster.heal())
    history.note("faults over")
    await cluster.run_for(options.settle_ms)
    final = await cluster.drive(_final_states(cluster, workload))
    rates = {
        b: (lim["rate_limit_per_s"], lim["burst"])
        for b, lim in limits(options.bursts).items()
        if lim["rate_limit_per_s"]
    }
    checker = Checker(history, rates)
    violations = (
        checker.during_run() + checker.at_least_once(final) + checker.deleted_biz_types(final)
    )
    violations += checker.lost_claims_on_time(sim_settings().reconcile_after_ms)
    violations += checker.counts_equal_jobs(*cluster.calendar_counts())
    if cluster.mongo is not None:
        violations += checker.one_document(cluster.job_documents())
    await cluster.drive(cluster.shutdown())
    return Outcome(seed, history, violations)


async def _final_states(cluster: Cluster, workload: Workload) -> dict[Identity, dict[str, Any]]:
    final = {}
    for identity in sorted(workload.created.keys() | workload.raced.keys()):
        call = await cluster.call("GET", "/v1/jobs/{}/{}".format(*identity))
        if call.status == 200:
            final[identity] = call.answer
    return final
