"""The package as an index would show it, and as the docs say to install it.

mmobs is not published yet, so ``pip install mmobs`` finds nothing: the README and
docs/vllm.md say to build the wheel from the checkout (``python3 -m build --wheel``)
and install that into vLLM's environment. Here the sdist and the wheel are built as
``python -m build`` builds them (an isolated build environment), ``twine check
--strict`` reads them as an index would, and the metadata, entry points and package
data are read back from the wheel. The vLLM server the tests run against has that
wheel installed, not the checkout (``.ci/install-vllm-server``).
"""

from __future__ import annotations

import email.parser
import json
import re
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from mmobs._version import __version__
from tests.support.markdown import fenced_blocks

ROOT = Path(__file__).resolve().parents[1]
WHEEL = f"mmobs-{__version__}-py3-none-any.whl"


#: What a build leaves in a source tree, and trees that are not the project's.
NOT_THE_SOURCE = shutil.ignore_patterns(
    ".git", ".tox", ".venv", "node_modules", "build", "dist", "*.egg-info", "__pycache__", ".*_cache", ".hypothesis"
)


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The sdist and the wheel, built by ``python -m build`` from a copy of the checkout into a folder of the test's.

    A copy: a build writes ``mmobs.egg-info`` and ``build/`` into its source tree, where tox's other
    environments, running beside this one, build mmobs too.
    """
    source = tmp_path_factory.mktemp("source") / "mmobs"
    shutil.copytree(ROOT, source, ignore=NOT_THE_SOURCE)
    out = tmp_path_factory.mktemp("dist")
    result = subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(out), str(source)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    yield out


def test_the_sdist_and_the_wheel_pass_twine_check(dist: Path) -> None:
    built = sorted(path.name for path in dist.iterdir())
    assert built == [WHEEL, f"mmobs-{__version__}.tar.gz"]
    result = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", *sorted(map(str, dist.iterdir()))],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("PASSED") == 2, result.stdout


def test_the_wheel_carries_the_metadata_an_index_shows(dist: Path) -> None:
    with zipfile.ZipFile(dist / WHEEL) as wheel:
        metadata = email.parser.Parser().parsestr(wheel.read(f"mmobs-{__version__}.dist-info/METADATA").decode())
    assert metadata["Name"] == "mmobs" and metadata["Version"] == __version__
    assert metadata["License-Expression"] == "Apache-2.0"  # an SPDX expression, not a classifier
    assert metadata["Requires-Python"] == ">=3.11"
    assert "multimodal cache keys" in metadata["Summary"]
    assert metadata["Description-Content-Type"] == "text/markdown"
    assert metadata.get_payload().startswith("# mmobs")  # the README, as the index page
    classifiers = metadata.get_all("Classifier")
    assert "Programming Language :: Python :: 3.11" in classifiers and "Typing :: Typed" in classifiers
    assert not [c for c in classifiers if c.startswith("License ::")]  # superseded by License-Expression
    urls = dict(url.split(", ", 1) for url in metadata.get_all("Project-URL"))
    assert set(urls) == {"Homepage", "Documentation", "Source", "Issues"}
    assert all(url.startswith("https://github.com/mmobs/mmobs") for url in urls.values())
    requires = metadata.get_all("Requires-Dist")
    assert {re.split(r"[<>=;\[ ]", r)[0] for r in requires if "extra ==" not in r} == {
        "Pillow", "numpy", "blake3", "prometheus-client", "structlog", "starlette",
    }  # fmt: skip


def test_the_wheel_carries_the_vllm_entry_point_the_cli_and_the_package_data(dist: Path) -> None:
    with zipfile.ZipFile(dist / WHEEL) as wheel:
        names = set(wheel.namelist())
        entry_points = wheel.read(f"mmobs-{__version__}.dist-info/entry_points.txt").decode()
    assert "[vllm.general_plugins]\nmmobs = mmobs.vllm:register" in entry_points
    assert "[console_scripts]\nmmobs = mmobs.cli:main" in entry_points
    assert {"mmobs/py.typed", "mmobs/vllm/logging.json"} <= names
    assert any(name.startswith("mmobs/reference/") for name in names)
    assert not [name for name in names if name.startswith(("tests/", "benchmarks/", "dashboards/"))]


def _install_block(page: Path) -> list[str]:
    """The first ``sh`` block of a page's vLLM install: its commands, comments cut."""
    for block in fenced_blocks(page.read_text(encoding="utf-8")):
        if block.language == "sh" and "python3 -m build --wheel" in block.text:
            return [line.split("  #")[0].strip() for line in block.lines if line.strip()]
    raise AssertionError(f"{page.name} has no install block")


def test_the_readme_and_the_vllm_page_install_the_wheel_that_is_built(dist: Path) -> None:
    readme, vllm_page = _install_block(ROOT / "README.md"), _install_block(ROOT / "docs" / "vllm.md")
    assert readme == vllm_page
    build, install, _serve = readme
    assert build == "python3 -m pip install build && python3 -m build --wheel"
    assert install == "/path/to/vllm-env/bin/pip install dist/mmobs-*.whl"
    assert f"dist/{WHEEL}" in (ROOT / "README.md").read_text(encoding="utf-8")  # the file the comment names
    assert (dist / WHEEL).is_file()
    assert "pip install mmobs " not in readme[1] and not any(line.startswith("pip install mmobs") for line in readme)


@pytest.mark.vllm_server
def test_the_vllm_server_environment_has_the_wheel_not_the_checkout() -> None:
    """What ``.ci/install-vllm-server`` installs: a wheel file (pip records an archive), not a directory."""
    from tests.support.vllm_server import require_vllm_server

    venv = require_vllm_server()
    (record,) = venv.glob(f"lib/python3*/site-packages/mmobs-{__version__}.dist-info/direct_url.json")
    origin = json.loads(record.read_text(encoding="utf-8"))
    assert "archive_info" in origin and origin["url"].endswith(f"/{WHEEL}"), origin
