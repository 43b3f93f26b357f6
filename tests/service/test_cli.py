"""The ``mmobs`` command, run as a user runs it: a subprocess."""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import mmobs
from mmobs import BadImageError, key_for_bytes
from mmobs.cli.parser import _HelpFormatter, build_parser
from mmobs.observability.fingerprint import compute_fingerprint
from tests.support import golden
from tests.support.markdown import fenced_blocks

ROOT = Path(__file__).resolve().parents[2]


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


@pytest.mark.parametrize("command", ["hash", "serve", "fingerprint"])
def test_an_unknown_vllm_release_is_refused_naming_the_known_ones(files, command):
    result = run(command, "--vllm-version", "0.24.0", *([str(files["photo.jpg"])] if command == "hash" else []))
    assert result.returncode == 2 and result.stdout == ""
    assert "mmobs does not know how vLLM '0.24.0' keys images; known releases: 0.25.0, 0.25.1," in result.stderr
    assert "0.34.0" in result.stderr


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
    assert lines[1].split() == ["key", "format", "0.33"]
    assert len(lines) == 2 + len(fingerprint.keys)


def test_the_rust_front_ends_keys_and_fingerprint(files: dict[str, Path]) -> None:
    """``--front-end rust``: the key vLLM's Rust front end gives each file, decoded or not, and its fingerprint."""
    paths = [str(path) for path in files.values()]
    keyed = [json.loads(line) for line in run("hash", "--front-end", "rust", "--json", *paths).stdout.splitlines()]
    expected = {}
    for path in paths:
        try:
            expected[path] = key_for_bytes(Path(path).read_bytes(), front_end="rust", verify="decode")
        except BadImageError:
            continue
    assert expected and {line["file"]: line["mm_hash"] for line in keyed if "mm_hash" in line} == expected
    assert {line["front_end"] for line in keyed if "mm_hash" in line} == {"rust"}
    header_only = run("hash", "--front-end", "rust", "--no-decode", paths[0]).stdout.splitlines()
    assert header_only[1].endswith(" front_end=rust") and header_only[0].split()[0] == key_for_bytes(
        Path(paths[0]).read_bytes(), front_end="rust"
    )
    lines = run("fingerprint", "--front-end", "rust", check=True).stdout.splitlines()
    assert lines[0] == compute_fingerprint(front_end="rust").digest and lines[1].split() == ["key", "format", "rust"]


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
            match = re.match(r"mmobs ([\w-]+)", line)
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


def test_inspect_says_the_malformed_exif_jpeg_is_a_broken_input(files):
    """The runbook's rule (MmobsExifFallbackRatioHigh, step 4) on the file the README calls broken EXIF: cause 1."""
    text = run("inspect", str(files["bad-exif-header.jpg"]), check=True).stdout
    assert "  open            ok: 0 tags" in text  # which path raises says little...
    assert "  EXIF block      malformed: SyntaxError: not a TIFF file" in text  # ...the block on its own does
    assert text.endswith("  verdict: the file's EXIF block is malformed: a broken input (the runbook's cause 1)\n")


def _every_reference_input() -> list[tuple[str, bytes]]:
    from scripts import corpus

    inputs = [(case.name, case.payload) for case in corpus.build_corpus() if case.kind == "image"]
    inputs += [(path.name, path.read_bytes()) for path in sorted((ROOT / "mmobs" / "reference").iterdir())]
    inputs += [(path.name, path.read_bytes()) for path in sorted((golden.GOLDEN_DIR / "inputs").iterdir())]
    return inputs


def test_the_runbooks_rule_holds_for_every_reference_input(tmp_path):
    """Every golden, reference and corpus input whose key falls back is broken metadata, and inspect says so.

    The corpus's inputs break EXIF in every container (JPEG, PNG, WebP, TIFF, a PNG's hex text
    profile), so a rule read from which load path raises would call several of them a regression.
    """
    from mmobs.cli.inspect_command import _inspect_file

    verdicts: dict[str, str] = {}
    for name, data in _every_reference_input():
        path = tmp_path / name
        path.write_bytes(data)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            report = _inspect_file(str(path))
        if report.get("exif_fallback"):
            verdicts[name] = report["exif_block"]["state"]
    assert len(verdicts) >= 15
    assert set(verdicts.values()) == {"malformed"}, {n: v for n, v in verdicts.items() if v != "malformed"}
    assert {"bad-exif-header.jpg", "bad-exif-short.jpg", "raw-profile-exif-bad-hex-l.png"} <= set(verdicts)
    assert any(name.endswith(".tif") for name in verdicts)


def test_inspect_calls_a_good_exif_block_well_formed(tmp_path):
    path = tmp_path / "imageid-string.jpg"
    path.write_bytes(golden.input_bytes("imageid-string.jpg"))
    report = json.loads(run("inspect", "--json", str(path), check=True).stdout)
    assert report["exif_block"] == {"state": "well-formed", "tags": 1}
    assert report["verdict"] is None  # its key did not fall back: nothing to diagnose


def test_events_reads_every_format_into_the_same_json_lines(tmp_path):
    log = tmp_path / "server.log"
    log.write_text(
        '{"timestamp": "2026-12-01T08:50:07Z", "level": "warning", "event": "exif_fallback", "kind": "image"}\n'
        "(APIServer pid=7) WARNING 12-01 08:50:07 [instrument.py:154] exif_fallback kind=media_with_bytes "
        'error="not a TIFF file" size=[64,48] request_id=abc\n'
        "(APIServer pid=7) INFO 12-01 08:50:08 [api_server.py:1] Received request chatcmpl-abc: params\n"
        'INFO:     127.0.0.1:5 - "POST /v1/chat/completions HTTP/1.1" 200 OK\n'
    )
    lines = [json.loads(line) for line in run("events", str(log), check=True).stdout.splitlines()]
    assert [line["event"] for line in lines] == [
        "exif_fallback",
        "exif_fallback",
        "Received request chatcmpl-abc: params",
    ]
    assert lines[1] == {
        "timestamp": "12-01 08:50:07", "level": "warning", "event": "exif_fallback", "process": 7,
        "process_name": "APIServer", "file": "instrument.py", "line": 154, "kind": "media_with_bytes",
        "error": "not a TIFF file", "size": [64, 48], "request_id": "abc",
    }  # fmt: skip
    filtered = subprocess.run(
        [sys.executable, "-m", "mmobs.cli", "events", "--event", "exif_fallback"],
        input=log.read_text(), capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    assert [json.loads(line)["kind"] for line in filtered.stdout.splitlines()] == ["image", "media_with_bytes"]


def test_events_stops_quietly_when_its_reader_does_and_names_a_missing_log(tmp_path):
    log = tmp_path / "big.log"
    log.write_text("".join(f'{{"event": "x", "n": {n}}}\n' for n in range(20000)))
    piped = subprocess.run(
        f"{sys.executable} -m mmobs.cli events {log} | head -n 1", shell=True, capture_output=True, text=True,
        timeout=60, executable="/bin/bash",
    )  # fmt: skip
    assert piped.stdout == '{"event": "x", "n": 0}\n' and piped.stderr == ""
    missing = run("events", str(tmp_path / "nope.log"))
    assert missing.returncode == 1
    assert missing.stderr == f"mmobs: {tmp_path / 'nope.log'}: cannot read the log: No such file or directory\n"


def test_vllm_logging_config_is_a_dictconfig_routing_vllm_to_mmobs_json(tmp_path):
    import logging.config

    text = run("vllm-logging-config", check=True).stdout
    assert text == (ROOT / "mmobs" / "vllm" / "logging.json").read_text()
    config = json.loads(text)
    assert config["formatters"]["json"]["()"] == "mmobs.observability.stdlib_events.JSONFormatter"
    assert config["loggers"]["vllm"] == {"handlers": ["json"], "level": "INFO", "propagate": False}
    vllm = logging.getLogger("vllm")
    saved = (vllm.handlers[:], vllm.level, vllm.propagate)
    try:
        logging.config.dictConfig(config)  # what vLLM does with VLLM_LOGGING_CONFIG_PATH
        assert [type(h.formatter).__name__ for h in vllm.handlers] == ["JSONFormatter"]
    finally:
        vllm.handlers, vllm.level, vllm.propagate = saved
