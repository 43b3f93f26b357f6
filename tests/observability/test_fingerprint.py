"""The fleet fingerprint (``mmobs.observability.fingerprint``): stable, per key format, following the keying release."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from prometheus_client import generate_latest

import mmobs
from mmobs import MultiModalHasher
from mmobs.errors import InvalidOptionError
from mmobs.events import observing
from mmobs.observability.fingerprint import compute_fingerprint, key_with_release, keying_release, process_fingerprint
from mmobs.observability.instrument import Instrumentation
from mmobs.releases import NEWEST, RELEASES, key_format


def test_fingerprint_is_stable_across_processes():
    here = compute_fingerprint()
    for _ in range(2):
        result = subprocess.run(
            [sys.executable, "-m", "mmobs.cli", "fingerprint", "--json"], capture_output=True, text=True, check=True
        )
        other = json.loads(result.stdout)
        assert other["fingerprint"] == here.digest
        assert other["keys"] == here.keys
    assert len(here.digest) == 16
    assert not any(key.startswith("error:") for key in here.keys.values())


def test_each_key_format_has_its_own_fingerprint_and_releases_of_one_format_share_it():
    by_release = {release: compute_fingerprint(release) for release in RELEASES}
    for release, fingerprint in by_release.items():
        assert fingerprint.key_format == key_format(release).name
        assert not any(key.startswith("error:") for key in fingerprint.keys.values()), release
    digests = {fingerprint.key_format: fingerprint.digest for fingerprint in by_release.values()}
    assert len(set(digests.values())) == len(digests) == 5  # one per format, and only one
    assert compute_fingerprint() == by_release[NEWEST]
    # 0.27 and 0.30 key every reference image alike (they differ on video tensors): the format's name tells them apart.
    assert by_release["0.27.1"].keys == by_release["0.30.0"].keys and digests["0.27"] != digests["0.30"]
    assert by_release["0.30.0"].keys != by_release["0.31.0"].keys  # framing: every key differs


def test_the_process_fingerprint_follows_the_release_it_keys_as(registry):
    try:
        key_with_release("0.30.0")
        with pytest.raises(InvalidOptionError, match="known releases"):
            key_with_release("0.24.0")
        assert keying_release() == "0.30.0"  # a refused release changes nothing
        with observing(Instrumentation(registry)):
            MultiModalHasher.hash_kwargs("blake3", x=1)
        labels = {
            "fingerprint": compute_fingerprint("0.30.0").digest,
            "key_format": "0.30",
            "mmobs": mmobs.__version__,
            "pillow": __import__("PIL").__version__,
            "numpy": __import__("numpy").__version__,
        }
        assert registry.get_sample_value("mmobs_hasher_info", labels) == 1.0
    finally:
        key_with_release(None)
    assert process_fingerprint() == compute_fingerprint()


def test_the_fingerprint_command_prints_a_releases_fingerprint():
    result = subprocess.run(
        [sys.executable, "-m", "mmobs.cli", "fingerprint", "--json", "--vllm-version", "0.27.1"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    printed = json.loads(result.stdout)
    expected = compute_fingerprint("0.27.1")
    assert (printed["fingerprint"], printed["key_format"], printed["keys"]) == (expected.digest, "0.27", expected.keys)


def test_fingerprint_changes_when_a_reference_key_changes(monkeypatch):
    baseline = compute_fingerprint()
    original = mmobs.observability.fingerprint._reference_bytes

    def altered(name: str) -> bytes:
        data = original(name)
        return data + b"\x00" if name == "rgba.png" else data

    monkeypatch.setattr(mmobs.observability.fingerprint, "_reference_bytes", altered)
    changed = compute_fingerprint()
    assert changed.digest != baseline.digest
    differing = {name for name in baseline.keys if baseline.keys[name] != changed.keys[name]}
    assert differing == {"media:rgba.png"}


def test_fingerprint_moves_no_traffic_counter(registry, instr):
    compute_fingerprint()
    text = generate_latest(registry).decode()
    for line in text.splitlines():
        if line.startswith(("mmobs_exif_fallback_total", "mmobs_media_keys_total", "mmobs_hashed_bytes_total")):
            assert line.endswith(" 0.0"), line


def test_fingerprint_covers_malformed_exif_paths():
    keys = compute_fingerprint().keys
    assert {"media:bad-exif-header.jpg", "open:bad-exif-chunk.png", "media:palette.png", "media:gray16.png"} <= set(
        keys
    )


def test_hasher_info_set_on_first_hash(registry):
    instrumentation = Instrumentation(registry)
    assert registry.get_sample_value("mmobs_hasher_info", None) is None
    with observing(instrumentation):
        MultiModalHasher.hash_kwargs("blake3", x=1)
    digest = compute_fingerprint().digest
    labels = {
        "fingerprint": digest,
        "key_format": "0.33",
        "mmobs": mmobs.__version__,
        "pillow": __import__("PIL").__version__,
        "numpy": __import__("numpy").__version__,
    }
    assert registry.get_sample_value("mmobs_hasher_info", labels) == 1.0
