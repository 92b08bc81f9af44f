"""Partitions: which daemon scans which jobs (docs/architecture.md, "Partitions").

A job's partition is a stable hash of its identity modulo P (`TIMER_PARTITIONS`,
fixed when the store is first initialised). The non-empty-seconds index has one
entry per (partition, second), kept in one ordered key, the *slot*: the partition
in the high bits, the second in the low ones. Partition 0's slot is the second
itself, so a store initialised before partitions existed (P = 1, no partition
field on its jobs) reads as partition 0 unchanged. Pure functions, no I/O.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Collection, Iterable

DEFAULT_PARTITIONS = 1
MAX_PARTITIONS = 256  # a page of the seconds index (1000) always spans more than a second
SLOT_SHIFT = 44  # seconds up to 2**44 (year ~557,000); 256 partitions stay below 2**52
SECOND_MASK = (1 << SLOT_SHIFT) - 1

DAEMON_LEASE_PREFIX = "daemon-p"  # daemon-p0 .. daemon-p{P-1}
DAEMON_BEAT_PREFIX = "daemon-live/"  # one per running daemon: how many share the partitions
FENCE_COUNTER = "daemon-fence"  # every fence handed out comes from this one counter


def partition_of(key: str, partitions: int) -> int:
    """The partition of a job key ("biz_type/job_id"): crc32, never Python's hash(),
    which differs between processes."""
    if partitions == 1:
        return 0
    return zlib.crc32(key.encode()) % partitions


def slot(partition: int, second: int) -> int:
    return (partition << SLOT_SHIFT) | second


def second_of_slot(value: int) -> int:
    return value & SECOND_MASK


def partition_of_slot(value: int) -> int:
    return value >> SLOT_SHIFT


def lease_name(partition: int) -> str:
    return f"{DAEMON_LEASE_PREFIX}{partition}"


def pointer_name(partition: int) -> str:
    return f"p{partition}"


def fair_share(partitions: int, live_daemons: int) -> int:
    """How many partitions one daemon takes at most: ⌈P / live daemons⌉."""
    return math.ceil(partitions / max(1, live_daemons))


def with_legacy(partitions: Iterable[int]) -> list[int | None]:
    """Partition values to match in a query: a job written before partitions existed
    has no partition field and belongs to partition 0."""
    values: list[int | None] = [*sorted(partitions)]
    if 0 in values:
        values.append(None)
    return values


def is_all(owned: Collection[int] | None, partitions: int) -> bool:
    return owned is None or len(owned) >= partitions
