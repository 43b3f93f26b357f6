"""The bad-input corpus (``scripts/corpus``) against a real ``mmobs serve``.

One service process for the module. Every case goes over HTTP (images as data
URLs in ``{"images": [...]}``, URLs as they are, raw requests byte for byte)
and must get the answer the corpus expects: never a 5xx, every refusal an
OpenAI-style JSON error with the expected code and reason, every 200 with the
expected ``exif_fallback``. The last test checks that the service's counters
moved by exactly what the responses reported: one ``mmobs_exif_fallback_total``
per item with ``exif_fallback: true``, one ``mmobs_bad_images_total`` per
``bad_image`` refusal.

Every image case is also loaded in-process: the loader may raise only
``BadImageError`` (with the expected reason), hashing a loaded image raises
nothing, a fallback is counted whenever it runs, and the key is then the
fallback key (the original bytes), so the fallback can never change it.
"""

from __future__ import annotations

import json
import re
import select
import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from blake3 import blake3
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from mmobs.errors import BAD_IMAGE_REASONS, BadImageError
from mmobs.events import RecordingObserver, observing
from mmobs.keys.hashing import MultiModalHasher
from mmobs.keys.loader import ImageMediaIO
from mmobs.keys.media import MediaWithBytes
from mmobs.observability.instrument import Instrumentation
from mmobs.observability.metrics import EXCEPTION_LABELS, exception_label
from scripts import corpus as make_corpus
from tests.support import ServiceProcess, data_url, metric_value

ROOT = Path(__file__).resolve().parents[2]
# Pillow warns about every corrupt EXIF block and near-bomb it meets; that is the corpus.
pytestmark = [
    pytest.mark.filterwarnings("ignore::UserWarning"),
    pytest.mark.filterwarnings("ignore::PIL.Image.DecompressionBombWarning"),
]


CASES = make_corpus.build_corpus()
IMAGE_CASES = [case for case in CASES if case.kind == "image"]
FALLBACK = "mmobs_exif_fallback_total"
BAD_IMAGES = "mmobs_bad_images_total"
HEX_KEY = re.compile(r"[0-9a-f]{64}")

#: What the HTTP responses reported, for the counter check at the end of the module.
LEDGER: dict[str, int] = {"fallback_items": 0, "bad_image_refusals": 0, "cases": 0, "options": 0}


class _NullLogger:
    def _ignore(self, *args: object, **kwargs: object) -> None:
        return None

    info = warning = error = debug = _ignore


def loader() -> ImageMediaIO:
    """The loader the service builds for a request without options."""
    return ImageMediaIO(max_pixels=make_corpus.IMAGE_MAX_PIXELS, max_bytes=make_corpus.IMAGE_MAX_BYTES)


def fallback_key(media: MediaWithBytes, algorithm: str = "blake3") -> str:
    """``hash_kwargs(algorithm, image=media)`` when the key comes from the original bytes."""
    value: object = media.original_bytes
    if media.io_config:
        value = {"io_config": media.io_config, "data": media.original_bytes}
    assert algorithm == "blake3"
    digest = blake3()
    digest.update(struct.pack("<Q", 5) + b"image" + b"\x03")
    for chunk in MultiModalHasher.iter_item_to_bytes("image", value):
        digest.update(chunk)
    return digest.hexdigest()


# -- the corpus itself ---------------------------------------------------------------------


def test_corpus_is_large_and_varied() -> None:
    names = [case.name for case in CASES]
    assert len(names) == len(set(names))
    assert len(CASES) >= 30
    kinds = {case.kind for case in CASES}
    assert kinds == {"image", "url", "request"}
    for case in CASES:
        assert case.expect[0] in ("ok", "error", "not_5xx"), case
        assert not case.only_not_5xx or case.kind == "request", case.name
        if case.expect[0] == "error":
            _, status, code, reason = case.expect
            assert 400 <= status < 500, case.name
            assert (reason in BAD_IMAGE_REASONS) if code == "bad_image" else reason is None, case.name
    # Every reason the loader or the URL parser can give is exercised (fetching is off).
    reasons = {case.reason for case in CASES if case.code == "bad_image"}
    assert reasons >= set(BAD_IMAGE_REASONS) - {"fetch_failed"}
    # Each format is truncated and bombed; EXIF is broken in every container.
    for ext in ("jpg", "png", "webp", "gif", "tif", "bmp"):
        assert any(n.startswith("truncated-") and n.endswith(ext) for n in names), ext
        assert any(n.startswith("bomb-") and n.endswith(ext) for n in names), ext
    for ext in ("jpg", "png", "webp"):
        assert sum(n.startswith("exif-") and n.endswith(ext) for n in names) >= 30, ext
    assert sum(n.startswith("tiff-") for n in names) >= 15


CANARIES = {
    "exif-bad-tiff-header.jpg": "SyntaxError",  # the vLLM #56527 image
    "exif-short-tiff-header.jpg": "error",  # struct.error
    "exif-bad-tiff-header-l.png": "SyntaxError",
    "raw-profile-exif-bad-hex-l.png": "ValueError",
    "tiff-xmp-short-with-orientation.tif": "TypeError",  # found by the fuzzer
}


@pytest.mark.parametrize(("name", "exception"), sorted(CANARIES.items()))
def test_canary_pillow_still_raises_on_the_known_bad_exif(name: str, exception: str) -> None:
    """Fails loudly if this Pillow stops raising where the fallback is meant to run.

    Without these, every fallback assertion in this module could pass vacuously.
    """
    case = next(case for case in CASES if case.name == name)
    assert case.fallback
    recorder = RecordingObserver()
    with observing(recorder):
        MultiModalHasher.hash_kwargs("blake3", image=loader().load_bytes(case.payload))
    raised = [type(event.error).__name__ for event in recorder.fallbacks]
    assert raised == [exception], f"{name}: Pillow now raises {raised} here (expected [{exception!r}])"
    assert sum(case.fallback for case in CASES) >= 10


def test_make_corpus_writes_the_files(tmp_path: Path) -> None:
    written = make_corpus.write_corpus(tmp_path)
    assert len(written) == len(CASES)
    index = (tmp_path / "index.json").read_text()
    for case in CASES:
        assert f'"{case.name}"' in index
    assert (tmp_path / "images" / "exif-bad-tiff-header.jpg").read_bytes() == next(
        case.payload for case in CASES if case.name == "exif-bad-tiff-header.jpg"
    )


# -- in-process: the loader and the hasher --------------------------------------------------


@pytest.fixture(scope="module")
def private_instrumentation() -> Instrumentation:
    """Counters in a registry of their own, so the global metrics never move here."""
    return Instrumentation(CollectorRegistry(), logger=_NullLogger(), drift=None, hasher_info=False)


def _fallbacks_counted(instrumentation: Instrumentation) -> float:
    return sum(
        sample.value
        for family in instrumentation.metrics.exif_fallbacks.collect()
        for sample in family.samples
        if sample.name == FALLBACK
    )


@pytest.mark.parametrize("case", IMAGE_CASES, ids=[case.name for case in IMAGE_CASES])
def test_image_case_in_process(case: Any, private_instrumentation: Instrumentation) -> None:
    recorder = RecordingObserver(private_instrumentation)
    counted_before = _fallbacks_counted(private_instrumentation)
    with observing(recorder):
        try:
            media = loader().load_bytes(case.payload)
        except BadImageError as error:
            assert not case.ok, f"{case.name}: refused as {error.reason}: {error.message}"
            assert error.reason == case.reason, f"{case.name}: {error.reason}: {error.message}"
            assert len(recorder.bad_images) == 1  # reported exactly once
            return
        # Anything but BadImageError escaping load_bytes fails the test right here.
        assert case.ok, f"{case.name}: loaded, but {case.expect} was expected"
        assert recorder.bad_images == []
        key = MultiModalHasher.hash_kwargs("blake3", image=media)
        fallbacks = list(recorder.fallbacks)
        plain = MultiModalHasher.hash_kwargs("blake3", image=media.media)
    assert HEX_KEY.fullmatch(key) and HEX_KEY.fullmatch(plain)
    assert len(fallbacks) == int(case.fallback), (
        f"{case.name}: expected exif_fallback={case.fallback}, events: "
        f"{[f'{type(f.error).__name__}: {f.error}' for f in fallbacks]}"
    )
    # Every swallowed exception was counted, under a known label.
    assert _fallbacks_counted(private_instrumentation) - counted_before == len(recorder.fallbacks)
    for event in recorder.fallbacks:
        assert exception_label(type(event.error)) in EXCEPTION_LABELS
        assert exception_label(type(event.error)) != "other", repr(event.error)
    assert [event.key_source for event in recorder.keyed] == ["original_bytes", "pixels"]
    # The fallback key is the original-bytes key: a fallback never changes the key.
    assert key == fallback_key(media)


# -- over HTTP --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    process = ServiceProcess(tmp_path_factory.mktemp("corpus-serve"), *make_corpus.SERVE_ARGS)
    yield process
    process.stop()


@pytest.fixture(scope="module")
def client(service: ServiceProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=service.url, timeout=60) as http:
        yield http


@pytest.fixture(scope="module")
def baseline(service: ServiceProcess) -> dict[str, float]:
    text = service.metrics()
    return {"fallbacks": metric_value(text, FALLBACK), "bad_images": metric_value(text, BAD_IMAGES)}


def send(client: httpx.Client, case: Any, port: int) -> httpx.Response:
    if case.kind == "image":
        return client.post("/v1/hash", json={"images": [data_url(case.payload, case.media_type)]})
    if case.kind == "url":
        return client.post("/v1/hash", json={"images": [case.payload]})
    if case.transport in ("socket", "trickle", "cut"):
        return raw_exchange(port, case)
    headers = {"content-type": case.content_type, **dict(case.headers)}
    body: Any = case.payload
    if case.transport == "chunked":
        payload = case.payload

        def chunks() -> Iterator[bytes]:
            for at in range(0, len(payload), 64 * 1024):
                yield payload[at : at + 64 * 1024]

        body = chunks()
    return client.request(case.method, case.path, content=body, headers=headers)


def raw_exchange(port: int, case: Any) -> httpx.Response:
    """Write the request verbatim on a socket (``trickle``: 4 KiB at a time) and parse the answer."""
    headers = [("Host", f"127.0.0.1:{port}"), ("Connection", "close"), ("Content-Type", case.content_type)]
    names = {name.lower() for name, _ in case.headers}
    if not names & {"content-length", "transfer-encoding"}:
        headers.append(("Content-Length", str(len(case.payload))))
    head = f"{case.method} {case.path} HTTP/1.1\r\n".encode() + b"".join(
        f"{name}: {value}\r\n".encode("latin-1") for name, value in [*headers, *case.headers]
    )
    data = head + b"\r\n" + case.payload
    if case.transport == "cut":
        data = data[: len(data) - len(case.payload) // 2]
    piece = 4096 if case.transport == "trickle" else len(data)
    received = b""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        try:
            for at in range(0, len(data), piece):
                sock.sendall(data[at : at + piece])
                if case.transport == "trickle" and select.select([sock], [], [], 0.005)[0]:
                    break  # the server answered early: stop writing, read it
        except OSError:
            pass  # the server refused and closed while we wrote; its answer may still be readable
        if case.transport == "cut":
            sock.shutdown(socket.SHUT_WR)  # the client gives up on the upload
        try:
            while chunk := sock.recv(65536):
                received += chunk
        except ConnectionResetError:
            pass
    status_line, _, rest = received.partition(b"\r\n")
    if not status_line.startswith(b"HTTP/1.1 "):
        raise httpx.RemoteProtocolError(f"no HTTP response, got {received[:200]!r}")
    header_block, _, body = rest.partition(b"\r\n\r\n")
    parsed = [tuple(line.decode("latin-1").split(":", 1)) for line in header_block.split(b"\r\n") if b":" in line]
    response_headers = [(name.strip(), value.strip()) for name, value in parsed]
    response_headers = [(n, v) for n, v in response_headers if n.lower() not in ("content-length", "transfer-encoding")]
    return httpx.Response(int(status_line.split()[1]), headers=response_headers, content=body)


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_case_over_http(case: Any, service: ServiceProcess, client: httpx.Client, baseline: dict[str, float]) -> None:
    LEDGER["cases"] += 1
    if case.only_not_5xx:
        # The answer may never reach us: the service's own request counter must say "not a 5xx".
        server_errors = metric_value(service.metrics(), "mmobs_http_requests_total", {"status_class": "5xx"})
        try:
            response = send(client, case, service.port)
        except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError):
            response = None  # the server closed the connection without an answer
        if response is not None:
            assert response.status_code < 500, f"{case.name}: {response.status_code} {response.text[:500]}"
            document = response.json() if response.headers.get("content-type") == "application/json" else {}
            LEDGER["fallback_items"] += response.status_code == 200 and document["items"][0]["exif_fallback"]
            LEDGER["bad_image_refusals"] += document.get("error", {}).get("code") == "bad_image"
        moved = _settled_5xx(service) - server_errors
        assert moved == 0, (
            f"{case.name}: the service counted {moved:g} server error(s) for this input; "
            f"its log ends with:\n{service.logs()[-3000:]}"
        )
        return
    response = send(client, case, service.port)
    assert response.status_code < 500, f"{case.name}: {response.status_code} {response.text[:500]}"
    if case.ok:
        assert response.status_code == 200, f"{case.name}: {response.status_code} {response.text[:500]}"
        items = response.json()["items"]
        assert len(items) == 1
        item = items[0]
        LEDGER["fallback_items"] += bool(item["exif_fallback"])
        assert item["exif_fallback"] is case.fallback, f"{case.name}: {item}"
        assert item["key_source"] == "original_bytes"
        assert HEX_KEY.fullmatch(item["mm_hash"])
        if case.kind == "image":
            with observing(None):
                assert item["mm_hash"] == MultiModalHasher.hash_kwargs(
                    "blake3", image=loader().load_bytes(case.payload)
                )
        return
    if case.code is None:
        # Refused by the HTTP server (h11) before mmobs saw the request: any 4xx will do.
        assert 400 <= response.status_code < 500, f"{case.name}: {response.status_code}"
        return
    assert response.status_code == case.status, f"{case.name}: {response.status_code} {response.text[:500]}"
    assert response.headers["content-type"] == "application/json"
    document = response.json()
    assert set(document) == {"error"}, document
    error = document["error"]
    assert error["code"] == case.code, f"{case.name}: {error}"
    assert error["type"] == "invalid_request_error"
    assert isinstance(error["message"], str) and error["message"]
    if case.code == "bad_image":
        LEDGER["bad_image_refusals"] += 1
        assert error["reason"] == case.reason, f"{case.name}: {error}"
    else:
        assert "reason" not in error


# -- request options, searched by Hypothesis (same service, same ledger) -------------------------

#: Every character str.isdigit() accepts (int() takes only the decimal ones): option parsers test with it.
_DIGITS = [c for c in map(chr, range(0x30000)) if c.isdigit()]
_digitish = st.text(st.sampled_from(_DIGITS), min_size=1, max_size=3)
_scalar = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=12),
    _digitish,
)
_json_value = st.recursive(
    _scalar,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=12,
)
_option_values = {
    "algorithm": st.one_of(st.sampled_from(["blake3", "sha256", "sha512", "md5", "BLAKE3", ""]), _json_value),
    "image_mode": st.one_of(st.sampled_from(["RGB", "L", "RGBA", "P", "La", "I;16", "BGR;15", "rgb"]), _json_value),
    "rgba_background_color": st.one_of(
        st.lists(st.one_of(st.integers(-5, 300), _digitish, st.text(max_size=3)), max_size=4), _json_value
    ),
    "model_id": st.one_of(st.text(max_size=20), _json_value),
    "mm_processor_kwargs": _json_value,
}
_options = st.fixed_dictionaries({}, optional=_option_values)  # type: ignore[arg-type]


def _as_text(value: object) -> str:
    if isinstance(value, list):
        return ",".join(_as_text(item) for item in value)
    return value if isinstance(value, str) else json.dumps(value)


@settings(
    derandomize=True, max_examples=250, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(options=_options, form=st.sampled_from(["json", "query", "multipart"]), good_image=st.booleans())
# What the search found first (a superscript digit in a comma-separated colour), pinned:
@example(options={"rgba_background_color": ["\u00b2", "1", "1"]}, form="query", good_image=True)
@example(options={"rgba_background_color": ["\u00b2", "1", "1"]}, form="multipart", good_image=True)
def test_request_options_never_5xx(
    options: dict[str, Any],
    form: str,
    good_image: bool,
    service: ServiceProcess,
    client: httpx.Client,
    baseline: dict[str, float],
) -> None:
    """Any option values, in any of the three request forms: a 200 or a JSON 4xx, never a 5xx."""
    image = _OPTION_IMAGES[good_image]
    LEDGER["options"] = 1
    if form == "json":
        response = client.post("/v1/hash", json={"images": [data_url(image, "image/png")], **options})
    elif form == "query":
        params = {name: _as_text(value) for name, value in options.items()}
        response = client.post("/v1/hash", params=params, content=image, headers={"content-type": "image/png"})
    else:
        data = {name: _as_text(value) for name, value in options.items()}
        response = client.post("/v1/hash", data=data, files={"file": ("x.png", image, "image/png")})
    assert response.status_code < 500, f"{form} {options!r}: {response.status_code} {response.text[:300]}"
    document = response.json()
    if response.status_code == 200:
        LEDGER["fallback_items"] += sum(bool(item["exif_fallback"]) for item in document["items"])
    else:
        assert 400 <= response.status_code < 500 and set(document) == {"error"}, document
        LEDGER["bad_image_refusals"] += document["error"]["code"] == "bad_image"


_OPTION_IMAGES = {
    True: make_corpus.encode(make_corpus.noisy((6, 4), seed=9, mode="RGBA"), "PNG"),
    False: make_corpus.png_with_exif(
        b"XXXX\x00\x00\x00\x08", make_corpus.encode(make_corpus.noisy((6, 4), seed=9, mode="L"), "PNG")
    ),
}


def _settled_5xx(service: ServiceProcess) -> float:
    """The 5xx count once the service has finished with the request (it may outlive our socket)."""
    deadline = time.monotonic() + 2.0
    value = metric_value(service.metrics(), "mmobs_http_requests_total", {"status_class": "5xx"})
    while time.monotonic() < deadline:
        time.sleep(0.1)
        again = metric_value(service.metrics(), "mmobs_http_requests_total", {"status_class": "5xx"})
        if again == value:
            return value
        value = again
    return value


def test_counters_moved_by_exactly_what_the_responses_reported(
    service: ServiceProcess, client: httpx.Client, baseline: dict[str, float]
) -> None:
    """Runs after every case above: fallbacks and refusals were each counted once."""
    text = service.metrics()
    assert metric_value(text, FALLBACK) - baseline["fallbacks"] == LEDGER["fallback_items"]
    assert metric_value(text, BAD_IMAGES) - baseline["bad_images"] == LEDGER["bad_image_refusals"]
    if LEDGER["cases"] == len(CASES) and not LEDGER.get("options"):  # the whole corpus and nothing else ran
        assert LEDGER["fallback_items"] == sum(case.fallback for case in CASES)
        assert LEDGER["bad_image_refusals"] == sum(case.code == "bad_image" for case in CASES)
        assert LEDGER["fallback_items"] >= 10
    assert metric_value(text, "mmobs_http_requests_total", {"status_class": "5xx"}) == 0
    assert "Traceback" not in service.logs()
