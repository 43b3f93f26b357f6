"""Which of the plugin's features each vLLM release is proven to carry: written once, as data.

The plugin looks vLLM's attributes up before it replaces any (:mod:`mmobs.vllm.shape`), and checks
on probes that each replacement returns what vLLM's own returns. A release can pass those checks
and still differ where a probe does not look (what a processor cache holds, how a uuid reaches the
hasher), so a feature also declines, by name, on a release older than the first one a test proves
it on. A newer release than any here keeps every feature its shape allows: the next release is
checked the day it appears (``docs/vllm.md``, Versions), not refused.

The key formats of each release are :mod:`mmobs.keys.releases`'s.
"""

from __future__ import annotations

import re

__all__ = ["FIRST_PROVEN", "unproven"]

#: Each feature, and the first vLLM release on which it is proven (the tests are named in
#: ``docs/vllm.md``'s release table). ``keys``, the hasher's hooks with vLLM PR #56576's fix where the
#: release lacks it, and ``loader``, the loader's refusals and transpose failures, hold from 0.25.0.
FIRST_PROVEN: dict[str, str] = {
    "keys": "0.25.0",
    "loader": "0.25.0",
    "context": "0.32.0",
    "decode_free_hits": "0.32.0",
    "cache_drift": "0.32.0",
    "uuid_checks": "0.32.0",
    "front_end": "0.32.0",
}


def unproven(feature: str, vllm_version: str) -> str | None:
    """Why ``feature`` is not carried on ``vllm_version`` (older than its first proven release), else None.

    A version that does not start with a release number (a source build) is left to the shape checks.
    """
    running, first = _release(vllm_version), _release(FIRST_PROVEN[feature])
    if running is None or first is None or running >= first:
        return None
    return f"proven from vLLM {FIRST_PROVEN[feature]} on, and this is {vllm_version}"


def _release(version: str) -> tuple[int, ...] | None:
    match = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", version)
    return None if match is None else tuple(int(part or 0) for part in match.groups())
