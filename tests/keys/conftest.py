"""Fixtures of the no-decode key modules (``test_keys_vllm_*.py``): the installed vLLM as the oracle, the ledger."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from mmobs.keys.loader import DEFAULT_MAX_PIXELS
from tests.keys.keys_vllm import LEDGER
from tests.support.vllm_oracle import require_vllm


@pytest.fixture(scope="module")
def vllm() -> Iterator[Any]:
    """vLLM's hasher and loader (``tests.support.vllm_oracle``), and its image module for the loaded-state check."""
    oracle = require_vllm()
    from vllm.multimodal import image as image_module

    # vLLM's pixel limit, aligned with the loader's: without it, a 56-megapixel
    # header in the corpus would have vLLM allocate the whole buffer.
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("VLLM_MAX_IMAGE_PIXELS", str(DEFAULT_MAX_PIXELS))
        assert oracle.envs.VLLM_MAX_IMAGE_PIXELS == DEFAULT_MAX_PIXELS  # read lazily: check it took
        yield oracle.hasher, image_module, oracle.image_media_io, oracle.allowed_formats


@pytest.fixture(scope="module", autouse=True)
def ledger_at_module_start() -> Counter[str]:
    """``LEDGER`` as the module's first test found it: its last test checks what the module added since."""
    return Counter(LEDGER)
