"""The remote fetcher: URL parsing, address checks, one deadline, exact bodies; and the service's use of it."""

from __future__ import annotations

import asyncio
import http.server
import json
import socket
import socketserver
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from mmobs.errors import BadImageError
from mmobs.service.fetch import RemoteFetcher, is_private_address, parse_remote_url
from tests.support import ServiceProcess, golden

PHOTO = golden.input_bytes("photo.jpg")


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _ImageServer

    def do_GET(self) -> None:
        self.server.hosts.append(self.headers.get("Host", ""))
        if self.path == "/redirect":
            self.send_response(302)
            self.send_header("Location", "http://169.254.169.254/latest/meta-data")
            self.end_headers()
        elif self.path == "/big":
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"\xff" * 300_000)
        elif self.path == "/big-declared":
            self.send_response(200)
            self.send_header("Content-Length", "300000")
            self.end_headers()
        elif self.path == "/drip-body":
            self.send_response(200)
            self.send_header("Content-Length", "100")
            self.end_headers()
            self._drip(b"x" * 100)
        elif self.path == "/drip-headers":
            self._drip(b"HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\nx")
        elif self.path == "/short":
            self.send_response(200)
            self.send_header("Content-Length", str(len(PHOTO)))
            self.end_headers()
            self.wfile.write(PHOTO[:1000])
        elif self.path == "/missing":
            self.send_response(404)
            self.end_headers()
        elif self.path == "/chunked":
            self.protocol_version = "HTTP/1.1"
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.send_header("Connection", "close")
            self.end_headers()
            for at in range(0, len(PHOTO), 1000):
                piece = PHOTO[at : at + 1000]
                self.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
            self.wfile.write(b"0\r\n\r\n")
        else:
            self.send_response(200)
            self.send_header("Content-Length", str(len(PHOTO)))
            self.end_headers()
            self.wfile.write(PHOTO)

    def _drip(self, data: bytes) -> None:
        try:
            for byte in data:
                self.wfile.write(bytes([byte]))
                self.wfile.flush()
                time.sleep(0.2)
        except OSError:
            pass  # the fetcher gave up: that is the point

    def log_message(self, *args: object) -> None:
        pass


class _ImageServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], family: int = socket.AF_INET) -> None:
        self.address_family = family
        self.connections = 0
        self.hosts: list[str] = []
        super().__init__(address, _Handler)

    def process_request(self, request: object, client_address: object) -> None:
        self.connections += 1
        super().process_request(request, client_address)  # type: ignore[arg-type]


def _serve(server: _ImageServer) -> Iterator[_ImageServer]:
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def origin() -> Iterator[_ImageServer]:
    yield from _serve(_ImageServer(("127.0.0.1", 0)))


def _url(server: _ImageServer, path: str, host: str = "127.0.0.1") -> str:
    return f"http://{host}:{server.server_address[1]}{path}"


def _fetcher(hosts: tuple[str, ...] = ("127.0.0.1",), **options: object) -> RemoteFetcher:
    defaults: dict[str, object] = {"max_bytes": 200_000, "timeout_seconds": 1.0, "allow_private": True}
    return RemoteFetcher(hosts, **{**defaults, **options})  # type: ignore[arg-type]


def _refusal(fetcher: RemoteFetcher, url: str) -> BadImageError:
    with pytest.raises(BadImageError) as caught:
        fetcher.fetch_blocking(url)
    return caught.value


# -- fetching ------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/photo.jpg", "/chunked"])
def test_fetcher_gets_allow_listed_image(origin: _ImageServer, path: str) -> None:
    assert _fetcher().fetch_blocking(_url(origin, path)) == PHOTO


@pytest.mark.parametrize(
    ("path", "reason", "words"),
    [
        ("/redirect", "fetch_failed", "redirect"),
        ("/big", "too_large", "larger than 200000"),
        ("/big-declared", "too_large", "300000 bytes"),
        ("/missing", "fetch_failed", "HTTP 404"),
        ("/short", "fetch_failed", "incomplete"),
    ],
)
def test_fetcher_limits(origin: _ImageServer, path: str, reason: str, words: str) -> None:
    error = _refusal(_fetcher(), _url(origin, path))
    assert (error.reason, words in error.message) == (reason, True), error.message


@pytest.mark.parametrize("path", ["/drip-body", "/drip-headers"])
def test_one_deadline_for_the_whole_fetch(origin: _ImageServer, path: str) -> None:
    """An origin sending a byte every 0.2 s never lets a read time out; the fetch still ends at its deadline."""
    started = time.monotonic()
    error = _refusal(_fetcher(timeout_seconds=1.0), _url(origin, path))
    elapsed = time.monotonic() - started
    assert error.reason == "fetch_failed" and "longer than 1 s" in error.message
    # The drips last 8 s and more; the upper bound leaves room for a loaded machine and still
    # tells a deadline from a per-read timeout that the drip would keep resetting.
    assert 1.0 <= elapsed < 4.0, elapsed


def test_private_peer_is_refused_before_any_connection(origin: _ImageServer) -> None:
    before = origin.connections
    error = _refusal(_fetcher(allow_private=False), _url(origin, "/photo.jpg"))
    assert error.reason == "unsupported_url" and "private" in error.message and "127.0.0.1" in error.message
    assert origin.connections == before, "the fetcher connected to a private address before checking it"


def test_resolves_once_checks_every_address_and_connects_to_the_checked_one(origin: _ImageServer) -> None:
    calls: list[tuple[str, int]] = []

    def resolver(addresses: list[str]):  # type: ignore[no-untyped-def]
        async def resolve(host: str, port: int) -> list[str]:
            calls.append((host, port))
            return addresses

        return resolve

    port = origin.server_address[1]
    url = f"http://images.test:{port}/photo.jpg"
    mixed = RemoteFetcher(
        ["images.test"], max_bytes=200_000, timeout_seconds=1.0, resolver=resolver(["93.184.216.34", "127.0.0.1"])
    )
    before = origin.connections
    error = _refusal(mixed, url)
    assert error.reason == "unsupported_url" and "(127.0.0.1)" in error.message
    assert calls == [("images.test", port)] and origin.connections == before
    # Allowed to reach loopback (tests only): connects to the address it resolved, names the host in Host.
    calls.clear()
    loopback = RemoteFetcher(["images.test"], max_bytes=200_000, timeout_seconds=1.0, allow_private=True,
                             resolver=resolver(["127.0.0.1"]))  # fmt: skip
    assert loopback.fetch_blocking(url) == PHOTO
    assert calls == [("images.test", port)]
    assert origin.hosts[-1] == f"images.test:{port}"


def test_ipv6_literal_is_split_right() -> None:
    try:
        server = _ImageServer(("::1", 0), socket.AF_INET6)
    except OSError:
        pytest.skip("no IPv6 loopback here")
    for running in _serve(server):
        port = running.server_address[1]
        assert _fetcher(("::1",)).fetch_blocking(f"http://[::1]:{port}/photo.jpg") == PHOTO
        assert running.hosts[-1] == f"[::1]:{port}"
    remote = parse_remote_url("https://[2001:DB8::1]/x.png?a=1")
    assert (remote.host, remote.port, remote.target, remote.host_header) == (
        "2001:db8::1",
        443,
        "/x.png?a=1",
        "[2001:db8::1]",
    )


# -- what is refused without any network -------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "http://[::1/x",  # unclosed bracket
        "http://[abc]/x",  # not an IPv6 address
        "http://\u2100.example/x",  # NFKC turns the netloc into "a/c.example"
        "http://127.0.0.1:99999/x",  # port out of range
        "http://127.0.0.1:0/x",
        "http://127.0.0.1:8a/x",
        "http://user:secret@127.0.0.1/x",
        "http://127.0.0.1/a b",
        "http://127.0.0.1/\x1b[31m\r\nX-Injected: 1",
        "http://2130706433/x",  # a decimal IPv4 address getaddrinfo would accept
        "http:///nohost",
        "ftp://127.0.0.1/x.png",
        "file:///etc/passwd",
        "http://evil.example/x.png",
        "http://127.0.0.1.evil.example/x.png",
        "http://\ud800/x",
    ],
)
def test_every_unparseable_or_unlisted_url_is_unsupported_url(url: str) -> None:
    error = _refusal(_fetcher(), url)
    assert error.reason == "unsupported_url", error.message


def test_a_host_off_the_list_names_the_option() -> None:
    error = _refusal(_fetcher(), "http://evil.example/x.png")
    assert "--allow-remote-host" in error.message and "'evil.example'" in error.message


@pytest.mark.parametrize(
    ("address", "private"),
    [
        ("8.8.8.8", False),
        ("2001:4860:4860::8888", False),
        ("127.0.0.1", True),
        ("10.1.2.3", True),
        ("100.64.0.1", True),  # carrier-grade NAT
        ("169.254.169.254", True),  # cloud metadata
        ("224.0.0.1", True),
        ("0.0.0.0", True),
        ("::1", True),
        ("fe80::1", True),
        ("fd00::1", True),
        ("::ffff:127.0.0.1", True),  # IPv4-mapped
        ("::ffff:169.254.169.254", True),
        ("::127.0.0.1", True),  # IPv4-compatible
        ("::a9fe:a9fe", True),
        ("64:ff9b::7f00:1", True),  # NAT64 of 127.0.0.1
        ("64:ff9b::a9fe:a9fe", True),  # NAT64 of 169.254.169.254
        ("64:ff9b::808:808", False),  # NAT64 of 8.8.8.8
        ("64:ff9b:1::808:808", True),  # local-use NAT64
        ("2002:7f00:1::", True),  # 6to4 of 127.0.0.1
        ("2002:a9fe:a9fe::1", True),
        ("2002:808:808::1", False),  # 6to4 of 8.8.8.8
        ("2001:0:4136:e378:8000:63bf:3fff:fdd2", True),  # Teredo
    ],
)
def test_address_classification(address: str, private: bool) -> None:
    assert is_private_address(address) is private


# -- the service ----------------------------------------------------------------------------------


def test_service_fetches_only_when_allowed(tmp_path: Path, origin: _ImageServer) -> None:
    url = _url(origin, "/photo.jpg")
    default = ServiceProcess(tmp_path, "--decode-workers", "1")
    try:
        response = httpx.post(default.url + "/v1/hash", json={"images": [url]})
        assert response.status_code == 400 and response.json()["error"]["reason"] == "unsupported_url"
        assert "--allow-remote-host" in response.json()["error"]["message"]
    finally:
        default.stop()
    allowed = ServiceProcess(
        tmp_path, "--allow-remote-host", "127.0.0.1", "--fetch-allow-private", "--decode-workers", "1"
    )
    try:
        response = httpx.post(allowed.url + "/v1/hash", json={"images": [url]})
        assert response.status_code == 200, response.text
        assert response.json()["items"][0]["mm_hash"] == golden.case("media-photo.jpg")["expected"]
        redirect = httpx.post(allowed.url + "/v1/hash", json={"images": [_url(origin, "/redirect")]})
        assert redirect.status_code == 400 and redirect.json()["error"]["reason"] == "fetch_failed"
    finally:
        allowed.stop()


def test_unparseable_urls_are_400_with_a_request_id_over_http(tmp_path: Path) -> None:
    """Each of these was a 500 (urlsplit raising outside the fetcher) once any host was allowed."""
    process = ServiceProcess(tmp_path, "--allow-remote-host", "images.example", "--decode-workers", "1")
    try:
        urls = ["http://[::1/x", "http://[abc]/x", "http://\u2100.example/x", "http://images.example:99999/x",
                "http://images.example/\x1b[2J\r\n{\"event\": \"forged\"}", "http://\ud800/x"]  # fmt: skip
        with httpx.Client(base_url=process.url, timeout=10) as client:
            for index, url in enumerate(urls):
                body = json.dumps({"images": [url]}).encode()  # lone surrogates and controls escaped
                response = client.post("/v1/hash", content=body, headers={"content-type": "application/json",
                                                                          "x-request-id": f"url-{index}"})  # fmt: skip
                assert response.status_code == 400, (url, response.text)
                assert response.json()["error"]["reason"] == "unsupported_url", (url, response.text)
                assert response.headers["x-request-id"] == f"url-{index}"
        refusals = [e for e in process.log_events() if e.get("event") == "bad_image"]
        assert sorted(e["request_id"] for e in refusals) == sorted(f"url-{i}" for i in range(len(urls)))
        logs = process.logs()
        assert "\x1b" not in logs and '"forged"' not in logs.replace('\\"forged\\"', "")
        assert "Traceback" not in logs
    finally:
        process.stop()


def test_fetch_never_blocks_the_event_loop(origin: _ImageServer) -> None:
    """The fetch is a coroutine: two dripping origins are waited for together, not one after the other."""

    async def both() -> float:
        fetcher = _fetcher(timeout_seconds=0.6)
        started = time.monotonic()
        url = _url(origin, "/drip-body")
        results = await asyncio.gather(*(fetcher.fetch(url) for _ in range(2)), return_exceptions=True)
        assert all(isinstance(r, BadImageError) and r.reason == "fetch_failed" for r in results), results
        return time.monotonic() - started

    assert asyncio.run(both()) < 1.1
