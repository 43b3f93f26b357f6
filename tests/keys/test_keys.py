"""The no-decode key path (``mmobs.keys.from_bytes``): same keys, limits and events as the loader, no pixel decoded.

Equality with the real vLLM is proven in ``tests/keys/test_keys_vllm_*.py``; here
the path is held to mmobs's own loader (``hash_kwargs(alg,
image=ImageMediaIO(...).load_bytes(data))``), and its library, HTTP
(``POST /v1/keys`` on a real ``mmobs serve``) and CLI (``mmobs hash
--no-decode``) surfaces are checked.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from PIL import Image, ImageFile, WebPImagePlugin
from prometheus_client import CollectorRegistry

import mmobs
from mmobs.errors import BadImageError, InvalidOptionError
from mmobs.events import KEY_PATHS, observing
from mmobs.keys import loader
from mmobs.keys.from_bytes import HEADER_FORMATS, key_for_bytes, key_image
from mmobs.keys.loader import ImageMediaIO
from mmobs.observability.drift import DriftTracker
from mmobs.observability.instrument import Instrumentation
from scripts.corpus import costly
from tests.support import ServiceProcess, data_url, golden, images, metric_value

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

GOLDEN = {path.name: path.read_bytes() for path in sorted((golden.GOLDEN_DIR / "inputs").iterdir())}
MODES = ("RGB", None, "L", "RGBA")
COLORS = ((255, 255, 255), (0, 0, 0), (12, 200, 77))


def loader_key(
    data: bytes,
    algorithm: str = "blake3",
    image_mode: str | None = "RGB",
    color: tuple[int, int, int] = (255, 255, 255),
    **extras: object,
) -> str:
    with observing(None):
        media = ImageMediaIO(image_mode, color).load_bytes(data)
        return mmobs.MultiModalHasher.hash_kwargs(algorithm, image=media, **extras)


def encode(image: Image.Image, fmt: str, **params: Any) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, fmt, **params)
    return buffer.getvalue()


def late_trns_png(idat_size: int | None = None) -> bytes:
    """An RGB PNG whose tRNS chunk comes after IDAT (Pillow applies it while decoding).

    ``idat_size`` splits its image data into chunks of that size first (a run the walk skips at once).
    """
    data = images.png_bytes("RGB", (9, 7) if idat_size is None else (64, 48))
    if idat_size is not None:
        data = costly.png_rechunked(data, idat_size)
    end = data.rfind(b"IEND") - 4
    return data[:end] + images.png_chunk(b"tRNS", b"\0\1\0\2\0\3") + data[end:]


# -- the library ----------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_golden_inputs_key_as_the_loader_for_every_mode_colour_and_algorithm(name: str) -> None:
    data = GOLDEN[name]
    for image_mode in MODES:
        for color in COLORS:
            with observing(None):
                assert key_for_bytes(data, "blake3", image_mode, color) == loader_key(data, "blake3", image_mode, color)
    for algorithm in ("sha256", "sha512"):
        with observing(None):
            assert key_for_bytes(data, algorithm) == loader_key(data, algorithm)


def test_other_keyword_arguments_join_the_key_as_in_hash_kwargs() -> None:
    data = GOLDEN["rgba.png"]
    extras = {"model_id": "Qwen/Qwen2.5-VL-3B-Instruct", "mm_processor_kwargs": {"max_pixels": 1024}}
    with observing(None):
        assert key_for_bytes(data, **extras) == loader_key(data, **extras)
        assert key_for_bytes(data, **extras) != key_for_bytes(data)


def test_the_golden_media_vectors_come_out_of_the_header_path() -> None:
    """The golden ``$media`` vectors (vLLM's own keys) reached without a decode."""
    checked = 0
    for case in golden.cases():
        recipe = dict(case["kwargs"])
        image = recipe.pop("image", None)
        if not isinstance(image, dict) or "$media" not in image or "$media" in json.dumps(recipe):
            continue
        spec = image["$media"]
        color = tuple(spec.get("rgba_background_color", (255, 255, 255)))
        io_ = ImageMediaIO(spec.get("image_mode", "RGB"), color)
        with observing(None):
            found = key_image(io_, golden.input_bytes(spec["file"]), case["algorithm"], **golden.build(recipe))
        assert (found.key, found.key_path) == (case["expected"], "header"), case["id"]
        checked += 1
    assert checked >= 6


def forbid_pixel_decoding(patch: pytest.MonkeyPatch) -> None:
    """Make every pixel decode raise: Pillow's decoders, ``ImageFile.load`` and WebP's frame reads."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a pixel decode was attempted")

    patch.setattr(Image, "_getdecoder", refuse)
    patch.setattr(ImageFile.ImageFile, "load", refuse)
    patch.setattr(WebPImagePlugin.WebPImageFile, "load", refuse)


@pytest.mark.parametrize(
    ("fmt", "mode", "params"),
    [
        ("JPEG", "RGB", {}), ("JPEG", "CMYK", {}), ("JPEG", "L", {"progressive": True}),
        ("PNG", "RGB", {}), ("PNG", "RGB", {"transparency": (1, 2, 3)}), ("PNG", "P", {}), ("PNG", "LA", {}),
        ("PNG", "I;16", {}), ("GIF", "P", {}), ("WEBP", "RGB", {}), ("WEBP", "RGBA", {"lossless": True}),
        ("BMP", "RGB", {}), ("TIFF", "RGBA", {"compression": "tiff_lzw"}), ("TIFF", "CMYK", {}),
    ],
)  # fmt: skip
def test_the_header_path_decodes_no_pixel(fmt: str, mode: str, params: dict[str, Any]) -> None:
    data = encode(images.noisy_image(mode, (24, 16)), fmt, **params)
    expected = {image_mode: loader_key(data, image_mode=image_mode) for image_mode in MODES}
    with pytest.MonkeyPatch.context() as patch, observing(None):
        forbid_pixel_decoding(patch)
        with pytest.raises(BadImageError, match="pixel decode"):  # the patch bites: the loader cannot decode
            ImageMediaIO().load_bytes(data)
        for image_mode, key in expected.items():
            found = key_image(ImageMediaIO(image_mode), data)
            assert (found.key, found.key_path) == (key, "header"), (fmt, mode, image_mode)


def test_verify_decode_decodes_and_refuses_what_the_loader_refuses() -> None:
    whole = images.jpeg_bytes((64, 48))
    truncated = whole[: len(whole) * 2 // 3]
    with observing(None):
        found = key_image(ImageMediaIO(), truncated)
        assert found.key_path == "header"  # the key vLLM would give it, had it accepted it
        with pytest.raises(BadImageError) as refused:
            key_for_bytes(truncated, verify="decode")
        assert refused.value.reason == "truncated"
        decoded = key_image(ImageMediaIO(), whole, verify="decode")
    assert (decoded.key, decoded.key_path) == (loader_key(whole), "decode")


@pytest.mark.parametrize(
    ("name", "data", "options", "because"),
    [
        ("late tRNS", late_trns_png(), {"image_mode": "RGB"}, "tRNS chunk after the image data"),
        ("late tRNS, run", late_trns_png(idat_size=64), {"image_mode": "RGB"}, "tRNS chunk after the image data"),
        ("ICO", encode(images.noisy_image("RGBA", (16, 16)), "ICO"), {"formats": None}, "format ICO"),
        ("no conversion", encode(images.noisy_image("P", (8, 8)), "PNG"), {"image_mode": "I;16"}, "cannot convert"),
    ],
)
def test_what_the_header_cannot_decide_is_decoded(
    name: str, data: bytes, options: dict[str, Any], because: str
) -> None:
    io_ = ImageMediaIO(**options)
    with observing(None):
        try:
            expected: str | None = mmobs.MultiModalHasher.hash_kwargs("blake3", image=io_.load_bytes(data))
        except BadImageError:
            expected = None
        if expected is None:
            with pytest.raises(BadImageError):
                key_image(io_, data)
            return
        found = key_image(io_, data)
    assert found.key == expected
    assert found.key_path == "header_decoded" and because in (found.decoded_because or ""), found


def test_a_late_trns_only_matters_for_an_rgb_png_keyed_for_rgb() -> None:
    data = late_trns_png()
    with observing(None):
        assert key_image(ImageMediaIO("RGB"), data).key_path == "header_decoded"
        for image_mode in ("L", "RGBA", None):
            found = key_image(ImageMediaIO(image_mode), data)
            assert (found.key, found.key_path) == (loader_key(data, image_mode=image_mode), "header")


@pytest.mark.parametrize("verify", ["header", "decode"])
def test_the_bytes_are_checked_and_opened_once_on_every_path(verify: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """One way down: guard, open, decide, decode if needed, hash, each step once, even when the header cannot decide."""
    data, calls = late_trns_png(), []
    for module, name in ((loader, "check_image_bytes"), (loader.Image, "open")):
        real = getattr(module, name)

        def spy(*args: Any, _real: Any = real, _name: str = name, **kwargs: Any) -> Any:
            calls.append(_name)
            return _real(*args, **kwargs)

        monkeypatch.setattr(module, name, spy)
    with observing(None):  # the default observer's fingerprint opens reference images of its own
        found = key_image(ImageMediaIO("RGB"), data, verify=verify)  # type: ignore[arg-type]
    assert found.key_path == ("header_decoded" if verify == "header" else "decode")
    assert calls == ["check_image_bytes", "open"]


def test_image_mode_none_never_converts_so_any_format_is_keyed_from_its_header() -> None:
    data = encode(images.noisy_image("RGBA", (16, 16)), "ICO")
    with observing(None):
        found = key_image(ImageMediaIO(None, formats=None), data)
        expected = mmobs.MultiModalHasher.hash_kwargs("blake3", image=ImageMediaIO(None, formats=None).load_bytes(data))
    assert (found.key, found.key_path, found.io_config) == (expected, "header", None)
    assert "ICO" not in HEADER_FORMATS


@pytest.mark.parametrize(
    ("data", "options", "reason"),
    [
        (b"", {}, "empty"),
        (b"\x00" * 64, {}, "unidentified"),
        (images.png_header_only(9000, 9000), {}, "too_many_pixels"),
        (images.jpeg_bytes(), {"max_bytes": 100}, "too_large"),
        (encode(images.noisy_image("RGBA", (16, 16)), "ICO"), {}, "unsupported_format"),  # not in the default formats
    ],
)
def test_header_refusals_are_the_loaders_counted_once(
    data: bytes, options: dict[str, Any], reason: str, record: Any
) -> None:
    with record() as loader_events, pytest.raises(BadImageError) as by_loader:
        ImageMediaIO(**options).load_bytes(data)
    with record() as key_events, pytest.raises(BadImageError) as by_header:
        key_image(ImageMediaIO(**options), data)
    assert by_header.value.reason == by_loader.value.reason == reason
    assert str(by_header.value) == str(by_loader.value)
    assert [e.reason for e in key_events.bad_images] == [e.reason for e in loader_events.bad_images] == [reason]
    assert key_events.key_paths == []


def test_events_key_source_and_path_but_no_exif_fallback(record: Any) -> None:
    """The EXIF is never read on this path: the regression JPEG keys with no fallback to report."""
    data = GOLDEN["bad-exif-header.jpg"]
    with record() as loader_events:
        mmobs.MultiModalHasher.hash_kwargs("blake3", image=ImageMediaIO().load_bytes(data))
    assert loader_events.fallbacks  # the loader path swallows the SyntaxError...
    with record() as events:
        key = key_for_bytes(data)
    assert key == loader_key(data)  # ...and lands on the very key the header path gives
    assert events.fallbacks == [] and events.transpose_failures == []
    assert [(e.kind, e.key_source) for e in events.keyed] == [("media_with_bytes", "original_bytes")]
    assert [event.key_path for event in events.key_paths] == ["header"] and len(events.hashed_calls) == 1


def test_the_counter_has_a_series_per_path_from_the_first_scrape() -> None:
    registry = CollectorRegistry()
    instrumentation = Instrumentation(registry, drift=None, hasher_info=False)

    def value(path: str) -> float | None:
        return registry.get_sample_value("mmobs_key_paths_total", {"key_path": path})

    assert [value(path) for path in KEY_PATHS] == [0.0, 0.0, 0.0]
    with observing(instrumentation):
        key_for_bytes(GOLDEN["photo.jpg"])
        key_for_bytes(late_trns_png())
        key_for_bytes(GOLDEN["photo.jpg"], verify="decode")
        with pytest.raises(BadImageError):
            key_for_bytes(b"not an image")
    assert {path: value(path) for path in KEY_PATHS} == {"header": 1.0, "header_decoded": 1.0, "decode": 1.0}
    assert registry.get_sample_value("mmobs_bad_images_total", {"reason": "unidentified"}) == 1.0
    assert (
        registry.get_sample_value(
            "mmobs_media_keys_total", {"kind": "media_with_bytes", "key_source": "original_bytes"}
        )
        == 3.0
    )


def test_the_drift_tracker_sees_both_paths_as_the_same_content() -> None:
    """Items keyed from the header are sampled like loaded ones, with the same item digest."""
    registry = CollectorRegistry()
    instrumentation = Instrumentation(registry, drift=DriftTracker(sample_rate=1.0), hasher_info=False)

    def value(name: str) -> float | None:
        return registry.get_sample_value(name, {"kind": "media_with_bytes"})

    data = GOLDEN["rgba.png"]
    with observing(instrumentation):
        mmobs.MultiModalHasher.hash_kwargs("blake3", image=ImageMediaIO().load_bytes(data))
        key_for_bytes(data)
        assert (value("mmobs_cache_key_drift_samples_total"), value("mmobs_cache_key_drift_total")) == (2.0, 0.0)
        key_for_bytes(data, rgba_background_color=(0, 0, 0))  # the same bytes, another io_config: drift
    assert (value("mmobs_cache_key_drift_samples_total"), value("mmobs_cache_key_drift_total")) == (3.0, 1.0)


@pytest.mark.parametrize("wrap", [bytes, bytearray, memoryview])
def test_any_bytes_like_input(wrap: Any) -> None:
    data = GOLDEN["palette.png"]
    with observing(None):
        assert key_for_bytes(wrap(data)) == loader_key(data)


@pytest.mark.parametrize(
    ("kwargs", "error", "param"),
    [
        ({"algorithm": "md5"}, ValueError, None),
        ({"verify": "pixels"}, InvalidOptionError, "verify"),
        ({"image_mode": "RGBZ"}, InvalidOptionError, "image_mode"),
        ({"rgba_background_color": (1, 2)}, InvalidOptionError, "rgba_background_color"),
        ({"rgba_background_color": "white"}, InvalidOptionError, "rgba_background_color"),
    ],
)
def test_bad_options_raise_before_anything_is_counted(
    kwargs: dict[str, Any], error: type, param: str | None, record: Any
) -> None:
    with record() as events, pytest.raises(error) as raised:
        key_for_bytes(GOLDEN["photo.jpg"], **kwargs)
    assert getattr(raised.value, "param", None) == param
    assert events.bad_images == [] and events.keyed == []


# -- POST /v1/keys ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    process = ServiceProcess(tmp_path_factory.mktemp("serve-keys"), "--max-image-bytes", "200000")
    yield process
    process.stop()


@pytest.fixture(scope="module")
def client(service: ServiceProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=service.url, timeout=30) as http:
        yield http


def test_keys_endpoint_answers_the_keys_of_hash_for_every_request_shape(client: httpx.Client) -> None:
    names = ["photo.jpg", "rgba.png", "bad-exif-header.jpg", "palette.png"]
    urls = [data_url(GOLDEN[name]) for name in names]
    body = {"images": urls, "image_mode": "RGB", "rgba_background_color": [0, 0, 0], "model_id": "m"}
    hashed = client.post("/v1/hash", json=body).json()["items"]
    keyed = client.post("/v1/keys", json=body).json()
    assert keyed["algorithm"] == "blake3"
    assert [item["mm_hash"] for item in keyed["items"]] == [item["mm_hash"] for item in hashed]
    assert [item["key_path"] for item in keyed["items"]] == ["header"] * len(names)
    assert keyed["items"][1] == {
        "index": 1, "mm_hash": hashed[1]["mm_hash"], "key_source": "original_bytes", "key_path": "header",
        "format": "PNG", "width": 32, "height": 24,
    }  # fmt: skip
    messages = {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": urls[0]}}]}]}
    assert client.post("/v1/keys", json=messages).json()["items"][0]["mm_hash"] == loader_key(GOLDEN["photo.jpg"])
    files = [("file", ("a.png", GOLDEN["rgba.png"], "image/png"))]
    multipart = client.post("/v1/keys", files=files, data={"algorithm": "sha512", "verify": "decode"}).json()
    assert multipart["items"][0]["mm_hash"] == loader_key(GOLDEN["rgba.png"], "sha512")
    assert multipart["items"][0]["key_path"] == "decode"
    raw = client.post("/v1/keys?image_mode=L", content=GOLDEN["gray.png"], headers={"content-type": "image/png"})
    assert raw.json()["items"][0]["mm_hash"] == loader_key(GOLDEN["gray.png"], image_mode="L")


@pytest.mark.parametrize(
    ("body", "status", "code", "reason", "param"),
    [
        ({"images": ["data:image/png;base64,@@@"]}, 400, "bad_image", "bad_base64", "images[0]"),
        ({"images": [data_url(b"not an image")]}, 400, "bad_image", "unidentified", "images[0]"),
        ({"images": [data_url(images.png_bytes(size=(300, 300)))]}, 400, "bad_image", "too_large", "images[0]"),
        ({"images": ["https://example.com/a.png"]}, 400, "bad_image", "unsupported_url", "images[0]"),
        ({"images": [data_url(GOLDEN["photo.jpg"])], "verify": "maybe"}, 400, "invalid_option", None, "verify"),
        ({"images": []}, 400, "invalid_request", None, "images"),
    ],
)
def test_keys_endpoint_errors_have_the_hash_endpoints_shape(
    client: httpx.Client, body: dict[str, Any], status: int, code: str, reason: str | None, param: str
) -> None:
    response = client.post("/v1/keys", json=body)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert (error["code"], error.get("reason"), error.get("param")) == (code, reason, param)
    if body.get("verify") is None:
        assert client.post("/v1/hash", json=body).json()["error"] == error


def test_keys_endpoint_moves_the_key_path_and_request_metrics(service: ServiceProcess, client: httpx.Client) -> None:
    before = service.metrics()
    body = {"images": [data_url(GOLDEN["photo.jpg"]), data_url(late_trns_png(), "image/png")]}
    assert client.post("/v1/keys", json=body).status_code == 200
    assert client.post("/v1/keys", json={"images": [data_url(b"junk")]}).status_code == 400
    after = service.metrics()

    def moved(name: str, labels: dict[str, str]) -> float:
        return metric_value(after, name, labels) - metric_value(before, name, labels)

    assert moved("mmobs_key_paths_total", {"key_path": "header"}) == 1
    assert moved("mmobs_key_paths_total", {"key_path": "header_decoded"}) == 1
    assert moved("mmobs_bad_images_total", {"reason": "unidentified"}) == 1
    assert moved("mmobs_http_requests_total", {"route": "/v1/keys", "status_class": "2xx"}) == 1
    assert moved("mmobs_http_requests_total", {"route": "/v1/keys", "status_class": "4xx"}) == 1
    assert moved("mmobs_http_image_requests_total", {"route": "/v1/keys", "status_class": "2xx"}) == 1


# -- mmobs hash --no-decode ------------------------------------------------------------------


def test_cli_no_decode_prints_the_loaders_key_and_the_path(tmp_path: Path) -> None:
    paths = []
    for name in ("photo.jpg", "la.png"):
        paths.append(tmp_path / name)
        paths[-1].write_bytes(GOLDEN[name])
    (tmp_path / "late.png").write_bytes(late_trns_png())
    paths.append(tmp_path / "late.png")
    result = subprocess.run(
        [sys.executable, "-m", "mmobs.cli", "hash", "--no-decode", "--json", *map(str, paths)],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert [row["mm_hash"] for row in rows] == [loader_key(path.read_bytes()) for path in paths]
    assert [row["key_path"] for row in rows] == ["header", "header", "header_decoded"]
    assert rows[1]["header_mode"] == "LA" and rows[2]["decoded_because"]
    text = subprocess.run(
        [sys.executable, "-m", "mmobs.cli", "hash", "--no-decode", str(paths[0])],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    assert text.startswith(rows[0]["mm_hash"]) and "key_path=header" in text and "header_mode=RGB" in text


def test_cli_no_decode_refuses_like_the_loader(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("not an image\n")
    result = subprocess.run(
        [sys.executable, "-m", "mmobs.cli", "hash", "--no-decode", str(path)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 1 and "unidentified" in result.stderr
