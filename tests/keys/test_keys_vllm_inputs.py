"""Proof that the no-decode key path (``mmobs.keys.from_bytes``) gives the real vLLM's key, input by input.

The oracle is vLLM 0.33.0 itself: ``MultiModalHasher.hash_kwargs(alg,
image=ImageMediaIO(image_mode, rgba_background_color=...).load_bytes(data))``.
Here: every golden input and every image case of the corpus (``scripts/make_corpus.py``),
for several image modes and background colours. The other modules of the proof:
a Hypothesis run over formats, modes, transparency, animation, EXIF orientations,
malformed EXIF and damaged bytes (``test_keys_vllm_property.py``), and the header's
branches and what it cannot decide, case by case (``test_keys_vllm_cases.py``).
Every input must satisfy (``compare`` in ``keys_vllm.py``):

* when vLLM accepts the image and mmobs keys it, the keys are equal;
* when mmobs keys it from the header alone (``key_path="header"``), the
  header's decision (convert or not) is the one the image vLLM's loader ends
  up with implies, for every ``image_mode`` the header decides (a stronger
  check: it catches a wrong decision the tested modes happen not to expose);
* otherwise mmobs decodes (``header_decoded``) or refuses: never a wrong key.

``LEDGER`` counts what was compared; the module's last test prints what its own tests
added and checks that they compared enough keys to mean something. vLLM is required
(``tests.support.vllm_oracle.require_vllm``): without it these tests skip with a
reason, or fail under ``MMOBS_REQUIRE_VLLM=1`` (CI).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from mmobs.keys.loader import ImageMediaIO
from tests.keys.keys_vllm import COLORS, LEDGER, MARKS, MODES, compare, ledger_since, load_make_corpus, vllm_formats
from tests.support import golden

pytestmark = MARKS


def _golden_inputs() -> list[Path]:
    return sorted((golden.GOLDEN_DIR / "inputs").iterdir())


def _corpus_images() -> list[Any]:
    return [case for case in load_make_corpus().build_corpus() if case.kind == "image"]


@pytest.mark.parametrize("path", _golden_inputs(), ids=lambda p: p.name)
def test_golden_inputs_key_as_vllm(vllm: Any, path: Path) -> None:
    data = path.read_bytes()
    outcomes = Counter()
    for image_mode in MODES:
        for color in COLORS:
            outcomes[compare(vllm, data, image_mode, color, label=path.name)] += 1
            # The same through key_image, with vLLM's allow-list, for the header-state check.
            compare(
                vllm,
                data,
                image_mode,
                color,
                io=ImageMediaIO(image_mode, color, formats=vllm_formats(vllm)),
                label=path.name,
            )
    for algorithm in ("sha256", "sha512"):
        compare(vllm, data, "RGB", COLORS[0], algorithm=algorithm, label=path.name)
    LEDGER["golden_inputs"] += 1
    assert outcomes["equal"] == len(MODES) * len(COLORS), outcomes  # vLLM accepts every golden input


CORPUS_IMAGES = _corpus_images()


@pytest.mark.parametrize("case", CORPUS_IMAGES, ids=lambda c: c.name)
def test_corpus_images_key_as_vllm(vllm: Any, case: Any) -> None:
    data = bytes(case.payload)
    for image_mode in MODES:
        for color in COLORS:
            compare(vllm, data, image_mode, color, label=case.name)
        compare(
            vllm,
            data,
            image_mode,
            COLORS[2],
            io=ImageMediaIO(image_mode, COLORS[2], formats=vllm_formats(vllm)),
            label=case.name,
        )
    LEDGER["corpus_images"] += 1


# -- the property run ------------------------------------------------------------------


def test_the_inputs_compared_enough(vllm: Any, ledger_at_module_start: Counter[str]) -> None:
    """Every golden input and corpus image was compared, and enough keys equal vLLM's (a difference fails where it is)."""
    ledger = ledger_since(ledger_at_module_start)
    print("\nno-decode key vs vLLM, golden and corpus inputs:", dict(sorted(ledger.items())))
    # Every golden input; the corpus's images less what a -k may leave out (the Pillow-range runs leave the costly).
    assert ledger["golden_inputs"] == len(_golden_inputs()) and ledger["corpus_images"] >= 1, ledger
    assert ledger["equal"] >= 1000, ledger
    assert ledger["path_header"] >= 100 and ledger["path_header_decoded"] >= 1, ledger
    assert ledger["header_decisions_checked"] >= 1000, ledger
