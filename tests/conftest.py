"""Shared pytest fixtures. Keep each group in its own commented section."""

from __future__ import annotations

import contextlib
import fnmatch
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from mmobs.events import RecordingObserver, observing
from tests.support import free_port
from tests.support.otlp_receiver import OTLP_TEST_ENV, OtlpReceiver, otlp_proto_available
from tests.support.vllm_kinds import ServerContext, vllm_server_fixture
from tests.support.vllm_server import MMOBS_FLAGS, VllmServer, write_json_logging_config

#: The distributions whose versions each run names in its header: what a range in pyproject.toml promises.
REPORTED_VERSIONS = (
    "Pillow", "numpy", "blake3", "prometheus-client", "structlog", "starlette", "uvicorn", "h11",
    "python-multipart", "pybase64", "opentelemetry-api", "vllm", "torch", "transformers",
)  # fmt: skip


def pytest_report_header() -> str:
    """The versions this run tests (tox's floors environment and the newest ones differ only here)."""
    from importlib import metadata

    def version(name: str) -> str:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return "absent"

    return "versions: " + ", ".join(f"{name} {version(name)}" for name in REPORTED_VERSIONS)


def pytest_configure(config: pytest.Config) -> None:
    """Stop at once, with a message saying where the golden vectors go, when they are not there."""
    from tests.support.golden import missing_message

    message = missing_message()
    if message is not None:
        pytest.exit(message, returncode=pytest.ExitCode.USAGE_ERROR)


# =============================================================================
# Core (test_hashing.py, test_image_io.py, test_golden.py): recording observer
# =============================================================================


class EventRecorder(RecordingObserver):
    """mmobs's RecordingObserver (forwarding to nobody), optionally asking for item digests."""

    def __init__(self, *, item_digests: bool = False) -> None:
        super().__init__()
        self.item_digests = item_digests

    def wants_item_digest(self, kind: str, media: Any) -> bool:
        return self.item_digests


@pytest.fixture
def record() -> Callable[..., contextlib.AbstractContextManager[EventRecorder]]:
    """``with record() as rec:`` installs a fresh EventRecorder for the block.

    It goes through ``mmobs.events.observing``, so only events reported inside
    the block (in this context) are recorded.
    """

    @contextlib.contextmanager
    def _record(**options: Any) -> Iterator[EventRecorder]:
        recorder = EventRecorder(**options)
        with observing(recorder):
            yield recorder

    return _record


@pytest.fixture
def silent_observer() -> Iterator[None]:
    """Route events to nobody for the test, so it never moves the global metrics."""
    with observing(None):
        yield


# =============================================================================
# Which tox environment runs a test: a marker of the environment's name (tox.ini selects by it).
# The core's tests carry none. A test that takes a vLLM server is ``vllm_server``'s wherever it lives;
# otherwise its own mark decides, then its file's row here (the first that matches).
# =============================================================================

ENVIRONMENTS = ("lint", "dashboards", "vllm", "vllm_releases", "pillow_range", "vllm_server")
ENVIRONMENT_OF_FILE = {
    "tests/test_style.py": "lint",
    "tests/test_packaging.py": "lint",
    "tests/dashboards/test_prometheus.py": "vllm_server",
    "tests/dashboards/*": "dashboards",
    "tests/docs/test_runbooks.py": "dashboards",
    "tests/docs/test_vllm_docs.py": "vllm_server",
    "tests/keys/test_keys_vllm*.py": "vllm",
    "tests/keys/test_pillow_range.py": "pillow_range",
    "tests/keys/test_releases.py": "vllm_releases",
    "tests/vllm/test_vllm_releases_plugin.py": "vllm_releases",
    "tests/vllm/*": "vllm",
}


def _environment_of(item: pytest.Item, root: Path) -> str | None:
    if "vllm_server_env" in getattr(item, "fixturenames", ()):
        return "vllm_server"
    marked = next((mark.name for mark in item.iter_markers() if mark.name in ENVIRONMENTS), None)
    if marked is not None:
        return marked
    path = item.path.relative_to(root).as_posix()
    return next((env for pattern, env in ENVIRONMENT_OF_FILE.items() if fnmatch.fnmatchcase(path, pattern)), None)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        environment = _environment_of(item, config.rootpath)
        if environment is not None:
            item.add_marker(environment)


# =============================================================================
# Real vLLM servers (tests/vllm, test_prometheus.py, test_vllm_docs.py): each kind a fixture that starts
# it on first use and stops it at the end of its scope (tests/support/vllm_kinds.py)
# =============================================================================


@pytest.fixture(scope="session")
def vllm_server_env(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any]:
    """(the vLLM server environment, the tiny model directory); skips where the environment is absent."""
    from tests.support.vllm_server import make_model, require_vllm_server

    venv = require_vllm_server()
    return venv, make_model(venv, tmp_path_factory.mktemp("tiny-qwen2-vl"))


@pytest.fixture(scope="session")
def vllm_media_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The ``--allowed-local-media-path`` of the shared server and of vLLM alone: their file URLs read it.

    It is ``media/`` in the shared server's own directory (its working directory), as docs/vllm.md's
    ``--allowed-local-media-path "$PWD/media"`` has it.
    """
    media = tmp_path_factory.mktemp("vllm-server") / "media"
    media.mkdir()
    return media


@pytest.fixture(scope="session")
def vllm_server_context(
    vllm_server_env: tuple[Any, Any], vllm_media_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> ServerContext:
    """What every kind of server starts from (tests/support/vllm_kinds.py)."""
    venv, model = vllm_server_env
    return ServerContext(venv, model, vllm_media_dir, tmp_path_factory)


# The kinds the whole suite shares; the drift and decode-free modules declare their own.


@vllm_server_fixture()
def vllm_server(context: ServerContext) -> VllmServer:
    """``vllm serve`` with mmobs's plugin and preset, the guard on, vLLM's request log and file URLs allowed,
    exporting its traces to ``server.otlp`` (an :class:`OtlpReceiver`; ``None`` without opentelemetry-proto),
    and OpenMetrics scrapes of ``/metrics`` answered by the preset (``MMOBS_VLLM_OPENMETRICS=1``).

    ``server.initial`` holds the mmobs samples read right after start-up, before any request;
    ``server.media_dir`` is the ``--allowed-local-media-path`` its file URLs may read.
    """
    otlp = OtlpReceiver() if otlp_proto_available() else None
    tracing = ["--otlp-traces-endpoint", otlp.endpoint] if otlp is not None else []
    try:
        server = VllmServer(
            context.venv,
            context.model,
            context.media_dir.parent,
            args=[
                *MMOBS_FLAGS,
                "--enable-log-requests",
                "--enable-scale-out",  # its render endpoints, answered as vLLM alone's (test_vllm_render_keys_only.py)
                "--allowed-local-media-path",
                str(context.media_dir),
                *tracing,
            ],
            # The fallback counters' exemplars (their trace ids) reach Prometheus's OpenMetrics scrapes.
            env={
                "MMOBS_VLLM_GUARD": "1",
                "MMOBS_VLLM_OPENMETRICS": "1",
                # The engine core's series, which vLLM's /metrics does not read (tests/vllm/test_vllm_rust_front_end.py).
                "MMOBS_METRICS_PORT": str(free_port()),
                **(OTLP_TEST_ENV if otlp is not None else {}),
            },
        )
    except BaseException:
        if otlp is not None:
            otlp.stop()
        raise
    server.otlp = otlp
    server.media_dir = context.media_dir
    server.wait_for_warm_up()
    server.initial = server.samples()
    return server


@vllm_server_fixture()
def vllm_servers_json(context: ServerContext) -> VllmServer:
    """``vllm serve --api-server-count 2`` with mmobs, the guard on, and a JSON logging config."""
    directory = context.directory("vllm-servers-json")
    config = write_json_logging_config(context.venv, directory)
    server = VllmServer(
        context.venv,
        context.model,
        directory,
        args=[*MMOBS_FLAGS, "--api-server-count", "2", "--enable-log-requests"],
        env={"MMOBS_VLLM_GUARD": "1", "VLLM_LOGGING_CONFIG_PATH": str(config)},
        name="vllm serve --api-server-count 2",
        timeout=360,
    )
    server.wait_for_warm_up(api_servers=2)
    server.initial = server.samples()
    return server


@vllm_server_fixture()
def vllm_scale_out(context: ServerContext) -> VllmServer:
    """vLLM alone (``MMOBS_VLLM_PLUGIN=0``) behind the preset, ``--enable-scale-out`` (its render endpoint) and
    ``--trust-request-mm-kwargs`` (request-level processor kwargs, which vLLM scopes into the keys).

    The oracle of the render-key and decode-free tests (its keys are vLLM's own hasher's; what Pillow decodes in
    its API server is witnessed, :meth:`VllmServer.decodes`) and the plugin-off state the docs describe (the
    preset counts HTTP requests only). Its file URLs read the shared server's directory.
    """
    return VllmServer(
        context.venv,
        context.model,
        context.directory("vllm-scale-out"),
        args=[
            *MMOBS_FLAGS,
            "--enable-scale-out",
            "--trust-request-mm-kwargs",
            "--allowed-local-media-path",
            str(context.media_dir),
        ],
        env={"MMOBS_VLLM_PLUGIN": "0"},
        name="vllm serve --enable-scale-out (MMOBS_VLLM_PLUGIN=0)",
        witness_decodes=True,
    )
