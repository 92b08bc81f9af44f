"""The callback target policy: which addresses and URLs are refused, at registration (PUT
422) and in the settings; credentials refused and redacted. Send time: test_broker_targets."""

# Hosts spelt in look-alike characters are what these tests are about.
# ruff: noqa: RUF001

from __future__ import annotations

import ipaddress
import re
from typing import Any

import pytest
from pydantic import ValidationError

from tests.unit.api_harness import Api, expect, locs
from timer_service.callback_targets import (
    TargetPolicy,
    literal_address,
    normalise_host,
    parse_cidrs,
    redact,
    redact_url,
)
from timer_service.model import BizType
from timer_service.settings import Settings

DEFAULT = TargetPolicy()
STRICT = TargetPolicy(
    allow_private=False, deny_networks=parse_cidrs("203.0.113.0/24, 2001:db8::/32")
)


# -- addresses ----------------------------------------------------------------------

# Every IPv6 form that carries an IPv4 address, here 169.254.169.254 (docs/operations.md,
# "Callback targets"): (address, form).
EMBEDDED_METADATA = [
    ("::ffff:169.254.169.254", "IPv4-mapped"),
    ("::169.254.169.254", "IPv4-compatible"),
    ("::ffff:0:169.254.169.254", "IPv4-translated (SIIT)"),
    ("2002:a9fe:a9fe::", "6to4"),
    ("2002:a9fe:a9fe:1::5", "6to4, a host in its site"),
    ("64:ff9b::169.254.169.254", "NAT64, well-known prefix"),
    ("64:ff9b:1::a9fe:a9fe", "NAT64, local-use prefix as a /96"),
    ("64:ff9b:1:a9fe:a9:fe00::", "NAT64, local-use prefix as a /48"),
    ("64:ff9b:1:a9:fe:a9fe::", "NAT64, local-use prefix as a /56"),
    ("64:ff9b:1:0:a9:fea9:fe00:0", "NAT64, local-use prefix as a /64"),
    ("2001:0:102:304::5601:5601", "Teredo, the client's inverted address"),
    ("2001:db8::5efe:169.254.169.254", "ISATAP"),
    ("2001:db8::200:5efe:a9fe:a9fe", "ISATAP, globally unique"),
]

ALWAYS_REFUSED = [
    ("169.254.169.254", "cloud metadata"),
    ("fd00:ec2::254", "cloud metadata"),
    ("100.100.100.200", "cloud metadata"),
    ("169.254.1.1", "link-local"),
    ("fe80::1", "link-local"),
    ("fe80::1%eth0", "link-local"),
    ("0.0.0.0", "unspecified"),
    ("0.1.2.3", "unspecified"),
    ("::", "unspecified"),
    ("224.0.0.1", "multicast"),
    ("239.255.255.250", "multicast"),
    ("ff02::1", "multicast"),
    ("255.255.255.255", "broadcast"),
    # IPv6 forms that carry a refused IPv4 address
    ("::ffff:169.254.169.254", "cloud metadata"),
    ("64:ff9b::a9fe:a9fe", "cloud metadata"),
    *((address, "cloud metadata") for address, _ in EMBEDDED_METADATA),
]


@pytest.mark.parametrize(("address", "rule"), ALWAYS_REFUSED)
@pytest.mark.parametrize("policy", [DEFAULT, STRICT], ids=["default", "strict"])
def test_always_refused_addresses_name_their_rule(
    policy: TargetPolicy, address: str, rule: str
) -> None:
    why = policy.address_refusal(address)
    assert why is not None and f" {rule} address" in why, f"expected {rule!r}, got {why!r}"


PRIVATE = [
    ("127.0.0.1", "loopback"),
    ("127.8.9.10", "loopback"),
    ("::1", "loopback"),
    ("10.0.0.7", "private"),
    ("172.16.0.1", "private"),
    ("172.31.255.254", "private"),
    ("192.168.1.2", "private"),
    ("100.64.0.1", "private"),
    ("fd12:3456::1", "private"),
    ("::ffff:10.1.2.3", "private"),
    ("::127.0.0.1", "loopback"),
    ("2002:a01:203::1", "private"),
    ("2002:7f00:1::", "loopback"),
    ("2001:0:102:304::f5fe:fdfc", "private"),  # Teredo client 10.1.2.3
]


@pytest.mark.parametrize(("address", "rule"), PRIVATE)
def test_loopback_and_private_are_allowed_by_default_and_refused_when_turned_off(
    address: str, rule: str
) -> None:
    assert DEFAULT.address_refusal(address) is None, f"{address} refused by default"
    why = STRICT.address_refusal(address)
    assert why is not None and f"{rule} address" in why, f"expected {rule!r}, got {why!r}"
    assert "TIMER_CALLBACK_ALLOW_PRIVATE is false" in why, why


@pytest.mark.parametrize(
    "address",
    [
        "93.184.216.34",
        "2606:2800:220:1::1",
        "172.32.0.1",
        "1.1.1.1",
        "2002:5db8:d822::1",  # 6to4 of 93.184.216.34
        "64:ff9b::93.184.216.34",
        "64:ff9b:1:5db8:d8:2200::",  # local-use NAT64, /48 layout, of 93.184.216.34
        "64:ff9b:1:ffff::93.184.216.34",
        "2001:470::5efe:93.184.216.34",
    ],
)
def test_public_addresses_are_allowed(address: str) -> None:
    assert DEFAULT.address_refusal(address) is None
    assert STRICT.address_refusal(address) is None


def test_extra_ranges_from_the_setting_are_refused() -> None:
    for address in ("203.0.113.9", "2001:db8::5"):
        why = STRICT.address_refusal(address)
        assert why == f"an address in a range refused by TIMER_CALLBACK_DENY_CIDRS ({address})", why
    assert STRICT.address_refusal("203.0.114.1") is None


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("Orders.Internal", "orders.internal"),
        ("ORDERS.internal.", "orders.internal"),
        ("bücher.example", "xn--bcher-kva.example"),
        ("ｍｅｔａｄａｔａ。google。internal", "metadata.google.internal"),
        ("under_score.internal", "under_score.internal"),  # not IDNA: NFKC and dots
        ("ｕｎｄｅｒ_ｓｃｏｒｅ｡internal", "under_score.internal"),
        ("[FD00:EC2::254]", "fd00:ec2::254"),
        ("", ""),
    ],
)
def test_hosts_are_normalised_as_the_resolver_will(host: str, expected: str) -> None:
    assert normalise_host(host) == expected, f"{host!r}: expected {expected!r}"


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("169.254.169.254", "169.254.169.254"),
        ("[fd00:ec2::254]", "fd00:ec2::254"),
        ("2852039166", "169.254.169.254"),  # what the C resolver makes of these
        ("0xa9.0xfe.0xa9.0xfe", "169.254.169.254"),
        ("0251.0376.0251.0376", "169.254.169.254"),
        ("127.1", "127.0.0.1"),
        ("orders.internal", None),
        ("deadbeef", None),
        ("1e100.net", None),
        # what the resolver makes of other digits and dots (IDNA, UTS 46)
        ("１６９.２５４.１６９.２５４", "169.254.169.254"),
        ("①⑥⑨.②⑤④.①⑥⑨.②⑤④", "169.254.169.254"),
        ("169。254。169。254", "169.254.169.254"),
        ("169．254．169．254", "169.254.169.254"),
        ("169｡254｡169｡254", "169.254.169.254"),
        ("169.254.169.254.", "169.254.169.254"),
        ("169.254.169.254。", "169.254.169.254"),
        ("０ｘａ９ｆｅａ９ｆｅ", "169.254.169.254"),
        ("[::169.254.169.254]", "::a9fe:a9fe"),
    ],
)
def test_literal_addresses_include_the_legacy_ipv4_forms(host: str, expected: str | None) -> None:
    ip = literal_address(host)
    assert (None if ip is None else str(ip)) == expected, f"{host}: expected {expected}, got {ip}"


def test_bad_cidrs_are_named() -> None:
    with pytest.raises(
        ValueError, match=re.escape("'10.0.0.0/33' is not an IP address or CIDR range")
    ):
        parse_cidrs("10.0.0.0/8,10.0.0.0/33")


# -- settings ------------------------------------------------------------------------


def test_settings_default_to_the_contract_and_parse_extra_ranges(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    default = Settings(_env_file=None).callback_target_policy()  # type: ignore[call-arg]
    assert default == TargetPolicy(allow_private=True, deny_networks=()), default
    monkeypatch.setenv("TIMER_CALLBACK_ALLOW_PRIVATE", "false")
    monkeypatch.setenv("TIMER_CALLBACK_DENY_CIDRS", "203.0.113.0/24, 2001:db8::/32")
    policy = Settings(_env_file=None).callback_target_policy()  # type: ignore[call-arg]
    assert policy == STRICT, f"expected {STRICT}, got {policy}"


def test_a_bad_range_in_the_settings_stops_the_process_naming_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TIMER_CALLBACK_DENY_CIDRS", "10.0.0.0/8 not-a-range")
    with pytest.raises(ValidationError, match="'not-a-range' is not an IP address"):
        Settings(_env_file=None)  # type: ignore[call-arg]


# -- registration (PUT) -------------------------------------------------------------

REFUSED_URLS = [
    ("http://169.254.169.254/latest/meta-data/", "a cloud metadata address (169.254.169.254)"),
    ("http://[fd00:ec2::254]/", "a cloud metadata address (fd00:ec2::254)"),
    ("http://metadata.google.internal/computeMetadata/v1/", "a cloud metadata host"),
    ("http://METADATA.google.internal./x", "a cloud metadata host"),
    ("http://169.254.10.1:8080/cb", "a link-local address (169.254.10.1)"),
    ("http://[fe80::1]/cb", "a link-local address (fe80::1)"),
    ("http://0.0.0.0:9000/cb", "an unspecified address (0.0.0.0)"),
    ("http://[::]:9000/cb", "an unspecified address (::)"),
    ("http://224.0.0.251/cb", "a multicast address (224.0.0.251)"),
    ("http://255.255.255.255/cb", "a broadcast address (255.255.255.255)"),
    ("http://0xa9.0xfe.0xa9.0xfe/", "a cloud metadata address (169.254.169.254)"),
    ("http://[::ffff:169.254.169.254]/", "a cloud metadata address"),
    ("http://１６９.２５４.１６９.２５４/", "a cloud metadata address (169.254.169.254)"),
    ("http://①⑥⑨.②⑤④.①⑥⑨.②⑤④/", "a cloud metadata address (169.254.169.254)"),
    ("http://169。254。169。254/", "a cloud metadata address (169.254.169.254)"),
    ("http://169．254．169．254:80/", "a cloud metadata address (169.254.169.254)"),
    ("http://169｡254｡169｡254/", "a cloud metadata address (169.254.169.254)"),
    ("http://０ｘａ９ｆｅａ９ｆｅ/", "a cloud metadata address (169.254.169.254)"),
    ("http://１６９.２５４.１.１/", "a link-local address (169.254.1.1)"),
    ("http://ｍｅｔａｄａｔａ。google。internal/", "a cloud metadata host"),
    ("http://ＭＥＴＡＤＡＴＡ/", "a cloud metadata host (metadata)"),
    *(
        (f"http://[{address}]/", f"(169.254.169.254, carried by {ipaddress.ip_address(address)})")
        for address, _ in EMBEDDED_METADATA
    ),
    ("http://user:pw@orders.internal/cb", "must not contain credentials"),
    ("https://token@orders.internal/cb", "must not contain credentials"),
]


@pytest.mark.parametrize(("url", "reason"), REFUSED_URLS)
async def test_put_refuses_a_callback_url_the_policy_forbids(
    api: Api, url: str, reason: str
) -> None:
    before = await api.snapshot()
    problem = expect(await api.put_biz(callback_url=url), 422)
    assert ["body", "callback_url"] in locs(problem), locs(problem)
    assert reason in problem["detail"], f"expected {reason!r} in {problem['detail']!r}"
    assert problem["detail"].startswith("body.callback_url: must not "), problem["detail"]
    assert await api.snapshot() == before, "a refused PUT changed the store"


async def test_with_private_targets_turned_off_put_refuses_loopback_and_private(
    make_api: Any,
) -> None:
    api = await make_api(callback_allow_private=False, callback_deny_cidrs="203.0.113.0/24")
    for url in (
        "http://127.0.0.1:9000/cb",
        "http://10.1.2.3/cb",
        "https://[::1]/",
        "http://203.0.113.5/",
        "http://１２７.０.０.１:9000/cb",
        "http://１０。１。２。３/cb",
        "http://[::127.0.0.1]/cb",
        "http://[2002:a01:203::]/cb",
        "http://[::ffff:203.0.113.5]/",
    ):
        problem = expect(await api.put_biz(callback_url=url), 422)
        assert "callback_url" in problem["detail"], problem
    # a host name is checked when callbacks go out: its addresses may change
    expect(await api.put_biz(callback_url="http://orders.internal/cb"), 201)


async def test_put_allows_loopback_private_and_names_by_default(make_api: Any) -> None:
    api = await make_api()
    urls = ["http://127.0.0.1:9000/cb", "http://10.1.2.3/cb", "https://[::1]/", "http://localhost/"]
    others = [
        "https://orders.example.com/timer",
        "http://１２７.０.０.１:9000/cb",
        "http://[::127.0.0.1]/cb",
        "http://[2002:a01:203::]/cb",
        "https://bücher.example/cb",
        "http://under_score.internal/cb",
    ]
    for i, url in enumerate([*urls, *others]):
        expect(await api.put_biz(f"b{i}", callback_url=url), 201)


# -- credentials stored before they were refused ---------------------------------------


def test_redact_url_and_text() -> None:
    url = "https://alice:s3cr%40t@orders.internal:8443/cb?x=1"
    assert redact_url(url) == "https://***@orders.internal:8443/cb?x=1"
    text = f"connection error: {url} alice:s3cr%40t and s3cr%40t"
    got = redact(text, url)
    assert "s3cr" not in got and "alice:" not in got, got
    assert got == ("connection error: https://***@orders.internal:8443/cb?x=1 *** and ***"), got
    assert redact("HTTP 503", "http://orders.internal/cb") == "HTTP 503"


async def test_a_stored_url_with_credentials_is_shown_redacted_and_kept_for_sending(
    api: Api,
) -> None:
    url = "http://alice:s3cret@orders.internal/cb"
    await api.store.biz_types.put_biz_type(BizType("legacy", url))
    got = expect(await api.request("GET", "/v1/biz-types/legacy"), 200)
    assert got["callback_url"] == "http://***@orders.internal/cb", got
    listed = expect(await api.request("GET", "/v1/biz-types"), 200)
    assert "s3cret" not in str(listed), listed
    stored = await api.store.biz_types.get_biz_type("legacy")
    assert stored is not None and stored.callback_url == url, "the stored URL must stay whole"
    assert BizType.from_doc(stored.to_doc()).callback_url == url
