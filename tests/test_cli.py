"""The ``mmobs`` command, run as a user runs it: a subprocess."""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import mmobs
from mmobs.cli import _HelpFormatter, build_parser
from mmobs.observability.fingerprint import compute_fingerprint
from tests import golden
from tests.markdown import fenced_blocks

ROOT = Path(__file__).resolve().parents[1]


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
    assert (
        f"mmobs: {files['notes.txt']}: unidentified: the bytes are not an image in an accepted format (JPEG, PNG"
        in result.stderr
    )
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


def test_inspect_undecodable_file_is_one_clean_line(files):
    result = run("inspect", str(files["notes.txt"]))
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr == f"mmobs: {files['notes.txt']}: unidentified: not an image Pillow can identify\n"

    as_json = run("inspect", "--json", str(ROOT / "README.md"))
    assert as_json.returncode == 1
    assert json.loads(as_json.stdout) == {
        "file": str(ROOT / "README.md"),
        "error": {"reason": "unidentified", "message": "not an image Pillow can identify"},
    }


def test_fingerprint_text_matches_library():
    lines = run("fingerprint", check=True).stdout.splitlines()
    fingerprint = compute_fingerprint()
    assert lines[0] == fingerprint.digest
    assert len(lines) == 1 + len(fingerprint.keys)


@pytest.mark.parametrize("args", [["serve", "--workers", "0"], ["serve", "--port", "http"], ["hash"], ["nonsense"]])
def test_usage_errors_exit_2(args):
    result = run(*args)
    assert result.returncode == 2 and "usage: mmobs" in result.stderr


# -- help, README synopsis, set-up errors -----------------------------------------------------------


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    (subparsers,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(subparsers.choices)


def _options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions if a.option_strings and not isinstance(a, argparse._HelpAction)]


@pytest.mark.parametrize("name", ["hash", "inspect", "fingerprint", "serve"])
def test_every_option_has_help_and_its_default(name):
    parser = _subcommands()[name]
    formatter = _HelpFormatter(parser.prog)
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        assert action.help, f"mmobs {name} {action.option_strings or action.dest}: no help"
        if action.option_strings:
            assert "(default: " in formatter._get_help_string(action), f"mmobs {name} {action.option_strings}"
    text = " ".join(run(name, "--help", check=True).stdout.split())
    assert text.count("(default: ") == len(_options(parser))


def _readme_synopsis() -> dict[str, set[str]]:
    """Per subcommand, the options the synopsis blocks of docs/service.md (``mmobs NAME`` and its indented lines) name."""
    named: dict[str, set[str]] = {}
    for block in fenced_blocks((ROOT / "docs" / "service.md").read_text()):
        current = None
        for line in block.lines:
            match = re.match(r"mmobs (\w+)", line)
            if match:
                current = match.group(1)
            elif not line.startswith(" "):
                current = None
            if current:
                named.setdefault(current, set()).update(re.findall(r"--[a-z][a-z-]*", line.split("#")[0]))
    return named


def test_readme_synopsis_lists_every_option_of_every_subcommand():
    synopsis = _readme_synopsis()
    for name, parser in _subcommands().items():
        options = {o for a in _options(parser) for o in a.option_strings}
        assert synopsis.get(name) == options, (name, sorted(options ^ synopsis.get(name, set())))


def test_serve_without_the_serve_extra_is_one_line_naming_it():
    code = "import sys; sys.modules['uvicorn'] = None; from mmobs.cli import main; sys.exit(main(['serve']))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr == "mmobs: 'mmobs serve' needs uvicorn, which is not installed: pip install 'mmobs[serve]'\n"


def test_a_missing_golden_folder_stops_the_suite_naming_where_to_put_it(tmp_path):
    missing = tmp_path / "no-golden-here"
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_surface.py"],
        capture_output=True, text=True, timeout=120, cwd=ROOT, env={**os.environ, "MMOBS_GOLDEN_DIR": str(missing)},
    )  # fmt: skip
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert "../shared/golden" in output and "MMOBS_GOLDEN_DIR" in output and str(missing) in output
    assert "Traceback" not in output and "FileNotFoundError" not in output
