"""mmobs inside an unmodified vLLM: a general plugin and a middleware preset.

Installing mmobs into a vLLM environment is all it takes: vLLM loads the entry
point ``mmobs = "mmobs.vllm:register"`` (group ``vllm.general_plugins``) in
each of its processes, and :func:`register` makes vLLM's multimodal path
report what it swallows, with keys unchanged (:mod:`mmobs.vllm.plugin`).
``vllm serve --middleware mmobs.vllm.Middleware`` adds request ids and
request metrics on vLLM's own ``/metrics`` (:mod:`mmobs.vllm.middleware`).

Environment switches (read when vLLM loads the plugin):

* ``MMOBS_VLLM_PLUGIN=0``: do nothing.
* ``MMOBS_VLLM_GUARD=1``: run mmobs's structural checks (:mod:`mmobs.keys.guard`)
  before vLLM decodes an image; a refusal is the ``ValueError`` vLLM answers
  with a 400, counted in ``mmobs_bad_images_total{reason="too_costly"}``.
* ``MMOBS_VLLM_FAST_KEYS=1``: key plain PIL images through mmobs's zero-copy
  pixel path (the same keys, proven by the differential tests).
* ``MMOBS_VLLM_DECODE_FREE_HITS=0``: decode every image, as vLLM does; by
  default the API server does not decode again bytes it decoded before whose
  key its processor cache holds (:mod:`mmobs.vllm.decode_free_hits.decode_skip`); the index of
  those decodes is bounded by ``MMOBS_VLLM_DECODED_INDEX_ENTRIES`` and
  ``MMOBS_VLLM_DECODED_INDEX_BYTES``.
* ``MMOBS_VLLM_UUID_CONFLICTS=count``: only count and log a client media uuid that
  vLLM would key as an earlier item's, with other content; by default such an item
  is refused with a 400 (:mod:`mmobs.vllm.uuid_checks.uuid_check`); the uuids remembered are
  bounded by ``MMOBS_VLLM_UUID_INDEX_ENTRIES`` and ``MMOBS_VLLM_UUID_INDEX_BYTES``.
* ``MMOBS_VLLM_MM_CACHE_HEAL=0``: only count vLLM's multimodal cache drift
  (``mmobs_vllm_mm_cache_*``); by default mmobs also rolls back the sender cache
  after a refused request, resubmits a drift-failed chat completion once and
  answers what it cannot resubmit with a 503 (:mod:`mmobs.vllm.cache_drift.cache_heal`,
  ``docs/vllm-cache-drift.md``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mmobs.vllm.plugin import register

if TYPE_CHECKING:
    from mmobs.vllm.middleware import Middleware as Middleware

__all__ = ["Middleware", "register"]


def __getattr__(name: str) -> Any:
    # The middleware needs Starlette; vLLM's engine processes load the plugin without it.
    if name == "Middleware":
        from mmobs.vllm.middleware import Middleware

        return Middleware
    raise AttributeError(f"module 'mmobs.vllm' has no attribute {name!r}")
