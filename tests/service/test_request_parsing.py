"""What ``mmobs serve``'s request parsing does without a server: the JSON value bound, data URLs from a decode worker."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mmobs.service.hash_request import count_json_values
from tests.support import golden

PHOTO_JPEG = golden.input_bytes("photo.jpg")


@settings(max_examples=60, deadline=None)
@given(
    size=st.sampled_from([0, 1, 16_383, 16_384, 262_143, 262_144, 262_145, 600_001]),
    seed=st.integers(0, 2**32 - 1),
)
def test_the_value_bound_counts_every_structural_byte(size: int, seed: int) -> None:
    """The NumPy count (bodies from 16 KiB, in 256 KiB pieces) is the bytes.count formula, at every edge."""
    body = random.Random(seed).choices(b',[{]}"ab', k=size)
    data = bytes(body)
    assert count_json_values(data) == data.count(b",") + 2 * (data.count(b"[") + data.count(b"{")) + 1


_B64 = __import__("base64").b64encode(PHOTO_JPEG).decode()


@pytest.mark.parametrize(
    "url",
    [
        f"data:image/jpeg;base64,{_B64}",
        f"DATA:IMAGE/JPEG;BASE64,{_B64}",
        f"data:image/jpeg;base64{_B64}",
        "data:image/png;" + "x=y;" * 80 + "base64," + _B64,
        f"data:text/plain;base64,{_B64}",
        "data:image/png;base64,@@@not*base64",
        "data:image/png,not-base64",
        "data:im\ud800age/png;base64,AAAA",
        "data:image/png;base64,iVBO\u00e9\u00e9",
        "ftp://x/y.png",
    ],
    ids=[
        "plain",
        "upper-case",
        "no-comma",
        "long-header",
        "text-plain",
        "bad-base64",
        "not-base64",
        "surrogate",
        "non-ascii-payload",
        "ftp",
    ],
)
def test_data_urls_from_a_decode_worker_decode_as_text_ones_do(url: str) -> None:
    """Large bodies come back from the worker as UTF-8 bytes; the same URL must give the same bytes or refusal."""
    from mmobs.errors import BadImageError
    from mmobs.service.request_image import data_url_bytes

    outcomes = []
    for form in (url, url.encode("utf-8", "surrogatepass")):
        try:
            outcomes.append(data_url_bytes(form, 200_000))
        except BadImageError as error:
            outcomes.append((error.reason, error.message))
    assert outcomes[0] == outcomes[1]
