"""``MMOBS_METRICS_PORT`` closed to strangers, over HTTP: the port as the plugin serves it when vLLM loads it.

Each case is a process that does what every vLLM process does at start-up, ``load_general_plugins()``
(vLLM 0.33.0's, in the ``vllm`` environment), with the port's switches set; it is then spoken to over
HTTP on a loopback port and stopped by its process id. The running ``vllm serve``'s port, with its
token and its debug page on, is ``tests/vllm/test_vllm_rust_front_end.py``'s.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support import ManagedProcess, free_port, require_vllm
from tests.support.vllm_server import parse_samples, series

TOKEN = "s3cret-token-for-the-port"
UNAUTHORIZED = "mmobs_metrics_unauthorized_total"
#: What ``vllm serve`` does first: load the general plugins, then configure vLLM's logging (the plugin's lines come out).
LOADED = (
    "import time, vllm.logger; from vllm.config.logging import LoggingConfig; from vllm.plugins import "
    "load_general_plugins; load_general_plugins(); vllm.logger.configure_logging(LoggingConfig()); time.sleep(600)"
)


class PluginProcess(ManagedProcess):
    """A Python process that loaded vLLM's general plugins (mmobs's among them), serving the metrics port."""

    def __init__(self, directory: Path, **switches: str) -> None:
        require_vllm()
        self.port = free_port()
        env = {key: value for key, value in os.environ.items() if not key.startswith(("MMOBS_", "_MMOBS_"))}
        env.update(MMOBS_METRICS_PORT=str(self.port), MMOBS_METRICS_HOST="127.0.0.1", **switches)
        super().__init__("vllm plugins", [sys.executable, "-c", LOADED], directory / "plugins.log", env=env)
        token = switches.get("MMOBS_METRICS_TOKEN")  # waited on with it: a refusal would be counted
        self.wait_until(lambda: self.get("/metrics", token).status_code == 200, 120, "the port to answer")

    def get(self, path: str, token: str | None = TOKEN, authorization: str | None = None) -> httpx.Response:
        """``GET path`` with ``token`` (None: no header), or with ``authorization`` as the whole header."""
        if authorization is None and token is not None:
            authorization = f"Bearer {token}"
        headers = {} if authorization is None else {"Authorization": authorization}
        return httpx.get(f"http://127.0.0.1:{self.port}{path}", headers=headers, timeout=10)


@pytest.fixture
def guarded(tmp_path: Path) -> Iterator[PluginProcess]:
    """The port with a token and the debug page on."""
    process = PluginProcess(tmp_path, MMOBS_METRICS_TOKEN=TOKEN, MMOBS_METRICS_DEBUG="1")
    yield process
    process.stop()


class TestTheMetricsPort:
    def test_without_a_token_or_a_wrong_one_every_path_is_a_401_without_detail_and_counted(
        self, guarded: PluginProcess
    ) -> None:
        """Missing and wrong tokens get the same 401 (nothing says which), on the metrics and the debug page alike;
        each is counted by what it carried."""
        answers = [
            guarded.get(path, None, authorization)
            for path in ("/metrics", "/debug/mm-items")
            for authorization in (None, "Bearer wrong", f"Basic {TOKEN}")
        ]  # fmt: skip
        assert [answer.status_code for answer in answers] == [401] * 6
        assert {answer.text for answer in answers} == {answers[0].text}
        assert answers[0].json()["error"]["code"] == "unauthorized"
        assert answers[0].headers["www-authenticate"] == 'Bearer realm="metrics"'
        with_token = guarded.get("/metrics")
        assert with_token.status_code == 200
        found = parse_samples(with_token.text)
        assert found[series(UNAUTHORIZED, credentials="missing")] == 4  # no header, and no bearer token in it
        assert found[series(UNAUTHORIZED, credentials="wrong")] == 2

    def test_with_the_token_the_debug_page_answers_its_items(self, guarded: PluginProcess) -> None:
        answer = guarded.get("/debug/mm-items")
        assert answer.status_code == 200 and answer.json() == []  # no engine core here: no item
        assert guarded.get("/debug/anything-else").status_code == 404

    def test_the_debug_page_is_off_unless_switched_on(self, tmp_path: Path) -> None:
        process = PluginProcess(tmp_path, MMOBS_METRICS_TOKEN=TOKEN)
        try:
            off = process.get("/debug/mm-items")
            assert off.status_code == 404 and off.json()["error"]["code"] == "not_found"
            assert process.get("/metrics").status_code == 200
        finally:
            process.stop()

    def test_the_debug_page_stays_off_without_a_token_and_says_why(self, tmp_path: Path) -> None:
        process = PluginProcess(tmp_path, MMOBS_METRICS_DEBUG="1")
        try:
            assert process.get("/debug/mm-items", None).status_code == 404
            assert process.get("/metrics", None).status_code == 200  # no token set: the series are open
            assert "MMOBS_METRICS_DEBUG=1 needs MMOBS_METRICS_TOKEN" in process.logs()
        finally:
            process.stop()
