"""Cases for what the service bounds around the images: options, JSON sizes, content types, URLs.

Each of these was a 500, or seconds of CPU, or gigabytes, in the service
before its bounds: lone surrogates that have no UTF-8 form, processor kwargs
keyed leaf by leaf, floods of JSON values (parsed in the service, or in a
decode worker past 256 KiB), long integer literals, binary bodies without a
Content-Type, and URLs that only the fetcher's parser refuses (the corpus
service allows one remote host, ``images.invalid``, which resolves nowhere).
"""

from __future__ import annotations

import json

from .base import base_image, data_url
from .case import Case, bad, ok, refused


def _service_cases() -> list[Case]:
    """What the service bounds around the images: each was a 500, or seconds of CPU, or gigabytes."""
    url = data_url(base_image("PNG"), "image/png")

    def body(**fields: object) -> bytes:
        return json.dumps({"images": [url], **fields}).encode()  # lone surrogates are escaped as \ud800

    text = [{"type": "text", "text": "Describe, in detail, this image. " * 12_000},
            {"type": "image_url", "image_url": {"url": url}}]  # fmt: skip
    flood = b'{"images": [' + b"[]," * 70_000 + b'"x"]}'
    requests = [
        ("svc-model-id-lone-surrogate", body(model_id="m\ud800"), refused(400, "invalid_option"), {}),
        ("svc-kwargs-key-lone-surrogate", body(mm_processor_kwargs={"\ud800": 1}), refused(400, "invalid_option"), {}),
        (
            "svc-kwargs-value-lone-surrogate",
            body(mm_processor_kwargs={"k": ["\udfff"]}),
            refused(400, "invalid_option"),
            {},
        ),
        ("svc-kwargs-30000-zeros", body(mm_processor_kwargs={"z": [0] * 30_000}), refused(400, "invalid_option"), {}),
        ("svc-kwargs-int-beyond-64-bits", body(mm_processor_kwargs={"n": 2**64}), refused(400, "invalid_option"), {}),
        ("svc-json-value-flood", flood, refused(400, "invalid_json"), {}),
        (
            "svc-json-value-flood-parsed-in-a-worker",
            b'{"images": [' + b"[]," * 600_000 + b'"x"]}',
            refused(400, "invalid_json"),
            {},
        ),
        ("svc-json-4000-digit-integer", body(n=int("9" * 4000)), refused(400, "invalid_json"), {}),
        (
            "svc-json-large-valid-parsed-in-a-worker",
            json.dumps({"messages": [{"role": "user", "content": text}]}).encode(),
            ok(False),
            {},
        ),
        ("svc-no-content-type-jpeg", base_image("JPEG"), refused(415, "unsupported_media_type"), {"content_type": ""}),
        (
            "svc-no-content-type-binary",
            b"\x00\x01\x02binary",
            refused(415, "unsupported_media_type"),
            {"content_type": ""},
        ),
        ("svc-keys-bad-verify", body(verify="pixels"), refused(400, "invalid_option"), {"path": "/v1/keys"}),
        ("svc-keys-json-value-flood", flood, refused(400, "invalid_json"), {"path": "/v1/keys"}),
        ("svc-keys-lone-surrogate", body(model_id="\ud800"), refused(400, "invalid_option"), {"path": "/v1/keys"}),
    ]
    cases = [Case(name, "request", payload, expect, **options) for name, payload, expect, options in requests]
    urls = [  # every one a 500 once a host was allowed: urlsplit raised outside the fetcher
        ("svc-url-unclosed-bracket", "http://[::1/x.png"),
        ("svc-url-bracket-not-ipv6", "http://[abc]/x.png"),
        ("svc-url-nfkc-netloc", "http://\u2100.example/x.png"),
        ("svc-url-port-out-of-range", "http://images.invalid:99999/x.png"),
        ("svc-url-ipv4-mapped-metadata", "http://[::ffff:169.254.169.254]/latest/meta-data"),
        ("svc-url-control-characters", "http://images.invalid/\x1b[2J\r\nX-Forged: 1"),
        ("svc-url-credentials", "http://user:secret@images.invalid/x.png"),
        ("svc-url-decimal-ipv4", "http://2130706433/x.png"),
        ("svc-url-nat64-loopback", "http://[64:ff9b::7f00:1]/x.png"),
    ]
    return cases + [Case(name, "url", value, bad("unsupported_url")) for name, value in urls]
