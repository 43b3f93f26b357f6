"""mmobs keys as each vLLM release keys, held to that release's own hasher and loader.

For every release :mod:`mmobs.releases` knows (or those ``MMOBS_VLLM_RELEASES`` names), the
release's Python sources run in a child interpreter (``release_probe.py``) on the golden cases, the
golden inputs and the corpus's images (its costly ones left to ``test_keys_vllm_inputs.py``), for the
loader's default mode and for ``image_mode=None``. In this process mmobs keys the same values with
``MultiModalHasher.for_vllm(R)`` and the same bytes with ``key_for_bytes(..., vllm_version=R)``:

* every key the release computes, mmobs computes;
* where the release's hasher raises (a broken EXIF block, before 0.31), mmobs's key is the one the
  release's format gives without the ImageID (what the upstream fix gives), and the fallback is
  reported once per read;
* a value the release pickles (no serialization of its own) cannot have the same key in two
  processes whose classes differ: those cases are named, not compared.
"""

from __future__ import annotations

import importlib.util
import io
import json
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from mmobs import ImageMediaIO, UnsupportedTypeWarning, key_for_bytes
from mmobs.errors import BadImageError
from mmobs.events import RecordingObserver, observing
from mmobs.keys.hashing import MultiModalHasher
from mmobs.releases import RELEASES, key_format, keyed_as
from tests.support import golden
from tests.support.vllm_releases import (
    releases_under_test,
    require_release_dependencies,
    run_in_release,
    unpack_release,
)

ROOT = Path(__file__).resolve().parents[2]
PROBE = Path(__file__).with_name("release_probe.py")
MODEL_ID = "Qwen/Qwen2-VL-2B-Instruct"
IMAGE_MODES = ["RGB", None]
RELEASES_UNDER_TEST = releases_under_test()


def _image_files(directory: Path) -> dict[str, Path]:
    """The golden inputs and the corpus's images that are not costly, as files."""
    files = {path.name: path for path in sorted((golden.GOLDEN_DIR / "inputs").iterdir())}
    spec = importlib.util.spec_from_file_location("make_corpus", ROOT / "scripts" / "make_corpus.py")
    assert spec is not None and spec.loader is not None
    corpus = sys.modules.get("make_corpus") or importlib.util.module_from_spec(spec)
    if "make_corpus" not in sys.modules:
        sys.modules["make_corpus"] = corpus  # dataclasses look their module up
        spec.loader.exec_module(corpus)
    for case in corpus.build_corpus():
        if case.kind == "image" and not case.name.startswith("costly"):
            path = directory / f"corpus-{case.name}"
            path.write_bytes(bytes(case.payload))
            files[path.name] = path
    return files


class ReleaseReports:
    """Each release's report on the image files (or why there is none), computed the first time a test asks.

    Each probe runs the release's vLLM in a child interpreter of its own (``run_in_release``).
    """

    def __init__(self, tmp_path_factory: pytest.TempPathFactory) -> None:
        require_release_dependencies()
        self._tmp_path_factory = tmp_path_factory
        self.files = _image_files(tmp_path_factory.mktemp("release-inputs"))
        self._reports: dict[str, dict[str, Any] | str] = {}

    def __getitem__(self, version: str) -> dict[str, Any] | str:
        if version not in self._reports:
            self._reports[version] = self._probe(version, self._tmp_path_factory.mktemp(f"vllm-{version}"))
        return self._reports[version]

    def _probe(self, version: str, directory: Path) -> dict[str, Any] | str:
        try:
            tree = unpack_release(version, directory)
        except pytest.skip.Exception as skipped:
            return str(skipped)
        request = {
            "model_id": MODEL_ID,
            "golden_inputs": str(golden.GOLDEN_DIR / "inputs"),
            "cases": golden.cases(),
            "files": {name: str(path) for name, path in self.files.items()},
            "image_modes": IMAGE_MODES,
        }
        return run_in_release(version, tree, PROBE, request, directory)


@pytest.fixture(scope="session")
def reports(tmp_path_factory: pytest.TempPathFactory) -> ReleaseReports:
    return ReleaseReports(tmp_path_factory)


@pytest.fixture(scope="session")
def image_files(reports: ReleaseReports) -> dict[str, Path]:
    return reports.files


def _report(reports: ReleaseReports, version: str) -> dict[str, Any]:
    found = reports[version]
    if isinstance(found, str):
        pytest.skip(found)
    return found


def _hash_for(version: str, algorithm: str, kwargs: dict[str, Any]) -> str:
    """``MultiModalHasher.for_vllm(version).hash_kwargs``, called as that release's hasher is called."""
    hasher = MultiModalHasher.for_vllm(version)
    if key_format(version).algorithm_argument:
        return hasher.hash_kwargs(algorithm, **kwargs)  # type: ignore[call-arg]
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("VLLM_MM_HASHER_ALGORITHM", algorithm)
        return hasher.hash_kwargs(**kwargs)


@pytest.mark.parametrize("version", RELEASES_UNDER_TEST)
def test_golden_cases_key_as_the_release(reports: ReleaseReports, version: str) -> None:
    report = _report(reports, version)
    version = keyed_as(version)
    tolerant = key_format(version).tolerant_image_id
    compared, pickled, raised = 0, [], []
    for case in golden.cases():
        theirs = report["cases"][case["id"]]
        kwargs = golden.build(case["kwargs"], version)
        recorder = RecordingObserver()
        with warnings.catch_warnings(record=True) as caught, observing(recorder):
            warnings.simplefilter("always")
            ours = _hash_for(version, case["algorithm"], kwargs)
        if any(issubclass(w.category, UnsupportedTypeWarning) for w in caught):
            pickled.append(case["id"])
            continue
        fallbacks = len(recorder.fallbacks)
        assert fallbacks == case["exif_fallbacks"], case["id"]
        if "raised" in theirs:
            # vLLM issue #56527: the bare ImageID read raises where mmobs falls back, and counts it.
            assert not tolerant and fallbacks > 0, (case["id"], theirs)
            raised.append(case["id"])
            continue
        assert ours == theirs["key"], f"vLLM {version}, case {case['id']}"
        compared += 1
    assert compared >= len(golden.cases()) - len(pickled) - len(raised)
    assert (raised != []) == (not tolerant), raised
    # Only what the release has no serialization for: before 0.27, video frames with their bytes.
    assert all("video" in name for name in pickled) and (pickled != []) == (not key_format(version).video_frames)


#: What mmobs refuses and a release keys, by file, image mode and reason: the only differences allowed.
#: A 100-megapixel JPEG is past mmobs's default ``max_pixels`` (a 400 before any decode; vLLM lets
#: Pillow's bomb check warn and decodes it), and a PNG whose IDAT is garbage fails mmobs's
#: ``verify="decode"``, where vLLM's loader swallows the decode error inside its EXIF transpose, and
#: its second ``load()`` returns the half-decoded image without raising. TGA is outside mmobs's
#: default formats (a format vision models are rarely sent, refused unless a caller allows it).
_REFUSED_BY_MMOBS_ONLY = [
    (file, mode, reason)
    for file, reason in (
        ("corpus-bomb-10000x10000.jpg", "too_many_pixels"),
        ("corpus-format-tga.tga", "unsupported_format"),
        ("corpus-png-garbage-idat.png", "corrupt"),
    )
    for mode in ("RGB", "None")
]


@pytest.mark.parametrize("version", RELEASES_UNDER_TEST)
def test_image_files_key_as_the_release(reports: ReleaseReports, image_files: dict[str, Path], version: str) -> None:
    report = _report(reports, version)
    version = keyed_as(version)
    counts = {"equal": 0, "fallback": 0, "refused_by_both": 0}
    differences: list[str] = []
    for name, by_mode in report["files"].items():
        payload = image_files[name].read_bytes()
        for mode, theirs in by_mode.items():
            image_mode = None if mode == "None" else mode
            label = f"{name} image_mode={image_mode}"
            try:
                ours = key_for_bytes(payload, image_mode=image_mode, verify="decode", vllm_version=version,
                                     model_id=MODEL_ID)  # fmt: skip
            except BadImageError as refused:
                if "refused" in theirs:
                    counts["refused_by_both"] += 1
                else:
                    differences.append((name, mode, refused.reason))
                continue
            assert "refused" not in theirs, f"{label}: refused by vLLM {version} ({theirs['refused']}), not by mmobs"
            if "raised" in theirs["media"]:
                assert not key_format(version).tolerant_image_id, (label, theirs)
                assert ours == theirs["without_image_id"], label
                counts["fallback"] += 1
            else:
                assert ours == theirs["media"]["key"], label
                counts["equal"] += 1
            _pixel_keys_agree(version, payload, image_mode, theirs, label)
    assert counts["equal"] > 0, counts
    assert sorted(differences) == sorted(_REFUSED_BY_MMOBS_ONLY), differences
    # The malformed-EXIF JPEG: a 500 before 0.31 (the hasher raises), the fix's key with mmobs.
    assert ("raised" in report["files"]["bad-exif-header.jpg"]["RGB"]["media"]) == (
        not key_format(version).tolerant_image_id
    )


def _pixel_keys_agree(version: str, data: bytes, image_mode: str | None, theirs: dict[str, Any], label: str) -> None:
    """The loader's ``io_config`` is the release's, and the hasher keys the pixels plain Pillow decodes as it does."""
    if key_format(version).io_config:
        media = ImageMediaIO(image_mode, vllm_version=version).load_bytes(data)
        assert (media.io_config is not None) == theirs["io_config"], label
    recorder = RecordingObserver()
    try:
        image = Image.open(io.BytesIO(data))
        image.load()
        with observing(recorder):
            ours = _hash_for(version, "blake3", {"image": image})
    except Exception as error:  # a file only the loader's tolerance gets through (Pillow raises anything)
        assert "raised" in theirs["pixels"], f"{label}: plain Pillow raised {error!r} here only"
        return
    if "raised" in theirs["pixels"]:  # the bare ImageID read of the release, where mmobs falls back
        assert not key_format(version).tolerant_image_id and recorder.fallbacks, (label, theirs["pixels"])
    else:
        assert ours == theirs["pixels"]["key"], f"{label}: pixels"


@pytest.mark.parametrize("version", RELEASES_UNDER_TEST)
def test_the_release_is_known(version: str) -> None:
    assert version.partition("+")[0] in RELEASES, (
        f"mmobs.releases does not know vLLM {version}: the tests above held it to vLLM {keyed_as(version)}'s "
        f"format ({key_format(keyed_as(version)).name}); where they pass, add it to RELEASES with that format"
    )


@pytest.mark.parametrize("version", RELEASES_UNDER_TEST)
def test_mmobs_hash_keys_as_the_release(reports: ReleaseReports, image_files: dict[str, Path], version: str) -> None:
    """``mmobs hash --vllm-version R``, decoding and from the header, gives release R's own keys."""
    report = _report(reports, version)
    names = ["bad-exif-header.jpg", "photo.jpg", "palette.png", "rgba.png", "imageid-string.jpg"]
    expected = [_image_alone_key(version, report["files"][name]["RGB"]) for name in names]
    for no_decode in ([], ["--no-decode"]):
        done = subprocess.run(
            [sys.executable, "-m", "mmobs.cli", "hash", "--json", "--vllm-version", keyed_as(version), *no_decode,
             *(str(image_files[name]) for name in names)],
            capture_output=True, text=True, timeout=120, check=True,
        )  # fmt: skip
        lines = [json.loads(line) for line in done.stdout.splitlines()]
        assert [line["mm_hash"] for line in lines] == expected, no_decode
        assert {line["vllm_version"] for line in lines} == {keyed_as(version)}


def _image_alone_key(version: str, theirs: dict[str, Any]) -> str:
    """The release's key of a loaded file alone; where its hasher raised, the key the upstream fix gives."""
    if "raised" in theirs["image_alone"]:
        assert not key_format(keyed_as(version)).tolerant_image_id, theirs
        return str(theirs["image_alone_without_image_id"])
    return str(theirs["image_alone"]["key"])
