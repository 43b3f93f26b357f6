"""The golden cache-key vectors of ``../shared/golden``: byte-for-byte vLLM keys.

The expected digests are read where they live, through ``tests/support/golden.py``;
none is copied into the repository. A case that stops matching after a Pillow
or NumPy upgrade is cache-key drift, not a test to loosen.
"""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
from blake3 import blake3

from mmobs import MultiModalHasher
from tests.support import golden

pytestmark = pytest.mark.usefixtures("silent_observer")

CASE_IDS = [case["id"] for case in golden.cases()]


def _kwargs(case: dict[str, Any]) -> dict[str, Any]:
    """Fresh values for the case (a poisoned image may raise on its first EXIF read only)."""
    return golden.build(case["kwargs"])


def test_vectors_are_present_and_exercise_the_fallback() -> None:
    """The suite is not vacuous: there are cases, ids are unique, and some hit the fallback."""
    assert len(CASE_IDS) >= 20
    assert len(set(CASE_IDS)) == len(CASE_IDS)
    assert any(case["exif_fallbacks"] > 0 for case in golden.cases())


@pytest.mark.parametrize("case_id", CASE_IDS)
def test_golden_key(case_id: str, record: Any) -> None:
    """hash_kwargs reproduces vLLM's key, and the EXIF fallback ran exactly as often."""
    case = golden.case(case_id)
    kwargs = _kwargs(case)
    with record() as rec:
        key = MultiModalHasher.hash_kwargs(case["algorithm"], **kwargs)
    assert key == case["expected"]
    assert len(rec.fallbacks) == case["exif_fallbacks"], [(type(e.error).__name__, str(e.error)) for e in rec.fallbacks]
    assert len(rec.hashed_calls) == 1
    assert rec.hashed_calls[0].algorithm == case["algorithm"]


@pytest.mark.parametrize("algorithm", ["sha256", "blake3"])
@pytest.mark.parametrize("case_id", CASE_IDS)
def test_chunk_stream_is_what_hash_kwargs_digests(case_id: str, algorithm: str) -> None:
    """The public chunk stream, hashed by hand, gives hash_kwargs' key (no hidden bytes)."""
    case = golden.case(case_id)
    kwargs = _kwargs(case)
    stream = b"".join(
        bytes(chunk) for name in sorted(kwargs) for chunk in MultiModalHasher.iter_item_to_bytes(name, kwargs[name])
    )
    digest = hashlib.sha256(stream) if algorithm == "sha256" else blake3(stream)
    assert digest.hexdigest() == MultiModalHasher.hash_kwargs(algorithm, **_kwargs(case))
