"""Raw HTTP request cases: bodies, options, paths, methods, headers and framings."""

from __future__ import annotations

import json

from .base import base_image, data_url, encode
from .case import BODY_MAX_BYTES, NOT_5XX, Case, bad, ok, refused
from .exif_cases import _mode_image


def multipart_field(name: str, value: str, boundary: str) -> bytes:
    """A multipart body with one text field and one valid PNG file."""
    return (
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="x.png"\r\n'
            "Content-Type: image/png\r\n\r\n"
        ).encode()
        + base_image("PNG")
        + f"\r\n--{boundary}--\r\n".encode()
    )


def _request_cases() -> list[Case]:
    url = data_url(base_image("PNG"), "image/png")
    good = json.dumps({"images": [url]}).encode()
    nested: dict = {}
    cursor = nested
    for _ in range(20):
        cursor["k"] = {}
        cursor = cursor["k"]
    nested_wide: list = [[[]] * 50] * 50  # small depth, many nodes
    boundary = "mmobs-boundary"
    multipart_text = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="algorithm"\r\n\r\nblake3\r\n--{boundary}--\r\n'
    ).encode()
    multipart_bad_image = (
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="x.png"\r\n'
            f"Content-Type: image/png\r\n\r\n"
        ).encode()
        + b"\x89PNG not really"
        + f"\r\n--{boundary}--\r\n".encode()
    )
    gray_url = data_url(encode(_mode_image("L"), "PNG"), "image/png")
    cases = [
        Case("req-malformed-json", "request", b'{"images": [', refused(400, "invalid_json")),
        Case("req-empty-body", "request", b"", refused(400, "invalid_json")),
        Case("req-json-not-utf8", "request", b'{"images": ["\xff\xfe"]}', refused(400, "invalid_json")),
        Case("req-json-array", "request", b"[1, 2, 3]", refused(400, "invalid_request")),
        Case("req-json-string", "request", b'"images"', refused(400, "invalid_request")),
        Case("req-json-null", "request", b"null", refused(400, "invalid_request")),
        Case("req-neither-images-nor-messages", "request", b'{"model_id": "m"}', refused(400, "invalid_request")),
        Case(
            "req-both-images-and-messages",
            "request",
            b'{"images": ["x"], "messages": []}',
            refused(400, "invalid_request"),
        ),
        Case(
            "req-images-not-list",
            "request",
            b'{"images": "data:image/png;base64,AAAA"}',
            refused(400, "invalid_request"),
        ),
        Case("req-images-empty", "request", b'{"images": []}', refused(400, "invalid_request")),
        Case("req-images-int", "request", b'{"images": [7]}', refused(400, "invalid_request")),
        Case("req-images-null", "request", b'{"images": [null]}', refused(400, "invalid_request")),
        Case("req-images-nan", "request", b'{"images": [NaN]}', refused(400, "invalid_request")),
        Case("req-images-huge-number", "request", b'{"images": [1e999]}', refused(400, "invalid_request")),
        Case(
            "req-images-object-without-url", "request", b'{"images": [{"uri": "x"}]}', refused(400, "invalid_request")
        ),
        Case("req-images-object-url-int", "request", b'{"images": [{"url": 5}]}', refused(400, "invalid_request")),
        Case("req-images-object-ok", "request", json.dumps({"images": [{"url": url}]}).encode(), ok(False)),
        Case("req-messages-not-list", "request", b'{"messages": {"content": []}}', refused(400, "invalid_request")),
        Case(
            "req-messages-no-image",
            "request",
            b'{"messages": [{"role": "user", "content": "hi"}]}',
            refused(400, "invalid_request"),
        ),
        Case(
            "req-messages-part-not-object",
            "request",
            b'{"messages": [{"content": [5]}]}',
            refused(400, "invalid_request"),
        ),
        Case("req-messages-content-int", "request", b'{"messages": [{"content": 5}]}', refused(400, "invalid_request")),
        Case(
            "req-messages-image-url-missing",
            "request",
            b'{"messages": [{"content": [{"type": "image_url"}]}]}',
            refused(400, "invalid_request"),
        ),
        Case(
            "req-messages-bad-image",
            "request",
            b'{"messages": [{"content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}]}',
            bad("unidentified"),
        ),
        Case("req-deep-nesting-arrays", "request", b"[" * 100_000 + b"]" * 100_000, refused(400, "invalid_json")),
        Case(
            "req-deep-nesting-objects",
            "request",
            b'{"a":' * 50_000 + b"1" + b"}" * 50_000,
            refused(400, "invalid_json"),
        ),
        Case(
            "req-deep-processor-kwargs",
            "request",
            json.dumps({"images": [url], "mm_processor_kwargs": nested}).encode(),
            refused(400, "invalid_option"),
        ),
        Case(
            "req-wide-processor-kwargs",
            "request",
            json.dumps({"images": [url], "mm_processor_kwargs": {"a": nested_wide}}).encode(),
            ok(False),
        ),
        Case(
            "req-processor-kwargs-list",
            "request",
            json.dumps({"images": [url], "mm_processor_kwargs": [1]}).encode(),
            refused(400, "invalid_option"),
        ),
        Case(
            "req-bad-algorithm",
            "request",
            json.dumps({"images": [url], "algorithm": "md5"}).encode(),
            refused(400, "invalid_option"),
        ),
        Case(
            "req-algorithm-not-string",
            "request",
            json.dumps({"images": [url], "algorithm": ["blake3"]}).encode(),
            refused(400, "invalid_option"),
        ),
        Case(
            "req-bad-image-mode",
            "request",
            json.dumps({"images": [url], "image_mode": "RGBZ"}).encode(),
            refused(400, "invalid_option"),
        ),
        Case(
            "req-image-mode-not-string",
            "request",
            json.dumps({"images": [url], "image_mode": {"x": 1}}).encode(),
            refused(400, "invalid_option"),
        ),
        Case(
            "req-bad-background",
            "request",
            json.dumps({"images": [url], "rgba_background_color": [1, 2, 999]}).encode(),
            refused(400, "invalid_option"),
        ),
        Case(
            "req-background-string",
            "request",
            json.dumps({"images": [url], "rgba_background_color": "red"}).encode(),
            refused(400, "invalid_option"),
        ),
        Case(
            "req-model-id-int",
            "request",
            json.dumps({"images": [url], "model_id": 7}).encode(),
            refused(400, "invalid_option"),
        ),
        Case(
            "req-model-id-too-long",
            "request",
            json.dumps({"images": [url], "model_id": "m" * 600}).encode(),
            refused(400, "invalid_option"),
        ),
        Case(
            "req-too-many-images",
            "request",
            json.dumps({"images": ["x"] * 65}).encode(),
            refused(400, "too_many_images"),
        ),
        Case(
            "req-unsupported-content-type",
            "request",
            b"hello",
            refused(415, "unsupported_media_type"),
            content_type="text/plain",
        ),
        Case(
            "req-content-type-garbage",
            "request",
            good,
            refused(415, "unsupported_media_type"),
            content_type='image; ;;="x"',
        ),
        Case(
            "req-content-type-xml",
            "request",
            good,
            refused(415, "unsupported_media_type"),
            content_type="application/xml",
        ),
        Case("req-raw-image-body-bad", "request", b"GIF89a broken", bad("unidentified"), content_type="image/gif"),
        Case("req-raw-image-body-empty", "request", b"", bad("empty"), content_type="image/png"),
        Case(
            "req-raw-image-bad-query-algorithm",
            "request",
            base_image("PNG"),
            refused(400, "invalid_option"),
            content_type="image/png",
            path="/v1/hash?algorithm=md5",
        ),
        Case(
            "req-raw-image-query-background",
            "request",
            base_image("PNG"),
            ok(False),
            content_type="image/png",
            path="/v1/hash?rgba_background_color=1,2,3",
        ),
        Case(
            "req-raw-image-query-background-arabic-digits",
            "request",
            base_image("PNG"),
            refused(400, "invalid_option"),
            content_type="image/png",
            path="/v1/hash?rgba_background_color=%D9%A1,2,3",
            note="int() would accept any Unicode decimal digit; the service takes ASCII digits only",
        ),
        Case(
            "req-raw-image-query-background-words",
            "request",
            base_image("PNG"),
            refused(400, "invalid_option"),
            content_type="image/png",
            path="/v1/hash?rgba_background_color=red,green,blue",
        ),
        Case(
            "req-raw-image-query-background-superscript",
            "request",
            base_image("PNG"),
            refused(400, "invalid_option"),
            content_type="image/png",
            path="/v1/hash?rgba_background_color=%C2%B2,1,1",
            note="'\u00b2'.isdigit() is True but int('\u00b2') raises ValueError",
        ),
        Case(
            "req-multipart-background-superscript",
            "request",
            multipart_field("rgba_background_color", "\u00b2,1,1", boundary),
            refused(400, "invalid_option"),
            content_type=f"multipart/form-data; boundary={boundary}",
            note="the same superscript digit as a multipart field",
        ),
        Case(
            "req-image-mode-null",
            "request",
            json.dumps({"images": [url], "image_mode": None}).encode(),
            ok(False),
            note="keep the decoded mode",
        ),
        Case(
            "req-unsupported-mode",
            "request",
            json.dumps({"images": [gray_url], "image_mode": "La"}).encode(),
            bad("unsupported_mode"),
            note="Pillow cannot convert L to La",
        ),
        Case("req-path-invalid-utf8", "request", good, refused(404, "not_found"), path="/%ff%fe", transport="socket"),
        Case("req-path-nul", "request", good, refused(404, "not_found"), path="/v1/hash%00", transport="socket"),
        Case("req-path-60k", "request", good, refused(404, "not_found"), path="/" + "a" * 60_000, transport="socket"),
        Case("req-method-put", "request", good, refused(405, "method_not_allowed"), method="PUT"),
        Case(
            "req-method-unknown", "request", good, refused(405, "method_not_allowed"), method="BREW", transport="socket"
        ),
        Case("req-get-hash", "request", b"", refused(405, "method_not_allowed"), method="GET"),
        Case(
            "req-content-length-superscript",
            "request",
            good,
            refused(400, None),
            headers=(("content-length", "\u00b2"),),
            transport="socket",
            note="h11 accepts only ASCII digits in Content-Length",
        ),
        Case(
            "req-multipart-no-boundary",
            "request",
            b"--x\r\n",
            refused(400, "invalid_multipart"),
            content_type="multipart/form-data",
        ),
        Case(
            "req-multipart-broken",
            "request",
            b"--x\r\nbroken",
            refused(400, "invalid_request"),
            content_type="multipart/form-data; boundary=x",
        ),
        Case(
            "req-multipart-no-file",
            "request",
            multipart_text,
            refused(400, "invalid_request"),
            content_type=f"multipart/form-data; boundary={boundary}",
        ),
        Case(
            "req-multipart-bad-image",
            "request",
            multipart_bad_image,
            bad("unidentified"),
            content_type=f"multipart/form-data; boundary={boundary}",
        ),
        Case(
            "req-huge-header",
            "request",
            good,
            (NOT_5XX,),
            headers=(("x-padding", "a" * 100_000),),
            note="a 100 KB header in one write: mmobs serve sets h11_max_incomplete_event_size to 64 KiB, but h11 "
            "applies it only to an *incomplete* header block; asyncio reads up to 256 KiB at once, so on loopback "
            "the whole block usually arrives complete and is accepted (200). Only 'no 5xx' is asserted.",
        ),
        Case(
            "req-huge-header-trickled",
            "request",
            good,
            refused(400, None),
            headers=(("x-padding", "a" * 100_000),),
            transport="trickle",
            note="the same 100 KB header sent slowly: h11 refuses it past 64 KiB (400)",
        ),
        Case(
            "req-many-headers",
            "request",
            good,
            ok(False),
            headers=tuple((f"x-h{i}", "v") for i in range(500)),
            note="500 small headers are fine",
        ),
        Case(
            "req-bad-request-id",
            "request",
            good,
            ok(False),
            headers=(("x-request-id", "bad id/../<script>;" * 20),),
            note="a request id outside the safe alphabet is replaced, not echoed",
        ),
        Case(
            "req-oversized-body",
            "request",
            b'{"images": ["' + b"A" * (BODY_MAX_BYTES + 10) + b'"]}',
            refused(413, "payload_too_large"),
        ),
        Case(
            "req-oversized-body-chunked",
            "request",
            b'{"images": ["' + b"A" * (BODY_MAX_BYTES + 10) + b'"]}',
            refused(413, "payload_too_large"),
            transport="chunked",
            note="no Content-Length: the limit is enforced while reading",
        ),
        Case(
            "req-content-length-lies-high",
            "request",
            good,
            refused(413, "payload_too_large"),
            headers=(("content-length", str(BODY_MAX_BYTES + 1)),),
            transport="socket",
            note="declared above the limit: refused before reading",
        ),
        Case(
            "req-body-cut-short-json",
            "request",
            good,
            (NOT_5XX,),
            transport="cut",
            note="the client declares the whole body, sends half of it and half-closes: the service must not "
            "count (or log) a server error for a client that went away",
        ),
        Case(
            "req-body-cut-short-raw-image",
            "request",
            base_image("PNG"),
            (NOT_5XX,),
            transport="cut",
            content_type="image/png",
            note="the same for a raw image/* upload",
        ),
        Case(
            "req-body-cut-short-multipart",
            "request",
            multipart_bad_image,
            (NOT_5XX,),
            transport="cut",
            content_type=f"multipart/form-data; boundary={boundary}",
            note="the same for a multipart upload",
        ),
        Case(
            "req-content-length-not-a-number",
            "request",
            good,
            refused(400, None),
            headers=(("content-length", "12abc"),),
            transport="socket",
            note="h11 refuses a malformed Content-Length",
        ),
        Case(
            "req-content-length-and-chunked",
            "request",
            b"%x\r\n%s\r\n0\r\n\r\n" % (len(good), good),
            ok(False),
            headers=(("content-length", "5"), ("transfer-encoding", "chunked")),
            transport="socket",
            note="both framings at once (the request-smuggling shape): h11 lets Transfer-Encoding win (RFC 9112 6.3)",
        ),
    ]
    return cases
