"""The callback target policy at send time: the addresses checked are the ones connected to.

aiohttp's connector connects only to the addresses its resolver returns, so a
resolver that refuses a host when any of its addresses is refused closes the
DNS-rebinding gap of a check made apart from the connection (resolve, check,
then connect to whatever a second lookup says). Addresses written in the URL
skip the resolver, so `literal_refusal` checks those (and metadata host names,
in any spelling the resolver reads as theirs) before the request.
Policy: timer_service/callback_targets.py; why a refusal is final:
docs/operations.md, "Callback targets".
"""

from __future__ import annotations

import socket

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from yarl import URL

from timer_service.callback_targets import TargetPolicy


class TargetRefused(OSError):
    """The callback target policy refuses this host."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"refused by the callback target policy: {reason}")
        self.reason = reason


class GuardedResolver(AbstractResolver):
    """Resolves with `inner` (aiohttp's default), then refuses the host when any address
    it resolves to is refused by the policy."""

    def __init__(self, policy: TargetPolicy, inner: AbstractResolver | None = None) -> None:
        self._policy = policy
        self._inner = inner if inner is not None else aiohttp.DefaultResolver()

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        results = await self._inner.resolve(host, port, family)
        for result in results:
            why = self._policy.address_refusal(result["host"])
            if why is not None:
                raise TargetRefused(f"{host} resolves to {why}")
        return results

    async def close(self) -> None:
        await self._inner.close()


def literal_refusal(policy: TargetPolicy, url: str) -> str | None:
    """Why the policy refuses `url`'s host as written: a refused address (in any form the
    resolver reads as one) or a metadata host name; None for another host name (the
    resolver checks its addresses) or an allowed address."""
    try:
        host = URL(url).raw_host or ""
    except ValueError:  # the request fails on it too, as a connection error
        return None
    return policy.host_refusal(host)


LITERAL_REFUSALS_KEPT = 4096  # URLs: a biz type has one callback URL


class LiteralRefusals:
    """`literal_refusal` under one policy, remembered per URL: it reads only the URL's
    text and the policy, which is fixed for the process, so an answer never goes stale
    and needs no expiry. Working it out (parse the URL, normalise the host, read it as
    an address, check the ranges) cost ~50 µs a callback; a lookup costs well under
    1 µs. What a host name resolves to can change: that is checked by the resolver on
    each lookup, and aiohttp keeps a lookup only for `ttl_dns_cache` (broker/sender.py).
    """

    def __init__(self, policy: TargetPolicy, kept: int = LITERAL_REFUSALS_KEPT) -> None:
        self._policy = policy
        self._kept = kept
        self._known: dict[str, str | None] = {}

    def __call__(self, url: str) -> str | None:
        try:
            return self._known[url]
        except KeyError:
            pass
        why = literal_refusal(self._policy, url)
        if len(self._known) >= self._kept:
            del self._known[next(iter(self._known))]  # the oldest: URLs rarely change
        self._known[url] = why
        return why


def refusal_in(exc: BaseException) -> TargetRefused | None:
    """The policy refusal behind an aiohttp error (it wraps what the resolver raised)."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, TargetRefused):
            return seen
        if isinstance(seen, aiohttp.ClientConnectorError) and isinstance(
            seen.os_error, TargetRefused
        ):
            return seen.os_error
        seen = seen.__cause__
    return None
