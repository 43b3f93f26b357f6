"""Loading and using mmobs's loader leaves Pillow, and vLLM's loader, exactly as they were for everyone else.

mmobs wraps Pillow's ``Image._decompression_bomb_check`` (``mmobs.keys.pixel_limit``). Before Pillow 13 the
wrapper passed a keyword that only Pillow 13 has, and from then on every ``Image.open`` in the process failed
as "cannot identify image file", vLLM's loader included. A fresh interpreter
(``tests/keys/pillow_isolation_probe.py``) observes Pillow and vLLM's loader before mmobs is imported, uses
mmobs's loader, and observes them again: the two observations must be equal. ``test_pillow_range.py`` runs
this module under each Pillow of the declared range.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from functools import cache
from pathlib import Path
from typing import Any

import PIL
import pytest
from PIL import Image

from tests.support import golden, require_vllm

PROBE = Path(__file__).with_name("pillow_isolation_probe.py")
ROOT = Path(__file__).resolve().parents[2]


@cache
def _report() -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as folder:
        report = Path(folder) / "report.json"
        result = subprocess.run(
            [sys.executable, str(PROBE), str(golden.GOLDEN_DIR / "inputs"), str(report)],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=ROOT,
        )
        assert result.returncode == 0, result.stderr[-4000:]
        return json.loads(report.read_text(encoding="utf-8"))


def test_the_probe_ran_on_the_pillow_of_this_process() -> None:
    """Under test_pillow_range.py the probe inherits the Pillow put first on the path, as this process has."""
    assert _report()["pillow"] == PIL.__version__
    expected = os.environ.get("MMOBS_EXPECTED_PILLOW")
    if expected:
        assert PIL.__version__ == expected


def test_mmobs_loads_images_and_applies_its_own_pixel_limit() -> None:
    """The wrapper is in force: mmobs refuses by its limit, and within it Pillow neither warns nor refuses."""
    used = _report()["mmobs"]
    assert used["load"] == {"returned": [64, 48], "warnings": []}
    assert used["refused"]["raised"] == "BadImageError"
    assert "100" in used["refused"]["message"] and "pixels" in used["refused"]["message"]
    assert used["loads_above_pillows_limit"] == {"returned": ["PNG", "RGB", [10000, 9000]], "warnings": []}


def test_pillow_behaves_after_mmobs_exactly_as_before() -> None:
    """Every open, decode, EXIF read and size check, with their results, errors and warnings, is unchanged."""
    report = _report()
    pillow = {name: seen for name, seen in report["before"].items() if not name.startswith("vllm ")}
    assert {name: report["after"][name] for name in pillow} == pillow
    # What was observed is Pillow at work, not a run of errors: the plain images decode, the sizes are checked.
    for name in ("photo.jpg", "rgb.png", "palette.png", "bad-exif-header.jpg"):
        assert "returned" in pillow[f"decode {name}"], pillow[f"decode {name}"]
    assert pillow["check_90mp"]["warnings"][0].startswith("DecompressionBombWarning")
    assert pillow["check_400mp"]["raised"] == "DecompressionBombError"
    assert pillow["open declares-400mp.png"]["raised"] == "DecompressionBombError"


@pytest.mark.vllm
def test_vllms_loader_behaves_after_mmobs_exactly_as_before() -> None:
    """vLLM's ``ImageMediaIO.load_bytes`` of every golden input gives what it gave before mmobs was loaded."""
    require_vllm()
    report = _report()
    vllm = {name: seen for name, seen in report["before"].items() if name.startswith("vllm ")}
    assert {name: report["after"][name] for name in vllm} == vllm
    Image.init()
    if "AVIF" in Image.OPEN:
        assert vllm["vllm photo.jpg"]["returned"] == ["RGB", [64, 48]], vllm["vllm photo.jpg"]
    else:
        # vLLM's allow-list names AVIF first; a Pillow without the plugin (10.1) raises KeyError for it on
        # every image, with or without mmobs: vLLM alone cannot load a JPEG there.
        assert vllm["vllm photo.jpg"] == {"raised": "KeyError", "message": "'AVIF'", "warnings": []}
