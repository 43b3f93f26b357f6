"""The loader refuses every bad input with its reason: nothing but BadImageError escapes, pixel bombs are refused from the header."""

from __future__ import annotations

import random
import resource
import sys
import tracemalloc
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from mmobs import (
    BAD_IMAGE_REASONS,
    BadImageError,
    ImageMediaIO,
    MediaWithBytes,
    MultiModalHasher,
    load_data_url,
)
from tests.support import golden
from tests.support.images import (
    as_base64,
    as_data_url,
    encode,
    jpeg_bytes,
    noisy_image,
    png_bytes,
    png_chunk,
    png_header_only,
    png_with_exif_chunk,
    png_with_garbage_idat,
    written,
)

pytestmark = pytest.mark.usefixtures("silent_observer")
hash_kwargs = MultiModalHasher.hash_kwargs


# -- Every refusal reason the loader can produce -------------------------------------------


Load = Callable[[Path], object]

REFUSALS: list[Any] = [
    # (reason, a word the message must contain, the call)
    pytest.param("empty", "empty", lambda t: ImageMediaIO().load_bytes(b""), id="empty-bytes"),
    pytest.param("empty", "empty", lambda t: ImageMediaIO().load_base64("image/png", ""), id="empty-base64"),
    pytest.param("empty", "empty", lambda t: load_data_url("data:image/png;base64,"), id="empty-data-url"),
    pytest.param(
        "too_large", "limit", lambda t: ImageMediaIO(max_bytes=100).load_bytes(png_bytes()), id="too-large-bytes"
    ),
    pytest.param(
        "too_large",
        "limit",
        lambda t: ImageMediaIO(max_bytes=100).load_base64("image/png", as_base64(png_bytes())),
        id="too-large-base64",
    ),
    pytest.param(
        "too_large",
        "limit",
        lambda t: ImageMediaIO(max_bytes=100).load_file(written(t, png_bytes())),
        id="too-large-file",
    ),
    pytest.param(
        "unidentified", "format", lambda t: ImageMediaIO().load_bytes(b"definitely not an image"), id="unidentified"
    ),
    pytest.param(
        "unidentified",
        "format",
        lambda t: load_data_url(as_data_url(b"GIF87a but not really")),
        id="unidentified-data-url",
    ),
    pytest.param(
        "unsupported_format",
        "TGA",
        lambda t: ImageMediaIO().load_bytes(encode(Image.new("RGB", (4, 3)), "TGA")),
        id="unsupported-format",
    ),
    pytest.param(
        "truncated",
        "ends early",
        lambda t: ImageMediaIO().load_bytes(jpeg_bytes()[: len(jpeg_bytes()) // 2]),
        id="truncated-jpeg",
    ),
    pytest.param(
        "truncated",
        "ends early",
        lambda t: ImageMediaIO().load_bytes(png_bytes()[: len(png_bytes()) // 2]),
        id="truncated-png",
    ),
    pytest.param(
        "corrupt", "decoded", lambda t: ImageMediaIO().load_bytes(png_with_garbage_idat()), id="corrupt-png-idat"
    ),
    pytest.param(
        "too_many_pixels",
        "pixels",
        lambda t: ImageMediaIO(max_pixels=100).load_bytes(png_bytes()),
        id="too-many-pixels-limit",
    ),
    pytest.param(
        "too_many_pixels",
        "pixels",
        lambda t: ImageMediaIO().load_bytes(png_header_only(40000, 40000)),
        id="too-many-pixels-bomb",
    ),
    pytest.param(
        "too_costly",
        "segments",
        lambda t: ImageMediaIO().load_bytes(jpeg_bytes()[:2] + b"\xff\xe0\x00\x02" * 2000 + jpeg_bytes()[2:]),
        id="too-costly-app0-flood",
    ),
    pytest.param(
        "unsupported_mode",
        "convert",
        lambda t: ImageMediaIO(image_mode="La").load_bytes(golden.input_bytes("gray.png")),
        id="unsupported-mode-L-to-La",
    ),
    pytest.param(
        "unsupported_mode",
        "convert",
        lambda t: ImageMediaIO(image_mode="I;16").load_bytes(golden.input_bytes("palette.png")),
        id="unsupported-mode-P-to-I16",
    ),
    pytest.param("bad_base64", "base64", lambda t: ImageMediaIO().load_base64("image/png", "!!!!"), id="bad-b64"),
    pytest.param("bad_base64", "base64", lambda t: ImageMediaIO().load_base64("image/png", "aGk"), id="bad-padding"),
    pytest.param(
        "bad_base64", "base64", lambda t: ImageMediaIO().load_base64("image/png", "aGVsbG8=é"), id="non-ascii"
    ),
    pytest.param(
        "bad_base64", "base64", lambda t: load_data_url("data:image/png;base64,not*base64"), id="bad-b64-data-url"
    ),
    pytest.param("bad_data_url", "','", lambda t: load_data_url("data:image/png;base64"), id="no-comma"),
    pytest.param("bad_data_url", "base64", lambda t: load_data_url("data:image/png,AAAA"), id="not-base64"),
    pytest.param(
        "bad_data_url", "image/*", lambda t: load_data_url("data:text/plain;base64,aGk="), id="non-image-type"
    ),
    pytest.param(
        "bad_data_url",
        "256",
        lambda t: load_data_url("data:image/png;" + "x" * 300 + ";base64,aGk="),
        id="long-header",
    ),
    pytest.param("bad_data_url", "string", lambda t: load_data_url(b"data:image/png;base64,"), id="not-a-string"),
    pytest.param("unsupported_url", "data:", lambda t: load_data_url("http://example.com/cat.png"), id="http"),
    pytest.param("unsupported_url", "data:", lambda t: load_data_url("https://example.com/cat.png"), id="https"),
    pytest.param("unsupported_url", "data:", lambda t: load_data_url("file:///etc/passwd"), id="file"),
    pytest.param("unsupported_url", "data:", lambda t: load_data_url("/etc/passwd"), id="no-scheme"),
]


@pytest.mark.parametrize(("reason", "keyword", "call"), REFUSALS)
def test_refusal_reason_message_and_single_report(
    reason: str, keyword: str, call: Load, tmp_path: Path, record: Any
) -> None:
    """A refusal is a ValueError with the right reason, a useful message, reported once."""
    with record() as rec, pytest.raises(BadImageError) as info:
        call(tmp_path)
    error = info.value
    assert isinstance(error, ValueError)
    assert error.reason == reason
    assert error.message and str(error) == error.message
    assert keyword in error.message
    assert error.param is None
    assert len(rec.bad_images) == 1 and rec.bad_images[0] is error


def test_refusal_cases_cover_every_loader_reason() -> None:
    """Every reason except fetch_failed (the service fetches, not the loader) is exercised."""
    covered = {param.values[0] for param in REFUSALS}
    assert covered == set(BAD_IMAGE_REASONS) - {"fetch_failed"}


def test_bad_image_error_rejects_unknown_reason() -> None:
    """Reasons are metric labels: a typo cannot create a new one."""
    with pytest.raises(ValueError, match="unknown BadImageError reason"):
        BadImageError("bogus", "message")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(lambda: png_bytes()[:20], id="png-cut-inside-IHDR"),
        pytest.param(lambda: jpeg_bytes()[:60], id="jpeg-cut-inside-DQT"),
    ],
)
def test_input_cut_inside_its_header_is_truncated(data: Callable[[], bytes], record: Any) -> None:
    """A file that ends inside its header "ends before the image does": reason truncated.

    Pillow reports this as ``OSError("Truncated File Read")`` from ``Image.open``.
    """
    with record() as rec, pytest.raises(BadImageError) as info:
        ImageMediaIO().load_bytes(data())
    assert info.value.reason == "truncated", info.value.message
    assert len(rec.bad_images) == 1


# -- Nothing but BadImageError escapes -----------------------------------------------------


MALFORMED = [
    pytest.param(b"\x89PNG\r\n\x1a\n", id="png-signature-only"),
    pytest.param(b"\xff\xd8", id="jpeg-soi-only"),
    pytest.param(b"\xff\xd8\xff\xe1\x00\x02", id="jpeg-empty-app1"),
    pytest.param(png_header_only(0, 0), id="png-zero-size"),
    pytest.param(png_header_only(16, 16, bit_depth=7), id="png-bad-bit-depth"),
    pytest.param(png_bytes()[:8] + png_chunk(b"IHDR", b"\x00" * 5), id="png-short-ihdr"),
    pytest.param(png_with_garbage_idat(), id="png-garbage-idat"),
    pytest.param(png_header_only(100, 100), id="png-missing-data"),
    pytest.param(b"GIF89a" + b"\xff" * 20, id="gif-garbage"),
    pytest.param(b"RIFF\x00\x00\x00\x00WEBPVP8 ", id="webp-stub"),
    pytest.param(b"II*\x00\x08\x00\x00\x00\xff\xff", id="tiff-bad-ifd"),
    pytest.param(b"BM" + b"\x00" * 60, id="bmp-zeros"),
    pytest.param(b"\x00" * 1000, id="zeros"),
]


@pytest.mark.filterwarnings("ignore::UserWarning:PIL")
@pytest.mark.parametrize("data", MALFORMED)
def test_malformed_input_raises_only_bad_image_error(data: bytes, record: Any) -> None:
    """Hand-made malformed inputs: a BadImageError, never a Pillow exception."""
    with record() as rec, pytest.raises(BadImageError) as info:
        ImageMediaIO().load_bytes(data)
    assert info.value.reason in BAD_IMAGE_REASONS
    assert len(rec.bad_images) == 1


def _mutations(data: bytes, count: int, seed: int) -> list[bytes]:
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        mutated = bytearray(data)
        for _ in range(rng.randint(1, 8)):
            mutated[rng.randrange(len(mutated))] = rng.randrange(256)
        if rng.random() < 0.3:
            mutated = mutated[: rng.randrange(1, len(mutated))]
        out.append(bytes(mutated))
    return out


FUZZ_SOURCES = {
    "jpeg": lambda: jpeg_bytes(size=(24, 16)),
    "png": lambda: png_bytes(size=(24, 16)),
    "png-exif": lambda: png_with_exif_chunk(b"II*\x00\x08\x00\x00\x00\x01\x00\x0d\x80\x02\x00\x04\x00\x00\x00abc\x00"),
    "gif": lambda: encode(noisy_image("P", (24, 16)), "GIF"),
    "webp": lambda: encode(noisy_image("RGB", (24, 16)), "WEBP"),
    "bmp": lambda: encode(noisy_image("RGB", (24, 16)), "BMP"),
    "tiff": lambda: encode(noisy_image("RGB", (24, 16)), "TIFF"),
}


@pytest.mark.filterwarnings("ignore::UserWarning:PIL")
@pytest.mark.parametrize("source", sorted(FUZZ_SOURCES))
def test_mutated_inputs_load_and_hash_or_raise_bad_image_error(source: str, record: Any) -> None:
    """Random byte flips and cuts: every input either loads and hashes, or is refused cleanly."""
    refused = 0
    with record() as rec:
        for data in _mutations(FUZZ_SOURCES[source](), count=60, seed=len(source)):
            try:
                media = ImageMediaIO(image_mode=None).load_bytes(data)
            except BadImageError as error:
                assert error.reason in BAD_IMAGE_REASONS
                refused += 1
                continue
            assert isinstance(media, MediaWithBytes)
            hash_kwargs("blake3", image=media)
            hash_kwargs("blake3", image=media.media)
    assert len(rec.bad_images) == refused


def test_truncation_at_every_length_is_handled_cleanly(record: Any) -> None:
    """Every prefix of a small PNG and JPEG: refused with BadImageError, or (only when
    the cut falls in the trailer Pillow never reads) loaded and hashable."""
    refused = 0
    with record() as rec:
        for data in (png_bytes(size=(8, 6)), jpeg_bytes(size=(8, 6))):
            for end in range(0, len(data), 3):
                try:
                    media = ImageMediaIO().load_bytes(data[:end])
                except BadImageError as error:
                    assert error.reason in ("empty", "unidentified", "truncated", "corrupt"), error.message
                    refused += 1
                    continue
                assert end > len(data) - 32, f"a {end}-byte prefix of {len(data)} bytes loaded"
                hash_kwargs("blake3", image=media)
    assert len(rec.bad_images) == refused


# -- Pixel bombs are refused from the header -----------------------------------------------


def _max_rss_bytes() -> int:
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss if sys.platform == "darwin" else rss * 1024


@pytest.mark.parametrize(
    ("width", "height", "loader"),
    [
        pytest.param(40000, 40000, ImageMediaIO(), id="40000x40000-pillow-bomb"),
        pytest.param(40000, 40000, ImageMediaIO(max_pixels=1_000_000_000), id="40000x40000-above-a-raised-limit"),
        pytest.param(10000, 10000, ImageMediaIO(), id="10000x10000-over-max-pixels"),
    ],
)
def test_pixel_bomb_refused_without_allocating(width: int, height: int, loader: ImageMediaIO, record: Any) -> None:
    """A tiny PNG declaring a huge image is refused before any pixel buffer exists."""
    data = png_header_only(width, height)
    assert len(data) < 200
    rss_before = _max_rss_bytes()
    tracemalloc.start()
    try:
        with record() as rec, warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with pytest.raises(BadImageError) as info:
                loader.load_bytes(data)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert info.value.reason == "too_many_pixels"
    assert len(rec.bad_images) == 1
    assert peak < 10 * 1024 * 1024
    assert _max_rss_bytes() - rss_before < 100 * 1024 * 1024


def test_pixel_bomb_is_too_many_pixels_even_when_warnings_are_errors() -> None:
    """Under ``-W error`` Pillow's DecompressionBombWarning is raised: still too_many_pixels.

    100 megapixels is above Pillow's warning threshold (~89.5M) and below its
    error threshold (~179M), and above the loader's default max_pixels.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(BadImageError) as info:
            ImageMediaIO().load_bytes(png_header_only(10000, 10000, color_type=0))
    assert info.value.reason == "too_many_pixels", info.value.message


def test_max_pixels_is_inclusive() -> None:
    """Exactly max_pixels is accepted; one more is refused."""
    data = png_bytes(size=(10, 10))
    assert ImageMediaIO(max_pixels=100).load_bytes(data).media.size == (10, 10)
    with pytest.raises(BadImageError) as info:
        ImageMediaIO(max_pixels=99).load_bytes(data)
    assert info.value.reason == "too_many_pixels"


def test_max_bytes_is_inclusive(tmp_path: Path) -> None:
    """Exactly max_bytes is accepted, by every entry point; one more is refused."""
    data = png_bytes(size=(10, 10))
    exact = ImageMediaIO(max_bytes=len(data))
    assert exact.load_bytes(data).original_bytes == data
    assert exact.load_file(written(tmp_path, data)).original_bytes == data
    assert exact.load_base64("image/png", as_base64(data)).original_bytes == data
    with pytest.raises(BadImageError) as info:
        ImageMediaIO(max_bytes=len(data) - 1).load_bytes(data)
    assert info.value.reason == "too_large"
