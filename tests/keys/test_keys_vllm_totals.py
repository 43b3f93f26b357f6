"""What the no-decode key modules (``test_keys_vllm_*.py``) compared with the real vLLM, in total.

``LEDGER`` (``keys_vllm.py``) counts every comparison; the test here prints it and
checks the run compared enough keys to mean something. Its module's name sorts
after the other ``test_keys_vllm_*`` modules, so it runs once they have; run
alone (or without the golden and corpus inputs), it skips.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.keys.keys_vllm import LEDGER, MARKS
from tests.keys.test_keys_vllm_cases import DECODE_CASES

pytestmark = MARKS


def test_ledger_compared_enough(vllm: Any) -> None:
    """The run compared enough keys, all of them equal (a difference fails where it is found)."""
    print("\nno-decode key vs vLLM:", dict(sorted(LEDGER.items())))
    if not LEDGER["golden_inputs"] or not LEDGER["corpus_images"]:
        pytest.skip("run with the other test_keys_vllm_* modules to check the totals")
    assert LEDGER["equal"] >= 1000, LEDGER
    assert LEDGER["path_header"] >= 100 and LEDGER["path_header_decoded"] >= 20, LEDGER
    assert LEDGER["header_decisions_checked"] >= 1000, LEDGER
    assert LEDGER["decode_case_decoded"] + LEDGER["decode_case_refused"] == len(DECODE_CASES), LEDGER
