"""A bounded, deterministic slice of ``scripts/fuzz.py`` for CI (well under 40 s).

The long runs (atheris and the seeded mutator, millions of executions) are
documented in ``docs/reliability.md``. Here the same harness runs a fixed
number of mutants from a fixed seed, plus a derandomized Hypothesis search
over hand-built EXIF directories, and checks that the harness would notice
the failures it exists to catch (an escaping exception, a fallback nobody
reported, a fallback nobody counted), so a green run is not a vacuous one.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import random
import struct
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [
    pytest.mark.filterwarnings("ignore::UserWarning"),
    pytest.mark.filterwarnings("ignore::PIL.Image.DecompressionBombWarning"),
]


def _load(name: str) -> Any:
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


_load("make_corpus")
fuzz = _load("fuzz")

#: The CI slice: fixed seed, fixed count. Raise RUNS locally for a longer look.
SEED = 20260601
RUNS = 12000


@pytest.fixture
def harness() -> Any:
    return fuzz.Harness()


def exif_input(container: str, tiff: bytes) -> bytes:
    return bytes([fuzz.EXIF_FLAG | fuzz.CONTAINERS.index(container)]) + tiff


BAD_HEADER = b"XXXX\x00\x00\x00\x08"


# -- the slice -------------------------------------------------------------------------------


def test_fixed_seed_slice_finds_nothing() -> None:
    stats = fuzz.run_random(SEED, RUNS, timeout=10.0)
    findings = "\n\n".join(f["traceback"] for f in stats.findings[:3])
    assert stats.findings == [], f"{len(stats.findings)} finding(s):\n{findings}"
    assert stats.executions == RUNS
    # Not vacuous: the slice reached the fallback, the transpose failure, every
    # refusal the decoders produce, many decoded modes, and every container.
    assert stats.fallback_items > 50
    assert {"SyntaxError", "struct.error"} <= set(stats.fallback_types)
    assert {"SyntaxError", "struct.error"} <= set(stats.transpose_types)
    assert {"corrupt", "unidentified", "truncated", "too_many_pixels"} <= set(stats.refused)
    assert len(stats.modes) >= 8, stats.modes
    assert set(stats.kinds) == {"file", *fuzz.CONTAINERS}
    assert stats.loaded > RUNS // 4


def test_mutator_is_deterministic() -> None:
    pool = fuzz.seed_inputs()

    def mutants(seed: int) -> list[bytes]:
        rng = random.Random(seed)
        return [fuzz.mutate(rng.choice(pool), rng, pool) for _ in range(300)]

    assert mutants(7) == mutants(7)
    assert mutants(7) != mutants(8)


def test_structure_aware_mutations_rewrite_tiff_fields() -> None:
    tiff = bytearray(fuzz.M.make_corpus.tiff_bytes([fuzz.M.make_corpus.entry(0x0112, 3, 1)]))
    rng = random.Random(3)
    changed = 0
    for _ in range(200):
        copy = bytearray(tiff)
        assert fuzz.tiff_mutation(copy, rng)
        changed += copy != tiff
    assert changed > 150
    assert not fuzz.tiff_mutation(bytearray(b"no tiff here"), rng)


# -- hand-built EXIF directories, searched by Hypothesis -------------------------------------

_entry = st.tuples(
    st.one_of(st.sampled_from(fuzz.TAGS), st.integers(0, 0xFFFF)),
    st.integers(0, 20),
    st.one_of(st.sampled_from((0, 1, 2, 4, 16, 37, 0xFFFF, 0xFFFFFFFF)), st.integers(0, 64)),
    st.binary(min_size=4, max_size=4),
)


@settings(
    derandomize=True,
    max_examples=300,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    container=st.sampled_from(fuzz.CONTAINERS),
    endian=st.sampled_from("<>"),
    entries=st.lists(_entry, max_size=8),
    declared=st.one_of(st.none(), st.integers(0, 0xFFFF)),
    ifd_offset=st.one_of(st.just(8), st.integers(0, 0xFFFFFFFF)),
    next_ifd=st.one_of(st.just(0), st.just(8), st.integers(0, 0xFFFFFFFF)),
    tail=st.binary(max_size=64),
)
def test_generated_exif_directories_load_and_hash_cleanly(
    container: str, endian: str, entries: list, declared: int | None, ifd_offset: int, next_ifd: int, tail: bytes
) -> None:
    head = (b"II" if endian == "<" else b"MM") + struct.pack(endian + "HL", 42, ifd_offset)
    table = b"".join(struct.pack(endian + "HHL", tag, typ, count) + value for tag, typ, count, value in entries)
    count = len(entries) if declared is None else declared
    tiff = head + struct.pack(endian + "H", count) + table + struct.pack(endian + "L", next_ifd) + tail
    harness = _shared_harness()
    harness.run(exif_input(container, tiff))  # raises on any broken property


_HARNESS: list[Any] = []


def _shared_harness() -> Any:
    if not _HARNESS:
        _HARNESS.append(fuzz.Harness())
    return _HARNESS[0]


# -- the harness notices what it must notice -------------------------------------------------


def test_known_fallback_inputs_pass_and_are_counted(harness: Any) -> None:
    assert harness.run(exif_input("jpeg", BAD_HEADER)).startswith("fallback")
    assert harness.run(exif_input("png-gray", BAD_HEADER)).startswith("fallback")
    assert harness.run(exif_input("png-raw-profile", b"not even a tiff")).startswith("fallback")
    assert harness.stats.fallback_items == 3
    assert harness._counted_fallbacks() >= 3


def test_harness_flags_an_exception_escaping_the_loader(harness: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(self: Any, opened: Any, data: bytes) -> Any:
        raise OSError("decoder exploded")

    monkeypatch.setattr(fuzz.M.ImageMediaIO, "_decode_opened", broken)
    with pytest.raises(OSError, match="decoder exploded"):
        harness.run(exif_input("jpeg", BAD_HEADER))


def test_harness_flags_a_fallback_nobody_reported(harness: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import mmobs.keys.hashing
    import mmobs.keys.writer

    def silent(observer: Any, image: Any, kind: Any, fallback: Any, original_bytes: Any) -> None:
        with contextlib.suppress(Exception):  # the bug the harness must catch: swallowed, not reported
            image.getexif().get(mmobs.keys.writer.IMAGE_ID_TAG)

    # The one tolerant read, for every key path: the writer's walk and the one-image fast path.
    for module in (mmobs.keys.writer, mmobs.keys.hashing):
        monkeypatch.setattr(module, "read_image_id", silent)
    with pytest.raises(fuzz.PropertyViolation, match="raised 1 time"):
        harness.run(exif_input("jpeg", BAD_HEADER))


def test_harness_flags_a_fallback_nobody_counted(harness: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(harness.instrumentation, "exif_fallback", lambda event: None)
    with pytest.raises(fuzz.PropertyViolation, match="counted 0"):
        harness.run(exif_input("jpeg", BAD_HEADER))


def test_harness_flags_a_pixel_key_that_drifts(harness: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import fuzzing.harness

    real = fuzzing.harness.asarray_key
    monkeypatch.setattr(fuzzing.harness, "asarray_key", lambda image: real(image)[::-1])
    with pytest.raises(fuzz.PropertyViolation, match="pixel key"):
        harness.run(exif_input("jpeg", BAD_HEADER))


# -- the command line --------------------------------------------------------------------------


def test_cli_random_run_and_reproduce(tmp_path: Path) -> None:
    pil_logger = logging.getLogger("PIL")
    level = pil_logger.level
    try:
        _run_cli(tmp_path)
    finally:
        pil_logger.setLevel(level)  # the CLI quiets Pillow's logger for long runs


def _run_cli(tmp_path: Path) -> None:
    assert (
        fuzz.main(
            ["--engine", "random", "--seed", "5", "--runs", "400", "--workdir", str(tmp_path), "--report-every", "0"]
        )
        == 0
    )
    stats = (tmp_path / "random-seed5-stats.json").read_text()
    assert '"executions": 400' in stats
    saved = tmp_path / "one.input"
    saved.write_bytes(exif_input("jpeg", BAD_HEADER))
    assert fuzz.main(["--reproduce", str(saved), "--workdir", str(tmp_path)]) == 0
    image = tmp_path / "one.jpg"
    image.write_bytes(fuzz.materialize(exif_input("jpeg", BAD_HEADER))[1])
    assert fuzz.main(["--reproduce", str(image), "--image", "--workdir", str(tmp_path)]) == 0
