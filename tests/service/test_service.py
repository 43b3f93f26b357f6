"""The reference service over real HTTP: ``mmobs serve`` under uvicorn on loopback, one server for the module.

Every test here talks to the module's one server (``service``, ``client``); the
last checks that none of them yielded a 5xx. Services started with options of
their own are in ``test_service_options.py``; what the request parsing does
without a server, in ``test_request_parsing.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from mmobs import ImageMediaIO, MultiModalHasher
from mmobs.events import observing
from mmobs.observability.fingerprint import compute_fingerprint
from tests.support import ServiceProcess, data_url, golden, images, metric_value

BAD_HEADER_JPEG = golden.input_bytes("bad-exif-header.jpg")
PHOTO_JPEG = golden.input_bytes("photo.jpg")
RGBA_PNG = golden.input_bytes("rgba.png")
FALLBACK = "mmobs_exif_fallback_total"


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    process = ServiceProcess(
        tmp_path_factory.mktemp("serve"), "--max-image-bytes", "200000", "--max-body-bytes", "1000000"
    )
    yield process
    process.stop()


@pytest.fixture(scope="module")
def client(service):
    with httpx.Client(base_url=service.url, timeout=30) as http:
        yield http


def offline_key(data: bytes, algorithm: str = "blake3", **extras: object) -> str:
    with observing(None):
        return MultiModalHasher.hash_kwargs(algorithm, image=ImageMediaIO().load_bytes(data), **extras)


def assert_error(response: httpx.Response, status: int, code: str, reason: str | None = None, param: str | None = None):
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    error = response.json()["error"]
    assert error["code"] == code
    assert error["type"] == "invalid_request_error"
    assert isinstance(error["message"], str) and len(error["message"]) > 10
    if reason is not None:
        assert error["reason"] == reason
    if param is not None:
        assert error["param"] == param
    return error


# -- the regression image end to end -------------------------------------------------------


def test_regression_jpeg_gets_200_golden_key_counter_and_log(service, client):
    before = metric_value(service.metrics(), FALLBACK, {"kind": "media_with_bytes", "exception": "SyntaxError"})
    response = client.post(
        "/v1/hash", json={"images": [data_url(BAD_HEADER_JPEG)]}, headers={"X-Request-ID": "regression-1"}
    )
    assert response.status_code == 200, response.text
    assert response.headers["x-request-id"] == "regression-1"
    (item,) = response.json()["items"]
    assert item["mm_hash"] == golden.case("media-bad-exif-header.jpg")["expected"]
    assert item["exif_fallback"] is True
    assert item["key_source"] == "original_bytes"
    assert (item["index"], item["width"], item["height"], item["mode"]) == (0, 64, 48, "RGB")
    after = metric_value(service.metrics(), FALLBACK, {"kind": "media_with_bytes", "exception": "SyntaxError"})
    assert after - before == 1
    events = [
        e for e in service.log_events() if e.get("event") == "exif_fallback" and e.get("request_id") == "regression-1"
    ]
    assert len(events) == 1
    assert events[0]["route"] == "/v1/hash" and events[0]["exception"] == "SyntaxError"
    assert events[0]["format"] == "JPEG" and events[0]["key_source"] == "original_bytes"


def test_golden_media_cases_over_http(client):
    for case in golden.cases():
        recipe = case["kwargs"].get("image", {})
        media = recipe.get("$media") if isinstance(recipe, dict) else None
        if media is None or len(case["kwargs"]) != 1:
            continue
        body = {"images": [data_url(golden.input_bytes(media["file"]))], "algorithm": case["algorithm"]}
        if "rgba_background_color" in media:
            body["rgba_background_color"] = media["rgba_background_color"]
        response = client.post("/v1/hash", json=body)
        assert response.status_code == 200, (case["id"], response.text)
        assert response.json()["items"][0]["mm_hash"] == case["expected"], case["id"]
        assert response.json()["items"][0]["exif_fallback"] is bool(case["exif_fallbacks"])


def test_extras_enter_the_key_only_when_given(client):
    kwargs = {"images_kwargs": {"max_pixels": 1003520}}
    body = {"images": [data_url(PHOTO_JPEG)], "model_id": "Qwen/Qwen2.5-VL-3B-Instruct", "mm_processor_kwargs": kwargs}
    response = client.post("/v1/hash", json=body)
    assert response.json()["items"][0]["mm_hash"] == golden.case("mm-hash-request")["expected"]
    plain = client.post("/v1/hash", json={"images": [data_url(PHOTO_JPEG)]}).json()["items"][0]["mm_hash"]
    assert plain == golden.case("media-photo.jpg")["expected"]


# -- request forms ---------------------------------------------------------------------------


def test_messages_form(client):
    body = {
        "messages": [
            {"role": "system", "content": "You describe images."},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What is this?"},
                    {"type": "image_url", "image_url": {"url": data_url(PHOTO_JPEG)}},
                    {"type": "image_url", "image_url": data_url(BAD_HEADER_JPEG)},
                ],
            },
        ],
        "algorithm": "sha256",
    }
    response = client.post("/v1/hash", json=body)
    assert response.status_code == 200, response.text
    payload = response.json()
    assert payload["algorithm"] == "sha256"
    assert [i["mm_hash"] for i in payload["items"]] == [
        offline_key(PHOTO_JPEG, "sha256"),
        offline_key(BAD_HEADER_JPEG, "sha256"),
    ]
    assert [i["exif_fallback"] for i in payload["items"]] == [False, True]


def test_multipart_form(client):
    files = [("image", ("a.jpg", PHOTO_JPEG, "image/jpeg")), ("image", ("b.jpg", BAD_HEADER_JPEG, "image/jpeg"))]
    response = client.post("/v1/hash", files=files, data={"algorithm": "sha512"})
    assert response.status_code == 200, response.text
    items = response.json()["items"]
    assert [i["mm_hash"] for i in items] == [offline_key(PHOTO_JPEG, "sha512"), offline_key(BAD_HEADER_JPEG, "sha512")]


def test_raw_body_form(client):
    response = client.post("/v1/hash?model_id=m1", content=RGBA_PNG, headers={"content-type": "image/png"})
    assert response.status_code == 200, response.text
    assert response.json()["items"][0]["mm_hash"] == offline_key(RGBA_PNG, model_id="m1")


def test_decode_options(client):
    body = {"images": [data_url(RGBA_PNG)], "image_mode": "RGBA"}
    item = client.post("/v1/hash", json=body).json()["items"][0]
    with observing(None):
        expected = MultiModalHasher.hash_kwargs("blake3", image=ImageMediaIO(image_mode="RGBA").load_bytes(RGBA_PNG))
    assert item["mm_hash"] == expected and item["mode"] == "RGBA"


# -- every refusal is a 4xx JSON error --------------------------------------------------------


BAD_IMAGES = {
    "empty": "data:image/png;base64,",
    "too_large": data_url(b"\x00" * 200_001),
    "unidentified": data_url(b"definitely not an image at all"),
    "truncated": data_url(images.jpeg_bytes()[:400]),
    "corrupt": data_url(images.png_with_garbage_idat(), "image/png"),
    "too_many_pixels": data_url(images.png_header_only(40000, 40000), "image/png"),
    "bad_base64": "data:image/png;base64,@@@not*base64",
    "bad_data_url": "data:image/png,not-base64-encoded",
    "unsupported_url": "https://example.com/cat.png",
}


@pytest.mark.parametrize("reason", sorted(BAD_IMAGES))
def test_every_bad_image_reason_is_a_400(service, client, reason):
    before = metric_value(service.metrics(), "mmobs_bad_images_total", {"reason": reason})
    body = {"images": [data_url(PHOTO_JPEG), data_url(PHOTO_JPEG), BAD_IMAGES[reason]]}
    response = client.post("/v1/hash", json=body)
    assert_error(response, 400, "bad_image", reason=reason, param="images[2]")
    after = metric_value(service.metrics(), "mmobs_bad_images_total", {"reason": reason})
    assert after - before == 1


def test_unsupported_mode_is_a_400(client):
    gray = golden.input_bytes("gray.png")
    response = client.post("/v1/hash", json={"images": [data_url(gray, "image/png")], "image_mode": "La"})
    assert_error(response, 400, "bad_image", reason="unsupported_mode", param="images[0]")


@pytest.mark.parametrize(
    ("content", "headers", "status", "code"),
    [
        (b"{not json", {"content-type": "application/json"}, 400, "invalid_json"),
        (b"", {"content-type": "application/json"}, 400, "invalid_json"),
        (b"[1, 2]", {"content-type": "application/json"}, 400, "invalid_request"),
        (b"\xff\xfe\x00", {"content-type": "application/json"}, 400, "invalid_json"),
        (b"[" * 100_000 + b"]" * 100_000, {"content-type": "application/json"}, 400, "invalid_json"),
        (b'{"images": []}', {"content-type": "application/json"}, 400, "invalid_request"),
        (b'{"images": "data:"}', {"content-type": "application/json"}, 400, "invalid_request"),
        (b'{"images": [1]}', {"content-type": "application/json"}, 400, "invalid_request"),
        (b'{"images": ["x"], "messages": []}', {"content-type": "application/json"}, 400, "invalid_request"),
        (
            b'{"messages": [{"content": [{"type": "image_url"}]}]}',
            {"content-type": "application/json"},
            400,
            "invalid_request",
        ),
        (b'{"messages": [{"content": "text only"}]}', {"content-type": "application/json"}, 400, "invalid_request"),
        (b'{"images": ["x"], "algorithm": "md5"}', {"content-type": "application/json"}, 400, "invalid_option"),
        (b'{"images": ["x"], "image_mode": "RGBZ"}', {"content-type": "application/json"}, 400, "invalid_option"),
        (
            b'{"images": ["x"], "rgba_background_color": [1, 2]}',
            {"content-type": "application/json"},
            400,
            "invalid_option",
        ),
        (b'{"images": ["x"], "model_id": 7}', {"content-type": "application/json"}, 400, "invalid_option"),
        (b'{"images": ["x"], "mm_processor_kwargs": [1]}', {"content-type": "application/json"}, 400, "invalid_option"),
        (b"hello", {"content-type": "text/plain"}, 415, "unsupported_media_type"),
        (b"--x\r\nbroken", {"content-type": "multipart/form-data; boundary=x"}, 400, "invalid_request"),
    ],
)
def test_malformed_requests_are_json_4xx(client, content, headers, status, code):
    assert_error(client.post("/v1/hash", content=content, headers=headers), status, code)


@pytest.mark.parametrize(
    ("option", "value"), [("image_mode", ["RGB"]), ("image_mode", "RGBZ"), ("rgba_background_color", [1, 2])]
)
def test_bad_decode_options_name_their_param(client, option, value):
    body = {"images": [data_url(PHOTO_JPEG)], option: value}
    assert_error(client.post("/v1/hash", json=body), 400, "invalid_option", param=option)


def test_deeply_nested_processor_kwargs_refused(client):
    nested: dict = {}
    cursor = nested
    for _ in range(40):
        cursor["a"] = {}
        cursor = cursor["a"]
    body = {"images": [data_url(PHOTO_JPEG)], "mm_processor_kwargs": nested}
    assert_error(client.post("/v1/hash", json=body), 400, "invalid_option", param="mm_processor_kwargs")


def test_oversized_body_is_413(client):
    body = b'{"images": ["' + b"A" * 1_100_000 + b'"]}'
    assert_error(
        client.post("/v1/hash", content=body, headers={"content-type": "application/json"}), 413, "payload_too_large"
    )


def test_oversized_body_without_content_length_is_413(client):
    def chunks():
        yield b'{"images": ["'
        for _ in range(40):
            yield b"A" * 50_000
        yield b'"]}'

    response = client.post("/v1/hash", content=chunks(), headers={"content-type": "application/json"})
    assert_error(response, 413, "payload_too_large")


def test_too_many_images(client):
    response = client.post("/v1/hash", json={"images": [data_url(PHOTO_JPEG)] * 65})
    assert_error(response, 400, "too_many_images")


def test_not_found_and_method_not_allowed_are_json(client):
    assert_error(client.get("/nowhere"), 404, "not_found")
    assert_error(client.get("/v1/hash"), 405, "method_not_allowed")


def test_nothing_yielded_a_5xx(service, client):
    """Runs after the others in this module: every request so far was answered below 500."""
    text = service.metrics()
    assert metric_value(text, "mmobs_http_requests_total", {"status_class": "5xx"}) == 0
    assert metric_value(text, "mmobs_http_requests_total", {"status_class": "4xx"}) > 20
    assert metric_value(text, "mmobs_http_image_requests_total", {"status_class": "5xx"}) == 0


def test_healthz(client):
    payload = client.get("/healthz").json()
    assert payload["status"] == "ok"

    assert payload["fingerprint"] == compute_fingerprint().digest


# -- bounded, validated input and messages that help ------------------------------------------------


@pytest.mark.parametrize(
    ("option", "value", "param"),
    [
        ("model_id", "qwen\ud800", "model_id"),
        ("mm_processor_kwargs", {"\ud800": 1}, "mm_processor_kwargs"),
        ("mm_processor_kwargs", {"images_kwargs": {"size": ["\udfff"]}}, "mm_processor_kwargs"),
        ("mm_processor_kwargs", {"zeros": [0] * 30_000}, "mm_processor_kwargs"),
        ("mm_processor_kwargs", {"big": 2**64}, "mm_processor_kwargs"),
        ("mm_processor_kwargs", {"text": "x" * 70_000}, "mm_processor_kwargs"),
    ],
)
def test_options_that_cannot_be_keyed_are_400(client, option, value, param):
    """Lone surrogates were a 500 (UnicodeEncodeError in hashing); 30,000 zeros cost a second per image."""
    body = json.dumps({"images": [data_url(PHOTO_JPEG)], option: value}).encode()  # surrogates escaped as \ud800
    headers = {"content-type": "application/json", "x-request-id": "opt-1"}
    response = client.post("/v1/hash", content=body, headers=headers)
    assert_error(response, 400, "invalid_option", param=param)
    assert response.headers["x-request-id"] == "opt-1"


@pytest.mark.parametrize("size", [200_000, 900_000])
def test_a_flood_of_json_values_is_refused_before_it_is_built(client, size):
    """Millions of empty lists cost seconds and gigabytes to parse; parsed here in the service or in a worker."""
    body = b'{"images": [' + b"[]," * (size // 3) + b'"x"]}'
    response = client.post("/v1/hash", content=body, headers={"content-type": "application/json"})
    error = assert_error(response, 400, "invalid_json")
    assert "more than 100000 values" in error["message"]


def test_integer_literals_are_bounded(client):
    body = b'{"images": ["x"], "mm_processor_kwargs": {"n": ' + b"9" * 4000 + b"}}"
    response = client.post("/v1/hash", content=body, headers={"content-type": "application/json"})
    error = assert_error(response, 400, "invalid_json")
    assert "more than 40 digits" in error["message"]


def test_a_large_json_body_is_parsed_off_the_event_loop_and_keys_the_same(client):
    """Over 256 KiB the body is parsed in a decode worker; the result is the same request."""
    text = "Describe, in detail, these images. " * 10_000
    parts = [{"type": "text", "text": text}, {"type": "image_url", "image_url": {"url": data_url(PHOTO_JPEG)}},
             {"type": "image_url", "image_url": data_url(BAD_HEADER_JPEG)}]  # fmt: skip
    body = {"messages": [{"role": "user", "content": parts}], "model_id": "m\u00e9"}
    assert len(json.dumps(body)) > 256 * 1024
    response = client.post("/v1/hash", json=body)
    assert response.status_code == 200, response.text
    items = response.json()["items"]
    assert [i["mm_hash"] for i in items] == [offline_key(PHOTO_JPEG, model_id="m\u00e9"),
                                             offline_key(BAD_HEADER_JPEG, model_id="m\u00e9")]  # fmt: skip
    assert [i["exif_fallback"] for i in items] == [False, True]


def test_a_binary_body_without_content_type_is_told_what_to_send(client):
    response = client.post("/v1/hash", content=PHOTO_JPEG)
    assert "content-type" not in response.request.headers
    error = assert_error(response, 415, "unsupported_media_type")
    assert "Content-Type: image/jpeg" in error["message"] and "utf-8" not in error["message"]
    error = assert_error(client.post("/v1/hash", content=b"\x00\x01binary"), 415, "unsupported_media_type")
    assert "not JSON" in error["message"]
    # Text that looks like JSON is still read as JSON, as before.
    assert client.post("/v1/hash", content=json.dumps({"images": [data_url(PHOTO_JPEG)]}).encode()).status_code == 200


def test_invalid_utf8_json_names_the_byte(client):
    response = client.post("/v1/hash", content=b'{"images": ["\xff"]}', headers={"content-type": "application/json"})
    error = assert_error(response, 400, "invalid_json")
    assert "0xff at offset 13" in error["message"] and "codec" not in error["message"]


def test_multipart_without_boundary_does_not_leak_the_status_into_the_message(client):
    response = client.post("/v1/hash", content=b"--x\r\n", headers={"content-type": "multipart/form-data"})
    error = assert_error(response, 400, "invalid_multipart")
    assert "400" not in error["message"] and "boundary" in error["message"]


@pytest.mark.parametrize(
    ("name", "options", "modes"),
    [
        ("rgba.png", {}, ("RGBA", "RGB")),
        ("gray.png", {}, ("L", "RGB")),
        ("palette.png", {}, ("P", "RGB")),
        ("rgba.png", {"image_mode": "RGBA"}, ("RGBA", "RGBA")),
        ("photo.jpg", {}, ("RGB", "RGB")),
    ],
)
def test_responses_name_the_source_mode_and_the_keyed_mode(client, name, options, modes):
    response = client.post("/v1/hash", json={"images": [data_url(golden.input_bytes(name), "image/png")], **options})
    item = response.json()["items"][0]
    assert (item["source_mode"], item["mode"]) == modes


def test_cli_hash_and_inspect_match_the_service(client, tmp_path: Path):
    import subprocess
    import sys

    path = tmp_path / "regression.jpg"
    path.write_bytes(BAD_HEADER_JPEG)
    result = subprocess.run(
        [sys.executable, "-m", "mmobs.cli", "hash", "--json", str(path)], capture_output=True, text=True, check=True
    )
    line = json.loads(result.stdout)
    served = client.post("/v1/hash", json={"images": [data_url(BAD_HEADER_JPEG)]}).json()["items"][0]
    assert line["mm_hash"] == served["mm_hash"]
    assert line["exif_fallback"] is True and line["exif_error"].startswith("SyntaxError: not a TIFF file")
