"""The multimodal front end's stages on a running ``vllm serve``'s ``/metrics``, with the openai client.

Each request carries images of its own (never seen before by the server, so
the processor cache misses them), as data URLs, as http URLs served by a
loopback file server, and as file URLs under the server's
``--allowed-local-media-path``. Every stage's histogram must move by exactly
the items (or requests) that went through it, refusals under their outcome; a
re-sent image is a decode-free hit (``skipped``) the processor never sees. The
whole front end is counted once per request handed to the engine, with its
items, and is a part of vLLM's own time to first token for the same requests.
A URL that cannot be fetched is answered exactly as vLLM alone (the plugin off)
answers it.
"""

from __future__ import annotations

import base64
import itertools
import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import openai
import pytest

from mmobs.vllm.front_end.front_end_metrics import METRIC_NAMES
from tests.support.images import jpeg_bytes, png_bytes
from tests.support.media_server import serving
from tests.support.vllm_requests import client_for
from tests.support.vllm_server import VllmServer, delta, series

pytestmark = pytest.mark.vllm_server

ROOT = Path(__file__).resolve().parents[2]
#: Requests through the slow host, 4 at a time (the server's --max-num-seqs: none waits for the engine):
#: over 5 minutes' rate, more than the alert's floor of 0.05 requests/s.
SLOW_REQUESTS = 28
_seed = itertools.count(30_000)
DOWNLOAD = "mmobs_vllm_mm_media_download_seconds_count"
DOWNLOAD_BYTES = "mmobs_vllm_mm_media_download_bytes_count"
DOWNLOAD_BYTES_SUM = "mmobs_vllm_mm_media_download_bytes_sum"
BASE64 = "mmobs_vllm_mm_base64_decode_seconds_count"
DECODE = "mmobs_vllm_mm_decode_seconds_count"
PROCESSOR = "mmobs_vllm_mm_processor_seconds_count"
PROCESSOR_ITEMS = "mmobs_vllm_mm_processor_items_count"
PROCESSOR_ITEMS_SUM = "mmobs_vllm_mm_processor_items_sum"
FRONT_END = "mmobs_vllm_mm_preprocessing_total_seconds_count"
FRONT_END_SUM = "mmobs_vllm_mm_preprocessing_total_seconds_sum"
TTFT_SUM = "vllm:time_to_first_token_seconds_sum"
TTFT_COUNT = "vllm:time_to_first_token_seconds_count"


@pytest.fixture(scope="module")
def media_url(vllm_server: VllmServer) -> Iterator[str]:
    """A loopback HTTP server over the server's media directory (what its file URLs may read too)."""
    with serving(vllm_server.media_dir) as url:
        yield url


def fresh_jpeg() -> bytes:
    return jpeg_bytes(size=(64, 48), seed=next(_seed))


def fresh_png() -> bytes:
    return png_bytes(size=(40, 30), seed=next(_seed))


def data_url(data: bytes, media_type: str = "image/jpeg") -> str:
    return f"data:{media_type};base64," + base64.b64encode(data).decode()


def published(server: VllmServer, data: bytes, suffix: str) -> str:
    """Put ``data`` in the server's media directory under a fresh name; returns the file's name."""
    name = f"image-{next(_seed)}{suffix}"
    (server.media_dir / name).write_bytes(data)
    return name


def send(server: VllmServer, urls: list[str]) -> tuple[int, Any]:
    """One chat completion with these image URLs (none: text only): (status, completion or error body)."""
    content: list[dict[str, Any]] = [{"type": "image_url", "image_url": {"url": url}} for url in urls]
    content.append({"type": "text", "text": "Describe."})
    try:
        raw = client_for(server).chat.completions.with_raw_response.create(
            model=server.model, max_tokens=2, messages=[{"role": "user", "content": content}]
        )
    except openai.APIStatusError as error:
        return error.status_code, error.response.json()
    return raw.http_response.status_code, raw.parse()


def stage_counts(server: VllmServer) -> dict[Any, float]:
    """The stages' counts (and the byte and item sums, which are exact), with vLLM's TTFT."""
    found = {}
    for key, value in server.samples("").items():
        name = key[0]
        family = name.removesuffix("_count").removesuffix("_sum")
        exact = name.endswith("_count") or name in (DOWNLOAD_BYTES_SUM, PROCESSOR_ITEMS_SUM)
        if (family in METRIC_NAMES and exact) or name in (FRONT_END_SUM, TTFT_SUM, TTFT_COUNT):
            found[key] = value
    return found


def moved_by(server: VllmServer, urls: list[str]) -> tuple[int, Any, dict[Any, float]]:
    before = stage_counts(server)
    status, body = send(server, urls)
    return status, body, delta(before, stage_counts(server))


def split_front_end(moved: dict[Any, float]) -> tuple[dict[Any, float], float, float]:
    """(the moved mmobs counts, the front end's seconds, vLLM's TTFT seconds) for the requests sent."""
    front_end = sum(v for k, v in moved.items() if k[0] == FRONT_END_SUM)
    ttft = sum(v for k, v in moved.items() if k[0] == TTFT_SUM)
    counts = {k: v for k, v in moved.items() if k[0] not in (FRONT_END_SUM, TTFT_SUM, TTFT_COUNT)}
    return counts, front_end, ttft


def front_end_of(server: VllmServer, items: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    return series(FRONT_END, model_name=server.model, items=items)


def test_a_data_url_image_moves_each_stage_once_and_the_front_end_is_within_ttft(vllm_server: VllmServer) -> None:
    status, _, moved = moved_by(vllm_server, [data_url(fresh_jpeg())])
    assert status == 200
    counts, front_end, ttft = split_front_end(moved)
    assert counts == {
        series(BASE64, modality="image", outcome="ok"): 1,
        series(DECODE, modality="image", format="jpeg", outcome="decoded"): 1,
        **processed(vllm_server, 1),
    }
    # vLLM counts time to first token from the same arrival: the front end is a part of it.
    assert moved[series(TTFT_COUNT, model_name=vllm_server.model, engine="0")] == 1
    assert 0 < front_end < ttft


def test_a_resent_image_is_a_skipped_decode_and_no_processor(vllm_server: VllmServer) -> None:
    url = data_url(fresh_png(), "image/png")
    assert send(vllm_server, [url])[0] == 200
    status, _, moved = moved_by(vllm_server, [url])
    assert status == 200
    assert split_front_end(moved)[0] == {
        series(BASE64, modality="image", outcome="ok"): 1,
        series(DECODE, modality="image", format="png", outcome="skipped"): 1,
        front_end_of(vllm_server, "1"): 1,
    }


def downloaded(scheme: str, nbytes: int) -> dict[Any, float]:
    """What one image fetched by an http(s) or file URL moves in the download histograms."""
    return {
        series(DOWNLOAD, modality="image", scheme=scheme, outcome="ok"): 1,
        series(DOWNLOAD_BYTES, modality="image", scheme=scheme): 1,
        series(DOWNLOAD_BYTES_SUM, modality="image", scheme=scheme): nbytes,
    }


def processed(server: VllmServer, items: int) -> dict[Any, float]:
    """What a request whose ``items`` images all missed the processor cache moves after their decodes."""
    return {
        series(PROCESSOR, modality="image"): 1,
        series(PROCESSOR_ITEMS, modality="image"): 1,
        series(PROCESSOR_ITEMS_SUM, modality="image"): items,
        front_end_of(server, "1" if items == 1 else "2-3"): 1,
    }


@pytest.mark.parametrize(("scheme", "format"), [("http", "jpeg"), ("file", "png")])
def test_an_image_by_url_is_one_download_of_exactly_its_bytes(
    vllm_server: VllmServer, media_url: str, scheme: str, format: str
) -> None:
    data = fresh_jpeg() if format == "jpeg" else fresh_png()
    name = published(vllm_server, data, ".jpg" if format == "jpeg" else ".png")
    url = f"{media_url}/{name}" if scheme == "http" else (vllm_server.media_dir / name).as_uri()
    status, _, moved = moved_by(vllm_server, [url])
    assert status == 200
    assert split_front_end(moved)[0] == {
        **downloaded(scheme, len(data)),
        series(DECODE, modality="image", format=format, outcome="decoded"): 1,
        **processed(vllm_server, 1),
    }


def test_several_images_from_every_source_are_one_processor_call_and_one_front_end(
    vllm_server: VllmServer, media_url: str
) -> None:
    jpeg, png = fresh_jpeg(), fresh_png()
    urls = [
        data_url(fresh_jpeg()),
        f"{media_url}/{published(vllm_server, jpeg, '.jpg')}",
        (vllm_server.media_dir / published(vllm_server, png, ".png")).as_uri(),
    ]
    status, _, moved = moved_by(vllm_server, urls)
    assert status == 200
    assert split_front_end(moved)[0] == {
        series(BASE64, modality="image", outcome="ok"): 1,
        **downloaded("http", len(jpeg)),
        **downloaded("file", len(png)),
        series(DECODE, modality="image", format="jpeg", outcome="decoded"): 2,
        series(DECODE, modality="image", format="png", outcome="decoded"): 1,
        **processed(vllm_server, 3),
    }


def test_a_text_only_request_is_a_front_end_of_no_items(vllm_server: VllmServer) -> None:
    status, _, moved = moved_by(vllm_server, [])
    assert status == 200
    assert split_front_end(moved)[0] == {front_end_of(vllm_server, "0"): 1}


REFUSED = {
    "broken bytes": (
        lambda: data_url(fresh_png()[:60], "image/png"),
        {
            series(BASE64, modality="image", outcome="ok"): 1,
            series(DECODE, modality="image", format="png", outcome="refused"): 1,
        },
    ),
    "not base64": (
        lambda: "data:image/jpeg;base64,not*base64!",
        {series(BASE64, modality="image", outcome="refused"): 1},
    ),
    "bytes of no image format": (
        lambda: data_url(b"plain text, not an image", "image/jpeg"),
        {
            series(BASE64, modality="image", outcome="ok"): 1,
            series(DECODE, modality="image", format="other", outcome="refused"): 1,
        },
    ),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_a_refused_image_is_counted_under_its_outcome_and_never_reaches_the_engine(
    vllm_server: VllmServer, case: str
) -> None:
    make_url, expected = REFUSED[case]
    status, body, moved = moved_by(vllm_server, [make_url()])
    assert status == 400, body
    counts, front_end, ttft = split_front_end(moved)
    assert counts == expected
    assert front_end == ttft == 0


def test_a_url_that_cannot_be_fetched_is_a_failed_download_answered_as_vllm_alone_answers(
    vllm_server: VllmServer, vllm_scale_out: VllmServer
) -> None:
    """vLLM's answer to a missing http file and to a file URL outside the allowed path is its own, unchanged."""
    with serving(vllm_server.media_dir) as base:
        urls = [f"{base}/missing-{next(_seed)}.jpg", (vllm_server.media_dir / f"missing-{next(_seed)}.png").as_uri()]
        before = stage_counts(vllm_server)
        answers = [send(vllm_server, [url]) for url in urls]
        moved = delta(before, stage_counts(vllm_server))
        alone = [send(vllm_scale_out, [url]) for url in urls]
    assert [status for status, _ in answers] == [status for status, _ in alone]
    assert all(status >= 400 for status, _ in answers)
    assert [body["error"]["message"] for _, body in answers] == [body["error"]["message"] for _, body in alone]
    assert split_front_end(moved)[0] == {
        series(DOWNLOAD, modality="image", scheme="http", outcome="failed"): 1,
        series(DOWNLOAD, modality="image", scheme="file", outcome="failed"): 1,
    }


def test_a_slow_media_host_makes_the_alerts_expression_true_and_the_runbook_reads_it(
    vllm_server: VllmServer, tmp_path: Path
) -> None:
    """Requests whose images come from a host that takes a second to answer: the front end is most of TTFT.

    A real Prometheus scrapes the server; the alert's expression (as the runbook gives it) turns
    true, every investigation query of the runbook has data, and its shell command runs.
    """
    from tests.dashboards.test_prometheus import PrometheusProcess
    from tests.docs.test_runbooks import _words as words
    from tests.docs.test_runbooks import alert_expressions, promql_queries, run_commands
    from tests.support import require_binary
    from tests.support.markdown import fenced_blocks

    require_binary("prometheus")
    address = vllm_server.url.removeprefix("http://")
    runbook = ROOT / "docs" / "runbooks" / "MmobsVllmMmFrontEndDominatesTtft.md"
    alert, *investigation = [
        q for b in fenced_blocks(runbook.read_text()) if b.language == "promql" for q in promql_queries(b.text)
    ]
    assert words(alert) == words(alert_expressions()["MmobsVllmMmFrontEndDominatesTtft"])
    names = [published(vllm_server, fresh_jpeg(), ".jpg") for _ in range(SLOW_REQUESTS)]
    prometheus = PrometheusProcess(tmp_path, address, None)
    try:
        prometheus.wait_until(lambda: prometheus.scalar('count_over_time(up{job="mmobs"}[1m])') >= 2, 60, "scraping")
        with serving(vllm_server.media_dir, delay=1.0) as slow, ThreadPoolExecutor(4) as pool:
            statuses = list(pool.map(lambda name: send(vllm_server, [f"{slow}/{name}"])[0], names))
        assert statuses == [200] * SLOW_REQUESTS
        prometheus.wait_until(lambda: bool(prometheus.query(alert)), 60, "the alert's expression to be true")
        for query in investigation:
            assert prometheus.query(query.replace("<job>", "mmobs")), query
    finally:
        prometheus.stop()
    env = {**os.environ, "PATH": f"{Path(vllm_server.command[0]).parent}{os.pathsep}{os.environ['PATH']}"}
    assert run_commands(runbook, tmp_path, env, {"<job>": "mmobs", "HOST:8000": address}, "vLLM") == 1
