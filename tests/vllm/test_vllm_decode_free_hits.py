"""Decode-free processor-cache hits on a real ``vllm serve``, against vLLM alone, spoken to with the ``openai`` client.

Two servers of the same model: one started for this module with mmobs's plugin and preset at their defaults
(decode-free hits on, the guard off), and vLLM alone, the suite's shared server with the plugin off
(``vllm_scale_out``: ``MMOBS_VLLM_PLUGIN=0``, the preset counting HTTP requests only, and flags that change no
chat's answer). Each chat's images are new bytes, so neither server has seen them. The same chats go to both: each
turn adds a new image and re-sends the earlier ones, as chat clients do. The
answers (status, prompt tokens and their ids, the completion at temperature
0), vLLM's own ``vllm:mm_cache_*`` deltas and every refusal's status and
message must be the same; on the plugin's server every re-sent image must be
a skipped decode (what Pillow decoded in each API server, read by the tests' witness plugin, shows it), and
mmobs's counts those an unskipped decode would give.
"""

from __future__ import annotations

import io
import os
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from tests.support import data_url
from tests.support.images import encode, noisy_image, png_header_only
from tests.support.videos import Clip, clip_bytes, faststart, without_last_frame
from tests.support.vllm_kinds import ServerContext, vllm_server_fixture
from tests.support.vllm_requests import comparable, drift_sampled, expected_for
from tests.support.vllm_server import MMOBS_FLAGS, VllmServer, delta, series
from tests.vllm.decode_free_requests import (
    answer,
    api_server_decodes,
    chat_images,
    content,
    run_chat,
    seeds,
    vllm_cache,
)

pytestmark = pytest.mark.vllm_server
ROOT = Path(__file__).resolve().parents[2]

SKIPPED = "mmobs_vllm_skipped_decodes_total"
LATE = "mmobs_vllm_late_decodes_total"


def _serve(context: ServerContext, directory: str, args: tuple[str, ...], env: dict[str, str], name: str) -> VllmServer:
    server = VllmServer(
        context.venv, context.model, context.directory(directory), args=args, env=env, name=name, witness_decodes=True
    )
    server.wait_for_warm_up()
    return server


@vllm_server_fixture(scope="module")
def vllm_mmobs(context: ServerContext) -> VllmServer:
    """``vllm serve --middleware mmobs.vllm.Middleware`` with every mmobs switch at its default."""
    return _serve(context, "vllm-mmobs", MMOBS_FLAGS, {}, "vllm serve (mmobs)")


@pytest.fixture(scope="module")
def vllm_alone(vllm_scale_out: VllmServer) -> VllmServer:
    """vLLM alone: the suite's server with the plugin off (one boot fewer than a module's own), which witnesses
    what Pillow decodes as this module's server does."""
    return vllm_scale_out


def test_a_chat_that_resends_its_images_is_answered_as_vllm_alone_answers_it(
    vllm_mmobs: VllmServer, vllm_alone: VllmServer
) -> None:
    images = chat_images()
    turns = len(images)
    plugin_before, alone_before = vllm_cache(vllm_mmobs), vllm_cache(vllm_alone)
    mmobs_before = vllm_mmobs.samples()
    decodes_before = {server.name: len(server.decodes()) for server in (vllm_mmobs, vllm_alone)}
    with_mmobs = run_chat(vllm_mmobs, images)
    alone = run_chat(vllm_alone, images)
    assert with_mmobs == alone
    assert all(ids for _, (_, ids, _) in with_mmobs), "the server returned no prompt token ids"

    # What Pillow decoded in each API server (the tests' witness, not mmobs's counters): vLLM alone decodes every
    # image on every send; with mmobs each image is decoded on its first send only, as often as alone decodes it.
    decoded = {
        server.name: api_server_decodes(server, decodes_before[server.name]) for server in (vllm_mmobs, vllm_alone)
    }
    sends, firsts = Counter[tuple[str, tuple[int, int]]](), Counter[tuple[str, tuple[int, int]]]()
    for index, (_, data) in enumerate(images):
        with Image.open(io.BytesIO(data)) as opened:  # the header only: no decode here
            sends[(str(opened.format), opened.size)] += turns - index
            firsts[(str(opened.format), opened.size)] += 1
    by_mmobs, by_alone = decoded[vllm_mmobs.name], decoded[vllm_alone.name]
    assert set(by_alone) == set(sends) and all(by_alone[image] >= sends[image] for image in sends), by_alone
    assert {image: by_mmobs[image] * sends[image] for image in sends} == {
        image: by_alone[image] * firsts[image] for image in sends
    }, (by_mmobs, by_alone)

    # vLLM's own cache counts moved alike: the same lookups, the same hits.
    moved_plugin = delta(plugin_before, vllm_cache(vllm_mmobs))
    moved_alone = delta(alone_before, vllm_cache(vllm_alone))
    assert {key[0]: value for key, value in moved_plugin.items()} == {
        key[0]: value for key, value in moved_alone.items()
    }
    resent = turns * (turns - 1) // 2
    hits = sum(value for key, value in moved_alone.items() if key[0] == "vllm:mm_cache_hits_total")
    assert hits == resent

    # Every re-sent image was a decode-free hit, none decoded late; mmobs counted what a decode would have given.
    moved = delta(mmobs_before, vllm_mmobs.samples())
    assert moved[series(SKIPPED, modality="image")] == resent
    assert series(LATE, modality="image") not in moved
    assert moved[series("mmobs_vllm_skipped_decode_cpu_seconds_total", modality="image")] > 0
    sampled = drift_sampled([data for _, data in images], "0")
    expected: Counter[Any] = Counter()
    for index, ((_, data), is_sampled) in enumerate(zip(images, sampled, strict=True)):
        per_image = expected_for(data, vllm_mmobs.model, sampled=is_sampled).counts
        for key, value in per_image.items():
            if not key[0].startswith("mmobs_http_"):
                expected[key] += value * (turns - index)  # sent in its own turn and every later one
    got = Counter(
        {
            key: value
            for key, value in comparable(moved).items()
            if not key[0].startswith(("mmobs_http_", "mmobs_vllm_"))
        }
    )
    assert got == +expected
    assert got[series("mmobs_exif_fallback_total", kind="media_with_bytes", exception="SyntaxError")] == 1


def test_a_chat_that_resends_its_clip_is_answered_as_vllm_alone_answers_it(
    vllm_mmobs: VllmServer, vllm_alone: VllmServer
) -> None:
    """Every turn re-sends the clip: the same answers; with mmobs only the first turn opens the container."""
    clip = clip_bytes(Clip(frames=8, fps=4.0, seed=next(seeds)), python=vllm_mmobs.venv / "bin" / "python")
    url = data_url(clip, "video/mp4")
    turns = 3
    opened_before = {server.name: len(server.witnessed("video_open")) for server in (vllm_mmobs, vllm_alone)}
    mmobs_before = vllm_mmobs.samples()

    def chat(server: VllmServer) -> list[tuple[int, Any]]:
        answers: list[tuple[int, Any]] = []
        for turn in range(1, turns + 1):
            parts = [{"type": "video_url", "video_url": {"url": url}}, {"type": "text", "text": f"Turn {turn}?"}]
            answers.append(answer(server, [{"role": "user", "content": parts}]))
        return answers

    with_mmobs, alone = chat(vllm_mmobs), chat(vllm_alone)
    assert with_mmobs == alone and all(status == 200 for status, _ in alone), alone

    # What OpenCV opened in each API server (the tests' witness): alone, the clip on every turn; with mmobs, once.
    opened = {
        server.name: sum(
            1
            for line in server.witnessed("video_open")[opened_before[server.name] :]
            if line["pid"] in set(server.api_server_pids())
        )
        for server in (vllm_mmobs, vllm_alone)
    }
    assert opened[vllm_mmobs.name] >= 1 and opened[vllm_alone.name] == turns * opened[vllm_mmobs.name], opened

    moved = delta(mmobs_before, vllm_mmobs.samples())
    assert moved[series(SKIPPED, modality="video")] == turns - 1
    assert series(LATE, modality="video") not in moved
    decodes = "mmobs_vllm_mm_decode_seconds_count"
    assert moved[series(decodes, format="mp4", modality="video", outcome="skipped")] == turns - 1
    assert moved[series(decodes, format="mp4", modality="video", outcome="decoded")] == 1
    assert moved[series("mmobs_vllm_mm_video_frames_count", count="kept")] == 1


def test_a_clip_over_the_frames_budget_is_refused_before_its_decode_and_broken_ones_as_vllm_alone(
    vllm_mmobs: VllmServer, vllm_alone: VllmServer
) -> None:
    """Over ten minutes of a still scene (19,000 frames, 768 kept): vLLM alone decodes it all before it answers; mmobs
    refuses it first with a 400 naming its budget (the default) and counts it. Broken containers: vLLM's 400, alike."""
    python = vllm_mmobs.venv / "bin" / "python"

    def ask(server: VllmServer, data: bytes) -> tuple[int, Any]:
        url = data_url(data, "video/mp4")
        return answer(server, [{"role": "user", "content": [{"type": "video_url", "video_url": {"url": url}}]}])

    clip = clip_bytes(Clip(frames=8, fps=4.0, seed=next(seeds)), python)
    for broken in (clip[: len(clip) // 2], b"\x00" * 1024):
        status, message = ask(vllm_mmobs, broken)
        assert (status, message) == ask(vllm_alone, broken) and status == 400, message
    long_still = clip_bytes(Clip(frames=19_000, fps=30.0, seed=next(seeds), scene="still"), python)
    before = vllm_mmobs.samples()
    alone = ask(vllm_alone, long_still)
    status, message = ask(vllm_mmobs, long_still)
    read = re.search(r"too_costly: decoding this video would read (\d+) frames to keep 768, over the 18000 "
                     r"MMOBS_VLLM_VIDEO_MAX_FRAMES_READ allows", message)  # fmt: skip
    assert status == 400 and read is not None and 18_000 < int(read[1]) <= 19_000, (message, alone)
    moved = delta(before, vllm_mmobs.samples())
    assert moved[series("mmobs_vllm_video_refusals_total", budget="frames_read")] == 1
    assert moved[series("mmobs_vllm_mm_decode_seconds_count", format="mp4", modality="video", outcome="refused")] == 1


def test_a_clip_too_long_for_the_context_is_refused_before_its_decode_in_vllms_words(
    vllm_mmobs: VllmServer, vllm_alone: VllmServer
) -> None:
    """25 s of a still 720p scene: 50 frames kept, more tokens than the servers' context. vLLM alone decodes it to its
    last kept frame before it refuses the prompt's length; mmobs gives the same 400, word for word, having read two
    frames (what OpenCV read, from the tests' witness). Where request processor kwargs make such a clip fit after
    all: tests/vllm/test_vllm_render_keys_only.py (these servers refuse request kwargs)."""
    python = vllm_mmobs.venv / "bin" / "python"
    clip = clip_bytes(Clip(1280, 720, frames=100, fps=4.0, seed=next(seeds), scene="still"), python)
    messages = [{"role": "user", "content": [{"type": "video_url", "video_url": {"url": data_url(clip, "video/mp4")}}]}]
    refused = answer(vllm_alone, messages)
    length = re.fullmatch(r"Input length \((\d+)\) exceeds model's maximum context length \((\d+)\)\.", refused[1])
    assert refused[0] == 400 and length is not None and int(length[1]) > int(length[2]), refused
    before, mark = vllm_mmobs.samples(), vllm_mmobs.captures()
    assert answer(vllm_mmobs, messages) == refused
    assert sum(vllm_mmobs.frames_read_since(mark)) <= 2
    moved = delta(before, vllm_mmobs.samples())
    assert moved[series("mmobs_vllm_video_refusals_total", budget="vllm_length")] == 1
    assert series(LATE, modality="video") not in moved
    # The same clip in the web's layout (sample table first), cut short of its last frame: its header promises a
    # frame the file lacks. Answered alike; from the header (two grabs) only where the frames picked survived the
    # cut, else decoded (the probe of the last one picked failed) and refused by vLLM itself.
    cut = without_last_frame(faststart(clip))
    messages = [{"role": "user", "content": [{"type": "video_url", "video_url": {"url": data_url(cut, "video/mp4")}}]}]
    before, mark = vllm_mmobs.samples(), vllm_mmobs.captures()
    assert answer(vllm_mmobs, messages) == answer(vllm_alone, messages)
    refused_early = delta(before, vllm_mmobs.samples()).get(
        series("mmobs_vllm_video_refusals_total", budget="vllm_length")
    )
    assert (sum(vllm_mmobs.frames_read_since(mark)) <= 2) == (refused_early == 1)
    # With truncate_prompt_tokens, vLLM refuses such a prompt in the truncation's words, once the placeholders are
    # expanded: mmobs decodes the deferred clip (a late decode) and lets vLLM word it.
    messages = [{"role": "user", "content": [{"type": "video_url", "video_url": {"url": data_url(clip, "video/mp4")}}]}]
    truncated = answer(vllm_alone, messages, truncate_prompt_tokens=1000)
    assert truncated[0] == 400 and "truncate_prompt_tokens" in truncated[1], truncated
    before = vllm_mmobs.samples()
    assert answer(vllm_mmobs, messages, truncate_prompt_tokens=1000) == truncated
    moved = delta(before, vllm_mmobs.samples())
    assert moved[series(LATE, modality="video")] == 1, moved
    assert series("mmobs_vllm_video_refusals_total", budget="vllm_length") not in moved


def test_refused_clips_fire_the_alert_on_a_real_prometheus_and_the_runbook_reads_them(
    vllm_mmobs: VllmServer, tmp_path: Path
) -> None:
    """A clip too long for the context, refused while a real Prometheus scrapes: the alert's expression (as the
    runbook gives it) turns true, the runbook's queries have data, and its commands find what they say."""
    from tests.dashboards.test_prometheus import PrometheusProcess
    from tests.docs.test_runbooks import _words as words
    from tests.docs.test_runbooks import alert_expressions, promql_queries, run_commands
    from tests.support import require_binary
    from tests.support.markdown import fenced_blocks

    require_binary("prometheus")
    python = vllm_mmobs.venv / "bin" / "python"
    clip = clip_bytes(Clip(1280, 720, frames=100, fps=4.0, seed=next(seeds), scene="still"), python)
    url = data_url(clip, "video/mp4")
    messages = [{"role": "user", "content": [{"type": "video_url", "video_url": {"url": url}}]}]
    runbook = ROOT / "docs" / "runbooks" / "MmobsVllmMmVideoRefused.md"
    alert, *investigation = [
        q for b in fenced_blocks(runbook.read_text()) if b.language == "promql" for q in promql_queries(b.text)
    ]
    assert words(alert) == words(alert_expressions()["MmobsVllmMmVideoRefused"])
    address = vllm_mmobs.url.removeprefix("http://")
    prometheus = PrometheusProcess(tmp_path, address, None)
    try:
        prometheus.wait_until(lambda: prometheus.scalar('count_over_time(up{job="mmobs"}[1m])') >= 2, 60, "scraping")
        assert answer(vllm_mmobs, messages)[0] == 400  # a refusal the scrapes see happen
        prometheus.wait_until(lambda: bool(prometheus.query(alert)), 60, "the alert's expression to be true")
        for query in investigation:
            assert prometheus.query(query.replace("<job>", "mmobs")), query
    finally:
        prometheus.stop()
    (tmp_path / "server.log").write_text(vllm_mmobs.logs())
    env = {**os.environ, "PATH": f"{Path(vllm_mmobs.command[0]).parent}{os.pathsep}{os.environ['PATH']}"}
    assert run_commands(runbook, tmp_path, env, {"<job>": "mmobs", "HOST:8000": address}, "vLLM") == 3


def test_a_stand_in_the_processor_reads_after_all_is_decoded_late_and_answered_alike(
    vllm_mmobs: VllmServer, vllm_alone: VllmServer
) -> None:
    """The same bytes under a client uuid: held under their content key, missed under the uuid.

    The loader hands on a stand-in (the cache holds the image's content key); vLLM keys the item
    by the uuid instead, which the cache does not hold, so the processor reads the pixels: a late
    decode, and the answer vLLM alone gives.
    """
    image = chat_images()[0]
    plain = [{"role": "user", "content": content([image], "Describe.")}]
    by_uuid = [{"role": "user", "content": content([image], "Describe.")}]
    by_uuid[0]["content"][0]["uuid"] = f"mmobs-late-decode-{next(seeds)}"
    results = []
    for server in (vllm_mmobs, vllm_alone):
        before = server.samples("mmobs_vllm_")
        results.append((answer(server, plain), answer(server, by_uuid), answer(server, plain)))
        moved = delta(before, server.samples("mmobs_vllm_"))
        if server is vllm_mmobs:
            assert moved[series(SKIPPED, modality="image")] == 2 and moved[series(LATE, modality="image")] == 1, moved
    assert results[0] == results[1]
    assert [status for status, _ in results[0]] == [200, 200, 200]


BAD_URLS = {
    "truncated": ("image/jpeg", lambda good: good[: len(good) // 3]),
    "corrupt": ("image/png", lambda good: good[:40] + bytes(len(good) - 40)),
    "one byte changed": ("image/jpeg", lambda good: good[:-200] + bytes([good[-200] ^ 0xFF]) + good[-199:]),
    # A header declaring 400 MP: Pillow's DecompressionBombError, which vLLM lets escape (the guard is off here).
    "bomb": ("image/png", lambda good: png_header_only(20_000, 20_000)),
}


@pytest.mark.parametrize("name", sorted(BAD_URLS))
def test_a_bad_image_after_a_cached_one_is_refused_as_vllm_alone_refuses_it(
    vllm_mmobs: VllmServer, vllm_alone: VllmServer, name: str
) -> None:
    media_type, spoil = BAD_URLS[name]
    good = (
        encode(noisy_image("RGB", (96, 80), seed=next(seeds)), "JPEG")
        if media_type == "image/jpeg"
        else encode(noisy_image("RGB", (64, 48), seed=next(seeds)), "PNG")
    )
    results = []
    for server in (vllm_mmobs, vllm_alone):
        first = answer(server, [{"role": "user", "content": content([(media_type, good)], "Describe.")}])
        # A 5xx's body is the preset's own on mmobs's side (vLLM's text stays in the log): statuses compared.
        spoiled = answer(
            server, [{"role": "user", "content": content([(media_type, good), (media_type, spoil(good))], "Both?")}]
        )
        results.append((first, spoiled if spoiled[0] < 500 else (spoiled[0], None)))
    assert results[0] == results[1]
    assert results[0][0][0] == 200


def test_bad_base64_after_a_cached_image_is_refused_as_vllm_alone_refuses_it(
    vllm_mmobs: VllmServer, vllm_alone: VllmServer
) -> None:
    good = encode(noisy_image("RGB", (64, 64), seed=next(seeds)), "PNG")
    url = data_url(good, "image/png")
    broken = url[:-8] + "*" + url[-7:]
    results = []
    for server in (vllm_mmobs, vllm_alone):
        ok = answer(server, [{"role": "user", "content": content([("image/png", good)], "Describe.")}])
        parts = [{"type": "image_url", "image_url": {"url": broken}}, {"type": "text", "text": "Again."}]
        refused = answer(server, [{"role": "user", "content": parts}])
        results.append((ok, refused))
    assert results[0] == results[1]
    assert results[0][1][0] == 400


# -- where vLLM's path is kept, and several API servers -------------------------------------------------

#: Each configuration that keeps vLLM's path: its flags, and the line its API server writes once to say why.
DECLINED = {
    "no processor cache": (("--mm-processor-cache-gb", "0"), "it has no multimodal processor cache"),
    "shared-memory cache": (("--mm-processor-cache-type", "shm"), "its processor cache is vLLM's shared-memory one"),
}


def _declining(context: ServerContext, name: str) -> VllmServer:
    return _serve(context, "vllm-declined", (*MMOBS_FLAGS, *DECLINED[name][0]), {}, name)


@vllm_server_fixture(scope="module")
def without_a_processor_cache(context: ServerContext) -> VllmServer:
    return _declining(context, "no processor cache")


@vllm_server_fixture(scope="module")
def with_a_shared_memory_cache(context: ServerContext) -> VllmServer:
    return _declining(context, "shared-memory cache")


@pytest.fixture(scope="module")
def declining_servers(
    without_a_processor_cache: VllmServer, with_a_shared_memory_cache: VllmServer
) -> dict[str, VllmServer]:
    """One mmobs server per configuration of ``DECLINED``."""
    return {"no processor cache": without_a_processor_cache, "shared-memory cache": with_a_shared_memory_cache}


@pytest.mark.parametrize("name", sorted(DECLINED))
def test_a_configuration_without_a_usable_cache_keeps_vllms_path_and_says_why_once(
    declining_servers: dict[str, VllmServer], vllm_alone: VllmServer, name: str
) -> None:
    server = declining_servers[name]
    images = chat_images()[:3]
    before = server.samples("mmobs_vllm_")
    answers = run_chat(server, images)
    assert answers == run_chat(vllm_alone, images)
    moved = delta(before, server.samples("mmobs_vllm_"))
    assert series(SKIPPED, modality="image") not in moved and series(LATE, modality="image") not in moved
    said = [line for line in server.log_lines() if "decode-free cache hits are off in this API server" in line]
    assert len(said) == 1 and DECLINED[name][1] in said[0] and "(APIServer pid=" in said[0], said


def test_each_api_server_skips_with_its_own_cache(vllm_servers_json: VllmServer) -> None:
    """With --api-server-count 2 each API server keeps its own cache and index: a re-send skips where it was seen."""
    server = vllm_servers_json
    image = chat_images()[0]
    sends = 8
    before = server.samples("mmobs_vllm_")
    for _ in range(sends):
        status, _ = answer(server, [{"role": "user", "content": content([image], "Describe.")}])
        assert status == 200
    moved = delta(before, server.samples("mmobs_vllm_"))
    decoded_by = moved[
        series("mmobs_vllm_decoded_index_entries", modality="image")
    ]  # the servers that decoded it once each
    assert decoded_by in (1, 2)
    assert moved[series(SKIPPED, modality="image")] == sends - decoded_by
    assert series(LATE, modality="image") not in moved
