"""URL cases: schemes the service refuses, and data: URLs good and bad."""

from __future__ import annotations

import base64

from .base import base_image
from .case import IMAGE_MAX_BYTES, Case, bad, ok


def _url_cases() -> list[Case]:
    png = base_image("PNG")
    b64 = base64.b64encode(png).decode()
    wrapped = "\n".join(b64[i : i + 76] for i in range(0, len(b64), 76))
    too_large = base64.b64encode(b"\x00" * (IMAGE_MAX_BYTES + 1024)).decode()
    cases = [
        ("url-http", "http://example.com/cat.png", bad("unsupported_url")),
        ("url-https", "https://example.com/cat.png", bad("unsupported_url")),
        ("url-ftp", "ftp://example.com/cat.png", bad("unsupported_url")),
        ("url-file", "file:///etc/passwd", bad("unsupported_url")),
        ("url-loopback", "http://127.0.0.1:1/x.png", bad("unsupported_url")),
        ("url-no-scheme", "cat.png", bad("unsupported_url")),
        ("url-empty-string", "", bad("unsupported_url")),
        ("url-javascript", "javascript:alert(1)", bad("unsupported_url")),
        ("data-no-comma", "data:image/png;base64" + b64, bad("bad_data_url")),
        ("data-not-base64", "data:image/png,%89PNG%0D%0A", bad("bad_data_url")),
        ("data-text-plain", f"data:text/plain;base64,{b64}", bad("bad_data_url")),
        ("data-header-too-long", "data:image/png;" + "x=y;" * 80 + "base64," + b64, bad("bad_data_url")),
        ("data-bad-base64-chars", "data:image/png;base64,@@@not*base64", bad("bad_base64")),
        ("data-bad-base64-padding", "data:image/png;base64," + b64[:-3] + "=", bad("bad_base64")),
        ("data-base64-non-ascii", "data:image/png;base64,iVBORw0KGgo\u00e9\u00e9", bad("bad_base64")),
        ("data-base64-nul", "data:image/png;base64,iVBO\x00Rw0KGgo=", bad("bad_base64")),
        ("data-empty-payload", "data:image/png;base64,", bad("empty")),
        ("data-too-large", "data:image/png;base64," + too_large, bad("too_large")),
        ("data-uppercase-scheme", f"DATA:IMAGE/PNG;BASE64,{b64}", ok(False)),
        ("data-mime-wrapped", f"data:image/png;base64,{wrapped}", ok(False)),
        ("data-octet-stream", f"data:application/octet-stream;base64,{b64}", ok(False)),
        ("data-no-media-type", f"data:;base64,{b64}", ok(False)),
        ("data-media-type-lies", f"data:image/gif;base64,{b64}", ok(False)),
    ]
    return [Case(name, "url", url, expect) for name, url, expect in cases]
