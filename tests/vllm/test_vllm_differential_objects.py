"""Differential tests, objects: vLLM's keys for the golden recipes, and mmobs's for vLLM's own objects.

Against the installed vLLM (``tests/support/vllm_oracle.py``; CI installs 0.33.0 and
forbids skipping):

* vLLM's keys for the golden vectors' recipes equal ``vectors.json``;
* vLLM's own ``MediaWithBytes`` objects keyed by mmobs (duck typing);
* the deliberate differences: inputs vLLM has no deterministic key for (it
  raises, or keys a memory address), which mmobs keys;
* the divergences the property run (``test_vllm_differential_property.py``)
  once found, pinned as plain cases.

Input files, plain and through each loader: ``test_vllm_differential_files.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pytest

from mmobs import MultiModalHasher
from tests.support import golden
from tests.support.vllm_oracle import NoKey, Oracle, build_golden_for_vllm, deterministic_key, quiet_vllm_hasher
from tests.vllm.differential import ALGORITHMS, LOADERS, MARKS, outcome

pytestmark = MARKS


# =============================================================================
# The golden vectors are vLLM's keys
# =============================================================================


@pytest.mark.parametrize("case_id", [case["id"] for case in golden.cases()])
def test_vllm_reproduces_golden_vector(oracle: Oracle, case_id: str) -> None:
    """vLLM, given each golden recipe built with its own loader and classes, gives ``expected``."""
    case = golden.case(case_id)
    kwargs = build_golden_for_vllm(oracle, case["kwargs"])
    assert oracle.key(case["algorithm"], **kwargs) == case["expected"]


# =============================================================================
# vLLM's own MediaWithBytes keyed by mmobs (duck typing)
# =============================================================================


def _vllm_media_cases() -> dict[str, Callable[[Oracle], Any]]:
    cases: dict[str, Callable[[Oracle], Any]] = {}
    for path in sorted((golden.GOLDEN_DIR / "inputs").iterdir()):
        for loader in ("rgb", "keep"):
            cases[f"{path.name}:{loader}"] = lambda o, p=path, opts=LOADERS[loader]: o.load(p.read_bytes(), **opts)
    frames = np.arange(2 * 4 * 4 * 3, dtype=np.uint8).reshape(2, 4, 4, 3)
    cases["video-ndarray-frames"] = lambda o: o.media_with_bytes(frames, b"\x01" * 1000)
    cases["video-ndarray-original-bytes"] = lambda o: o.media_with_bytes(frames, b"\x01" * 10)

    def tensor_frames(o: Oracle, original: bytes) -> Any:
        import torch

        return o.media_with_bytes(torch.from_numpy(frames.copy()), original)

    cases["video-tensor-frames"] = lambda o: tensor_frames(o, b"\x01" * 1000)
    cases["video-tensor-original-bytes"] = lambda o: tensor_frames(o, b"\x01" * 10)
    # vLLM pickles a MediaWithBytes holding anything else (its own object, class path included).
    cases["other-media-str"] = lambda o: o.media_with_bytes("not media", b"\x01" * 10)
    return cases


VLLM_MEDIA_CASES = _vllm_media_cases()


@pytest.mark.parametrize("case_id", list(VLLM_MEDIA_CASES))
def test_mmobs_keys_vllm_media_objects(oracle: Oracle, case_id: str) -> None:
    """mmobs accepts the objects vLLM's loader produced and keys them as vLLM does."""
    make = VLLM_MEDIA_CASES[case_id]
    expected, actual = {}, {}
    with quiet_vllm_hasher():
        for algorithm in ALGORITHMS:
            vllm_key = deterministic_key(oracle, algorithm, lambda: {"media": make(oracle)})
            assert not isinstance(vllm_key, NoKey), vllm_key.reason
            expected[algorithm] = vllm_key
            actual[algorithm] = MultiModalHasher.hash_kwargs(algorithm, media=make(oracle))
    assert actual == expected


# =============================================================================
# Deliberate differences: where vLLM raises or keys a memory address, mmobs keys
# =============================================================================


@dataclass(frozen=True)
class Deliberate:
    """An input vLLM has no deterministic key for, and mmobs keys."""

    make: Callable[[], Any]
    vllm_does: Literal["raises", "keys an address"]
    algorithms: tuple[str, ...] = ALGORITHMS


def _tensor_requiring_grad() -> Any:
    import torch

    return torch.arange(4.0, requires_grad=True)


DELIBERATE_CASES: dict[str, Deliberate] = {
    # np.array(v).view(np.uint8) is refused for arrays of references (TypeError).
    "object-ndarray": Deliberate(lambda: np.array([1, "a", None], dtype=object), "raises"),
    "object-ndarray-frames": Deliberate(lambda: np.array([[b"x"]], dtype=object), "raises"),
    # np.array(big_int) is an object array: its tobytes() is the int object's address.
    "int-beyond-64-bits": Deliberate(lambda: int("9" * 30), "keys an address"),
    "negative-int-beyond-64-bits": Deliberate(lambda: -int("9" * 30), "keys an address"),
    # The digest's update() refuses a non-contiguous buffer (BufferError).
    "noncontiguous-memoryview": Deliberate(lambda: memoryview(bytes(range(16)))[::3], "raises"),
    "2d-noncontiguous-memoryview": Deliberate(lambda: memoryview(np.arange(12, dtype="<i2").reshape(3, 4).T), "raises"),
    # blake3's update() takes only byte-format buffers of at least one dimension
    # ("buffer contents are not compatible with u8", "shape is null"); hashlib takes any.
    "memoryview-of-int16-blake3": Deliberate(lambda: memoryview(np.arange(3, dtype="<i2")), "raises", ("blake3",)),
    "memoryview-of-bool-blake3": Deliberate(lambda: memoryview(np.array([True, False])), "raises", ("blake3",)),
    "0d-memoryview-blake3": Deliberate(lambda: memoryview(np.array(7, dtype=np.uint8)), "raises", ("blake3",)),
    # tensor.cpu().numpy() without detach() raises for a tensor that requires grad.
    "tensor-requires-grad": Deliberate(_tensor_requiring_grad, "raises"),
}


@pytest.mark.parametrize("case_id", list(DELIBERATE_CASES))
def test_deliberate_difference(oracle: Oracle, case_id: str) -> None:
    """vLLM has no deterministic key for these; mmobs keys them, deterministically.

    These inputs are therefore excluded from the property run's strategies.
    If this fails on the vLLM side, vLLM changed: widen the property run.
    """
    case = DELIBERATE_CASES[case_id]
    for algorithm in case.algorithms:
        vllm_key = deterministic_key(oracle, algorithm, lambda: {"x": case.make()})
        assert isinstance(vllm_key, NoKey), f"vLLM now keys {case_id} deterministically: include it in the property run"
        expected_reason = "vLLM raised" if case.vllm_does == "raises" else "vLLM gave two keys"
        assert vllm_key.reason.startswith(expected_reason), vllm_key
        held = [case.make(), case.make()]  # both alive: an address could not repeat
        keys = {MultiModalHasher.hash_kwargs(algorithm, x=value) for value in held}
        assert len(keys) == 1, keys


# =============================================================================
# Divergences the property run found, pinned as plain cases
# =============================================================================

#: name -> (fresh input, the algorithms vLLM keys it with). The property run found mmobs
#: raising TypeError on each ("memoryview: cannot cast view with zeros in shape or strides",
#: fixed since, these are its regression cases): a C-contiguous
#: memoryview of two or more dimensions, one of length 0; vLLM keys it as the empty byte
#: string (blake3 takes byte formats only, hashlib any).
FOUND_CASES: dict[str, tuple[Callable[[], Any], tuple[str, ...]]] = {
    "memoryview-u8-shape-0x3": (lambda: memoryview(np.zeros((0, 3), np.uint8)), ALGORITHMS),
    "memoryview-i8-shape-2x0": (lambda: memoryview(np.zeros((2, 0), np.int8)), ALGORITHMS),
    "memoryview-f8-shape-3x0": (lambda: memoryview(np.zeros((3, 0))), ("sha256", "sha512")),
}


@pytest.mark.parametrize("case_id", list(FOUND_CASES))
def test_found_divergence(oracle: Oracle, case_id: str) -> None:
    """Each input the property run once shrank to: mmobs's key is vLLM's."""
    make, algorithms = FOUND_CASES[case_id]
    expected, actual = {}, {}
    for algorithm in algorithms:
        vllm_key = deterministic_key(oracle, algorithm, lambda: {"x": make()})
        assert not isinstance(vllm_key, NoKey), vllm_key.reason
        expected[algorithm] = vllm_key
        actual[algorithm] = outcome(lambda alg=algorithm: MultiModalHasher.hash_kwargs(alg, x=make()))
    assert actual == expected
