"""What one request may cost the service, over real HTTP: budgets, 503s, 500s and set-up errors.

The services here run with small budgets (0.05 s of CPU per request; 64 MiB
per image) so that plain images of a few megapixels breach them: the hard
limits are tested with honest inputs, whatever structural checks the loader
adds in front of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import psutil
import pytest
import structlog
from PIL import Image
from starlette.testclient import TestClient

from mmobs.service.app import create_app
from mmobs.service.config import ServiceConfig
from tests.support import ServiceProcess, data_url, golden, images, metric_value

BAD_HEADER_JPEG = golden.input_bytes("bad-exif-header.jpg")
PHOTO_JPEG = golden.input_bytes("photo.jpg")
_RAMP = (np.add.outer(np.arange(6000), np.arange(6000)) % 251).astype(np.uint8)
#: 36 MP in 440 KB, ~0.15 s of CPU and 108 MB: three times a 0.05 s budget (a 12 MP one, at ~0.05 s,
#: once fitted it on a fast machine), well under the default memory budget.
SLOW_PNG = images.encode(Image.fromarray(np.stack([_RAMP, _RAMP, _RAMP // 2], -1)), "PNG")
#: 49 MP of one colour in 250 KB: 147 MB of pixels, over a 64 MiB budget.
FLAT_PNG = images.encode(Image.new("RGB", (7000, 7000), (9, 9, 9)), "PNG")
#: ~0.0035 s of CPU each on a quiet machine: 48 of them breach a 0.05 s budget together (3 times over),
#: never one alone (over 10 times under: a loaded machine's CPU seconds run dear, and one of 0.012 s once
#: breached it alone).
SMALL_SLOW_PNG = images.encode(Image.fromarray(np.stack([_RAMP[:800, :800]] * 3, -1)), "PNG")
BAD = "mmobs_bad_images_total"


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    process = ServiceProcess(tmp_path_factory.mktemp("budgets"), "--max-request-cpu-seconds", "0.05")
    yield process
    process.stop()


def post(service: ServiceProcess, *payloads: bytes, request_id: str = "budget") -> httpx.Response:
    urls = [data_url(p, "image/png") for p in payloads]
    return httpx.post(service.url + "/v1/hash", json={"images": urls}, headers={"x-request-id": request_id}, timeout=30)


def decode_workers(process: ServiceProcess) -> list[psutil.Process]:
    found = []
    for child in psutil.Process(process.process.pid).children():
        try:
            if "mmobs.service.decode_worker" in " ".join(child.cmdline()):
                found.append(child)
        except psutil.Error:  # a retired worker being reaped
            pass
    return found


def refusal(response: httpx.Response, param: str) -> dict:
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert (error["code"], error["reason"], error["param"]) == ("bad_image", "too_costly", param), error
    return error


def test_over_the_cpu_budget_is_400_too_costly_counted_once(service: ServiceProcess) -> None:
    before = metric_value(service.metrics(), BAD, {"reason": "too_costly"})
    response = post(service, SLOW_PNG, request_id="cpu-1")
    error = refusal(response, "images[0]")
    assert "0.05 s of CPU time" in error["message"] and "--max-request-cpu-seconds" in error["message"]
    assert response.headers["x-request-id"] == "cpu-1"
    assert metric_value(service.metrics(), BAD, {"reason": "too_costly"}) - before == 1
    (event,) = [e for e in service.log_events() if e.get("event") == "bad_image" and e.get("request_id") == "cpu-1"]
    assert event["reason"] == "too_costly"
    assert post(service, PHOTO_JPEG).status_code == 200  # the worker was replaced


def test_the_budget_is_per_request_shared_by_its_images(service: ServiceProcess) -> None:
    # One image alone fits, once the worker is warm (the test before this one had its worker replaced,
    # and a fresh worker's first key costs more); it is many together that breach the budget.
    for _ in range(3):
        alone = post(service, SMALL_SLOW_PNG)
    assert alone.status_code == 200, alone.text
    response = post(service, *[SMALL_SLOW_PNG] * 48)
    error = response.json()["error"]
    assert response.status_code == 400 and error["reason"] == "too_costly"
    assert error["param"] != "images[0]" and "with the work done before it" in error["message"]


def test_a_fallback_before_a_refused_image_is_counted(service: ServiceProcess) -> None:
    """It happened: the EXIF fallback of images[0] counts although the request is refused for images[1]."""
    text = service.metrics()
    fallbacks, requests = (
        metric_value(text, "mmobs_exif_fallback_total"),
        metric_value(text, "mmobs_http_exif_fallback_requests_total"),
    )
    refusal(post(service, BAD_HEADER_JPEG, SLOW_PNG), "images[1]")
    text = service.metrics()
    assert metric_value(text, "mmobs_exif_fallback_total") - fallbacks == 1
    assert metric_value(text, "mmobs_http_exif_fallback_requests_total") - requests == 1


def test_healthz_answers_while_costly_inputs_decode(service: ServiceProcess) -> None:
    async def run() -> list[float]:
        async with httpx.AsyncClient(base_url=service.url, timeout=30) as client:
            body = {"images": [data_url(SLOW_PNG, "image/png")]}
            costly = [asyncio.ensure_future(client.post("/v1/hash", json=body)) for _ in range(6)]
            latencies = []
            for _ in range(20):
                started = time.perf_counter()
                assert (await client.get("/healthz")).status_code == 200
                latencies.append(time.perf_counter() - started)
                await asyncio.sleep(0.02)
            for response in await asyncio.gather(*costly):
                assert response.status_code == 400 and response.json()["error"]["reason"] == "too_costly"
            return latencies

    latencies = asyncio.run(run())
    assert max(latencies) < 2.0, latencies  # CI-loose; docs/reliability.md has the measured p99


def test_the_no_decode_key_path_has_the_same_budget(service: ServiceProcess) -> None:
    """``POST /v1/keys`` runs in the decode workers too: a decode it needs is bounded like any other."""
    body = {"images": [data_url(SLOW_PNG, "image/png")], "verify": "decode"}
    refusal(httpx.post(service.url + "/v1/keys", json=body, timeout=30), "images[0]")
    header_only = httpx.post(service.url + "/v1/keys", json={"images": [data_url(SLOW_PNG, "image/png")]}, timeout=30)
    assert header_only.status_code == 200 and header_only.json()["items"][0]["key_path"] == "header"


def test_over_the_memory_budget_is_400_too_costly_and_workers_go_with_the_service(tmp_path: Path) -> None:
    process = ServiceProcess(tmp_path, "--decode-workers", "2", "--max-decode-memory-mib", "64")
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and httpx.get(process.url + "/healthz").json()["decode_workers"] < 2:
            time.sleep(0.1)
        workers = decode_workers(process)
        assert len(workers) == 2
        before = metric_value(process.metrics(), BAD)
        error = refusal(post(process, FLAT_PNG), "images[0]")
        assert "64 MiB" in error["message"] and "--max-decode-memory-mib" in error["message"]
        text = process.metrics()
        assert metric_value(text, BAD) - before == 1  # one refusal, as too_costly, not also as corrupt
        assert metric_value(text, BAD, {"reason": "too_costly"}) == 1
        assert post(process, PHOTO_JPEG).status_code == 200
        workers += decode_workers(process)  # the replacement too
    finally:
        process.stop()
    psutil.wait_procs(workers, timeout=5)
    assert not any(w.is_running() and w.status() != psutil.STATUS_ZOMBIE for w in workers)


def test_a_full_line_is_503_with_retry_after_and_counted(tmp_path: Path) -> None:
    process = ServiceProcess(tmp_path, "--decode-workers", "1", "--decode-queue", "1", "--decode-queue-timeout", "0.05")
    try:

        async def run() -> list[httpx.Response]:
            async with httpx.AsyncClient(base_url=process.url, timeout=30) as client:
                body = {"images": [data_url(SLOW_PNG, "image/png")]}
                return await asyncio.gather(*(client.post("/v1/hash", json=body, headers={"x-request-id": f"q-{i}"})
                                              for i in range(6)))  # fmt: skip

        responses = asyncio.run(run())
        busy = [r for r in responses if r.status_code == 503]
        assert busy and all(r.status_code in (200, 503) for r in responses)
        for response in busy:
            assert response.headers["retry-after"].isdigit() and response.headers["x-request-id"].startswith("q-")
            assert response.json()["error"]["code"] == "server_busy"
        text = process.metrics()
        assert metric_value(text, "mmobs_http_requests_total", {"route": "/v1/hash", "status_class": "5xx"}) == len(
            busy
        )
    finally:
        process.stop()


def test_without_python_multipart_an_upload_is_a_server_setup_error(tmp_path: Path) -> None:
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    for name in ("python_multipart", "multipart"):
        (shadow / f"{name}.py").write_text(f"raise ModuleNotFoundError(\"No module named '{name}'\", name={name!r})\n")
    process = ServiceProcess(tmp_path, "--decode-workers", "1", env={"PYTHONPATH": str(shadow)})
    try:
        for _ in range(2):
            response = httpx.post(process.url + "/v1/hash", files={"f": ("a.jpg", PHOTO_JPEG, "image/jpeg")})
            assert response.status_code == 501, response.text
            error = response.json()["error"]
            assert error["type"] == "server_error" and "pip install 'mmobs[serve]'" in error["message"]
        logged = [e for e in process.log_events() if e.get("event") == "multipart_unavailable"]
        assert len(logged) == 1 and logged[0]["install"] == "pip install 'mmobs[serve]'" and logged[0]["request_id"]
        assert httpx.post(process.url + "/v1/hash", json={"images": [data_url(PHOTO_JPEG)]}).status_code == 200
    finally:
        process.stop()


# -- in process: the paths no client input reaches --------------------------------------------------


@contextlib.contextmanager
def _captured_logs_with_their_context() -> Iterator[list[dict[str, Any]]]:
    """``capture_logs(processors=[merge_contextvars])``, which structlog has from 25.5 on, for every structlog mmobs allows."""
    capture = structlog.testing.LogCapture()
    processors = structlog.get_config()["processors"]
    structlog.configure(processors=[structlog.contextvars.merge_contextvars, capture])
    try:
        yield capture.entries
    finally:
        structlog.configure(processors=processors)


@pytest.mark.parametrize(("error", "status"), [(RuntimeError("a bug"), 500), (MemoryError(), 503)])
def test_server_side_failures_carry_the_request_id(
    monkeypatch: pytest.MonkeyPatch, error: BaseException, status: int
) -> None:
    app = create_app(ServiceConfig(decode_workers=0))

    async def broken(*args: object, **kwargs: object) -> None:
        raise error

    monkeypatch.setattr(app.state.service.decoder, "run", broken)
    with _captured_logs_with_their_context() as logs:
        with TestClient(app) as client:
            response = client.post(
                "/v1/hash", json={"images": [data_url(PHOTO_JPEG)]}, headers={"x-request-id": "srv-1"}
            )
    assert response.status_code == status
    assert response.headers["x-request-id"] == "srv-1"
    assert response.json()["error"]["type"] == "server_error"
    if status == 503:
        assert response.headers["retry-after"].isdigit()
    else:
        (logged,) = [e for e in logs if e["event"] == "internal_error"]
        assert logged["request_id"] == "srv-1" and logged["error_type"] == "RuntimeError"
