"""Client uuids checked against their content in vLLM's engine core, where no Python API server checks them.

vLLM's engine core keys its encoder cache and its prefix cache's multimodal extra keys by each item's
``MultiModalFeatureSpec.identifier``; ``mm_hash`` keys the processor cache. vLLM's Python front end
makes the identifier from ``mm_hash`` (itself, or behind a LoRA prefix), and checks nothing about
client uuids: :mod:`mmobs.vllm.uuid_checks` does that in its API server. The Rust front end
(``vllm-rs``) has no Python API server, and hands the engine a client's ``uuid`` as the identifier
with ``mm_hash`` the digest of the file's bytes. So the same uuid sent later with another image is
served what the caches hold under it (vLLM issue #55547): if the two images' placeholders differ in
length, vLLM's scheduler fails the request and ``vllm-rs`` answers 500; if they do not, nothing notices.

Here each item whose identifier is not made from its ``mm_hash`` is a client uuid with its content's
digest beside it: the first content a uuid came with is remembered (a bounded LRU,
:class:`~mmobs.vllm.uuid_checks.uuid_check.UuidIndex`), and the same uuid with another ``mm_hash``
is a **conflict**, counted and logged as the API server's are. By default the item is then keyed by
its content: its identifier becomes its ``mm_hash``, exactly what the engine receives for the same
image sent without a uuid, so no cache serves the first image for the second. Refusing is not
offered here: the engine core can refuse a request only by failing it (``FinishReason.ERROR``, as
for a preprocessing error or the scheduler's own size check), which ``vllm-rs`` answers with a 500.
``MMOBS_VLLM_UUID_CONFLICTS=count`` only counts and logs, leaving vLLM's keys.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from mmobs.vllm.uuid_checks.uuid_check import ConflictReporter, UuidIndex, conflicts_acted_on, index_from_environment
from mmobs.vllm.uuid_checks.uuid_metrics import ConflictAction, UuidCheckMetrics


def client_uuid(feature: Any) -> str | None:
    """The item's identifier if a client chose it: neither its ``mm_hash`` nor ``mm_hash`` behind a LoRA prefix."""
    mm_hash = getattr(feature, "mm_hash", None)
    identifier = feature.identifier
    if mm_hash is None or identifier == mm_hash or identifier.endswith(f":{mm_hash}"):
        return None
    return str(identifier)


class EngineUuidCheck(ConflictReporter):
    """The engine core's uuid index, counters and log events; acting on a conflict means keying by content."""

    def __init__(
        self,
        index: UuidIndex | None = None,
        *,
        rekey: bool = True,
        metrics: UuidCheckMetrics | None = None,
        logger: Any = None,
    ) -> None:
        super().__init__(index, metrics, logger)
        self.rekey = rekey

    def check(self, request_id: str, features: Iterable[Any]) -> None:
        """Check a request's ``mm_features`` before vLLM reads them; a conflicting item's identifier is replaced."""
        checked = 0
        for feature in features:
            uuid = client_uuid(feature)
            if uuid is None:
                continue
            checked += 1
            self.metrics.item["checked"].inc()
            content_key = str(feature.mm_hash)
            previous = self.index.remember(uuid, content_key)
            if previous is None:
                continue
            action: ConflictAction = "rekeyed" if self.rekey else "counted"
            self.report(request_id, feature.modality, uuid, previous, content_key, action)
            if self.rekey:
                feature.identifier = content_key
        if checked:
            self.metrics.index_size(len(self.index), self.index.nbytes)


def check_from_environment() -> EngineUuidCheck:
    """The check the switches ask for: the API server's index sizes and conflict switch."""
    return EngineUuidCheck(index_from_environment(), rekey=conflicts_acted_on())
