"""The EXIF ImageID: a UUID pins the key, a media-with-bytes keys by its bytes, and a malformed EXIF block never escapes from hashing (the vLLM regression)."""

from __future__ import annotations

import pickle
import struct
import uuid
from typing import Any

import numpy as np
import PIL
import pytest
from PIL import Image

import mmobs
from mmobs import ImageMediaIO, MediaWithBytes, MultiModalHasher
from tests.support import golden
from tests.support.images import (
    BAD_TIFF_HEADER,
    IMAGE_ID_TAG,
    SHORT_TIFF_HEADER,
    jpeg_bytes,
    jpeg_with_exif,
    noisy_image,
)
from tests.support.reference import (
    FR,
    LEN,
    ref_item,
    ref_pixel_key,
    stream_key,
)

pytestmark = pytest.mark.usefixtures("silent_observer")
hash_kwargs = MultiModalHasher.hash_kwargs


# -- EXIF ImageID --------------------------------------------------------------------------


def _golden_uuid() -> uuid.UUID:
    return uuid.UUID(golden.case("pil-uuid-imageid")["kwargs"]["image"]["$image"]["uuid_image"])


def _with_image_id(image: Image.Image, image_id: object) -> Image.Image:
    image.getexif()[IMAGE_ID_TAG] = image_id
    return image


def test_uuid_image_id_keys_by_uuid_only(record: Any) -> None:
    """A UUID ImageID pins the key: FR(uuid.bytes), whatever the pixels (golden case)."""
    image_id = _golden_uuid()
    image = _with_image_id(noisy_image("L", (5, 3)), image_id)  # not the golden case's pixels
    with record() as rec:
        key = hash_kwargs("blake3", image=image)
    assert key == golden.case("pil-uuid-imageid")["expected"]
    assert key == stream_key(FR(b"image") + b"\x03" + FR(image_id.bytes))
    assert [(e.kind, e.key_source) for e in rec.keyed] == [("image", "image_id")]
    assert rec.fallbacks == []


def test_uuid_image_id_inside_media_with_bytes(record: Any) -> None:
    """The ImageID wins over the original bytes too."""
    image_id = uuid.UUID(int=0x0123456789ABCDEF)
    media = MediaWithBytes(_with_image_id(Image.new("RGB", (2, 2)), image_id), b"encoded", {"image_mode": "RGB"})
    with record() as rec:
        key = hash_kwargs("blake3", m=media)
    assert key == stream_key(FR(b"m") + b"\x03" + FR(image_id.bytes))
    assert [(e.kind, e.key_source) for e in rec.keyed] == [("media_with_bytes", "image_id")]


def test_string_image_id_keys_by_pixels(record: Any) -> None:
    """Only a uuid.UUID counts; a string ImageID (golden input) falls to the pixels."""
    image = Image.open(golden.GOLDEN_DIR / "inputs" / "imageid-string.jpg")
    image.load()
    assert image.getexif()[IMAGE_ID_TAG] == "abc"
    fresh = Image.open(golden.GOLDEN_DIR / "inputs" / "imageid-string.jpg")
    with record() as rec:
        key = hash_kwargs("blake3", image=fresh)
    assert key == ref_pixel_key("image", image)
    assert [(e.kind, e.key_source) for e in rec.keyed] == [("image", "pixels")]
    assert rec.fallbacks == []

    plain = noisy_image("RGB", (4, 4))
    tagged = _with_image_id(noisy_image("RGB", (4, 4)), str(_golden_uuid()))
    assert hash_kwargs("blake3", image=tagged) == hash_kwargs("blake3", image=plain)


# -- MediaWithBytes ------------------------------------------------------------------------


def test_media_without_io_config_keys_by_original_bytes(record: Any) -> None:
    """No io_config: item "image" of the original bytes; the pixels do not matter."""
    original = b"\x89PNG...pretend encoded bytes"
    media = MediaWithBytes(noisy_image("RGB", (3, 3), seed=1), original)
    other_pixels = MediaWithBytes(noisy_image("RGB", (3, 3), seed=2), original)
    with record() as rec:
        key = hash_kwargs("blake3", image=media)
    expected = stream_key(FR(b"image") + b"\x03" + FR(b"image") + b"\x03" + FR(original))
    assert key == expected == hash_kwargs("blake3", image=other_pixels)
    assert [(e.kind, e.key_source) for e in rec.keyed] == [("media_with_bytes", "original_bytes")]
    assert hash_kwargs("blake3", image=MediaWithBytes(media.media, original, {})) == expected


def test_media_with_io_config_keys_by_config_and_bytes(record: Any) -> None:
    """With io_config: item "image" of {"io_config", "data": original_bytes}."""
    original = b"encoded"
    io_config = {"image_mode": "RGB", "rgba_background_color": (255, 255, 255)}
    media = MediaWithBytes(Image.new("RGB", (1, 1)), original, io_config)
    with record() as rec:
        key = hash_kwargs("blake3", image=media)
    config = (
        b"\x02" + LEN(2)
        + FR(b"image_mode") + b"\x03" + FR(b"RGB")
        + FR(b"rgba_background_color") + b"\x01" + LEN(3) + (b"\x03" + FR(np.array(255).tobytes())) * 3
    )  # fmt: skip
    value = b"\x02" + LEN(2) + FR(b"io_config") + config + FR(b"data") + b"\x03" + FR(original)
    assert key == stream_key(FR(b"image") + b"\x03" + FR(b"image") + value)
    assert [(e.kind, e.key_source) for e in rec.keyed] == [("media_with_bytes", "original_bytes")]


@pytest.mark.parametrize(
    ("original_len", "key_source"),
    [(1000, "frames"), (97, "frames"), (96, "original_bytes"), (10, "original_bytes")],
)
def test_video_keys_by_the_smaller_of_frames_and_bytes(original_len: int, key_source: str, record: Any) -> None:
    """Frames (96 bytes here) are keyed only when strictly smaller than the original bytes."""
    frames = np.arange(96, dtype=np.uint8).reshape(2, 4, 4, 3)
    media = MediaWithBytes(frames, b"\x07" * original_len)
    with record() as rec:
        key = hash_kwargs("blake3", video=media)
    source = frames if key_source == "frames" else media.original_bytes
    assert key == stream_key(FR(b"video") + b"\x03" + b"".join(ref_item("video", source)))
    assert [(e.kind, e.key_source) for e in rec.keyed] == [("video", key_source)]


def test_media_holding_something_else_is_pickled_whole(record: Any) -> None:
    """Other media have no key format: the whole object is pickled, as vLLM does, with a warning."""
    media = MediaWithBytes("not media", b"bytes")
    with record() as rec, pytest.warns(mmobs.UnsupportedTypeWarning, match="MediaWithBytes"):
        key = hash_kwargs("blake3", m=media)
    assert key == stream_key(FR(b"m") + b"\x03" + FR(pickle.dumps(media)))
    assert rec.keyed == []


@pytest.mark.vllm  # torch is vLLM's: the vllm environment has it
def test_video_frames_as_a_tensor_key_like_vllm(record: Any) -> None:
    """vLLM's video decoders may hand back frames as a tensor: keyed as the tensor item."""
    torch = pytest.importorskip("torch", reason="torch is an optional dependency of mmobs")
    frames = torch.arange(96, dtype=torch.uint8).reshape(2, 4, 4, 3)
    with record() as rec:
        small = hash_kwargs("blake3", video=MediaWithBytes(frames, b"\x07" * 97))
        large = hash_kwargs("blake3", video=MediaWithBytes(frames, b"\x07" * 96))
    tensor_item = b"".join(ref_item("tensor", frames.numpy()))
    assert small == stream_key(FR(b"video") + b"\x03" + FR(b"video") + b"\x03" + tensor_item)
    assert large == stream_key(FR(b"video") + b"\x03" + b"".join(ref_item("video", b"\x07" * 96)))

    assert [(e.kind, e.key_source) for e in rec.keyed] == [("video", "frames"), ("video", "original_bytes")]


# -- The vLLM regression: a malformed EXIF block must never escape from hashing ------------


REGRESSION_SOURCES = {
    "golden-bad-exif-header.jpg": lambda: golden.input_bytes("bad-exif-header.jpg"),
    "built-from-plain-jpeg": lambda: jpeg_with_exif(BAD_TIFF_HEADER, jpeg_bytes(seed=3)),
}


@pytest.fixture(params=sorted(REGRESSION_SOURCES))
def regression_jpeg(request: pytest.FixtureRequest) -> bytes:
    return REGRESSION_SOURCES[request.param]()


def test_regression_image_falls_back_to_pixels(regression_jpeg: bytes, record: Any) -> None:
    """The decoded image of the vLLM regression JPEG hashes by pixels, and says so once."""
    media = ImageMediaIO().load_bytes(regression_jpeg).media
    with record() as rec:
        key = hash_kwargs("blake3", image=media)
    (event,) = rec.fallbacks
    assert type(event.error) is SyntaxError
    assert (event.kind, event.key_source) == ("image", "pixels")
    assert event.image is media
    assert event.original_bytes is None
    assert [(e.kind, e.key_source) for e in rec.keyed] == [("image", "pixels")]

    fresh = ImageMediaIO().load_bytes(regression_jpeg).media
    assert key == ref_pixel_key("image", fresh)


def test_regression_media_falls_back_to_original_bytes(regression_jpeg: bytes, record: Any) -> None:
    """The MediaWithBytes of the regression JPEG hashes by its bytes, and says so once."""
    media = ImageMediaIO().load_bytes(regression_jpeg)
    assert media.io_config is None  # a JPEG is RGB already: no conversion
    with record() as rec:
        key = hash_kwargs("blake3", image=media)
    (event,) = rec.fallbacks
    assert type(event.error) is SyntaxError
    assert (event.kind, event.key_source) == ("media_with_bytes", "original_bytes")
    assert event.image is media.media
    assert event.original_bytes == regression_jpeg
    assert [(e.kind, e.key_source) for e in rec.keyed] == [("media_with_bytes", "original_bytes")]

    clean = MediaWithBytes(Image.new("RGB", (1, 1)), regression_jpeg, None)
    with record() as clean_rec:
        assert key == hash_kwargs("blake3", image=clean)
    assert clean_rec.fallbacks == []
    assert key == stream_key(FR(b"image") + b"\x03" + FR(b"image") + b"\x03" + FR(regression_jpeg))


def test_converted_regression_image_still_falls_back(record: Any) -> None:
    """``convert()`` carries the poisoned EXIF along; the fallback still runs once."""
    data = golden.input_bytes("bad-exif-header.jpg")
    media = ImageMediaIO(image_mode="L").load_bytes(data)
    assert media.io_config == {"image_mode": "L", "rgba_background_color": (255, 255, 255)}
    with record() as rec:
        hash_kwargs("blake3", image=media.media)
    assert [type(e.error) for e in rec.fallbacks] == [SyntaxError]


def test_short_tiff_header_falls_back_with_struct_error(record: Any) -> None:
    """A valid TIFF prefix with a cut-off IFD offset raises struct.error; tolerated too."""
    data = jpeg_with_exif(SHORT_TIFF_HEADER)
    with record() as rec:
        image_key = hash_kwargs("blake3", image=ImageMediaIO().load_bytes(data).media)
        media_key = hash_kwargs("blake3", image=ImageMediaIO().load_bytes(data))
    assert [(type(e.error), e.kind, e.key_source) for e in rec.fallbacks] == [
        (struct.error, "image", "pixels"),
        (struct.error, "media_with_bytes", "original_bytes"),
    ]
    assert image_key == ref_pixel_key("image", ImageMediaIO().load_bytes(data).media)
    assert media_key == stream_key(FR(b"image") + b"\x03" + FR(b"image") + b"\x03" + FR(data))


# -- canaries: fail loudly if Pillow stops raising, so the tests above stay honest --


def _exif_read_error(image: Image.Image) -> BaseException | None:
    try:
        image.getexif().get(IMAGE_ID_TAG)
    except Exception as error:
        return error
    return None


def test_canary_pillow_raises_on_regression_jpeg() -> None:
    """bad-exif-header.jpg, once loaded like vLLM does, must still make getexif() raise."""
    error = _exif_read_error(ImageMediaIO().load_bytes(golden.input_bytes("bad-exif-header.jpg")).media)
    assert type(error) is SyntaxError, (
        f"Pillow {PIL.__version__} no longer raises SyntaxError from getexif() on "
        f"bad-exif-header.jpg (got {error!r}); the fallback tests would pass vacuously. "
        "Find a new input that raises and update the tests."
    )


def test_canary_pillow_raises_on_bad_exif_png_chunk() -> None:
    """bad-exif-chunk.png after open + load must still make getexif() raise."""
    image = Image.open(golden.GOLDEN_DIR / "inputs" / "bad-exif-chunk.png")
    image.load()
    error = _exif_read_error(image)
    assert type(error) is SyntaxError, (
        f"Pillow {PIL.__version__} no longer raises from getexif() on bad-exif-chunk.png "
        f"after open+load (got {error!r}); the golden exif_fallbacks counts are now vacuous."
    )


def test_canary_pillow_raises_struct_error_on_short_tiff_header() -> None:
    """The struct.error input must still raise struct.error."""
    error = _exif_read_error(ImageMediaIO().load_bytes(jpeg_with_exif(SHORT_TIFF_HEADER)).media)
    assert type(error) is struct.error, (
        f"Pillow {PIL.__version__} no longer raises struct.error from getexif() on a JPEG "
        f"whose TIFF header is {SHORT_TIFF_HEADER!r} (got {error!r})."
    )
