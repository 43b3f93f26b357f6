"""Any vLLM release's own Python sources, to run its hasher and loader in a child interpreter.

vLLM's hasher and image loader are pure Python over Pillow, NumPy, blake3 and torch, so a release's
wheel, unpacked without its compiled kernels and without its dependencies, imports them beside the
test environment's packages. The wheel comes from the package index (``pip download --no-deps``, so
pip's cache serves the second run), and only its ``.py`` files are unpacked, into the test's folder.

``MMOBS_VLLM_RELEASES`` (comma-separated) names the releases the release tests run against; the
default is every release :data:`mmobs.releases.RELEASES` knows. A release that cannot be
fetched skips its tests with the reason (``MMOBS_REQUIRE_VLLM_RELEASES=1`` fails them instead, as
in CI). A release mmobs does not know yet is held to the newest one's format, the day it appears.
"""

from __future__ import annotations

import importlib.util
import json
import os
import queue
import select
import signal
import subprocess
import sys
import threading
import time
import zipfile
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from mmobs.releases import RELEASES
from tests.support.prefetch import SESSION_ENVIRON

REQUIRE_VLLM_RELEASES = os.environ.get("MMOBS_REQUIRE_VLLM_RELEASES") == "1"
ROOT = Path(__file__).resolve().parents[2]
ZYGOTE = Path(__file__).with_name("release_zygote.py")
#: Seconds a script in a release's tree may take.
TIMEOUT = 900


def releases_under_test() -> list[str]:
    named = os.environ.get("MMOBS_VLLM_RELEASES", "")
    return [name.strip() for name in named.split(",") if name.strip()] or list(RELEASES)


_unpacked: dict[str, Path] = {}
_unpacking: defaultdict[str, threading.Lock] = defaultdict(threading.Lock)


def unpack_release(version: str, directory: Path) -> Path:
    """A folder holding release ``version``'s ``vllm`` package (Python files only); skips if unfetchable.

    Unpacked into ``directory`` the first time a session asks, and that folder again after; two threads
    asking for the same release at once get one download.
    """
    with _unpacking[version]:
        if version in _unpacked:
            return _unpacked[version]
        wheels = directory / "wheel"
        done = subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", f"vllm=={version}",
             "-d", str(wheels)],
            capture_output=True, text=True, timeout=900, env=SESSION_ENVIRON,
        )  # fmt: skip
        found = sorted(wheels.glob(f"vllm-{version}-*.whl"))
        if done.returncode != 0 or not found:
            message = f"vLLM {version} could not be fetched from the package index: {done.stderr.strip()[-600:]}"
            if REQUIRE_VLLM_RELEASES:
                pytest.fail(f"{message} (MMOBS_REQUIRE_VLLM_RELEASES=1 forbids skipping)")
            pytest.skip(message)
        tree = directory / "tree"
        with zipfile.ZipFile(found[0]) as wheel:
            wheel.extractall(
                tree, [name for name in wheel.namelist() if name.startswith("vllm/") and name.endswith(".py")]
            )
        found[0].unlink()  # hundreds of MB of kernels, no longer needed
        _unpacked[version] = tree
        return tree


def require_release_dependencies() -> None:
    """Skip (or fail, under ``MMOBS_REQUIRE_VLLM_RELEASES=1``) where a release's hasher cannot import."""
    if importlib.util.find_spec("torch") is None:
        reason = "a release's hasher imports torch and vLLM's dependencies (.ci/install-vllm installs them)"
        if REQUIRE_VLLM_RELEASES:
            pytest.fail(f"{reason}; MMOBS_REQUIRE_VLLM_RELEASES=1 forbids skipping")
        pytest.skip(reason)


class ReleaseRunner:
    """Runs a script in a release's tree, each in a process forked from a zygote (``release_zygote.py``).

    The zygote has imported what every release imports from the environment (torch, transformers...),
    so a run costs the release's own ``vllm`` modules and the script's work, not ten seconds of imports.
    One zygote per thread that runs at once, started on first use and stopped by :meth:`close`, by its
    process id (a script that overruns :data:`TIMEOUT` is killed by its own).
    """

    def __init__(self) -> None:
        self._idle: queue.SimpleQueue[subprocess.Popen[bytes]] = queue.SimpleQueue()
        self._started: list[subprocess.Popen[bytes]] = []
        self._lock = threading.Lock()

    def __enter__(self) -> ReleaseRunner:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        with self._lock:
            for zygote in self._started:
                zygote.kill()
                zygote.wait()
                assert zygote.stdin is not None and zygote.stdout is not None
                zygote.stdin.close()
                zygote.stdout.close()
            self._started.clear()

    def _zygote(self) -> subprocess.Popen[bytes]:
        try:
            return self._idle.get_nowait()
        except queue.Empty:
            pass
        env = {key: value for key, value in SESSION_ENVIRON.items() if key != "PYTHONPATH"}
        zygote = subprocess.Popen(
            [sys.executable, str(ZYGOTE)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0,
            env={**env, "VLLM_NO_USAGE_STATS": "1"}, cwd=ROOT,
        )  # fmt: skip
        with self._lock:
            self._started.append(zygote)
        return zygote

    @staticmethod
    def _answer(zygote: subprocess.Popen[bytes], deadline: float) -> dict[str, int] | None:
        """The zygote's next JSON line; ``None`` if none came by ``deadline`` (a monotonic time)."""
        assert zygote.stdout is not None
        line = b""
        while not line.endswith(b"\n"):
            if not select.select([zygote.stdout], [], [], max(0.0, deadline - time.monotonic()))[0]:
                return None
            byte = os.read(zygote.stdout.fileno(), 1)
            assert byte, f"the release zygote ended (exit {zygote.wait()})"
            line += byte
        answer: dict[str, int] = json.loads(line)
        return answer

    def run(
        self,
        version: str,
        tree: Path,
        script: Path,
        request: dict[str, Any],
        directory: Path,
        env: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        """Run ``script REQUEST.json REPORT.json`` with release ``version``'s sources first on the path; its report.

        The report must name the release and a ``vllm`` imported from ``tree``, so that the vLLM of the
        test's own environment can never answer in the release's place.
        """
        request_path, report_path = directory / f"{script.stem}-request.json", directory / f"{script.stem}-report.json"
        output = directory / f"{script.stem}-output.txt"
        request_path.write_text(json.dumps(request))
        command = {
            "script": str(script),
            "argv": [str(request_path), str(report_path)],
            "path": [str(tree), str(ROOT)],
            "env": env or {},
            "cwd": str(directory),
            "output": str(output),
        }
        zygote = self._zygote()
        assert zygote.stdin is not None
        zygote.stdin.write(json.dumps(command).encode() + b"\n")
        deadline = time.monotonic() + TIMEOUT
        started, ended = self._answer(zygote, deadline), self._answer(zygote, deadline)
        assert started is not None, f"the release zygote did not start {script.name} for vLLM {version}"
        if ended is None:
            os.kill(started["pid"], signal.SIGKILL)
            raise AssertionError(
                f"{script.name} in vLLM {version} took over {TIMEOUT} s (killed):\n{output.read_text()}"
            )
        self._idle.put(zygote)
        assert ended["returncode"] == 0, f"{script.name} in vLLM {version} failed:\n{output.read_text()[-4000:]}"
        report: dict[str, Any] = json.loads(report_path.read_text())
        assert report["vllm"] == version and report["vllm_file"].startswith(str(tree)), report["vllm_file"]
        return report
