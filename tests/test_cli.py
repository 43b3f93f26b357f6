"""The ``mmobs`` command, run as a user runs it: a subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import mmobs
from mmobs.fingerprint import compute_fingerprint
from tests import golden


def run(*args: str, check: bool = False) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mmobs.cli", *args], capture_output=True, text=True, timeout=120, check=check
    )


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    paths = {}
    for name in ("bad-exif-header.jpg", "photo.jpg", "palette.png", "bad-exif-chunk.png"):
        paths[name] = tmp_path / name
        paths[name].write_bytes(golden.input_bytes(name))
    paths["notes.txt"] = tmp_path / "notes.txt"
    paths["notes.txt"].write_text("not an image\n")
    return paths


def test_version():
    result = run("--version", check=True)
    assert result.stdout.strip() == f"mmobs {mmobs.__version__}"


def test_hash_json_gives_golden_keys_and_fallback_reasons(files):
    result = run("hash", "--json", str(files["bad-exif-header.jpg"]), str(files["photo.jpg"]), check=True)
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [line["mm_hash"] for line in lines] == [
        golden.case("media-bad-exif-header.jpg")["expected"],
        golden.case("media-photo.jpg")["expected"],
    ]
    bad, good = lines
    assert bad["exif_fallback"] is True and bad["key_source"] == "original_bytes"
    assert bad["exif_error"].startswith("SyntaxError: not a TIFF file")
    assert (bad["format"], bad["mode"], bad["width"], bad["height"]) == ("JPEG", "RGB", 64, 48)
    assert good["exif_fallback"] is False and good["exif_error"] is None
    # Events go to stderr, so stdout is clean JSON lines.
    assert "exif_fallback" in result.stderr


def test_hash_text_output(files):
    result = run("hash", "--algorithm", "sha256", str(files["palette.png"]), check=True)
    key = result.stdout.split()[0]
    with mmobs.observing(None):
        expected = mmobs.MultiModalHasher.hash_kwargs(
            "sha256", image=mmobs.ImageMediaIO().load_bytes(golden.input_bytes("palette.png"))
        )
    assert key == expected
    assert "key_source=original_bytes exif_fallback=false" in result.stdout
    assert "format=PNG mode=RGB size=" in result.stdout


def test_hash_undecodable_file_exits_non_zero_and_keeps_going(files, tmp_path):
    missing = tmp_path / "missing.jpg"
    result = run("hash", str(files["notes.txt"]), str(missing), str(files["photo.jpg"]))
    assert result.returncode == 1
    assert f"mmobs: {files['notes.txt']}: unidentified: the bytes are not an image in an accepted format (JPEG, PNG" in result.stderr
    assert f"mmobs: {missing}: unreadable: cannot read the file" in result.stderr
    assert golden.case("media-photo.jpg")["expected"] in result.stdout


def test_hash_rejects_unknown_mode(files):
    result = run("hash", "--image-mode", "XYZ", str(files["photo.jpg"]))
    assert result.returncode == 2 and "unknown image_mode 'XYZ'" in result.stderr


def test_inspect_explains_each_load_path(files):
    report = json.loads(run("inspect", "--json", str(files["bad-exif-header.jpg"]), check=True).stdout)
    paths = report["paths"]
    assert paths["open"]["raises"] is None  # a fresh open tolerates it...
    assert paths["loader"]["raises"].startswith("SyntaxError")  # ...the loaded image does not
    assert report["key_source"] == "original_bytes" and report["exif_fallback"] is True
    assert report["exif_segment_bytes"] > 0

    text = run("inspect", str(files["bad-exif-chunk.png"]), check=True).stdout
    assert "open            getexif() raises SyntaxError" in text
    assert "key: from original_bytes" in text


def test_inspect_undecodable_file(files):
    result = run("inspect", str(files["notes.txt"]))
    assert result.returncode == 1 and "cannot identify image file" in result.stderr


def test_fingerprint_text_matches_library():
    lines = run("fingerprint", check=True).stdout.splitlines()
    fingerprint = compute_fingerprint()
    assert lines[0] == fingerprint.digest
    assert len(lines) == 1 + len(fingerprint.keys)


@pytest.mark.parametrize("args", [["serve", "--workers", "0"], ["serve", "--port", "http"], ["hash"], ["nonsense"]])
def test_usage_errors_exit_2(args):
    result = run(*args)
    assert result.returncode == 2 and "usage: mmobs" in result.stderr
