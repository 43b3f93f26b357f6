"""The plugin on each vLLM release, in that release's own loader and hasher: vLLM PR #56576's fix where it is missing.

Before vLLM 0.31 the hasher read the EXIF ImageID bare, so the malformed-EXIF JPEG of vLLM issue #56527 raised out of
it (a 500 in ``vllm serve``). For every release ``tests/support/vllm_releases.py`` runs (each one's
Python sources in a child interpreter, ``release_plugin_probe.py``), vLLM alone and then vLLM with
the plugin key the golden inputs:

* with the plugin, every image vLLM alone keys keeps its key;
* the malformed-EXIF JPEG, which vLLM alone cannot key before 0.31, gets the key that release's format gives
  without the ImageID (mmobs's ``key_for_bytes(vllm_version=R)``, itself held to each release by
  ``tests/keys/test_releases.py``), with exactly one fallback counted and logged;
* with ``MMOBS_VLLM_EXIF_FIX=0`` it raises as vLLM alone does, and the fallback is still counted;
* a feature not proven on the release declines with one line naming it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from mmobs import key_for_bytes
from mmobs.releases import FIRST_PROVEN, key_format, unproven
from tests.support import golden
from tests.support.vllm_releases import (
    releases_under_test,
    require_release_dependencies,
    run_in_release,
    unpack_release,
)

PROBE = Path(__file__).with_name("release_plugin_probe.py")
BAD_EXIF_JPEG = "bad-exif-header.jpg"
FALLBACK = "mmobs_exif_fallback_total{exception=SyntaxError,kind=media_with_bytes}"
#: By default each key format's first release (0.25.1 for 0.25: vLLM issue #56527 was reported on it), the
#: last release without the fix and the newest; ``MMOBS_VLLM_RELEASES`` names others.
RELEASES = releases_under_test() if os.environ.get("MMOBS_VLLM_RELEASES") else [
    "0.25.1", "0.27.1", "0.30.0", "0.31.0", "0.33.0", "0.34.0"
]  # fmt: skip
#: What each declined feature's line says, by the feature's name in mmobs.releases.
DECLINED_LINES = {
    "decode_free_hits": "decode-free cache hits are off",
    "context": "request ids in vLLM's threads and its dummy inputs are off",
    "cache_drift": "cache drift counting and healing are off",
    "uuid_checks": "client media uuid checks are off",
    "front_end": "the front end's stage timings are off",
    "render": "the render endpoints' counts, guard and keys-only answers are off",
    "video": "video clips' timings, budgets and decode-free hits are off",
}


class PluginProbes:
    """Each release's report, with the fix on or off, computed the first time a test asks for it.

    Each probe runs the release's vLLM in a child interpreter of its own (``run_in_release``).
    """

    def __init__(self, tmp_path_factory: pytest.TempPathFactory) -> None:
        self._tmp_path_factory = tmp_path_factory
        self._reports: dict[tuple[str, bool], dict[str, Any]] = {}

    def report(self, version: str, *, fix: bool) -> dict[str, Any]:
        if (version, fix) not in self._reports:
            require_release_dependencies()
            directory = self._tmp_path_factory.mktemp(f"plugin-{version}-fix-{'on' if fix else 'off'}")
            tree = unpack_release(version, directory)
            files = {path.name: str(path) for path in sorted((golden.GOLDEN_DIR / "inputs").iterdir())}
            env = {"MMOBS_VLLM_EXIF_FIX": "1" if fix else "0"}
            self._reports[(version, fix)] = run_in_release(version, tree, PROBE, files, directory, env=env)
        return self._reports[(version, fix)]


@pytest.fixture(scope="session")
def plugin_probes(tmp_path_factory: pytest.TempPathFactory) -> PluginProbes:
    return PluginProbes(tmp_path_factory)


@pytest.fixture(scope="module", params=RELEASES)
def release(request: pytest.FixtureRequest, plugin_probes: PluginProbes) -> tuple[str, dict[str, Any]]:
    version = request.param
    return version, plugin_probes.report(version, fix=True)


def _tolerant(version: str) -> bool:
    """Whether the release reads the ImageID tolerantly itself (0.31 on): vLLM alone keys the malformed-EXIF JPEG."""
    return key_format(version).tolerant_image_id


def test_every_image_vllm_alone_keys_keeps_its_key(release: tuple[str, dict[str, Any]]) -> None:
    version, report = release
    assert report["registered"], report["start_up"]
    keyed = {name for name, alone in report["alone"].items() if "key" in alone}
    for name in keyed:
        assert report["with_plugin"][name]["key"] == report["alone"][name]["key"], name
    assert (keyed == set(report["alone"])) == _tolerant(version)


def test_what_vllm_alone_cannot_key_gets_the_fixs_key_and_one_counted_fallback(
    release: tuple[str, dict[str, Any]],
) -> None:
    """Before 0.31, the images whose EXIF read raises (the malformed-EXIF JPEG among them): a 500 with vLLM alone."""
    version, report = release
    raised = {name: alone["raised"] for name, alone in report["alone"].items() if "raised" in alone}
    if not _tolerant(version):
        assert raised[BAD_EXIF_JPEG] == "SyntaxError"  # "not a TIFF file": the 500 of vLLM issue #56527
    for name, exception in raised.items():
        found = report["with_plugin"][name]
        assert found["key"] == key_for_bytes(golden.input_bytes(name), vllm_version=version), name
        fallbacks = {key: value for key, value in found["moved"].items() if key.startswith("mmobs_exif_fallback_total")}
        assert fallbacks == {f"mmobs_exif_fallback_total{{exception={exception},kind=media_with_bytes}}": 1.0}, name
        (event,) = [line for line in found["logged"] if "exif_fallback" in line]
        assert exception in event and "media_with_bytes" in event, event
    bad_exif = report["with_plugin"][BAD_EXIF_JPEG]
    assert bad_exif["moved"][FALLBACK] == 1.0 and bad_exif["key"] == key_for_bytes(
        golden.input_bytes(BAD_EXIF_JPEG), vllm_version=version
    )


def test_an_image_with_an_image_id_is_keyed_by_it_as_vllm_alone_keys_it(release: tuple[str, dict[str, Any]]) -> None:
    _, report = release
    name = "imageid-string.jpg"
    assert report["with_plugin"][name]["key"] == report["alone"][name]["key"]
    assert not any(key.startswith("mmobs_exif_fallback_total") for key in report["with_plugin"][name]["moved"])


def test_each_feature_not_proven_on_the_release_declines_with_one_line(release: tuple[str, dict[str, Any]]) -> None:
    version, report = release
    for feature, line in DECLINED_LINES.items():
        said = [text for text in report["start_up"] if line in text]
        if unproven(feature, version) is not None:
            assert len(said) == 1 and f"proven from vLLM {FIRST_PROVEN[feature]} on" in said[0], (feature, said)
            assert version in said[0]
    (summary,) = [text for text in report["start_up"] if text.startswith("mmobs (")]
    assert f"counting vLLM {version}'s multimodal fallbacks" in summary
    assert "MultiModalHasher.serialize_item" in summary and "ImageMediaIO.load_bytes" in summary


@pytest.mark.parametrize("version", [v for v in RELEASES if not _tolerant(v)])
def test_with_the_fix_off_the_release_raises_as_before_and_the_fallback_is_counted(
    version: str, plugin_probes: PluginProbes
) -> None:
    report = plugin_probes.report(version, fix=False)
    bad_exif = report["with_plugin"][BAD_EXIF_JPEG]
    assert bad_exif["raised"] == report["alone"][BAD_EXIF_JPEG]["raised"] == "SyntaxError"
    assert bad_exif["moved"][FALLBACK] == 1.0
    assert {name: found.get("raised") for name, found in report["with_plugin"].items()} == {
        name: found.get("raised") for name, found in report["alone"].items()
    }
    assert {name: found.get("key") for name, found in report["with_plugin"].items()} == {
        name: found.get("key") for name, found in report["alone"].items()
    }
