"""Client media uuids checked against their content in a running ``vllm serve``, with the openai client.

vLLM keys an item sent with a ``uuid`` (and no processor or media kwargs) by
the uuid alone: the same uuid with another image is answered with the first
image's features. Through the real server's OpenAI route, on the shared
server (the default: a conflict is refused), the ``--api-server-count 2``
server (each API server its own memory); count only
(``MMOBS_VLLM_UUID_CONFLICTS=count``) on the counting drift server, in
``tests/vllm/test_vllm_cache_drift.py``:

* a conflict both ways (a small image after a large one, and a large after a
  small), its 400, its counters and its ``mm_uuid_conflict`` event with the
  request id the client got;
* no false alarm: the same bytes again, under another data URL media type;
  another uuid; a reference by uuid alone after the data (and before it);
* concurrent clients reusing one uuid for distinct images: exactly one wins;
* the runbook's commands on the server's log, and its alert on a real Prometheus.
"""

from __future__ import annotations

import base64
import os
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import openai
import pytest

from mmobs.vllm.uuid_checks.uuid_check import ENTRY_BYTES
from tests.docs.test_runbooks import alert_expressions, run_commands
from tests.support.images import jpeg_bytes, png_bytes
from tests.support.vllm_requests import client_for
from tests.support.vllm_server import VllmServer, delta, series

pytestmark = pytest.mark.vllm_server

ROOT = Path(__file__).resolve().parents[2]
ITEMS = "mmobs_vllm_mm_uuid_items_total"
CONFLICTS = "mmobs_vllm_mm_uuid_conflicts_total"
_seed = iter(range(29_000, 1_000_000))


def url(data: bytes, media_type: str = "image/png") -> str:
    return f"data:{media_type};base64," + base64.b64encode(data).decode()


def small() -> bytes:
    return png_bytes(size=(16, 16), seed=next(_seed))


def large() -> bytes:
    return jpeg_bytes(size=(224, 224), seed=next(_seed))


def send(server: VllmServer, parts: list[tuple[str | None, str | None]]) -> tuple[int, str, Any]:
    """One chat completion whose images are (data URL or None, uuid or None): (status, x-request-id, body)."""
    content: list[dict[str, Any]] = []
    for data_url, uuid in parts:
        part: dict[str, Any] = {"type": "image_url", "image_url": {"url": data_url} if data_url else None}
        if uuid is not None:
            part["uuid"] = uuid
        content.append(part)
    content.append({"type": "text", "text": "Describe."})
    client = client_for(server)
    try:
        raw = client.chat.completions.with_raw_response.create(
            model=server.model, max_tokens=2, messages=[{"role": "user", "content": content}]
        )
    except openai.APIStatusError as error:
        return error.status_code, error.response.headers.get("x-request-id", ""), error.response.json()
    return raw.http_response.status_code, raw.headers.get("x-request-id", ""), raw.parse()


def uuid_counts(server: VllmServer) -> dict[Any, float]:
    return server.samples("mmobs_vllm_mm_uuid_")


def conflicts_logged(server: VllmServer) -> list[dict[str, Any]]:
    from tests.support.vllm_requests import mmobs_lines

    return mmobs_lines(server, "mm_uuid_conflict")


@pytest.mark.parametrize(
    "first, second", [(large, small), (small, large)], ids=["small-after-large", "large-after-small"]
)
def test_a_reused_uuid_with_other_content_is_refused(vllm_server: VllmServer, first: Any, second: Any) -> None:
    uuid = f"u-conflict-{next(_seed)}"
    before = uuid_counts(vllm_server)
    first_data = first()
    status, _, answer = send(vllm_server, [(url(first_data), uuid)])
    assert status == 200, answer
    status, request_id, error = send(vllm_server, [(url(second()), uuid)])
    assert status == 400, error
    message = error["error"]["message"]
    assert message.startswith(f"mm_uuid_conflict: the image uuid '{uuid}' was sent before with other content")
    assert "Give each distinct image a uuid of its own, or send it without one." in message
    assert delta(before, uuid_counts(vllm_server)) == {
        series(ITEMS, kind="checked"): 2,
        series(CONFLICTS, action="refused"): 1,
        series("mmobs_vllm_mm_uuid_index_entries"): 1,
        series("mmobs_vllm_mm_uuid_index_bytes"): ENTRY_BYTES,
    }
    (event,) = [e for e in conflicts_logged(vllm_server) if e["uuid"] == uuid]
    # vLLM's own id for the request (the client's x-request-id, prefixed as vLLM names chat completions).
    assert (event["request_id"], event["action"], event["modality"]) == (f"chatcmpl-{request_id}", "refused", "image")
    assert event["previous_content_key"] != event["content_key"] and len(event["content_key"]) == 16
    # The content the uuid came with first is still its own: no conflict.
    assert send(vllm_server, [(url(first_data), uuid)])[0] == 200


def test_no_false_alarm(vllm_server: VllmServer) -> None:
    """The same bytes again (another media type on the data URL), a second uuid, references by uuid alone."""
    data, uuid = png_bytes(size=(32, 32), seed=next(_seed)), f"u-same-{next(_seed)}"
    before = uuid_counts(vllm_server)
    first = send(vllm_server, [(url(data), uuid)])
    assert first[0] == 200, first
    tokens = first[2].usage.prompt_tokens
    for media_type in ("image/png", "image/jpeg"):
        again = send(vllm_server, [(url(data, media_type), uuid)])
        assert again[0] == 200 and again[2].usage.prompt_tokens == tokens, again
    by_uuid = send(vllm_server, [(None, uuid)])  # the data left out: vLLM's cache has it under the uuid
    assert by_uuid[0] == 200 and by_uuid[2].usage.prompt_tokens == tokens, by_uuid
    other = send(vllm_server, [(url(data), f"{uuid}-b")])  # the same image under a second uuid: allowed
    assert other[0] == 200, other
    moved = delta(before, uuid_counts(vllm_server))
    assert moved.get(series(CONFLICTS, action="refused"), 0) == 0
    assert (moved[series(ITEMS, kind="checked")], moved[series(ITEMS, kind="uuid_only")]) == (4, 1)


def test_a_uuid_first_sent_with_a_bad_image_or_wrapped_base64_is_no_conflict(
    vllm_server: VllmServer, vllm_scale_out: VllmServer
) -> None:
    """A uuid whose first image was refused is not remembered; base64 with line breaks is the same bytes."""
    uuid, data = f"u-bad-first-{next(_seed)}", png_bytes(size=(20, 20), seed=next(_seed))
    before = uuid_counts(vllm_server)
    bad = send(vllm_server, [(url(b"not an image at all"), uuid)])
    assert bad[0] == 400 and "mm_uuid_conflict" not in bad[2]["error"]["message"], bad
    assert send(vllm_server, [(url(data), uuid)])[0] == 200
    encoded = base64.b64encode(data).decode()
    wrapped = "data:image/png;base64," + "\n".join(encoded[i : i + 76] for i in range(0, len(encoded), 76))
    alone = send(vllm_scale_out, [(wrapped, None)])[0]
    assert send(vllm_server, [(wrapped, uuid)])[0] == alone  # whatever vLLM makes of it, never a conflict
    moved = delta(before, uuid_counts(vllm_server))
    assert moved.get(series(CONFLICTS, action="refused"), 0) == 0
    assert moved[series(ITEMS, kind="checked")] == (2 if alone == 200 else 1)


def test_a_reference_by_uuid_before_the_data_is_vllms_own_answer(
    vllm_server: VllmServer, vllm_scale_out: VllmServer
) -> None:
    """Nothing to check: counted as uuid_only, and answered exactly as vLLM alone (the plugin off) answers it."""
    uuid = f"u-unknown-{next(_seed)}"
    before = uuid_counts(vllm_server)
    status, _, answer = send(vllm_server, [(None, uuid)])
    alone_status, _, alone = send(vllm_scale_out, [(None, uuid)])
    assert (status, answer["error"]["message"]) == (alone_status, alone["error"]["message"])
    assert status == 400 and "mm_uuid_conflict" not in answer["error"]["message"], answer
    assert delta(before, uuid_counts(vllm_server)) == {series(ITEMS, kind="uuid_only"): 1}


def test_concurrent_clients_reusing_one_uuid_one_wins(vllm_server: VllmServer) -> None:
    uuid, images = f"u-race-{next(_seed)}", [url(png_bytes(size=(24, 24), seed=next(_seed))) for _ in range(8)]
    before = uuid_counts(vllm_server)
    with ThreadPoolExecutor(4) as pool:
        statuses = Counter(status for status, _, _ in pool.map(lambda u: send(vllm_server, [(u, uuid)]), images))
    assert statuses == Counter({200: 1, 400: 7}), statuses
    moved = delta(before, uuid_counts(vllm_server))
    assert (moved[series(CONFLICTS, action="refused")], moved[series(ITEMS, kind="checked")]) == (7, 8)


def test_each_api_server_remembers_what_it_saw(vllm_servers_json: VllmServer) -> None:
    """``--api-server-count 2``: a uuid is known to the API servers that received it, as vLLM's caches are."""
    server, uuid, data = vllm_servers_json, f"u-two-{next(_seed)}", large()
    before = uuid_counts(server)
    for _ in range(20):  # until both API servers received it (the kernel spreads connections)
        assert send(server, [(url(data), uuid)])[0] == 200
        if delta(before, uuid_counts(server)).get(series("mmobs_vllm_mm_uuid_index_entries"), 0) == 2:
            break
    moved = delta(before, uuid_counts(server))
    assert moved[series("mmobs_vllm_mm_uuid_index_entries")] == 2, moved
    sends = moved[series(ITEMS, kind="checked")]
    statuses = [send(server, [(url(small()), uuid)])[0] for _ in range(4)]
    assert statuses == [400] * 4
    moved = delta(before, uuid_counts(server))
    assert moved[series(CONFLICTS, action="refused")] == 4 and moved[series(ITEMS, kind="checked")] == sends + 4


def test_the_runbook_and_its_alert_on_a_real_prometheus(vllm_server: VllmServer, tmp_path: Path) -> None:
    """After the conflicts above: the alert fires on a real Prometheus; the runbook's queries have data and its
    commands find what they say on the server's log."""
    from tests.dashboards.test_prometheus import PrometheusProcess
    from tests.docs.test_runbooks import _words as words
    from tests.docs.test_runbooks import promql_queries
    from tests.support import require_binary
    from tests.support.markdown import fenced_blocks

    uuid = f"u-alert-{next(_seed)}"
    assert send(vllm_server, [(url(large()), uuid)])[0] == 200
    require_binary("prometheus")
    address = vllm_server.url.removeprefix("http://")
    prometheus = PrometheusProcess(tmp_path, address, None)
    try:
        prometheus.wait_until(lambda: prometheus.scalar('count_over_time(up{job="mmobs"}[1m])') >= 2, 60, "scraping")
        assert send(vllm_server, [(url(small()), uuid)])[0] == 400  # a conflict the scrapes see happen
        runbook = ROOT / "docs" / "runbooks" / "MmobsVllmMmUuidConflict.md"
        alert, *investigation = [
            q for b in fenced_blocks(runbook.read_text()) if b.language == "promql" for q in promql_queries(b.text)
        ]
        assert words(alert) == words(alert_expressions()["MmobsVllmMmUuidConflict"])
        prometheus.wait_until(lambda: bool(prometheus.query(alert)), 60, "the alert's expression to be true")
        for query in investigation:
            assert prometheus.query(query.replace("<job>", "mmobs")), query
    finally:
        prometheus.stop()
    (tmp_path / "server.log").write_text(vllm_server.logs())
    env = {**os.environ, "PATH": f"{Path(vllm_server.command[0]).parent}{os.pathsep}{os.environ['PATH']}"}
    assert run_commands(runbook, tmp_path, env, {"<job>": "mmobs", "HOST:8000": address}, "vLLM") == 3
