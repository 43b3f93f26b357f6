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
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

from mmobs.releases import RELEASES

REQUIRE_VLLM_RELEASES = os.environ.get("MMOBS_REQUIRE_VLLM_RELEASES") == "1"
ROOT = Path(__file__).resolve().parents[2]
#: Seconds a script in a release's tree may take.
TIMEOUT = 900


def releases_under_test() -> list[str]:
    named = os.environ.get("MMOBS_VLLM_RELEASES", "")
    return [name.strip() for name in named.split(",") if name.strip()] or list(RELEASES)


_unpacked: dict[str, Path] = {}


def unpack_release(version: str, directory: Path) -> Path:
    """A folder holding release ``version``'s ``vllm`` package (Python files only); skips if unfetchable.

    Unpacked into ``directory`` the first time a session asks, and that folder again after.
    """
    if version not in _unpacked:
        wheels = directory / "wheel"
        done = subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", f"vllm=={version}",
             "-d", str(wheels)],
            capture_output=True, text=True, timeout=900,
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
    return _unpacked[version]


def require_release_dependencies() -> None:
    """Skip (or fail, under ``MMOBS_REQUIRE_VLLM_RELEASES=1``) where a release's hasher cannot import."""
    if importlib.util.find_spec("torch") is None:
        reason = "a release's hasher imports torch and vLLM's dependencies (.ci/install-vllm installs them)"
        if REQUIRE_VLLM_RELEASES:
            pytest.fail(f"{reason}; MMOBS_REQUIRE_VLLM_RELEASES=1 forbids skipping")
        pytest.skip(reason)


def run_in_release(
    version: str,
    tree: Path,
    script: Path,
    request: dict[str, Any],
    directory: Path,
    env: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Run ``python SCRIPT REQUEST.json REPORT.json`` with release ``version``'s sources first on the path; its report.

    The script runs in a child interpreter of its own (stopped by its process id past :data:`TIMEOUT`).
    Its report must name the release and a ``vllm`` imported from ``tree``, so that the vLLM of the
    test's own environment can never answer in the release's place.
    """
    request_path, report_path = directory / f"{script.stem}-request.json", directory / f"{script.stem}-report.json"
    request_path.write_text(json.dumps(request))
    child_env = {key: value for key, value in os.environ.items() if not key.startswith(("MMOBS_VLLM_", "VLLM_"))}
    child_env.update(PYTHONPATH=os.pathsep.join([str(tree), str(ROOT)]), VLLM_NO_USAGE_STATS="1", **(env or {}))
    try:
        done = subprocess.run(
            [sys.executable, str(script), str(request_path), str(report_path)],
            capture_output=True, text=True, timeout=TIMEOUT, env=child_env, cwd=directory,
        )  # fmt: skip
    except subprocess.TimeoutExpired as overrun:
        raise AssertionError(f"{script.name} in vLLM {version} took over {TIMEOUT} s (killed)") from overrun
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"{script.name} in vLLM {version} failed:\n{output[-4000:]}"
    report: dict[str, Any] = json.loads(report_path.read_text())
    assert report["vllm"] == version and report["vllm_file"].startswith(str(tree)), report["vllm_file"]
    return report
