"""What the cache-drift tests (``test_vllm_cache_drift.py``) send and read: fresh images, chat bodies, the counters,
the three steps that drift the caches, a refused request's touch, concurrent multi-image load."""

from __future__ import annotations

import base64
import io
import random
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
from PIL import Image

from tests.support.vllm_server import VllmServer, delta

CHAT = "/v1/chat/completions"
DRIFT_ITEMS = "mmobs_vllm_mm_cache_drift_items_total"
SENDER_MISSES = "mmobs_vllm_mm_cache_sender_misses_total"
REDRIFTS = "mmobs_vllm_mm_cache_redrifts_total"
SENDER_REDRIFTS = "mmobs_vllm_mm_cache_sender_redrifts_total"
REQUESTS = "mmobs_vllm_mm_cache_drift_requests_total"
ROLLED_BACK = "mmobs_vllm_mm_cache_rolled_back_items_total"
SKIPPED = "mmobs_vllm_skipped_decodes_total"
LATE = "mmobs_vllm_late_decodes_total"
ENGINE_MISS = "Multi-modal cache miss for request"
seeds = iter(range(10_000, 1_000_000))


def image_url(size: int = 224, seed: int | None = None) -> str:
    """A PNG data URL of noise no other request carries (so it starts out in neither cache)."""
    rng = random.Random(next(seeds) if seed is None else seed)
    image = Image.frombytes("RGB", (size, size), bytes(rng.randrange(256) for _ in range(size * size * 3)))
    buffer = io.BytesIO()
    image.save(buffer, "PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def body(server: VllmServer, urls: list[str], text: str = "Describe.", **extra: Any) -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"type": "image_url", "image_url": {"url": url}} for url in urls]
    content.append({"type": "text", "text": text})
    return {"model": server.model, "max_tokens": 2, "messages": [{"role": "user", "content": content}], **extra}


def post(server: VllmServer, payload: dict[str, Any], route: str = CHAT) -> httpx.Response:
    return httpx.post(server.url + route, json=payload, timeout=120)


def too_long_with_its_image(server: VllmServer, size: int = 224) -> str:
    """A text that fits the 1024-token context alone but not with one ``size`` x ``size`` image's tokens (vLLM: 400)."""
    with_image = post(server, body(server, [image_url(size)], "x")).json()["usage"]["prompt_tokens"]
    alone = post(server, {"model": server.model, "max_tokens": 1, "messages": [{"role": "user", "content": "x"}]})
    image_tokens = with_image - alone.json()["usage"]["prompt_tokens"]
    per_word = 5  # " word" is five tokens for the tiny model's tokenizer (checked below)
    text = "x" + " word" * ((1026 - with_image) // per_word + 1)
    tokens = post(server, {"model": server.model, "max_tokens": 1, "messages": [{"role": "user", "content": text}]})
    assert 1024 - image_tokens < tokens.json()["usage"]["prompt_tokens"] < 1024
    return text


def counters(server: VllmServer) -> dict[Any, float]:
    return server.samples("mmobs_vllm_mm_cache_")


def vllm_cache(server: VllmServer) -> dict[Any, float]:
    return {key: value for key, value in server.samples("vllm:mm_cache_").items() if "_created" not in key[0]}


def settled_cache(server: VllmServer, timeout: float = 60.0) -> dict[Any, float]:
    """vLLM's cache counters once the server is idle, the same two reads apart.

    A load test before may leave requests the server is still finishing (their
    clients gave up), whose cache queries would land in the next test's window:
    idle is no request in the API server (mmobs's in-progress gauge: vLLM's
    own gauges see a request only once it reaches the engine, after its
    images went through the cache) and none running or waiting in the engine.
    """
    deadline = time.monotonic() + timeout
    previous = None
    while time.monotonic() < deadline:
        busy = sum(
            value
            for key, value in server.samples("vllm:num_requests_").items()
            if key[0] != "vllm:num_requests_swapped"
        ) + sum(server.samples("mmobs_http_requests_in_progress").values())
        current = vllm_cache(server)
        if busy == 0 and current == previous:
            return current
        previous = current
        time.sleep(0.5)
    raise AssertionError(f"vLLM's engine did not settle within {timeout} s")


def engine_misses(server: VllmServer) -> int:
    return server.logs().count(ENGINE_MISS)


def three_steps(server: VllmServer) -> tuple[list[httpx.Response], dict[Any, float]]:
    text = too_long_with_its_image(server)
    x = image_url()
    before = counters(server)
    responses = [
        post(server, body(server, [x], text)),
        post(server, body(server, [x])),
        post(server, body(server, [x])),
    ]
    return responses, delta(before, counters(server))


def touch_drift(
    server: VllmServer, *, stream: bool = False, route: str = CHAT
) -> tuple[httpx.Response, dict[Any, float]]:
    """Four 112x112 items fill both caches; a refused request touches the first in P0 only; a fifth evicts
    different items in P0 and P1; the first, sent by hash, is then missing from P1."""
    text = too_long_with_its_image(server, 112)
    first, *others = [image_url(112) for _ in range(5)]
    for url in (first, *others[:3]):
        assert post(server, body(server, [url])).status_code == 200
    before = counters(server)
    assert post(server, body(server, [first], text)).status_code == 400
    assert post(server, body(server, [others[3]])).status_code == 200
    if route == CHAT:
        response = post(server, body(server, [first], stream=stream))
    else:
        payload = {"model": server.model, "max_output_tokens": 2, "input": [{"role": "user", "content": [
            {"type": "input_image", "image_url": first}, {"type": "input_text", "text": "Describe."}]}]}  # fmt: skip
        response = post(server, payload, route)
    return response, delta(before, counters(server))


def load(server: VllmServer, clients: int, requests: int, *, stream_every: int = 0) -> tuple[Counter[int], list[str]]:
    """``requests`` chat completions of four 224x224 images each, drawn from 16, from ``clients`` threads."""
    rng = random.Random(21)
    pool = [image_url(224, seed=2100 + i) for i in range(16)]
    jobs = [[pool[rng.randrange(16)] for _ in range(4)] for _ in range(requests)]
    errors: list[str] = []
    lock = threading.Lock()

    def send(index: int) -> int:
        stream = bool(stream_every) and index % stream_every == 0
        try:
            response = post(server, body(server, jobs[index], stream=stream))
        except httpx.HTTPError as error:  # a connection closed without a response
            with lock:
                errors.append(repr(error))
            return -1
        if stream and '"error"' in response.text:
            with lock:
                errors.append(response.text[:300])
            return 599
        return response.status_code

    with ThreadPoolExecutor(clients) as executor:
        statuses = Counter(executor.map(send, range(requests)))
    return statuses, errors
