"""Fetch remote images safely, for services that choose to allow it.

Off unless a host allow-list is configured (``mmobs serve --allow-remote-host``).
When on, a fetch:

* parses the URL first, and every way it can fail to parse (``http://[::1/x``,
  a netloc that NFKC normalisation changes, a bad port, credentials, control
  characters) is a refusal (``unsupported_url``), never an exception;
* accepts ``http``/``https`` URLs whose host is on the list, IPv6 literals
  included (``http://[2001:db8::1]/x.png``);
* resolves the name once and checks *every* address it resolves to: none may
  be private, loopback, link-local, reserved or multicast, including such an
  IPv4 address embedded in IPv6 (IPv4-mapped ``::ffff:0:0/96``, IPv4-compatible
  ``::/96``, NAT64 ``64:ff9b::/96`` and ``64:ff9b:1::/48``, 6to4 ``2002::/16``);
* connects only to the address it checked (so DNS rebinding between the check
  and the connect is impossible), with TLS verified against the name (SNI and
  ``Host`` stay the name);
* follows no redirect, caps the body at ``max_bytes`` and refuses a body
  shorter than its ``Content-Length``;
* does all of it, DNS included, within one wall-clock deadline
  (``timeout_seconds``): an origin dripping one byte at a time cannot hold a
  request longer than that.

Responses are parsed with h11, the HTTP/1.1 parser uvicorn uses.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

import h11

from mmobs._version import __version__
from mmobs.errors import BadImageError

_READ_CHUNK = 64 * 1024
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")
_COMPATIBLE = ipaddress.ip_network("::/96")
#: 6to4: Python 3.13 (and the 3.12.4 ``ipaddress``) counts the whole prefix as not global, earlier
#: releases as global; the address it carries decides here, on every Python.
_SIXTOFOUR = ipaddress.ip_network("2002::/16")
_ALLOW_HINT = "(the server's operator allows a host with --allow-remote-host HOST)"

#: ``async resolver(host, port) -> [address, ...]``; the default asks the system resolver.
Resolver = Callable[[str, int], Awaitable[list[str]]]


def is_private_address(address: str) -> bool:
    """Whether a remote fetch must not connect to ``address``.

    Anything not globally reachable, and multicast; for IPv6, also any of the
    forms that carry an IPv4 address whose own check fails.
    """
    ip = ipaddress.ip_address(address.split("%")[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip in _SIXTOFOUR:
        v4 = ipaddress.IPv4Address((int(ip) >> 80) & 0xFFFFFFFF)
        return not v4.is_global or v4.is_multicast
    if not ip.is_global or ip.is_multicast:
        return True
    if isinstance(ip, ipaddress.IPv6Address):
        if ip in _NAT64_LOCAL:
            return True
        embedded = []
        if ip.ipv4_mapped is not None:
            embedded.append(ip.ipv4_mapped)
        if ip in _NAT64 or ip in _COMPATIBLE:
            embedded.append(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
        if ip.teredo is not None:
            embedded.extend(ip.teredo)
        return any(not v4.is_global or v4.is_multicast for v4 in embedded)
    return False


@dataclass(frozen=True)
class RemoteURL:
    """An ``http(s)`` URL, split: where to connect and what to ask for."""

    scheme: str
    host: str  # lower case; an IPv6 literal without brackets
    port: int
    target: str  # path and query
    host_header: str
    literal: bool  # the host is an IP address


def _unsupported(message: str) -> BadImageError:
    return BadImageError("unsupported_url", message)


def parse_remote_url(url: str) -> RemoteURL:
    """Split ``url``; any URL that does not parse cleanly is a ``BadImageError`` (``unsupported_url``)."""
    if not isinstance(url, str) or not url.isascii() or any(c <= " " or c == "\x7f" for c in url):
        raise _unsupported(
            "the URL must be ASCII without spaces or control characters (percent-encode them; "
            "use the punycode form of an international host name)"
        )
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError as error:
        raise _unsupported(f"the URL does not parse: {str(error)[:120]}") from None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https") or not host:
        raise _unsupported("only http(s) URLs with a host can be fetched")
    if parts.username is not None or parts.password is not None:
        raise _unsupported("URLs with credentials (user:password@) are not fetched")
    literal = False
    if ":" in host or "%" in host or host.replace(".", "").isdigit():
        try:
            ip = ipaddress.ip_address(host)
        except ValueError:
            raise _unsupported(f"the URL's host {host[:80]!r} is not a valid IP address or name") from None
        host, literal = ip.compressed, True
    if port == 0:
        raise _unsupported("the URL has an invalid port")
    port = port or (443 if scheme == "https" else 80)
    default_port = port == (443 if scheme == "https" else 80)
    named = f"[{host}]" if ":" in host else host
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return RemoteURL(scheme, host, port, target, named if default_port else f"{named}:{port}", literal)


async def _system_resolver(host: str, port: int) -> list[str]:
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


class RemoteFetcher:
    """Fetch ``http(s)`` image URLs from allow-listed hosts with hard limits."""

    def __init__(
        self,
        allowed_hosts: tuple[str, ...] | list[str],
        *,
        max_bytes: int,
        timeout_seconds: float = 5.0,
        allow_private: bool = False,
        resolver: Resolver | None = None,
    ) -> None:
        self.allowed_hosts = frozenset(_normalize_host(h) for h in allowed_hosts if h.strip())
        self.max_bytes = max_bytes
        self.timeout = timeout_seconds
        self.allow_private = allow_private
        self.resolve = resolver or _system_resolver

    def check(self, url: str) -> RemoteURL:
        """Parse ``url`` and check its host against the allow-list (no network)."""
        remote = parse_remote_url(url)
        if remote.host not in self.allowed_hosts:
            raise _unsupported(f"the host {remote.host[:100]!r} is not on this server's allow-list {_ALLOW_HINT}")
        return remote

    async def fetch(self, url: str) -> bytes:
        """The image's bytes, or a ``BadImageError`` (never reported: the caller does that)."""
        remote = self.check(url)
        try:
            async with asyncio.timeout(self.timeout):
                return await self._fetch(remote)
        except TimeoutError:
            raise BadImageError("fetch_failed", f"fetching the image took longer than {self.timeout:g} s") from None

    def fetch_blocking(self, url: str) -> bytes:
        """:meth:`fetch` for code without an event loop."""
        return asyncio.run(self.fetch(url))

    async def _fetch(self, remote: RemoteURL) -> bytes:
        addresses = [remote.host] if remote.literal else await self._resolve(remote)
        if not self.allow_private:
            for address in addresses:
                if is_private_address(address):
                    raise _unsupported(
                        f"the host {remote.host[:100]!r} resolves to a private or reserved address ({address}); "
                        "remote images must come from public addresses"
                    )
        reader, writer = await self._connect(remote, addresses)
        try:
            return await self._exchange(remote, reader, writer)
        finally:
            writer.close()

    async def _resolve(self, remote: RemoteURL) -> list[str]:
        try:
            addresses = await self.resolve(remote.host, remote.port)
        except (OSError, UnicodeError) as error:
            raise BadImageError("fetch_failed", f"cannot resolve {remote.host[:100]!r}: {str(error)[:100]}") from None
        if not addresses:
            raise BadImageError("fetch_failed", f"{remote.host[:100]!r} resolves to no address")
        return addresses

    async def _connect(
        self, remote: RemoteURL, addresses: list[str]
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        context = ssl.create_default_context() if remote.scheme == "https" else None
        last: OSError | None = None
        for address in addresses:  # every one of them was checked above
            try:
                return await asyncio.open_connection(
                    address,
                    remote.port,
                    ssl=context,
                    server_hostname=remote.host if context is not None else None,
                    limit=_READ_CHUNK,
                )
            except OSError as error:
                last = error
        raise BadImageError("fetch_failed", f"cannot connect to {remote.host[:100]!r}: {str(last)[:120]}")

    async def _exchange(self, remote: RemoteURL, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bytes:
        connection = h11.Connection(h11.CLIENT)
        request = h11.Request(
            method="GET",
            target=remote.target,
            headers=[
                ("Host", remote.host_header),
                ("Accept", "image/*"),
                ("Accept-Encoding", "identity"),
                ("User-Agent", f"mmobs/{__version__}"),
                ("Connection", "close"),
            ],
        )
        try:
            # h11 0.14 annotates send() as Optional[bytes]: it is None only for ConnectionClosed.
            writer.write((connection.send(request) or b"") + (connection.send(h11.EndOfMessage()) or b""))
            await writer.drain()
            chunks: list[bytes] = []
            size = 0
            while True:
                event = connection.next_event()
                if event is h11.NEED_DATA:
                    connection.receive_data(await reader.read(_READ_CHUNK))
                    continue
                if isinstance(event, h11.Response):
                    self._check_response(event)
                elif isinstance(event, h11.Data):
                    size += len(event.data)
                    if size > self.max_bytes:
                        raise BadImageError("too_large", f"the remote image is larger than {self.max_bytes} bytes")
                    chunks.append(bytes(event.data))
                elif isinstance(event, h11.EndOfMessage):
                    return b"".join(chunks)
                elif isinstance(event, h11.ConnectionClosed):
                    raise BadImageError("fetch_failed", "the server closed the connection without a response")
        except h11.RemoteProtocolError as error:
            raise BadImageError(
                "fetch_failed", f"the server's response is incomplete or malformed: {str(error)[:120]}"
            ) from None
        except (OSError, ssl.SSLError) as error:
            raise BadImageError(
                "fetch_failed", f"fetching the image failed: {type(error).__name__}: {str(error)[:150]}"
            ) from None

    def _check_response(self, response: h11.Response) -> None:
        if 300 <= response.status_code < 400:
            raise BadImageError(
                "fetch_failed", f"the server answered a redirect ({response.status_code}); redirects are not followed"
            )
        if response.status_code != 200:
            raise BadImageError("fetch_failed", f"the server answered HTTP {response.status_code}")
        for name, value in response.headers:
            if name == b"content-length" and value.isdigit() and int(value) > self.max_bytes:
                raise BadImageError(
                    "too_large", f"the remote image is {int(value)} bytes, above the limit of {self.max_bytes}"
                )


def _normalize_host(host: str) -> str:
    host = host.strip().lower().strip("[]")
    try:
        return ipaddress.ip_address(host).compressed
    except ValueError:
        return host
