"""Helpers shared by the tests that run real processes (uvicorn, Prometheus)."""

from __future__ import annotations

import base64
import contextlib
import importlib
import os
import random
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

REQUIRE_PROMETHEUS = os.environ.get("MMOBS_REQUIRE_PROMETHEUS") == "1"
REQUIRE_VLLM = os.environ.get("MMOBS_REQUIRE_VLLM") == "1"


def require_binary(name: str) -> str:
    """The path of a Prometheus binary, or skip (fail under MMOBS_REQUIRE_PROMETHEUS=1)."""
    path = shutil.which(name)
    if path is None:
        message = f"{name} not installed (apt-get install prometheus)"
        if REQUIRE_PROMETHEUS:
            pytest.fail(f"{message}, and MMOBS_REQUIRE_PROMETHEUS=1 forbids skipping")
        pytest.skip(message)
    return path


def _require_import(module: str, what: str, how: str) -> None:
    """Skip when ``module`` is not importable, saying ``how`` to get it; fail instead under MMOBS_REQUIRE_VLLM=1."""
    try:
        importlib.import_module(module)
    except ImportError as error:
        message = f"{what} is not installed ({error}); {how}"
        if REQUIRE_VLLM:
            pytest.fail(f"{message}, and MMOBS_REQUIRE_VLLM=1 forbids skipping")
        pytest.skip(message)


def require_vllm() -> None:
    """Skip when vLLM is not importable (fail under MMOBS_REQUIRE_VLLM=1, as in CI)."""
    _require_import("vllm.multimodal.hasher", "vLLM", ".ci/install-vllm installs it without CUDA")


def require_opencv() -> None:
    """Skip when OpenCV is not importable: vLLM's video loader and the tests' clips need it (fail under
    MMOBS_REQUIRE_VLLM=1, as in CI, where .ci/install-vllm installs it with vLLM)."""
    _require_import("cv2", "OpenCV", ".ci/install-vllm installs it with vLLM")


@contextlib.contextmanager
def vllm_plugin_registered() -> Iterator[ModuleType]:
    """mmobs's vLLM plugin registered afresh in this process for the block, then unregistered (vLLM restored)."""
    from mmobs.vllm import plugin

    plugin.unregister()
    plugin.register()
    try:
        yield plugin
    finally:
        plugin.unregister()


def free_port() -> int:
    """A loopback TCP port nothing listens on, from below the kernel's ephemeral range.

    A port ``bind(0)`` hands out comes from the range the kernel gives every outgoing connection, and
    tox runs environments side by side whose tests open thousands: a server that binds it seconds
    later (``vllm serve`` imports for twenty) could find it taken. Below that range only another
    ``free_port`` picks ports, at random among some twenty thousand.
    """
    low = _ephemeral_range_start()
    chooser = random.SystemRandom()
    for _ in range(200):
        port = chooser.randrange(10_000, low)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free loopback port between 10000 and {low}")


def _ephemeral_range_start() -> int:
    """The first port of Linux's ephemeral range (``ip_local_port_range``); 32768, its default, elsewhere."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768
    return low if low > 11_000 else 32768


def data_url(data: bytes, media_type: str = "image/jpeg") -> str:
    return f"data:{media_type};base64,{base64.b64encode(data).decode()}"


def value(registry: CollectorRegistry, name: str, **labels: str) -> float:
    """A sample's value in ``registry``; 0.0 for a series that does not exist (yet)."""
    sample = registry.get_sample_value(name, labels)
    return 0.0 if sample is None else sample


def metric_value(text: str, name: str, labels: dict[str, str] | None = None) -> float:
    """Sum of the samples called ``name`` whose labels include ``labels`` (0 if none)."""
    labels = labels or {}
    total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
    return total


class ManagedProcess:
    """A server in a subprocess of its own session, its output captured to a file, stopped by its PID.

    ``env`` is the child's whole environment (``None``: this process's).
    """

    def __init__(
        self,
        name: str,
        command: list[str],
        log_path: Path,
        *,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.name = name
        self.log_path = log_path
        self._log = open(log_path, "wb")
        self.process = subprocess.Popen(
            command,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=cwd,
            start_new_session=True,
        )

    def wait_until(self, ready: Callable[[], bool], timeout: float = 30.0, what: str = "ready") -> None:
        """Poll ``ready()`` (HTTP errors count as not yet) until it holds; stop and raise on timeout or exit."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.process.returncode}:\n{self.logs()[-4000:]}")
            try:
                if ready():
                    return
            except (httpx.HTTPError, KeyError, IndexError, ValueError):
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"{self.name} not {what} within {timeout} s:\n{self.logs()[-4000:]}")

    def logs(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors="replace")

    def log_events(self) -> list[dict[str, Any]]:
        """Every line of the log that is a JSON object, parsed (the others are left out)."""
        import json

        events = []
        for line in self.logs().splitlines():
            if line.startswith("{"):
                try:
                    events.append(json.loads(line))
                except ValueError:
                    pass
        return events

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()


class ServiceProcess(ManagedProcess):
    """``mmobs serve`` in a subprocess on a loopback port, logs captured to a file."""

    def __init__(self, tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        command = [sys.executable, "-m", "mmobs.cli", "serve", "--port", str(self.port), *args]
        log_path = tmp_path / f"serve-{self.port}.log"
        super().__init__("mmobs serve", command, log_path, env={**os.environ, **(env or {})})
        self.wait_until(lambda: httpx.get(self.url + "/healthz", timeout=1.0).status_code == 200)

    def metrics(self, **headers: str) -> str:
        response = httpx.get(self.url + "/metrics", headers=headers, timeout=10)
        response.raise_for_status()
        return response.text
