"""What a vLLM operator reads, run as written: ``docs/vllm.md`` and the runbooks, against real ``vllm serve``.

The page's commands are taken from its ``sh`` blocks as they are written, with
its three variables (``VLLM_VENV``, ``MODEL``, ``PORT``) set to this run's
server, and run in ``bash``: the client snippet sends the malformed-EXIF JPEG, ``curl``
reads the counter (moved by exactly one), ``mmobs events`` finds the event with
the request id the client got. The same on the shared server, which logs vLLM's
text, and on the one that logs JSON through ``mmobs vllm-logging-config``.

The runbooks whose alerts a vLLM job raises run their shell commands on both
logs too (``server.log``, the input files, ``HOST:8000`` the vLLM server; the
vLLM cache-drift runbooks on the drift servers, ``tests/vllm/test_vllm_cache_drift.py``).
A server with the plugin off (``MMOBS_VLLM_PLUGIN=0``) and the preset on shows
what ``MmobsMetricsAbsent`` sees: HTTP series only, and the alert's expression
true on a real Prometheus.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.docs.test_runbooks import run_commands
from tests.support import require_binary
from tests.support.markdown import fenced_blocks
from tests.support.otlp_receiver import OTLP_TEST_ENV
from tests.support.vllm_requests import BAD_EXIF_JPEG, ROUTE, chat
from tests.support.vllm_server import DEFAULT_VENV, VllmServer

pytestmark = pytest.mark.vllm_server

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "vllm.md"
RUNBOOKS = ROOT / "docs" / "runbooks"
#: The runbooks of alerts a vLLM job raises whose commands need no drift (the drift ones: test_vllm_cache_drift.py).
VLLM_RUNBOOKS = (
    "MmobsExifFallbackRatioHigh",
    "MmobsHasherFingerprintMismatch",
    "MmobsMetricsAbsent",
    "MmobsTargetDown",
)
FALLBACK = 'mmobs_exif_fallback_total{exception="SyntaxError",kind="media_with_bytes"}'


# -- reading the page ------------------------------------------------------------------------------


def page_commands(text: str) -> list[str]:
    """The shell commands of a page's ``sh`` blocks, one string each; a heredoc stays with its command."""
    commands: list[str] = []
    for block in fenced_blocks(text):
        if block.language != "sh":
            continue
        lines = iter(block.lines)
        for line in lines:
            if not line.strip():
                continue
            heredoc = re.search(r"<<'(\w+)'", line)
            if heredoc:
                body = [line]
                for inner in lines:
                    body.append(inner)
                    if inner == heredoc.group(1):
                        break
                commands.append("\n".join(body))
            else:
                commands.append(line)
    return commands


def exports(text: str) -> dict[str, str]:
    return dict(re.findall(r"^export (\w+)=(\S+)", text, flags=re.MULTILINE))


def serve_words(command: str, server: VllmServer) -> list[str]:
    """A page's ``vllm serve`` line as the words it runs, its variables set to ``server``'s."""
    code = command.split("2>&1")[0]
    values = {
        "VLLM_VENV": str(Path(server.command[0]).parents[1]),
        "MODEL": server.model,
        "PORT": str(server.port),
        "PWD": str(server.media_dir.parent),  # the server's working directory
    }
    for name, value in values.items():
        code = code.replace(f"${name}", value)
    return shlex.split(code)


def test_the_page_sets_its_paths_once_and_uses_no_others() -> None:
    text = PAGE.read_text(encoding="utf-8")
    assert list(exports(text)) == ["VLLM_VENV", "MODEL", "PORT"]
    env = {k: v for k, v in os.environ.items() if k != "MMOBS_VLLM_SERVER_VENV"}
    default = subprocess.run(
        ["bash", "-c", f"export VLLM_VENV={exports(text)['VLLM_VENV']}; echo $VLLM_VENV"],
        env={**env, "HOME": str(Path.home())}, capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    assert default == str(DEFAULT_VENV)  # where .ci/install-vllm-server builds it
    used = {name for command in page_commands(text) for name in re.findall(r"\$\{?([A-Z_]+)", command)}
    assert used <= {"VLLM_VENV", "MODEL", "PORT", "PWD", "MMOBS_VLLM_SERVER_VENV", "HOME"}, used
    install = [c for c in page_commands(text) if c.startswith(".ci/install-vllm-server")]
    assert install == ['.ci/install-vllm-server "$VLLM_VENV"              # about 2 minutes and 2.5 GB the first time']
    assert 'bin/python" scripts/make_tiny_vlm.py "$MODEL"' in text  # what tests/vllm_server.make_model runs


def _without_tracing(command: list[str]) -> list[str]:
    if "--otlp-traces-endpoint" not in command:
        return command
    at = command.index("--otlp-traces-endpoint")
    return command[:at] + command[at + 2 :]


def test_the_serve_commands_are_what_the_servers_run(vllm_server: VllmServer) -> None:
    serves = [c for c in page_commands(PAGE.read_text(encoding="utf-8")) if '/bin/vllm" serve' in c]
    assert len(serves) == 2 and all(c.endswith("2>&1 | tee server.log") for c in serves)
    text_log, json_log = (serve_words(c, vllm_server) for c in serves)
    start = text_log.index(vllm_server.command[0])
    # The shared server also exports its traces to the tests' receiver (docs/vllm-traces.md): the page's
    # command is the server's without those settings.
    # Its render endpoints are on too, for the render tests (docs/routers.md has that command).
    command = [word for word in _without_tracing(vllm_server.command) if word != "--enable-scale-out"]
    env = dict(vllm_server.extra_env)
    # It serves its engine core's series on a port of its own too, with a token and the debug page
    # (docs/vllm-rust-front-end.md, "The metrics port").
    for name in (*OTLP_TEST_ENV, "MMOBS_VLLM_OPENMETRICS", "MMOBS_METRICS_PORT", "MMOBS_METRICS_TOKEN",
                 "MMOBS_METRICS_DEBUG"):  # fmt: skip
        env.pop(name, None)
    assert dict(w.split("=", 1) for w in text_log[:start]) == env
    assert text_log[start:] == command
    assert json_log == [f"VLLM_LOGGING_CONFIG_PATH={vllm_server.media_dir.parent}/vllm-logging.json", *text_log]


# -- the page's commands, on both log formats ------------------------------------------------------


@dataclass
class Ran:
    server: VllmServer
    outputs: list[str]
    before: float
    after: float


def _fallbacks(server: VllmServer) -> float:
    return sum(v for (name, labels), v in server.samples("mmobs_exif_fallback_total").items()
               if dict(labels) == {"exception": "SyntaxError", "kind": "media_with_bytes"})  # fmt: skip


def run_page(server: VllmServer, workdir: Path) -> Ran:
    """The client snippet's block as written: the snippet, ``curl``, ``mmobs events`` on the saved log."""
    commands = page_commands(PAGE.read_text(encoding="utf-8"))
    start = next(i for i, c in enumerate(commands) if c.startswith('"$VLLM_VENV/bin/python" - <<'))
    env = {
        **os.environ,
        "VLLM_VENV": str(Path(server.command[0]).parents[1]),
        "MODEL": server.model,
        "PORT": str(server.port),
    }
    before = _fallbacks(server)
    outputs = []
    for command in commands[start : start + 3]:
        if 'mmobs" events server.log' in command:
            (workdir / "server.log").write_text(server.logs())  # what `| tee server.log` saved
        result = subprocess.run(["bash", "-o", "pipefail", "-c", command], cwd=ROOT if "python" in command else workdir,
                                env=env, capture_output=True, text=True, timeout=120)  # fmt: skip
        assert result.returncode == 0, (command, result.stderr[-2000:])
        outputs.append(result.stdout)
    return Ran(server, outputs, before, _fallbacks(server))


def check_page_outputs(ran: Ran) -> str:
    """What the page says the three commands print; returns the request's id."""
    status, request_id = ran.outputs[0].split()
    assert status == "200" and re.fullmatch(r"[0-9a-f]{32}", request_id), ran.outputs[0]
    (metric,) = ran.outputs[1].splitlines()
    assert metric.startswith(FALLBACK + " ") and ran.after == ran.before + 1, (metric, ran.before, ran.after)
    event = json.loads(ran.outputs[2])
    assert {k: event[k] for k in ("event", "kind", "exception", "format", "key_source", "request_id", "route")} == {
        "event": "exif_fallback",
        "kind": "media_with_bytes",
        "exception": "SyntaxError",
        "format": "JPEG",
        "key_source": "original_bytes",
        "request_id": request_id,
        "route": ROUTE,
    }
    return request_id


@pytest.fixture(scope="module")
def text_run(vllm_server: VllmServer, tmp_path_factory: pytest.TempPathFactory) -> tuple[Ran, Path]:
    workdir = tmp_path_factory.mktemp("vllm-page-text")
    return run_page(vllm_server, workdir), workdir


@pytest.fixture(scope="module")
def json_run(vllm_servers_json: VllmServer, tmp_path_factory: pytest.TempPathFactory) -> tuple[Ran, Path]:
    workdir = tmp_path_factory.mktemp("vllm-page-json")
    return run_page(vllm_servers_json, workdir), workdir


def test_the_page_runs_as_written_on_vllms_text_log(text_run: tuple[Ran, Path]) -> None:
    ran, workdir = text_run
    check_page_outputs(ran)
    assert not (workdir / "server.log").read_text().lstrip().startswith("{")  # vLLM's own text format


def test_the_page_runs_as_written_on_the_json_log(json_run: tuple[Ran, Path]) -> None:
    ran, workdir = json_run
    check_page_outputs(ran)
    lines = [line for line in (workdir / "server.log").read_text().splitlines() if "exif_fallback" in line]
    assert lines and all(line.startswith("{") for line in lines)  # mmobs vllm-logging-config's JSON


# -- the runbooks, on both log formats -------------------------------------------------------------


def _runbook_workdir(ran: Ran, workdir: Path, request_id: str) -> tuple[dict[str, str], dict[str, str]]:
    for name in ("suspect.jpg", "the-file.jpg"):
        (workdir / name).write_bytes(BAD_EXIF_JPEG)
    venv_bin = Path(ran.server.command[0]).parent
    env = {**os.environ, "PATH": f"{venv_bin}{os.pathsep}{os.environ['PATH']}"}  # vLLM's environment's mmobs
    subprocess.run("mmobs fingerprint --json > b.json", shell=True, cwd=workdir, env=env, check=True, timeout=120)
    placeholders = {"<job>": "mmobs", "<id>": request_id, "HOST:8000": ran.server.url.removeprefix("http://")}
    return env, placeholders


@pytest.mark.parametrize("log_format", ["text", "json"])
@pytest.mark.parametrize("runbook", VLLM_RUNBOOKS)
def test_the_runbooks_commands_on_a_vllm_server(runbook: str, log_format: str, request: pytest.FixtureRequest) -> None:
    ran, workdir = request.getfixturevalue(f"{log_format}_run")
    env, placeholders = _runbook_workdir(ran, workdir, check_page_outputs(ran))
    assert run_commands(RUNBOOKS / f"{runbook}.md", workdir, env, placeholders, "vLLM") > 0


# -- the plugin off, the preset on -----------------------------------------------------------------


def test_with_the_plugin_off_the_preset_counts_http_only_and_metrics_absent_sees_it(
    vllm_scale_out: VllmServer, tmp_path: Path
) -> None:
    """The plugin off (``MMOBS_VLLM_PLUGIN=0``) and the preset on: the shared plugin-off server (conftest)."""
    plugin_off = vllm_scale_out
    from tests.dashboards.test_prometheus import PrometheusProcess
    from tests.docs.test_runbooks import alert_expressions

    status, request_id, _ = chat(plugin_off, BAD_EXIF_JPEG)
    assert status == 200 and request_id
    families = {name for name, _ in plugin_off.samples()}
    assert "mmobs_http_requests_total" in families
    assert not {name for name in families if not name.startswith("mmobs_http_")}, families
    said = [line for line in plugin_off.log_lines() if "the vLLM plugin is not active in this API server" in line]
    assert len(said) == 1 and "MMOBS_VLLM_PLUGIN=0" in said[0], said
    assert "counting vLLM" not in plugin_off.logs()
    require_binary("prometheus")
    prometheus = PrometheusProcess(tmp_path, plugin_off.url.removeprefix("http://"), None)
    try:
        prometheus.wait_until(lambda: prometheus.scalar('count_over_time(up{job="mmobs"}[1m])') >= 2, 60, "scraping")
        assert prometheus.scalar('up{job="mmobs"}') == 1
        assert prometheus.scalar(alert_expressions()["MmobsMetricsAbsent"]) == 1
        assert httpx.get(plugin_off.url + "/health", timeout=5).status_code == 200
    finally:
        prometheus.stop()
