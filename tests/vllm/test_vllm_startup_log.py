"""The plugin's own lines in vLLM's log (``mmobs.vllm.startup_log``), said before vLLM configured logging too.

vLLM's API server loads its plugins while it builds its argument parser, before
``vllm.logger.configure_logging`` runs; ``tests/vllm/test_vllm_server.py`` shows the
API server's line in a real server's log. Here, without vLLM: a logger tree
shaped as vLLM's before and after configuration, and a stand-in for its
``vllm.logger`` module holding ``configure_logging``.
"""

from __future__ import annotations

import contextlib
import io
import logging
import sys
import types
from collections.abc import Iterator

import pytest

from mmobs.vllm import startup_log


@contextlib.contextmanager
def unconfigured_vllm() -> Iterator[tuple[types.ModuleType, io.StringIO]]:
    """``vllm`` with no handler yet (as in the API server at plugin load), and a ``configure_logging`` that adds one.

    Entered inside the test's body, not in a fixture: pytest (9.2 on) gives its capture handlers to every
    logger that does not propagate when a test phase starts, so a ``vllm`` logger made non-propagating in
    setup would have handlers again by the time the test runs.
    """
    vllm = logging.getLogger("vllm")
    saved = (vllm.handlers[:], vllm.propagate, vllm.level)
    vllm.handlers, vllm.propagate = [], False
    stream = io.StringIO()
    module = types.ModuleType("vllm.logger")
    calls = []

    def configure_logging(config: object = None) -> str:
        calls.append(config)
        handler = logging.StreamHandler(stream)
        handler.setFormatter(logging.Formatter("%(levelname)s [%(filename)s] %(message)s"))
        vllm.handlers = [handler]
        vllm.setLevel(logging.INFO)
        return "configured"

    module.configure_logging = configure_logging  # type: ignore[attr-defined]
    module.calls = calls  # type: ignore[attr-defined]
    saved_module = sys.modules.get("vllm.logger")
    sys.modules["vllm.logger"] = module
    try:
        yield module, stream
    finally:
        vllm.handlers, vllm.propagate, vllm.level = saved
        if saved_module is None:
            sys.modules.pop("vllm.logger", None)
        else:
            sys.modules["vllm.logger"] = saved_module


def test_a_line_said_before_vllm_configures_logging_waits_for_it() -> None:
    with unconfigured_vllm() as (module, stream):
        original = module.configure_logging
        startup_log.say(logging.INFO, "mmobs (API server): counting %s", "vLLM")
        startup_log.say(logging.WARNING, "mmobs: declined")
        assert stream.getvalue() == ""
        assert module.configure_logging("config") == "configured"  # vLLM's function runs and answers as before
        assert module.calls == ["config"]
        assert stream.getvalue().splitlines() == [
            "INFO [startup_log.py] mmobs (API server): counting vLLM",
            "WARNING [startup_log.py] mmobs: declined",
        ]
        assert module.configure_logging is original  # put back after its one call
        startup_log.say(logging.INFO, "later")  # configured now: at once, naming the caller's line
        assert stream.getvalue().splitlines()[-1] == "INFO [test_vllm_startup_log.py] later"


def test_without_vllms_configure_logging_a_line_is_not_held_back(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Another host (no ``vllm.logger``): nothing will configure the tree later, so the line goes out now."""
    monkeypatch.delitem(sys.modules, "vllm.logger", raising=False)
    vllm = logging.getLogger("vllm")
    saved = (vllm.handlers[:], vllm.propagate)
    vllm.handlers, vllm.propagate = [], False
    try:
        startup_log.say(logging.WARNING, "mmobs: %s", "now")
    finally:
        vllm.handlers, vllm.propagate = saved
    assert capsys.readouterr().err == "mmobs: now\n"  # logging's last resort, as for any unconfigured logger


def test_no_more_than_max_pending_lines_are_held() -> None:
    with unconfigured_vllm() as (module, stream):
        for n in range(startup_log.MAX_PENDING + 10):
            startup_log.say(logging.INFO, "line %d", n)
        module.configure_logging()
        assert len(stream.getvalue().splitlines()) == startup_log.MAX_PENDING


def test_a_size_switch_that_is_no_whole_number_is_its_default_and_one_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("MMOBS_VLLM_TEST_ENTRIES", "2048")
    assert startup_log.whole_number_env("MMOBS_VLLM_TEST_ENTRIES", 7) == 2048
    monkeypatch.setenv("MMOBS_VLLM_TEST_ENTRIES", " ")
    assert startup_log.whole_number_env("MMOBS_VLLM_TEST_ENTRIES", 7) == 7
    monkeypatch.setenv("MMOBS_VLLM_TEST_ENTRIES", "-5")
    with caplog.at_level(logging.WARNING, logger="vllm.mmobs"):
        assert startup_log.whole_number_env("MMOBS_VLLM_TEST_ENTRIES", 7) == 7
    assert [r.getMessage() for r in caplog.records] == [
        "mmobs: MMOBS_VLLM_TEST_ENTRIES='-5' is not a whole number of 0 or more; using 7"
    ]
