"""Fetch remote images safely, for services that choose to allow it.

Off unless a host allow-list is configured. When on: only ``http``/``https``
URLs whose host is on the list; the connected peer must not be a private,
loopback, link-local or reserved address (checked on the socket actually
connected, so DNS rebinding cannot sneak one in); redirects are not followed;
the body is capped at ``max_bytes`` and the whole fetch at ``timeout_seconds``.
"""

from __future__ import annotations

import http.client
import ipaddress
import time
from urllib.parse import urlsplit

from .errors import BadImageError

__all__ = ["RemoteFetcher"]

_READ_CHUNK = 64 * 1024


def _is_private(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%")[0])
    return not ip.is_global or ip.is_multicast


class RemoteFetcher:
    """Fetch ``http(s)`` image URLs from allow-listed hosts with hard limits."""

    def __init__(
        self,
        allowed_hosts: tuple[str, ...] | list[str],
        *,
        max_bytes: int,
        timeout_seconds: float = 5.0,
        allow_private: bool = False,
    ) -> None:
        self.allowed_hosts = frozenset(h.lower().strip() for h in allowed_hosts if h.strip())
        self.max_bytes = max_bytes
        self.timeout = timeout_seconds
        self.allow_private = allow_private

    def fetch(self, url: str) -> bytes:
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        host = (parts.hostname or "").lower()
        if scheme not in ("http", "https") or not host:
            raise BadImageError("unsupported_url", "only http(s) URLs with a host can be fetched")
        if host not in self.allowed_hosts:
            raise BadImageError(
                "unsupported_url", f"the host {host[:100]!r} is not on this server's allow-list"
            )
        try:
            port = parts.port
        except ValueError:
            raise BadImageError("unsupported_url", "the URL has an invalid port") from None
        deadline = time.monotonic() + self.timeout
        connection_type = http.client.HTTPSConnection if scheme == "https" else http.client.HTTPConnection
        connection = connection_type(host, port, timeout=self.timeout)
        try:
            connection.connect()
            peer = connection.sock.getpeername()[0]
            if not self.allow_private and _is_private(peer):
                raise BadImageError("unsupported_url", "the URL resolves to a private address")
            path = parts.path or "/"
            if parts.query:
                path += "?" + parts.query
            connection.request("GET", path, headers={"Accept": "image/*", "User-Agent": "mmobs"})
            response = connection.getresponse()
            if 300 <= response.status < 400:
                raise BadImageError("fetch_failed", f"the server answered a redirect ({response.status}); redirects are not followed")
            if response.status != 200:
                raise BadImageError("fetch_failed", f"the server answered HTTP {response.status}")
            declared = response.getheader("content-length")
            if declared and declared.isascii() and declared.isdigit() and int(declared) > self.max_bytes:
                raise BadImageError("too_large", f"the remote image is {declared} bytes, above the limit of {self.max_bytes}")
            chunks, size = [], 0
            while True:
                if time.monotonic() > deadline:
                    raise BadImageError("fetch_failed", f"fetching took longer than {self.timeout} s")
                chunk = response.read(_READ_CHUNK)
                if not chunk:
                    break
                size += len(chunk)
                if size > self.max_bytes:
                    raise BadImageError("too_large", f"the remote image is larger than {self.max_bytes} bytes")
                chunks.append(chunk)
            return b"".join(chunks)
        except BadImageError:
            raise
        except (OSError, http.client.HTTPException) as error:
            raise BadImageError("fetch_failed", f"fetching the image failed: {type(error).__name__}: {str(error)[:150]}") from None
        finally:
            connection.close()
