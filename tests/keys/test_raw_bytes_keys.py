"""``key_for_bytes(data, front_end="rust")``: the identifier vLLM's Rust front end gives an image.

Held here to its definition (blake3 of the file's bytes) on every golden input and corpus image, and to the
options it refuses; held to the running ``vllm-rs`` itself, on the golden inputs and one corpus image of each
class, in ``tests/vllm/test_vllm_rust_front_end.py``.
"""

from __future__ import annotations

import blake3
import pytest

from mmobs import BadImageError, InvalidOptionError, key_for_bytes
from mmobs.observability.fingerprint import compute_fingerprint
from scripts.corpus import Case, build_corpus
from tests.support import golden

INPUTS = sorted(path.name for path in (golden.GOLDEN_DIR / "inputs").iterdir())


@pytest.mark.parametrize("name", INPUTS)
def test_the_rust_key_is_the_digest_of_the_bytes_and_not_the_python_key(name: str) -> None:
    data = golden.input_bytes(name)
    rust = key_for_bytes(data, front_end="rust")
    assert rust == blake3.blake3(data).hexdigest()
    assert rust != key_for_bytes(data)
    assert key_for_bytes(bytearray(data), front_end="rust", verify="decode") == rust


def _key_or_refusal(data: bytes, **options: str) -> str:
    try:
        return key_for_bytes(data, **options)
    except BadImageError as error:
        return f"refused: {error.reason}"


@pytest.mark.parametrize("case", [c for c in build_corpus() if c.kind == "image"], ids=lambda c: c.name)
def test_every_corpus_image_is_the_digest_of_its_bytes_or_refused_as_the_python_key_refuses_it(case: Case) -> None:
    python, rust = _key_or_refusal(case.payload), _key_or_refusal(case.payload, front_end="rust")
    assert rust == (python if python.startswith("refused: ") else blake3.blake3(case.payload).hexdigest())


def test_the_rust_key_refuses_what_the_python_key_refuses() -> None:
    with pytest.raises(BadImageError) as python:
        key_for_bytes(b"not an image")
    with pytest.raises(BadImageError) as rust:
        key_for_bytes(b"not an image", front_end="rust")
    assert rust.value.reason == python.value.reason


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"front_end": "go"}, "front_end must be one of python, rust, not 'go'"),
        ({"front_end": "rust", "algorithm": "sha256"}, "blake3 only"),
        ({"front_end": "rust", "model_id": "m"}, "request keywords (model_id) are not part of its key"),
        ({"front_end": "rust", "verify": "pixels"}, "verify must be one of"),
    ],
)
def test_an_option_the_front_end_cannot_honour_is_refused_by_name(options: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidOptionError, match=message.replace("(", r"\(").replace(")", r"\)")):
        key_for_bytes(golden.input_bytes("photo.jpg"), **options)  # type: ignore[arg-type]


def test_the_fingerprint_names_the_rust_key_format_and_differs_from_every_python_one() -> None:
    rust = compute_fingerprint(front_end="rust")
    assert rust.key_format == "rust" and rust == compute_fingerprint("0.30.0", front_end="rust")
    assert set(rust.keys) == {f"bytes:{name}" for name in (
        "bad-exif-header.jpg", "short-ifd.jpg", "bad-exif-chunk.png", "orientation-6.jpg", "palette.png",
        "gray16.png", "rgba.png", "cmyk.jpg")}  # fmt: skip
    assert rust.digest not in {compute_fingerprint(version).digest for version in (None, "0.30.0", "0.25.0")}
    with pytest.raises(InvalidOptionError):
        compute_fingerprint(front_end="ruby")  # type: ignore[arg-type]
