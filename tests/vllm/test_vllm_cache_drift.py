"""vLLM's multimodal cache drift on a real ``vllm serve``: counted, prevented, healed.

vLLM's API server (P0) sends an item by hash alone when its shadow of the
engine's (P1) cache says P1 holds it. Three ways the two disagree are
provoked here through vLLM's own OpenAI routes, and each is checked by the
real server's ``/metrics`` and log, with exact counts:

* a request refused after rendering (a text that fits alone but not with its
  image's tokens): its item entered P0 and never P1;
* a refused request that only *touched* a cached item: P0's LRU order moves,
  P1's does not, and a later insertion evicts different items in each;
* P0's own sender cache losing an item within one request (a cache smaller
  than one request's items: vLLM asserts), under concurrent load.

Two servers configured so the caches drift (``--limit-mm-per-prompt`` 4 images,
``--mm-processor-cache-gb 0.0003``: one 224x224 image fits, four 112x112 do),
one with mmobs's healing (the default) and one with
``MMOBS_VLLM_MM_CACHE_HEAL=0`` (counting only: vLLM's behaviour unchanged; so are its client uuid
conflicts, ``MMOBS_VLLM_UUID_CONFLICTS=count``);
the three-step sequence also runs on the shared default server. What the tests send and
read (images, bodies, counters, the steps, the load) is in ``cache_drift_requests.py``.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.support.vllm_kinds import ServerContext, vllm_server_fixture
from tests.support.vllm_requests import mmobs_lines
from tests.support.vllm_server import MMOBS_FLAGS, VllmServer, delta, series, write_json_logging_config
from tests.vllm.cache_drift_requests import (
    DRIFT_ITEMS,
    ENGINE_MISS,
    LATE,
    REDRIFTS,
    REQUESTS,
    ROLLED_BACK,
    SENDER_MISSES,
    SENDER_REDRIFTS,
    SKIPPED,
    body,
    counters,
    engine_misses,
    image_url,
    load,
    post,
    seeds,
    settled_cache,
    three_steps,
    too_long_with_its_image,
    touch_drift,
)

pytestmark = pytest.mark.vllm_server

SMALL_CACHE_FLAGS = ("--limit-mm-per-prompt", '{"image": 4}', "--mm-processor-cache-gb", "0.0003")


# -- the servers -----------------------------------------------------------------------------------


def _start(
    context: ServerContext, env: dict[str, str], directory: str, name: str, *, json_log: bool = False
) -> VllmServer:
    server_directory = context.directory(directory)
    if json_log:
        env = {**env, "VLLM_LOGGING_CONFIG_PATH": str(write_json_logging_config(context.venv, server_directory))}
    server = VllmServer(
        context.venv, context.model, server_directory, args=[*MMOBS_FLAGS, *SMALL_CACHE_FLAGS], env=env, name=name
    )
    server.wait_for_warm_up()
    return server


@vllm_server_fixture(scope="module")
def healing_server(context: ServerContext) -> VllmServer:
    """Healing on, and vLLM's log in JSON (mmobs vllm-logging-config), so that the runbooks read both formats."""
    return _start(context, {}, "vllm-drift-heal", "vllm serve (small mm cache, json log)", json_log=True)


@vllm_server_fixture(scope="module")
def counting_server(context: ServerContext) -> VllmServer:
    return _start(
        context,
        {"MMOBS_VLLM_MM_CACHE_HEAL": "0", "MMOBS_VLLM_UUID_CONFLICTS": "count"},
        "vllm-drift-count",
        "vllm serve (small mm cache, MMOBS_VLLM_MM_CACHE_HEAL=0, MMOBS_VLLM_UUID_CONFLICTS=count)",
    )


# -- the three steps that drift the caches ---------------------------------------------------------


def test_a_refused_request_leaves_nothing_behind_and_the_next_one_gets_200(vllm_server: VllmServer) -> None:
    """The shared default server (default cache, healing on): 400, then 200 and 200; one item rolled back."""
    misses = engine_misses(vllm_server)
    (refused, second, third), moved = three_steps(vllm_server)
    assert refused.status_code == 400 and "Input length" in refused.json()["error"]["message"], refused.text
    assert (second.status_code, third.status_code) == (200, 200), (second.text, third.text)
    assert moved == {series(ROLLED_BACK): 1}
    assert engine_misses(vllm_server) == misses
    request_id = refused.headers["x-request-id"]
    (line,) = [f for f in mmobs_lines(vllm_server, "mm_cache_rollback") if f["request_id"] == f"chatcmpl-{request_id}"]
    assert (line["items"], line["process"]) == ("1", "APIServer")


def test_with_healing_off_the_same_steps_are_vllms_400_500_200_and_counted(counting_server: VllmServer) -> None:
    (refused, second, third), moved = three_steps(counting_server)
    assert refused.status_code == 400
    assert second.status_code == 500 and second.json()["error"]["message"] == "Internal server error"
    assert third.status_code == 200
    assert moved == {series(DRIFT_ITEMS, engine="0"): 1, series(REQUESTS, outcome="failed"): 1}
    request_id = f"chatcmpl-{second.headers['x-request-id']}"
    assert f"{ENGINE_MISS} {request_id}" in counting_server.logs()
    (line,) = [f for f in mmobs_lines(counting_server, "mm_cache_drift") if f["request_id"] == request_id]
    assert (line["modality"], line["where"], line["engine"], line["level"]) == ("image", "engine", "0", "WARNING")
    assert len(line["mm_hash"]) == 16 and line["redrift"] == "false"


# -- drift rollback cannot prevent: a refused request's touch ------------------------------------


def test_a_drifted_request_is_resubmitted_once_and_answered(healing_server: VllmServer) -> None:
    misses = engine_misses(healing_server)
    response, moved = touch_drift(healing_server)
    assert response.status_code == 200, response.text
    assert response.json()["usage"]["completion_tokens"] == 2
    assert moved == {series(DRIFT_ITEMS, engine="0"): 1, series(REQUESTS, outcome="healed"): 1}
    assert engine_misses(healing_server) == misses + 1  # vLLM's engine saw the drift; the client did not
    request_id = f"chatcmpl-{response.headers['x-request-id']}"
    (healed,) = [f for f in mmobs_lines(healing_server, "mm_cache_drift_request") if f["request_id"] == request_id]
    assert (healed["outcome"], healed["attempts"]) == ("healed", 2)  # a JSON log (the text parse gives "2")


def test_a_streamed_drifted_request_is_healed_before_its_first_chunk(healing_server: VllmServer) -> None:
    response, moved = touch_drift(healing_server, stream=True)
    assert response.status_code == 200
    events = [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: {")]
    assert events and not any("error" in event for event in events), response.text[:500]
    assert moved == {series(DRIFT_ITEMS, engine="0"): 1, series(REQUESTS, outcome="healed"): 1}


def test_a_drift_on_a_route_that_cannot_resubmit_is_a_503_with_retry_after(healing_server: VllmServer) -> None:
    response, moved = touch_drift(healing_server, route="/v1/responses")
    assert response.status_code == 503, response.text
    assert response.headers["retry-after"] == "1"
    assert "cache drift" in response.json()["error"]["message"]
    assert moved == {series(DRIFT_ITEMS, engine="0"): 1, series(REQUESTS, outcome="failed"): 1}


def test_the_same_entry_drifting_again_is_a_redrift(counting_server: VllmServer) -> None:
    """One image drifted twice (two rounds of the touch sequence around the same hash): one re-drift."""
    text = too_long_with_its_image(counting_server, 112)
    first = image_url(112)
    moved: Counter[Any] = Counter()
    statuses = []
    for _ in range(2):
        others = [image_url(112) for _ in range(4)]
        for url in (first, *others[:3]):
            post(counting_server, body(counting_server, [url]))
        before = counters(counting_server)
        post(counting_server, body(counting_server, [first], text))
        post(counting_server, body(counting_server, [others[3]]))
        statuses.append(post(counting_server, body(counting_server, [first])).status_code)
        moved.update(delta(before, counters(counting_server)))
    assert statuses == [500, 500]
    assert moved == {
        series(DRIFT_ITEMS, engine="0"): 2,
        series(REDRIFTS, engine="0"): 1,
        series(REQUESTS, outcome="failed"): 2,
    }


# -- concurrent multi-image load -------------------------------------------------------------------


@pytest.mark.parametrize(("clients", "requests", "stream_every"), [(6, 72, 0), (8, 144, 3)])
def test_concurrent_multi_image_load_is_all_200(
    healing_server: VllmServer, clients: int, requests: int, stream_every: int
) -> None:
    before, misses = counters(healing_server), engine_misses(healing_server)
    decodes_before = healing_server.samples("mmobs_vllm_")
    statuses, errors = load(healing_server, clients, requests, stream_every=stream_every)
    moved = delta(before, counters(healing_server))
    assert statuses == Counter({200: requests}), (statuses, errors[:3])
    # Re-sent images were decode-free hits; those that left the cache before the processor read them were
    # decoded late (how many is timing: tests/vllm/test_vllm_decode_free_hits.py makes one deterministically).
    decodes = delta(decodes_before, healing_server.samples("mmobs_vllm_"))
    assert decodes[series(SKIPPED, modality="image")] > 0, decodes
    assert decodes.get(series(LATE, modality="image"), 0) <= decodes[series(SKIPPED, modality="image")]
    # A drift fails one attempt of a request: P0's first lost item, or the engine's miss (naming all of them).
    drifted = moved.get(series(SENDER_MISSES), 0) + engine_misses(healing_server) - misses
    assert drifted > 0, "the load no longer drifts: nothing was proven"
    assert moved.get(series(REQUESTS, outcome="failed"), 0) == 0
    assert moved[series(REQUESTS, outcome="healed")] == drifted


def test_with_healing_off_every_failure_of_the_load_is_counted(counting_server: VllmServer) -> None:
    before, misses = counters(counting_server), engine_misses(counting_server)
    events_before = len(mmobs_lines(counting_server, "mm_cache_drift"))
    statuses, errors = load(counting_server, 6, 72)
    moved = delta(before, counters(counting_server))
    # Every drift event of the load is counted on its side, its re-drifts too (the poisoned-entry alert's series).
    events = mmobs_lines(counting_server, "mm_cache_drift")[events_before:]
    for where, drifted, again in (("sender", SENDER_MISSES, SENDER_REDRIFTS), ("engine", DRIFT_ITEMS, REDRIFTS)):
        side = [event for event in events if event["where"] == where]
        repeats = sum(event["redrift"] == "true" for event in side)
        assert sum(v for k, v in moved.items() if k[0] == drifted) == len(side), where
        assert sum(v for k, v in moved.items() if k[0] == again) == repeats, where
    failed = sum(count for status, count in statuses.items() if status != 200)
    assert failed > 0 and set(statuses) <= {200, 500, -1}, (statuses, errors[:3])
    assert moved[series(REQUESTS, outcome="failed")] == failed
    assert moved.get(series(SENDER_MISSES), 0) + engine_misses(counting_server) - misses == failed


# -- where nothing drifts, vLLM's cache is untouched ------------------------------------------------


def test_without_drift_vllms_cache_counts_are_the_same_with_and_without_healing(
    healing_server: VllmServer, counting_server: VllmServer
) -> None:
    """One sequence of hits, misses and evictions (single 112x112 images, sequential, none refused).

    Both caches are first filled with the same 16 images, which evict whatever
    the tests before left in them (the load with healing off leaves entries
    that P0 and P1 disagree on), so that the sequence meets the same cache twice.
    """
    fillers = [image_url(112, seed=4300 + i) for i in range(16)]
    urls = [image_url(112, seed=4200 + i) for i in range(7)]
    order = [0, 1, 0, 2, 3, 1, 4, 5, 0, 6, 6, 2, 1, 0, 5, 3]
    moved = {}
    for server in (healing_server, counting_server):
        settled_cache(server)
        for url in fillers:
            assert post(server, body(server, [url])).status_code == 200
        before, cache_before = counters(server), settled_cache(server)
        for index in order:
            assert post(server, body(server, [urls[index]])).status_code == 200
        assert delta(before, counters(server)) == {}
        moved[server.extra_env.get("MMOBS_VLLM_MM_CACHE_HEAL", "1")] = delta(cache_before, settled_cache(server))
    assert moved["1"] == moved["0"], moved
    hits = next(value for key, value in moved["1"].items() if key[0] == "vllm:mm_cache_hits_total")
    queries = next(value for key, value in moved["1"].items() if key[0] == "vllm:mm_cache_queries_total")
    assert 0 < hits < queries == len(order)


# -- operators: a real Prometheus scraping the counting server ---------------------------------------


def test_dashboards_alerts_and_runbooks_against_a_real_prometheus(
    counting_server: VllmServer, healing_server: VllmServer, tmp_path: Path
) -> None:
    """After the drift above (healing off: failed requests, re-drifts), Prometheus scrapes the server with the
    shipped rules: the drift panels' queries, the alerts' expressions and every runbook command work."""
    import shutil
    import time

    from tests.dashboards.dashboard_files import dashboard_targets
    from tests.dashboards.test_prometheus import PrometheusProcess
    from tests.docs.test_runbooks import VLLM_RUNBOOK_PREFIX, alert_expressions, promql_queries, run_commands
    from tests.docs.test_runbooks import _words as words
    from tests.support import REQUIRE_PROMETHEUS
    from tests.support.markdown import fenced_blocks

    if shutil.which("prometheus") is None or shutil.which("promtool") is None:
        message = "prometheus not installed"
        pytest.fail(message) if REQUIRE_PROMETHEUS else pytest.skip(message)
    address = counting_server.url.removeprefix("http://")
    prometheus = PrometheusProcess(tmp_path, address, None)  # scrape job "mmobs", as the mixin selects
    try:
        prometheus.wait_until(
            lambda: (
                prometheus.scalar('sum(mmobs_vllm_mm_cache_drift_requests_total{job="mmobs"})') > 0
                and prometheus.scalar('count_over_time(up{job="mmobs"}[1m])') >= 3
            ),
            60,
            "scraping the drift",
        )
        time.sleep(2)
        # vLLM's names with their colon, and mmobs's counters as the server counts them.
        stored = {
            key[0]: value
            for key, value in counters(counting_server).items()
            if key[0] == REQUESTS and dict(key[1])["outcome"] == "failed"
        }
        assert (
            prometheus.scalar('sum(mmobs_vllm_mm_cache_drift_requests_total{job="mmobs",outcome="failed"})')
            == (stored[REQUESTS])
        )
        # The drift panels, per model, beside vLLM's hit rate: data for the served model.
        drift_targets = [t for where, _, t in dashboard_targets() if "mmobs_vllm_mm_cache_" in t["expr"]]
        assert len(drift_targets) == 6
        for target in drift_targets:
            expr = target["expr"].replace("$__rate_interval", "1m")
            for variable in ("$job", "$instance", "$model_name", "$cluster"):
                expr = expr.replace(variable, ".*")
            result = prometheus.query(expr)
            assert result and all(r["metric"]["model_name"] == counting_server.model for r in result), expr
        # Each vLLM runbook: its first query is its alert's, every other query has data; every command runs on
        # this server's text log and on the healing server's JSON log, and prints what the runbook says.
        # (MmobsVllmMmUuidConflict's runbook runs on the uuid conflicts of tests/vllm/test_vllm_uuid_server.py.)
        prefix = f"{VLLM_RUNBOOK_PREFIX}MmCache"
        runbooks = sorted((Path(__file__).parents[2] / "docs" / "runbooks").glob(f"{prefix}*.md"))
        assert [r.stem for r in runbooks] == sorted(n for n in alert_expressions() if n.startswith(prefix))
        fill = {"<job>": "mmobs", "HOST:8000": address}
        for runbook in runbooks:
            queries = [
                q for b in fenced_blocks(runbook.read_text()) if b.language == "promql" for q in promql_queries(b.text)
            ]
            alert, *investigation = queries
            assert words(alert) == words(alert_expressions()[runbook.stem]), runbook.stem
            prometheus.query(alert)
            for query in investigation:
                for placeholder, value in fill.items():
                    query = query.replace(placeholder, value)
                assert prometheus.query(query), f"{runbook.stem}: no data for {query}"
        for server in (counting_server, healing_server):
            workdir = tmp_path / f"work-{server.port}"
            workdir.mkdir()
            (workdir / "server.log").write_text(server.logs())
            placeholders = {"<job>": "mmobs", "HOST:8000": server.url.removeprefix("http://")}
            env = {**os.environ, "PATH": f"{Path(server.command[0]).parent}{os.pathsep}{os.environ['PATH']}"}
            for runbook in runbooks:
                assert run_commands(runbook, workdir, env, placeholders, "vLLM") >= 3, runbook.stem
        drift_lines = [line for line in healing_server.log_lines() if "mm_cache_drift" in line]
        assert drift_lines and all(line.startswith("{") for line in drift_lines)  # the healing server logs JSON
    finally:
        prometheus.stop()


# -- client media uuids, count only ----------------------------------------------------------------


def test_a_uuid_conflict_is_only_counted_on_the_counting_server(
    counting_server: VllmServer, vllm_scale_out: VllmServer
) -> None:
    """Client media uuids, count only (``MMOBS_VLLM_UUID_CONFLICTS=count``, as this server counts its drift): a
    conflict counted and logged, and answered as vLLM answers it (tests/vllm/test_vllm_uuid_server.py has the rest)."""
    from tests.vllm.test_vllm_uuid_server import CONFLICTS, conflicts_logged, large, send, small, url, uuid_counts

    assert counting_server.extra_env.get("MMOBS_VLLM_UUID_CONFLICTS") == "count"
    uuid = f"u-count-{next(seeds)}"
    before = uuid_counts(counting_server)
    first, second = url(large()), url(small())
    status, _, answer = send(counting_server, [(first, uuid)])
    assert status == 200, answer
    status, request_id, wrong = send(counting_server, [(second, uuid)])
    assert status == 200, wrong
    # vLLM's own answer, wrong as it is: the first image's features (its prompt tokens), as vLLM alone gives it.
    alone = [send(vllm_scale_out, [(data_url, uuid)])[2].usage.prompt_tokens for data_url in (first, second)]
    assert wrong.usage.prompt_tokens == answer.usage.prompt_tokens == alone[0] == alone[1]
    assert send(vllm_scale_out, [(second, None)])[2].usage.prompt_tokens != alone[1]  # not the second image's own
    assert delta(before, uuid_counts(counting_server))[series(CONFLICTS, action="counted")] == 1
    (event,) = [e for e in conflicts_logged(counting_server) if e["uuid"] == uuid]
    assert (event["request_id"], event["action"]) == (request_id, "counted")
