"""The job-store port and its adapters (MongoDB, in-memory)."""

from timer_service.store.base import (
    Claimed,
    CreateResult,
    CreateStatus,
    JobStore,
    NewJob,
    Outcome,
    OutcomeKind,
    SecondEntry,
    SendRef,
)

__all__ = [
    "Claimed",
    "CreateResult",
    "CreateStatus",
    "JobStore",
    "NewJob",
    "Outcome",
    "OutcomeKind",
    "SecondEntry",
    "SendRef",
]
