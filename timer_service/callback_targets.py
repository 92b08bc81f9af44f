"""Where callbacks may go: the callback target policy, pure (docs/operations.md).

Always refused, whatever the settings: cloud metadata endpoints, link-local,
unspecified, multicast and broadcast addresses (nothing legitimate listens
there, and a metadata endpoint hands out the node's cloud credentials).
Loopback and private ranges are allowed (the contract's default) unless the
operator turns them off; the operator may refuse more ranges. The API checks a
URL when a biz type is registered (a literal address or a metadata host
name); the notifier checks every address a host name resolves to before it
connects (broker/targets.py), so a name that resolves to a refused address
later is refused too.

Credentials in a URL (`http://user:pw@host`) are refused at registration;
`redact` keeps those of biz types stored before that out of logs, errors and
answers.
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


def _nets(*cidrs: str) -> tuple[IPNetwork, ...]:
    return tuple(ipaddress.ip_network(c) for c in cidrs)


# (rule, ranges), in the order a refusal is explained: the most specific first.
ALWAYS_REFUSED: tuple[tuple[str, tuple[IPNetwork, ...]], ...] = (
    # AWS, GCP, Azure, OpenStack: 169.254.169.254 (and AWS's IPv6 one); Alibaba Cloud's.
    ("cloud metadata", _nets("169.254.169.254/32", "fd00:ec2::254/128", "100.100.100.200/32")),
    ("link-local", _nets("169.254.0.0/16", "fe80::/10")),
    ("unspecified", _nets("0.0.0.0/8", "::/128")),
    ("multicast", _nets("224.0.0.0/4", "ff00::/8")),
    ("broadcast", _nets("255.255.255.255/32")),
)
# Refused only when TIMER_CALLBACK_ALLOW_PRIVATE is false.
PRIVATE: tuple[tuple[str, tuple[IPNetwork, ...]], ...] = (
    ("loopback", _nets("127.0.0.0/8", "::1/128")),
    (
        "private",
        # RFC 1918, shared address space (RFC 6598, used by some clusters), unique local.
        _nets("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "fc00::/7"),
    ),
)
DENIED_BY_SETTING = "TIMER_CALLBACK_DENY_CIDRS"
PRIVATE_SETTING = "TIMER_CALLBACK_ALLOW_PRIVATE"

# Host names of metadata endpoints, refused before any lookup (lower case, no final dot).
METADATA_HOSTS = frozenset(
    {
        "metadata.google.internal",
        "metadata.goog",
        "metadata",
        "instance-data",
        "instance-data.ec2.internal",
    }
)

_NAT64 = ipaddress.ip_network("64:ff9b::/96")  # RFC 6052: an IPv4 address in its low 32 bits


def parse_cidrs(text: str) -> tuple[IPNetwork, ...]:
    """Comma- or space-separated CIDRs (`10.0.0.0/8, fd00::/8`); ValueError naming a bad one."""
    nets = []
    for item in text.replace(",", " ").split():
        try:
            nets.append(ipaddress.ip_network(item, strict=False))
        except ValueError:
            raise ValueError(f"{item!r} is not an IP address or CIDR range") from None
    return tuple(nets)


@dataclass(frozen=True, slots=True)
class TargetPolicy:
    allow_private: bool = True
    deny_networks: tuple[IPNetwork, ...] = ()

    def address_refusal(self, address: str | IPAddress) -> str | None:
        """Why a callback must not connect to `address` ("a link-local address
        (169.254.1.1)"), or None when it may."""
        try:
            ip = (
                ipaddress.ip_address(address.split("%", 1)[0])
                if isinstance(address, str)
                else address
            )
        except ValueError:
            return f"not an IP address ({address!r})"
        for candidate in _embedded(ip):
            for rule, nets in ALWAYS_REFUSED:
                if any(candidate in net for net in nets):
                    return f"{_article(rule)} {rule} address ({ip})"
            for rule, nets in () if self.allow_private else PRIVATE:
                if any(candidate in net for net in nets):
                    why = f"{_article(rule)} {rule} address ({ip})"
                    return f"{why}, refused while {PRIVATE_SETTING} is false"
            if any(candidate in net for net in self.deny_networks):
                return f"an address in a range refused by {DENIED_BY_SETTING} ({ip})"
        return None

    def url_refusal(self, url: str) -> str | None:
        """Why a biz type must not register `url` (an absolute http(s) URL), or None.

        What a URL alone shows: credentials, a metadata host name, a refused
        literal address. A host name's addresses are checked when a callback
        goes out, since they can change."""
        parts = urlsplit(url)
        if parts.username is not None or parts.password is not None:
            return (
                "must not contain credentials (user:password@): they would be sent with every"
                " callback and shown wherever the URL is; receivers authenticate callbacks by"
                " their signature (signing_secret)"
            )
        host = (parts.hostname or "").rstrip(".").lower()
        if host in METADATA_HOSTS:
            return f"must not point at a cloud metadata host ({host})"
        ip = literal_address(host)
        why = None if ip is None else self.address_refusal(ip)
        return None if why is None else f"must not point at {why}"


def literal_address(host: str) -> IPAddress | None:
    """The address a host written as an address means, including the legacy IPv4 forms
    (`2852039166`, `0xa9.0376.43518`) that the C resolver accepts; None for a name."""
    host = host.strip("[]")
    try:
        return ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        pass
    if host and all(c in "0123456789abcdefx." for c in host.lower()):
        try:
            return ipaddress.IPv4Address(socket.inet_aton(host))
        except OSError:
            return None
    return None


def _article(word: str) -> str:
    return "an" if word[0] in "aeiou" else "a"


def _embedded(ip: IPAddress) -> tuple[IPAddress, ...]:
    """The address itself and the IPv4 address an IPv6 one carries (mapped, NAT64)."""
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return (ip, ip.ipv4_mapped)
        if ip in _NAT64:
            return (ip, ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
    return (ip,)


# -- credentials ------------------------------------------------------------------

REDACTED = "***"


def has_credentials(url: str) -> bool:
    try:
        return "@" in urlsplit(url).netloc
    except ValueError:
        return False


def redact_url(url: str) -> str:
    """`url` with its user information replaced by `***`."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    if "@" not in parts.netloc:
        return url
    host = parts.netloc.rsplit("@", 1)[1]
    return urlunsplit(parts._replace(netloc=f"{REDACTED}@{host}"))


def redact(text: str, url: str) -> str:
    """`text` (an error, a log line) without the credentials of `url` in any form it may
    carry them: the whole URL, `user:password`, the password alone (the user name alone
    stays: it is not a secret, and a short one would blank out unrelated text)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return text
    if "@" not in parts.netloc:
        return text
    userinfo = parts.netloc.rsplit("@", 1)[0]
    text = text.replace(url, redact_url(url)).replace(userinfo, REDACTED)
    if parts.password:
        text = text.replace(parts.password, REDACTED)
    return text
