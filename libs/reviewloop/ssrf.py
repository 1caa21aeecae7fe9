"""The SSRF rule: which addresses a server-side request made for a tenant may reach.

One rule for every such request (a webhook, a classifier URL), so a fix to it reaches all of them.

Only globally routable unicast addresses are reached: no loopback, link-local (the cloud metadata
service at 169.254.169.254), private, shared, reserved or multicast ranges, unless the deployment allows
a network explicitly. An IPv6 address that carries an IPv4 address (IPv4-mapped ``::ffff:a.b.c.d``,
IPv4-translated ``::ffff:0:a.b.c.d``, IPv4-compatible ``::a.b.c.d``, NAT64 ``64:ff9b::a.b.c.d``, 6to4
``2002:aabb:ccdd::``) is judged by the IPv4 address it carries, since a NAT64 gateway or 6to4 relay
delivers it there. Use it in two places: on the URL when it is stored (:func:`check_url`, then
:func:`resolve_checked` on its host), and on every request, where the addresses just resolved are checked
and the request connects to one of them, never to a fresh lookup (DNS rebinding).

Example::

    host, _literal = check_url(url)
    addresses = await resolve_checked(host, port, allowed)  # Refused names the address and why
    # connect to addresses[0], with Host (and TLS SNI) still naming ``host``
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Iterable, Sequence
from urllib.parse import urlsplit

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

MAX_URL = 2000

# IPv6 prefixes whose low 32 bits are an IPv4 address (RFC 4291 2.5.5, RFC 2765, RFC 6052).
_LOW_32_EMBEDDING = (
    ipaddress.IPv6Network("::ffff:0:0/96"),  # IPv4-mapped
    ipaddress.IPv6Network("::ffff:0:0:0/96"),  # IPv4-translated (SIIT)
    ipaddress.IPv6Network("64:ff9b::/96"),  # NAT64, the well-known prefix
    ipaddress.IPv6Network("::/96"),  # IPv4-compatible (deprecated); also :: and ::1
)
# Prefixes that carry an IPv4 address somewhere this rule does not decode: refused whole.
_REFUSED_V6 = {
    ipaddress.IPv6Network("64:ff9b:1::/48"): "a local-use NAT64 address (RFC 8215)",
    ipaddress.IPv6Network("2001::/32"): "a Teredo address",
}


class Refused(ValueError):
    """A URL or address a server-side request may not reach; the message says why."""


def parse_networks(values: Iterable[str]) -> tuple[IpNetwork, ...]:
    """CIDRs a deployment allows despite the rule (e.g. ``REVIEWLOOP_WEBHOOK_ALLOWED_NETWORKS``).

    Args:
        values: CIDR strings (host bits allowed); blank entries are skipped.

    Returns:
        The networks, in order.

    Raises:
        ValueError: An entry that is not a network.
    """
    return tuple(ipaddress.ip_network(v.strip(), strict=False) for v in values if v.strip())


def embedded_ipv4(address: IpAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address carries (mapped, translated, compatible, NAT64, 6to4), or None.

    Args:
        address: Any IP address; an IPv4 one carries none.

    Returns:
        The embedded IPv4 address, or None.
    """
    if isinstance(address, ipaddress.IPv4Address):
        return None
    if address.sixtofour is not None:
        return address.sixtofour
    if any(address in net for net in _LOW_32_EMBEDDING):
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def address_refusal(address: IpAddress, allowed: Sequence[IpNetwork] = ()) -> str | None:
    """Why a server-side request may not connect to ``address``, or None when it may.

    An address that embeds an IPv4 address is judged by the embedded one (``[::ffff:10.0.0.1]``,
    ``[64:ff9b::a9fe:a9fe]`` and ``[2002:a9fe:a9fe::]`` are refused as 10.0.0.1 and 169.254.169.254).

    Args:
        address: The address about to be connected to (an IP literal, or what a name resolved to).
        allowed: Networks the deployment allows despite the rule; the address, or the IPv4 address it
            embeds, in one of them is allowed.

    Returns:
        None, or a sentence naming the address and why it is refused.
    """
    embedded = embedded_ipv4(address)
    judged: IpAddress = embedded or address
    if any(a.version == net.version and a in net for net in allowed for a in {address, judged}):
        return None
    named = f"{address} (which carries {embedded})" if embedded else str(address)
    for net, what in _REFUSED_V6.items():
        if address in net:
            return f"{named} is {what}"
    if judged.is_global and not judged.is_multicast:
        return None
    return f"{named} is a loopback, link-local, private or reserved address"


def check_url(url: str) -> tuple[str, str | None]:
    """The host of a URL a server-side request may be made to, and the IP literal it is (if any).

    Args:
        url: An ``http://`` or ``https://`` URL with a host and no credentials.

    Returns:
        (host, the normalized IP literal or None for a name). A name still has to pass
        :func:`resolve_checked`; a literal, :func:`address_refusal`.

    Raises:
        Refused: Too long, not http(s), no host, credentials in it, port 0, a host no resolver takes.
    """
    if len(url) > MAX_URL:
        raise Refused(f"at most {MAX_URL} characters")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise Refused(f"not a URL ({exc})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise Refused("an http:// or https:// URL with a host")
    if parts.username is not None or parts.password is not None:
        raise Refused("credentials in the URL are not allowed")
    if port == 0:
        raise Refused("port 0")
    try:
        return parts.hostname, str(ipaddress.ip_address(parts.hostname))
    except ValueError:
        pass
    try:  # what a resolver would be asked: a label over 63 characters is no name (issue 34: it was a 500)
        parts.hostname.encode("idna")
    except UnicodeError:
        raise Refused("the host is not a DNS name (labels of 1 to 63 characters)") from None
    return parts.hostname, None


async def _getaddrinfo(host: str, port: int) -> list[str]:
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


async def resolve(host: str, port: int) -> list[IpAddress]:
    """Every address ``host`` resolves to now (an IP literal resolves to itself), zone ids dropped.

    Raises:
        OSError: The name does not resolve.
    """
    return [ipaddress.ip_address(a.split("%")[0]) for a in await _getaddrinfo(host, port)]


async def resolve_checked(host: str, port: int, allowed: Sequence[IpNetwork] = ()) -> list[IpAddress]:
    """Resolve ``host`` and check every address it resolves to; connect to one of those returned.

    Every address must pass (a name with one private address among public ones is refused: which one a
    client would connect to is not ours to choose).

    Args:
        host: A name or an IP literal.
        port: The port to resolve for.
        allowed: As in :func:`address_refusal`.

    Returns:
        The addresses, in the resolver's order, all allowed.

    Raises:
        Refused: One address is not allowed (the message names the host and why).
        OSError: The name does not resolve.
    """
    addresses = await resolve(host, port)
    for address in addresses:
        why = address_refusal(address, allowed)
        if why:
            raise Refused(f"{host} is not an address this deployment may reach: {why}")
    return addresses
