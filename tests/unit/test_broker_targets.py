"""The callback target policy when a callback goes out: the addresses a host resolves to
are checked by the resolver the connection uses, written addresses before the request;
a refusal is a dead job with a clear error; redirects are answers, never followed;
credentials of a stored URL stay out of errors, history and logs.

Every connection here goes to the loopback receiver: refused targets are loopback
addresses under a policy that refuses loopback, or addresses no connection is made to.
"""

# Hosts spelt in look-alike characters are what these tests are about.
# ruff: noqa: RUF001

from __future__ import annotations

import logging
import socket
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp.abc import AbstractResolver, ResolveResult

from broker import targets
from broker.callback import CallbackRequest, Response, judge
from broker.sender import Sender
from broker.targets import LiteralRefusals, literal_refusal
from tests.unit.broker_harness import Receiver, World, wait_for_states, world_with
from timer_service.callback_targets import TargetPolicy, parse_cidrs
from timer_service.clock import SystemClock
from timer_service.dispatch import OutcomeKind
from timer_service.model import BizType, JobState, RetryPolicy

NO_LOOPBACK = TargetPolicy(allow_private=False)
REQUEST = CallbackRequest(b'{"x":1}', {"Content-Type": "application/json"})


class FakeResolver(AbstractResolver):
    """Answers from a table, and records every lookup."""

    def __init__(self, table: dict[str, list[str]]) -> None:
        self.table = table
        self.asked: list[str] = []

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        self.asked.append(host)
        if host not in self.table:
            raise OSError(f"no such host {host}")
        return [
            ResolveResult(
                hostname=host,
                host=address,
                port=port,
                family=socket.AF_INET6 if ":" in address else socket.AF_INET,
                proto=0,
                flags=socket.AI_NUMERICHOST,
            )
            for address in self.table[host]
        ]

    async def close(self) -> None:
        pass


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    r = Receiver()
    await r.start()
    yield r
    await r.stop()


async def post(
    url: str, policy: TargetPolicy, resolver: AbstractResolver | None = None
) -> Response:
    sender = Sender(SystemClock(), policy, resolver)
    await sender.start()
    try:
        return await sender.post(url, REQUEST, timeout_s=5)
    finally:
        await sender.close()


# -- send time: resolved and written addresses ---------------------------------------


async def test_a_name_is_sent_to_the_address_the_checked_lookup_returned(
    receiver: Receiver,
) -> None:
    resolver = FakeResolver({"orders.test": ["127.0.0.1"]})  # no such name in real DNS
    got = await post(f"http://orders.test:{receiver.port}/orders", TargetPolicy(), resolver)
    assert got.status_code == 200 and not got.refused, f"expected 200, got {got}"
    assert resolver.asked == ["orders.test"], resolver.asked
    assert len(receiver.for_biz("orders")) == 1


async def test_a_name_resolving_to_a_refused_address_is_refused_before_connecting(
    receiver: Receiver,
) -> None:
    resolver = FakeResolver({"orders.test": ["127.0.0.1"]})
    got = await post(f"http://orders.test:{receiver.port}/orders", NO_LOOPBACK, resolver)
    assert got.refused and got.status_code is None, f"expected a refusal, got {got}"
    expected = (
        "refused by the callback target policy: orders.test resolves to a loopback address"
        " (127.0.0.1), refused while TIMER_CALLBACK_ALLOW_PRIVATE is false"
    )
    assert got.error == expected, f"expected {expected!r}, got {got.error!r}"
    assert receiver.received == [], "a refused target was connected to"


async def test_one_refused_address_among_several_refuses_the_host(receiver: Receiver) -> None:
    # The allowed address is first: a connector trying them in turn would reach it.
    resolver = FakeResolver({"orders.test": ["127.0.0.1", "169.254.169.254"]})
    got = await post(f"http://orders.test:{receiver.port}/orders", TargetPolicy(), resolver)
    assert got.refused, f"expected a refusal, got {got}"
    assert got.error is not None and "cloud metadata address (169.254.169.254)" in got.error
    assert receiver.received == []


async def test_extra_ranges_are_refused_at_send_time(receiver: Receiver) -> None:
    policy = TargetPolicy(deny_networks=parse_cidrs("127.0.0.0/30"))
    resolver = FakeResolver({"orders.test": ["127.0.0.1"]})
    got = await post(f"http://orders.test:{receiver.port}/orders", policy, resolver)
    assert got.refused and "TIMER_CALLBACK_DENY_CIDRS" in (got.error or ""), got
    assert receiver.received == []


@pytest.mark.parametrize(
    "host",
    [
        "127.0.0.1",
        "[::ffff:127.0.0.1]",
        "127.1",
        "１２７.０.０.１",
        "①②⑦。⓪。⓪。①",
        "127｡0｡0｡1",
        "[::127.0.0.1]",
        "[2002:7f00:1::]",
        "[64:ff9b::127.0.0.1]",
        "[2001:0:102:304::80ff:fffe]",  # Teredo, client 127.0.0.1 inverted
        "[2001:470::5efe:127.0.0.1]",
    ],
)
async def test_a_written_address_is_checked_though_no_lookup_happens(
    receiver: Receiver, host: str
) -> None:
    resolver = FakeResolver({})
    got = await post(f"http://{host}:{receiver.port}/orders", NO_LOOPBACK, resolver)
    assert got.refused and "loopback address" in (got.error or ""), f"got {got}"
    assert receiver.received == [] and resolver.asked == []


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://１６９.２５４.１６９.２５４/", "a cloud metadata address (169.254.169.254)"),
        ("http://169。254。169。254/", "a cloud metadata address (169.254.169.254)"),
        ("http://[::169.254.169.254]/", "a cloud metadata address (169.254.169.254, carried"),
        ("http://[2002:a9fe:a9fe::]/", "a cloud metadata address (169.254.169.254, carried"),
        ("http://ｍｅｔａｄａｔａ.google.internal/", "a cloud metadata host"),
        ("http://metadata/computeMetadata/v1/", "a cloud metadata host (metadata)"),
    ],
)
async def test_hosts_refused_at_registration_are_refused_at_send_before_any_lookup(
    url: str, reason: str
) -> None:
    resolver = FakeResolver({})
    got = await post(url, TargetPolicy(), resolver)
    assert got.refused and reason in (got.error or ""), f"expected {reason!r}, got {got}"
    assert resolver.asked == [], "a refused host was looked up"


async def test_the_real_resolver_is_guarded_too(receiver: Receiver) -> None:
    got = await post(f"http://localhost:{receiver.port}/orders", NO_LOOPBACK)
    assert got.refused and "localhost resolves to a loopback address" in (got.error or ""), got
    assert receiver.received == []
    allowed = await post(f"http://localhost:{receiver.port}/orders", TargetPolicy())
    assert allowed.status_code == 200, f"expected 200 from localhost, got {allowed}"


def test_a_refusal_is_dead_at_once_whatever_attempts_are_left() -> None:
    policy = RetryPolicy(max_attempts=10)
    refused = Response(None, error="refused by the callback target policy: x", refused=True)
    verdict = judge(refused, policy, attempt=1, budget_base=0, known_at=1000)
    assert verdict.kind is OutcomeKind.DEAD, f"expected dead, got {verdict}"
    assert verdict.error == "refused by the callback target policy: x"
    failed = Response(None, error="connection error: refused")
    assert judge(failed, policy, 1, 0, 1000).kind is OutcomeKind.RETRY


# -- redirects -----------------------------------------------------------------------


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
async def test_a_redirect_is_an_answer_never_followed(receiver: Receiver, status: int) -> None:
    def answer(record: Any) -> tuple[int, dict[str, str], float]:
        if record.path == "/orders":
            return status, {"Location": receiver.url("elsewhere")}, 0.0
        return 200, {}, 0.0

    receiver.responder = answer
    got = await post(receiver.url("orders"), TargetPolicy())
    assert got.status_code == status, f"expected {status}, got {got}"
    assert receiver.for_biz("elsewhere") == [], "the redirect was followed"
    verdict = judge(got, RetryPolicy(), 1, 0, 1000)
    assert (verdict.kind, verdict.error) == (OutcomeKind.DEAD, f"HTTP {status}"), verdict


# -- credentials of a stored URL -------------------------------------------------------


async def test_credentials_stay_out_of_connection_errors() -> None:
    for url in (
        "http://alice:s3cret@127.0.0.1:1/cb",  # nothing listens on port 1
        "http://alice:s3cret@127.0.0.1:99999/cb",  # a port aiohttp refuses, URL in the error
    ):
        got = await post(url, TargetPolicy())
        assert got.status_code is None and got.error, f"expected an error, got {got}"
        assert "s3cret" not in got.error, f"credentials in {got.error!r}"


# -- through the broker: job state, history, logs --------------------------------------


@pytest.fixture
async def strict_world(memory_store: Any) -> AsyncIterator[World]:
    """The broker harness's world, with a broker that refuses loopback targets."""
    async with world_with(memory_store, callback_allow_private=False) as w:
        yield w


async def test_a_refused_target_makes_the_job_dead_with_the_reason(strict_world: World) -> None:
    w = strict_world
    await w.put_biz("orders", retry=RetryPolicy(max_attempts=5))
    await w.broker.start()
    due = w.clock.now_ms() + 100
    jobs = await w.create("orders", ["j1"], due)
    w.daemon.watch([due])
    assert await w.daemon.dispatch_once() == 1
    (job,) = await wait_for_states(w.store, jobs, {JobState.DEAD}, 5, w.clock)
    assert w.receiver.received == [], "a refused target was called"
    (attempt,) = job.history
    assert attempt.status_code is None, attempt
    assert job.last_error == attempt.error and attempt.error is not None
    assert attempt.error.startswith("refused by the callback target policy: a loopback address")
    assert w.metric("timer_callbacks_total", biz_type="orders", outcome="dead") == 1


async def test_stored_credentials_stay_out_of_history_and_logs(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    biz = BizType(
        "orders",
        "http://alice:s3cret@127.0.0.1:1/cb",
        retry=RetryPolicy(max_attempts=1),
    )
    await world.store.biz_types.put_biz_type(biz)
    await world.broker.start()
    due = world.clock.now_ms() + 100
    jobs = await world.create("orders", ["j1"], due)
    world.daemon.watch([due])
    caplog.set_level(logging.DEBUG)
    assert await world.daemon.dispatch_once() == 1
    (job,) = await wait_for_states(world.store, jobs, {JobState.DEAD}, 5, world.clock)
    assert job.last_error is not None and job.last_error.startswith("connection error"), job
    public = str(job.to_public())
    assert "s3cret" not in public, f"credentials in the job: {public}"
    logged = "\n".join(f"{r.getMessage()} {r.__dict__}" for r in caplog.records)
    assert "callback failed" in logged, "expected the failure to be logged"
    assert "s3cret" not in logged, "credentials in the logs"


def test_literal_refusals_are_worked_out_once_per_url(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[str] = []

    def counted(policy: TargetPolicy, url: str) -> str | None:
        asked.append(url)
        return literal_refusal(policy, url)

    monkeypatch.setattr(targets, "literal_refusal", counted)
    refusals = LiteralRefusals(TargetPolicy(allow_private=False))
    for _ in range(3):
        assert refusals("http://10.0.0.1/cb") is not None
        assert refusals("http://orders.example/cb") is None
    assert asked == ["http://10.0.0.1/cb", "http://orders.example/cb"], asked


def test_literal_refusals_keep_a_bounded_number_of_urls_and_forget_the_oldest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[str] = []

    def counted(policy: TargetPolicy, url: str) -> str | None:
        asked.append(url)
        return literal_refusal(policy, url)

    monkeypatch.setattr(targets, "literal_refusal", counted)
    refusals = LiteralRefusals(TargetPolicy(), kept=2)
    for url in ("http://a.example/", "http://b.example/", "http://c.example/"):
        refusals(url)
    refusals("http://c.example/")  # kept
    refusals("http://a.example/")  # forgotten: worked out again
    assert asked == [f"http://{h}.example/" for h in "abca"], asked


def test_each_policy_has_its_own_answers() -> None:
    """A policy is fixed for a process; a Sender made with another policy (a restart
    with new settings) answers by that one, whatever the first remembered."""
    url = "http://192.168.1.5/cb"
    assert LiteralRefusals(TargetPolicy(allow_private=True))(url) is None
    assert LiteralRefusals(TargetPolicy(allow_private=False))(url) is not None
