"""The plugin's own environment switches, read when vLLM loads it: named once, for the plugin and its plans.

Each feature's finer switches live with the feature (``MMOBS_VLLM_DECODE_FREE_HITS``,
``MMOBS_VLLM_MM_CACHE_HEAL``, ``MMOBS_VLLM_UUID_CONFLICTS``); these are the plugin's as a whole and its
key and loader hooks'. ``mmobs/vllm/__init__.py`` lists them all for the operator.
"""

from __future__ import annotations

import os

#: ``MMOBS_VLLM_PLUGIN=0`` turns the plugin off.
PLUGIN_ENV = "MMOBS_VLLM_PLUGIN"
#: ``MMOBS_VLLM_FAST_KEYS=1`` keys plain PIL images through mmobs's pixel path.
FAST_KEYS_ENV = "MMOBS_VLLM_FAST_KEYS"
#: ``MMOBS_VLLM_GUARD=1`` runs mmobs's structural checks before vLLM decodes an image.
GUARD_ENV = "MMOBS_VLLM_GUARD"
#: ``MMOBS_VLLM_EXIF_FIX=0`` keeps the bare ImageID read of vLLM 0.25 to 0.30 (a broken EXIF block is a 500),
#: still counting each fallback the fix would have taken.
EXIF_FIX_ENV = "MMOBS_VLLM_EXIF_FIX"


def enabled(variable: str, default: str = "0") -> bool:
    """Whether switch ``variable`` is ``1`` (``default`` when it is unset); any other value is off."""
    return os.environ.get(variable, default).strip() == "1"
