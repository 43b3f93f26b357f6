"""The multimodal front end's stages timed inside the real vLLM 0.33 (``mmobs.vllm.front_end.stages``), in process.

The plugin is registered in this process for the module; vLLM's own
``MediaConnector`` fetches data, file and http URLs (a loopback file server)
with vLLM's own loader, and each stage's histogram must move by exactly the
items that went through it, refusals under their outcome. The processor and
the hand-off to the engine are shown on a running server
(``tests/vllm/test_vllm_front_end_server.py``); here the processor hook is shown to
time a model's own override.
"""

from __future__ import annotations

import asyncio
import base64
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from mmobs.events import observing
from mmobs.vllm.front_end import stages as front_end
from mmobs.vllm.front_end.front_end_metrics import FrontEndMetrics, item_count_label
from tests.support import require_opencv, require_vllm, vllm_plugin_registered
from tests.support.images import jpeg_bytes, png_bytes
from tests.support.media_server import serving
from tests.support.videos import Clip, clip_bytes

Counts = dict[tuple[str, tuple[tuple[str, str], ...]], float]


@pytest.fixture(scope="module")
def vllm() -> Iterator[types.SimpleNamespace]:
    require_vllm()
    from vllm.multimodal.media.audio import AudioMediaIO
    from vllm.multimodal.media.connector import MediaConnector
    from vllm.multimodal.media.image import ImageMediaIO
    from vllm.multimodal.parse import MultiModalDataParser
    from vllm.multimodal.processing.processor import BaseMultiModalProcessor

    with vllm_plugin_registered():
        assert hasattr(MediaConnector.load_from_url_async, "__wrapped__"), "the plugin did not time the front end"
        yield types.SimpleNamespace(
            connector=MediaConnector,
            image_io=ImageMediaIO,
            audio_io=AudioMediaIO,
            parser=MultiModalDataParser,
            processor=BaseMultiModalProcessor,
        )


@pytest.fixture
def metrics(vllm: types.SimpleNamespace, monkeypatch: pytest.MonkeyPatch) -> FrontEndMetrics:
    """Fresh histograms (their own registry) in place of the process's."""
    fresh = FrontEndMetrics(CollectorRegistry())
    monkeypatch.setattr(front_end, "front_end_metrics", lambda: fresh)
    return fresh


@pytest.fixture(scope="module")
def media(tmp_path_factory: pytest.TempPathFactory) -> Iterator[types.SimpleNamespace]:
    directory = tmp_path_factory.mktemp("media")
    files = {"photo.jpg": jpeg_bytes((96, 64), seed=3), "chart.png": png_bytes("RGB", (40, 30), seed=4)}
    for name, data in files.items():
        (directory / name).write_bytes(data)
    with serving(directory) as url:
        yield types.SimpleNamespace(directory=directory, url=url, files=files)


def counts(metrics: FrontEndMetrics) -> Counts:
    """Every histogram's count per label set, and the byte histogram's sum: what a test can know exactly."""
    found: Counts = {}
    for family in metrics.registry.collect():
        for sample in family.samples:
            known = sample.name.endswith("_count") or sample.name == "mmobs_vllm_mm_media_download_bytes_sum"
            if known and sample.value:
                found[sample.name, tuple(sorted(sample.labels.items()))] = sample.value
    return found


def key(name: str, **labels: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    return name, tuple(sorted(labels.items()))


DECODE = "mmobs_vllm_mm_decode_seconds_count"
BASE64 = "mmobs_vllm_mm_base64_decode_seconds_count"
DOWNLOAD = "mmobs_vllm_mm_media_download_seconds_count"
VIDEO_FRAMES = "mmobs_vllm_mm_video_frames_count"
DOWNLOAD_BYTES = "mmobs_vllm_mm_media_download_bytes_count"
DOWNLOAD_BYTES_SUM = "mmobs_vllm_mm_media_download_bytes_sum"


def downloaded(modality: str, scheme: str, nbytes: int) -> Counts:
    """What one fetch of ``nbytes`` bytes moves in the download histograms."""
    return {
        key(DOWNLOAD, modality=modality, scheme=scheme, outcome="ok"): 1,
        key(DOWNLOAD_BYTES, modality=modality, scheme=scheme): 1,
        key(DOWNLOAD_BYTES_SUM, modality=modality, scheme=scheme): nbytes,
    }


def data_url(data: bytes, media_type: str = "image/jpeg") -> str:
    return f"data:{media_type};base64,{base64.b64encode(data).decode()}"


#: One event loop for the module, as a server has one: vLLM's HTTP connection keeps its client session on it.
_loop = asyncio.new_event_loop()


def fetch(
    vllm: types.SimpleNamespace, url: str, *, asynchronous: bool = True, media_io: Any = None, **connector: Any
) -> Any:
    """vLLM's own fetch of an image URL, as its chat parser runs it (async) or the offline path does (sync)."""
    media_connector = vllm.connector(**connector)
    media_io = vllm.image_io() if media_io is None else media_io
    if asynchronous:
        return _loop.run_until_complete(media_connector.load_from_url_async(url, media_io))
    return media_connector.load_from_url(url, media_io)


@pytest.mark.parametrize("asynchronous", [True, False], ids=["async", "sync"])
def test_a_data_url_is_one_base64_and_one_decode(
    vllm: types.SimpleNamespace, metrics: FrontEndMetrics, asynchronous: bool
) -> None:
    image = fetch(vllm, data_url(jpeg_bytes((32, 24), seed=1)), asynchronous=asynchronous)
    assert image.media.size == (32, 24)
    assert counts(metrics) == {
        key(BASE64, modality="image", outcome="ok"): 1,
        key(DECODE, modality="image", format="jpeg", outcome="decoded"): 1,
    }


def test_a_payload_that_is_not_base64_is_a_refused_base64_and_no_decode(
    vllm: types.SimpleNamespace, metrics: FrontEndMetrics
) -> None:
    with pytest.raises(ValueError):
        fetch(vllm, "data:image/jpeg;base64,not*base64!")
    assert counts(metrics) == {key(BASE64, modality="image", outcome="refused"): 1}


def test_a_video_data_url_is_one_base64_and_one_decode_by_its_modality(
    vllm: types.SimpleNamespace, metrics: FrontEndMetrics
) -> None:
    require_opencv()
    from vllm.multimodal.media.video import VideoMediaIO

    clip = fetch(
        vllm, data_url(clip_bytes(Clip(frames=6, seed=30)), "video/mp4"), media_io=VideoMediaIO(vllm.image_io())
    )
    frames, _ = clip.media
    assert frames.shape[0] == 6
    assert counts(metrics) == {
        key(BASE64, modality="video", outcome="ok"): 1,
        key(DECODE, modality="video", format="mp4", outcome="decoded"): 1,
        key(VIDEO_FRAMES, count="read"): 1,
        key(VIDEO_FRAMES, count="kept"): 1,
    }


def test_an_audio_data_urls_base64_is_timed_up_to_its_loader(
    vllm: types.SimpleNamespace, metrics: FrontEndMetrics
) -> None:
    """Audio's decode is not timed; its base64 is: ok where the loader got the bytes, refused where it did not."""
    with pytest.raises(Exception):  # noqa: B017 - not audio: vLLM's audio loader refuses it its own way
        fetch(vllm, data_url(b"not audio at all", "audio/wav"), media_io=vllm.audio_io())
    assert counts(metrics) == {key(BASE64, modality="audio", outcome="ok"): 1}
    with pytest.raises(ValueError):
        fetch(vllm, "data:audio/wav;base64,not*base64!", media_io=vllm.audio_io())
    assert counts(metrics) == {
        key(BASE64, modality="audio", outcome="ok"): 1,
        key(BASE64, modality="audio", outcome="refused"): 1,
    }


def test_bytes_the_loader_refuses_are_a_refused_decode_by_their_format(
    vllm: types.SimpleNamespace, metrics: FrontEndMetrics
) -> None:
    broken = png_bytes("RGB", (40, 30), seed=9)[:60]
    with pytest.raises(ValueError):
        fetch(vllm, data_url(broken, "image/png"))
    assert counts(metrics) == {
        key(BASE64, modality="image", outcome="ok"): 1,
        key(DECODE, modality="image", format="png", outcome="refused"): 1,
    }


@pytest.mark.parametrize("asynchronous", [True, False], ids=["async", "sync"])
def test_an_http_url_is_one_download_of_exactly_its_bytes_and_one_decode(
    vllm: types.SimpleNamespace, metrics: FrontEndMetrics, media: types.SimpleNamespace, asynchronous: bool
) -> None:
    image = fetch(vllm, f"{media.url}/chart.png", asynchronous=asynchronous)
    assert image.media.size == (40, 30)
    assert counts(metrics) == {
        **downloaded("image", "http", len(media.files["chart.png"])),
        key(DECODE, modality="image", format="png", outcome="decoded"): 1,
    }


def test_an_http_url_that_fails_is_a_failed_download_and_no_decode(
    vllm: types.SimpleNamespace, metrics: FrontEndMetrics, media: types.SimpleNamespace
) -> None:
    with pytest.raises(Exception, match="404"):
        fetch(vllm, f"{media.url}/missing.jpg")
    assert counts(metrics) == {key(DOWNLOAD, modality="image", scheme="http", outcome="failed"): 1}


def test_a_download_is_labelled_with_the_modality_it_fetches(
    vllm: types.SimpleNamespace, metrics: FrontEndMetrics, media: types.SimpleNamespace
) -> None:
    """An audio URL's download is audio's, whatever its decode then makes of the bytes (not timed: images only)."""
    with pytest.raises(Exception):  # noqa: B017 - a JPEG is not audio; vLLM's audio loader says so its own way
        fetch(vllm, f"{media.url}/photo.jpg", media_io=vllm.audio_io())
    assert counts(metrics) == {
        **downloaded("audio", "http", len(media.files["photo.jpg"])),
    }


def test_a_file_url_is_one_read_of_exactly_its_bytes_and_one_decode(
    vllm: types.SimpleNamespace, metrics: FrontEndMetrics, media: types.SimpleNamespace
) -> None:
    url = (media.directory / "photo.jpg").as_uri()
    image = fetch(vllm, url, allowed_local_media_path=str(media.directory))
    assert image.media.size == (96, 64)
    assert counts(metrics) == {
        **downloaded("image", "file", len(media.files["photo.jpg"])),
        key(DECODE, modality="image", format="jpeg", outcome="decoded"): 1,
    }


def test_a_file_url_refused_before_the_loader_is_a_failed_read(
    vllm: types.SimpleNamespace, metrics: FrontEndMetrics, media: types.SimpleNamespace, tmp_path: Path
) -> None:
    outside = tmp_path / "outside.jpg"
    outside.write_bytes(media.files["photo.jpg"])
    with pytest.raises(ValueError, match="allowed-local-media-path"):
        fetch(vllm, outside.as_uri(), allowed_local_media_path=str(media.directory))
    with pytest.raises(FileNotFoundError):
        fetch(vllm, (media.directory / "missing.jpg").as_uri(), allowed_local_media_path=str(media.directory))
    assert counts(metrics) == {key(DOWNLOAD, modality="image", scheme="file", outcome="failed"): 2}


def test_nothing_is_timed_while_nobody_observes(
    vllm: types.SimpleNamespace, metrics: FrontEndMetrics, media: types.SimpleNamespace
) -> None:
    """vLLM's dummy inputs and mmobs's own content keys run under no observer: they are not traffic."""
    with observing(None):
        fetch(vllm, data_url(jpeg_bytes((16, 16), seed=2)))
        fetch(vllm, f"{media.url}/chart.png")
        fetch(vllm, (media.directory / "photo.jpg").as_uri(), allowed_local_media_path=str(media.directory))
    assert counts(metrics) == {}


def _processor_class(vllm: types.SimpleNamespace, calls: list[Any]) -> type:
    """A model's processor that overrides vLLM's ``_apply_hf_processor_main``, as 14 of vLLM's models do."""

    class OwnProcessor(vllm.processor):  # type: ignore[misc, name-defined]
        requires_tokenizer = False

        def _apply_hf_processor_main(self, mm_items: Any, hf_kwargs: Any) -> Any:
            calls.append(dict(mm_items.get_all_counts()))
            return "processed"

        def _get_mm_fields_config(self, *args: Any) -> Any:
            return {}

        def _get_prompt_updates(self, *args: Any) -> Any:
            return []

    return OwnProcessor


def test_the_processor_a_model_overrides_is_timed_per_call_with_its_items(
    vllm: types.SimpleNamespace, metrics: FrontEndMetrics
) -> None:
    calls: list[Any] = []
    info = types.SimpleNamespace(get_data_parser=vllm.parser)
    processor = _processor_class(vllm, calls)(info, dummy_inputs=None)
    parser = vllm.parser()
    images = [vllm.image_io().load_bytes(jpeg_bytes((16, 16), seed=seed)).media for seed in (5, 6)]
    assert processor._apply_hf_processor_main(parser.parse_mm_data({"image": images}), {}) == "processed"
    assert processor._apply_hf_processor_main(parser.parse_mm_data({"image": images[:1]}), {}) == "processed"
    processor._apply_hf_processor_main(parser.parse_mm_data({}), {})  # every item cached: nothing to time
    with observing(None):  # vLLM's dummy inputs
        processor._apply_hf_processor_main(parser.parse_mm_data({"image": images}), {})
    assert calls == [{"image": 2}, {"image": 1}, {}, {"image": 2}]
    processed = {k: v for k, v in counts(metrics).items() if "processor" in k[0]}
    assert processed == {
        key("mmobs_vllm_mm_processor_seconds_count", modality="image"): 2,
        key("mmobs_vllm_mm_processor_items_count", modality="image"): 2,
    }
    items = metrics.registry.get_sample_value("mmobs_vllm_mm_processor_items_sum", {"modality": "image"})
    assert items == 3


@pytest.mark.parametrize(
    ("items", "label"), [(0, "0"), (1, "1"), (2, "2-3"), (3, "2-3"), (4, "4-7"), (7, "4-7"), (8, "8+"), (99, "8+")]
)
def test_a_requests_items_fall_in_a_closed_set_of_ranges(items: int, label: str) -> None:
    assert item_count_label(items) == label


def test_the_format_label_is_the_sniffed_format_of_every_golden_and_corpus_input() -> None:
    """The decode histogram's cheap two-byte lookup labels every real input as the structural checks' sniff does."""
    from mmobs.keys.guard import sniff_format
    from scripts.corpus.build import build_corpus
    from tests.support import golden

    inputs = [path.read_bytes() for path in sorted((golden.GOLDEN_DIR / "inputs").iterdir())]
    inputs += [case.payload for case in build_corpus() if case.kind == "image"]
    assert len(inputs) > 50
    labels = [front_end.format_label(data) for data in inputs]
    assert labels == [(sniff_format(data) or "other").lower() for data in inputs]
    assert {"jpeg", "png", "other"} <= set(labels)
