"""Every name, limit and default the processes share, in one place."""

import re

BIZ_TYPE_PATTERN = r"^[a-z0-9][a-z0-9_.-]{0,63}$"
JOB_ID_PATTERN = r"^[A-Za-z0-9_.:-]{1,128}$"
BIZ_TYPE_RE = re.compile(BIZ_TYPE_PATTERN)
JOB_ID_RE = re.compile(JOB_ID_PATTERN)

# Biz types the service keeps for itself start with this, which BIZ_TYPE_PATTERN never
# matches: no business can name one, and none is counted or listed as a business's.
RESERVED_BIZ_TYPE_PREFIX = "_"
CANARY_BIZ_TYPE = "_canary"  # the canary's jobs (timer_service.canary)

# Storage layout (MongoDB collection names).
BUCKET_COLLECTION_PREFIX = "jobs_b"  # jobs_b0 .. jobs_b{N-1}
LOCATOR_COLLECTION = "locator"  # (biz_type, job_id) -> bucket, O(1)
SECONDS_COLLECTION = "seconds"  # ordered index of non-empty seconds (the skip list)
BIZ_TYPES_COLLECTION = "biz_types"
LEASES_COLLECTION = "leases"
POINTERS_COLLECTION = "pointers"
ROUNDS_COLLECTION = "rounds"  # claim rounds not yet confirmed by the queue (normally few)
BROKERS_COLLECTION = "brokers"  # broker heartbeats: which biz types a live broker holds
OWNERS_COLLECTION = "owners"  # per biz type: the ownership epoch its send marks carry
SCHEDULES_COLLECTION = "schedules"
AUDIT_COLLECTION = "audit"  # operator actions, kept for the retention period

# A bucket per second of the minute: few enough collections for any MongoDB
# (two WiredTiger files each), while consecutive seconds land in different
# collections, so the API's writes into "now" and the daemon's claims of the
# next seconds never contend on one collection or one index.
DEFAULT_BUCKETS = 60

# How long a stopping process waits for a cancelled task before leaving it behind.
TASK_STOP_TIMEOUT_S = 3.0

# Job labels (docs/api.md, "Labels"): a flat object of string pairs.
LABEL_KEY_PATTERN = r"^[a-z0-9_.-]{1,32}$"
MAX_LABELS = 8
MAX_LABEL_VALUE_CHARS = 128

MAX_BATCH_ITEMS = 1000

# Bounds of what the API accepts (docs/api.md), so that no setting can make the service
# useless or run away: a rate so low nothing ever goes out, a callback held for days, a
# schedule that makes a job every millisecond.
MIN_RATE_LIMIT_PER_S = 0.001  # one callback per 1000 s
MAX_TIMEOUT_MS = 300_000  # 5 minutes for one callback
MAX_BURST = 10_000
# A registration quota above this is no quota; its default burst (one second's worth)
# stays within MAX_BURST.
MAX_REGISTRATION_RATE_PER_S = 10_000
MAX_CONCURRENCY = 1000  # callbacks in flight at once, per biz type
MIN_CYCLE_INTERVAL_MS = 1000  # a cycling interval schedule: as fine as a seconds cron
# A due time (epoch ms) before 2001-01-01T00:00:00Z can only be seconds given for ms.
MIN_DUE_AT_MS = 978_307_200_000
MAX_LIST_LIMIT = 1000
DEFAULT_LIST_LIMIT = 100

# docs/api.md, "Jobs": the service may claim a job up to 2 s before its next_attempt_at.
MAX_CLAIM_AHEAD_MS = 2000

# Secret rotation: how long the replaced secret keeps signing (default, most).
DEFAULT_SECRET_OVERLAP_S = 86_400
MAX_SECRET_OVERLAP_S = 30 * 86_400

DEFAULT_RETRY = {
    "max_attempts": 10,
    "initial_backoff_ms": 1000,
    "max_backoff_ms": 600000,
    "multiplier": 2.0,
}

# Histogram buckets fine enough to read 1 ms .. 60 s (docs/operations.md, "Metrics").
LATENCY_BUCKETS_S = (
    0.0005,
    0.001,
    0.002,
    0.003,
    0.005,
    0.0075,
    0.01,
    0.015,
    0.025,
    0.05,
    0.075,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    120.0,
    300.0,
)
TOKENS_COLLECTION = "tokens"  # access tokens: their grants and hashes, never a secret
