"""What drifted between vLLM's two multimodal caches: counted, logged, and remembered in bounded memory.

vLLM's API server (P0) keeps a metadata-only shadow of the engine's (P1)
processor cache and sends an item by hash alone when it believes P1 holds
it. When P1 does not, EngineCore fails the request and names the hashes
(``mm_cache_miss_hashes``); P0's own sender cache can also lose an item
between its lookup and its update within one request. This module is where
both are reported (:mod:`mmobs.vllm.cache_drift.cache_hooks` calls it from inside vLLM):

* the ``mmobs_vllm_mm_cache_*`` counters (:mod:`mmobs.vllm.cache_drift.cache_metrics`);
* one ``mm_cache_drift`` log event per drifted item, naming the request, the
  modality and the hash (its first :data:`HASH_CHARS` characters: enough to
  grep, not a payload);
* a bounded memory of what drifted recently: the requests whose failure is
  drift (so the answer can say so, or the request be resubmitted) and the
  hashes (so an entry that drifts again and again is counted as a re-drift).

No vLLM import here: it is plain bookkeeping, testable without vLLM.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

from mmobs.observability.log_fields import safe_text
from mmobs.observability.metrics import made_once
from mmobs.vllm.cache_drift.cache_metrics import CacheDriftMetrics, cache_drift_metrics, engine_label

#: How much of a hash a log line carries.
HASH_CHARS = 16
#: Recently drifted hashes remembered for the re-drift count; requests and modalities remembered.
RECENT_HASHES = 1024
RECENT_REQUESTS = 1024
RECENT_MODALITIES = 4096

Outcome = Literal["healed", "failed"]
_K = TypeVar("_K")
_V = TypeVar("_V")


def short_hash(mm_hash: str) -> str:
    return safe_text(mm_hash[:HASH_CHARS], HASH_CHARS)


class BoundedMap(Generic[_K, _V]):
    """A dict that forgets its oldest entries past ``capacity`` (thread-safe: vLLM calls from two threads)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._data: OrderedDict[_K, _V] = OrderedDict()
        self._lock = threading.Lock()

    def put(self, key: _K, value: _V) -> bool:
        """Store ``value``; whether ``key`` was already there (its age is refreshed)."""
        with self._lock:
            seen = key in self._data
            self._data[key] = value
            self._data.move_to_end(key)
            while len(self._data) > self.capacity:
                self._data.popitem(last=False)
            return seen

    def get(self, key: _K) -> _V | None:
        with self._lock:
            return self._data.get(key)

    def pop(self, key: _K) -> _V | None:
        with self._lock:
            return self._data.pop(key, None)

    def __len__(self) -> int:
        return len(self._data)


@dataclass(frozen=True)
class DriftFailure:
    """A request the engine failed by drift: the hashes it did not hold, and which engine said so."""

    request_id: str
    hashes: tuple[str, ...]
    engine: str


class DriftBook:
    """The counters, the log events and the bounded memory of one API server process."""

    def __init__(self, metrics: CacheDriftMetrics | None = None, logger: Any = None) -> None:
        self.metrics = metrics if metrics is not None else cache_drift_metrics()
        self._logger = logger
        self.recent_hashes: BoundedMap[str, None] = BoundedMap(RECENT_HASHES)
        self.failures: BoundedMap[str, DriftFailure] = BoundedMap(RECENT_REQUESTS)
        self.modalities: BoundedMap[str, str] = BoundedMap(RECENT_MODALITIES)

    @property
    def log(self) -> Any:
        if self._logger is None:
            from mmobs.observability.logs import mmobs_logger

            self._logger = mmobs_logger()
        return self._logger

    def note_modality(self, mm_hash: str, modality: str | None) -> None:
        """An item P0 cached or sent by hash alone: remember its modality, for the event if it drifts."""
        if modality:
            self.modalities.put(mm_hash, modality)

    def engine_missed(self, request_id: str, hashes: list[str], engine_index: object) -> DriftFailure:
        """EngineCore failed ``request_id`` because it did not hold ``hashes`` (P0 invalidates them next)."""
        engine = engine_label(engine_index)
        items, redrifts = self.metrics.engine(engine)
        failure = DriftFailure(request_id, tuple(hashes), engine)
        self.failures.put(request_id, failure)
        parent, _, index = request_id.rpartition("_")
        if parent and index.isdigit():  # a sub-request (the Responses API's ``resp_..._0``): its request's too
            self.failures.put(parent, failure)
        for mm_hash in hashes:
            again = self.recent_hashes.put(mm_hash, None)
            items.inc()
            if again:
                redrifts.inc()
            self._event(request_id, mm_hash, "engine", engine=engine, redrift=again)
        return failure

    def sender_missed(self, request_id: str | None, mm_hash: str, modality: str | None) -> None:
        """P0's sender cache lost ``mm_hash`` between its lookup and its update (vLLM would assert)."""
        self.metrics.sender_misses.inc()
        again = self.recent_hashes.put(mm_hash, None)
        if again:
            self.metrics.sender_redrifts.inc()
        self._event(request_id, mm_hash, "sender", modality=modality, redrift=again)

    def failure_of(self, request_id: str) -> DriftFailure | None:
        """The drift that failed ``request_id``, if that is what failed it."""
        return self.failures.get(request_id)

    def forget(self, request_id: str) -> None:
        self.failures.pop(request_id)

    def resolved(self, request_id: str | None, outcome: Outcome, attempts: int) -> None:
        """A request drift failed was answered: after a resubmission (healed) or with an error (failed)."""
        self.metrics.outcome[outcome].inc()
        level = self.log.info if outcome == "healed" else self.log.warning
        level("mm_cache_drift_request", request_id=safe_text(request_id or "", 128), outcome=outcome, attempts=attempts)

    def rolled_back(self, request_id: str | None, count: int, reason: str) -> None:
        """``count`` items a refused request had put into P0 were taken out again."""
        if count:
            self.metrics.rolled_back_items.inc(count)
            self.log.info(
                "mm_cache_rollback", request_id=safe_text(request_id or "", 128), items=count, reason=safe_text(reason)
            )

    def _event(
        self,
        request_id: str | None,
        mm_hash: str,
        where: str,
        *,
        engine: str | None = None,
        modality: str | None = None,
        redrift: bool,
    ) -> None:
        fields: dict[str, Any] = {
            "request_id": safe_text(request_id or "", 128),
            "modality": safe_text(modality or self.modalities.get(mm_hash) or "unknown", 32),
            "mm_hash": short_hash(mm_hash),
            "where": where,
            "redrift": redrift,
        }
        if engine is not None:
            fields["engine"] = engine
        self.log.warning("mm_cache_drift", **fields)


@made_once
def drift_book() -> DriftBook:
    """The API server's one :class:`DriftBook`, made on first use (its counters register then)."""
    return DriftBook()
