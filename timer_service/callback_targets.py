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
import unicodedata
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

import idna

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

# The dots IDNA (and the C library's IDNA 2003 codec) read as a label separator.
_DOTS = str.maketrans(dict.fromkeys("\u3002\uff0e\uff61", "."))


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
        carried = embedded_ipv4(ip)

        def found_in(nets: tuple[IPNetwork, ...]) -> str | None:
            if any(ip in net for net in nets):
                return str(ip)
            inside = next((v4 for v4 in carried if any(v4 in net for net in nets)), None)
            return None if inside is None else f"{inside}, carried by {ip}"

        for rule, nets in ALWAYS_REFUSED:
            if (shown := found_in(nets)) is not None:
                return f"{_article(rule)} {rule} address ({shown})"
        for rule, nets in () if self.allow_private else PRIVATE:
            if (shown := found_in(nets)) is not None:
                why = f"{_article(rule)} {rule} address ({shown})"
                return f"{why}, refused while {PRIVATE_SETTING} is false"
        if (shown := found_in(self.deny_networks)) is not None:
            return f"an address in a range refused by {DENIED_BY_SETTING} ({shown})"
        return None

    def host_refusal(self, host: str) -> str | None:
        """Why a callback must not go to `host` as written in a URL (a metadata host name,
        a refused address in any form the resolver reads as one), or None; a host name's
        addresses are checked when it is resolved."""
        host = normalise_host(host)
        if host in METADATA_HOSTS:
            return f"a cloud metadata host ({host})"
        ip = literal_address(host)
        return None if ip is None else self.address_refusal(ip)

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
        why = self.host_refusal(parts.hostname or "")
        return None if why is None else f"must not point at {why}"


def normalise_host(host: str) -> str:
    """`host` as the resolver will be asked for it: an IPv6 address without its brackets,
    anything else through IDNA (UTS 46, as yarl encodes a URL's host for aiohttp), or,
    where IDNA refuses it (`under_score.internal`), through NFKC with the Unicode full
    stops read as dots; lower case, without a final dot."""
    host = host.strip("[]")
    if ":" in host or host.isascii():  # what UTS 46 does to ASCII: lower case
        return host.lower().rstrip(".")
    try:
        ascii_host = idna.encode(host, uts46=True).decode("ascii")
    except UnicodeError:  # idna.IDNAError is one
        ascii_host = unicodedata.normalize("NFKC", host).translate(_DOTS).lower()
    return ascii_host.rstrip(".")


def literal_address(host: str) -> IPAddress | None:
    """The address a host written as an address means, including the legacy IPv4 forms
    (`2852039166`, `0xa9.0376.43518`) that the C resolver accepts, in any digits and dots
    the resolver reads as ASCII (full-width, circled; ideographic full stops); None for a
    name."""
    host = normalise_host(host)
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


def _local_use_nat64(value: int) -> ipaddress.IPv4Address:
    """The IPv4 address in an address of 64:ff9b:1::/48 (RFC 8215). Where RFC 6052 puts it
    depends on the operator's prefix length (/48, /56, /64 or /96), which the address does
    not say; each layout but /96 leaves a zero suffix (40, 32, 24 bits once the reserved
    bits 64-71 are taken out), so the longest zero suffix names the layout."""
    without_u = (value >> 64) << 56 | value & ((1 << 56) - 1)
    for suffix_bits in (40, 32, 24):
        if without_u & ((1 << suffix_bits) - 1) == 0:
            return ipaddress.IPv4Address(without_u >> suffix_bits & 0xFFFF_FFFF)
    return ipaddress.IPv4Address(value & 0xFFFF_FFFF)


def _article(word: str) -> str:
    return "an" if word[0] in "aeiou" else "a"


_IPV4_IN_LOW_32_BITS = _nets(
    "::ffff:0:0/96",  # IPv4-mapped (RFC 4291)
    "::ffff:0:0:0/96",  # IPv4-translated, SIIT (RFC 2765)
    "64:ff9b::/96",  # NAT64, the well-known prefix (RFC 6052)
)
_IPV4_COMPATIBLE = ipaddress.ip_network("::/96")  # deprecated (RFC 4291), still routed by some
_LOCAL_USE_NAT64 = ipaddress.ip_network("64:ff9b:1::/48")
_ISATAP_IDS = (0x0000_5EFE, 0x0200_5EFE)  # the interface id's high half (RFC 5214)


def embedded_ipv4(ip: IPAddress) -> tuple[ipaddress.IPv4Address, ...]:
    """The IPv4 addresses an IPv6 address carries, in every form a packet to it may reach
    that IPv4 address by: mapped, SIIT, compatible (but `::` and `::1`, which are IPv6's
    own), NAT64 (the well-known prefix and the local-use one), 6to4, Teredo (its server
    and its client, whose address is stored inverted) and ISATAP."""
    if not isinstance(ip, ipaddress.IPv6Address):
        return ()
    value, found = int(ip), []
    low32 = ipaddress.IPv4Address(value & 0xFFFF_FFFF)
    if any(ip in net for net in _IPV4_IN_LOW_32_BITS):
        found.append(low32)
    if ip in _IPV4_COMPATIBLE and value > 1:
        found.append(low32)
    if ip in _LOCAL_USE_NAT64:
        found.append(_local_use_nat64(value))
    if ip.sixtofour is not None:
        found.append(ip.sixtofour)
    if ip.teredo is not None:
        found.extend(ip.teredo)
    if (value >> 32) & 0xFFFF_FFFF in _ISATAP_IDS:
        found.append(low32)
    return tuple(found)


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
