"""Which jobs an operator means: the console's filter, and what each bulk action may
change (docs/api.md, "Search" and "Bulk actions"). Pure: the stores translate a
`JobFilter` into their own queries and use `matches` for what their indexes leave.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from timer_service.model import ACTIVE_STATES, Job, JobState, Labels, job_key

# The most documents (or keys) one search call reads; past it the page ends short,
# with a cursor to go on from (docs/api.md, "Search": which filters scan).
SEARCH_SCAN_LIMIT = 5000


@dataclass(frozen=True, slots=True)
class JobFilter:
    """Every field given must match; None (or empty) is any. `due_after` is inclusive and
    `due_before` exclusive, both on `due_at`. `idle`: only jobs whose callback no broker
    has started (what a cancel can still stop)."""

    biz_type: str | None = None
    states: frozenset[JobState] | None = None
    labels: Labels = ()
    job_id_prefix: str | None = None
    due_after: int | None = None
    due_before: int | None = None
    idle: bool = False

    def matches(self, job: Job) -> bool:
        if self.biz_type is not None and job.biz_type != self.biz_type:
            return False
        if self.states is not None and job.state not in self.states:
            return False
        if self.job_id_prefix is not None and not job.job_id.startswith(self.job_id_prefix):
            return False
        return (
            self.matches_due(job.due_at)
            and self.matches_labels(job.labels)
            and (not self.idle or job.sending is None)
        )

    def matches_due(self, due_at: int) -> bool:
        if self.due_after is not None and due_at < self.due_after:
            return False
        return self.due_before is None or due_at < self.due_before

    def matches_labels(self, labels: Labels) -> bool:
        return set(self.labels) <= set(labels)

    @property
    def key_prefix(self) -> str | None:
        """The identity keys the filter's jobs share a prefix of (identity order is key
        order), or None when it names no biz type."""
        if self.biz_type is None:
            return None
        return job_key(self.biz_type, self.job_id_prefix or "")

    def to_public(self) -> dict[str, Any]:
        """The filter as the API spells it (an audit entry's `filter`)."""
        out: dict[str, Any] = {"biz_type": self.biz_type}
        if self.states is not None:
            out["state"] = sorted(s.value for s in self.states)
        if self.labels:
            out["labels"] = dict(self.labels)
        for name in ("job_id_prefix", "due_after", "due_before"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        return out


class BulkAction(StrEnum):
    CANCEL = "cancel"
    REPLAY = "replay"


# The states each action can change a job from (jobs.cancel, jobs.replay).
ELIGIBLE: dict[BulkAction, frozenset[JobState]] = {
    BulkAction.CANCEL: ACTIVE_STATES,
    BulkAction.REPLAY: frozenset({JobState.DEAD}),
}


def eligible(action: BulkAction, given: JobFilter) -> JobFilter:
    """The filter narrowed to the jobs `action` may change; ValueError when the filter
    names a state the action cannot change a job from."""
    allowed = ELIGIBLE[action]
    if given.states is not None and not given.states <= allowed:
        bad = sorted(s.value for s in given.states - allowed)
        can = " or ".join(sorted(s.value for s in allowed))
        raise ValueError(f"a {action.value} changes only {can} jobs, not {', '.join(bad)}")
    return replace(given, states=given.states or allowed)


def counted(action: BulkAction, given: JobFilter) -> JobFilter:
    """What a dry run counts: the eligible jobs, and for a cancel only those whose
    callback has not started (a cancel skips those in flight)."""
    narrowed = eligible(action, given)
    return replace(narrowed, idle=action is BulkAction.CANCEL)
