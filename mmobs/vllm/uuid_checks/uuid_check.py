"""Client media uuids checked against their content, inside vLLM's API server.

vLLM lets a content part carry a client-chosen ``uuid``. With no hash factors
(the request's processor and media kwargs) that string becomes the item's
key as it is; with factors, the key of the string and the factors. Either
way the content is never looked at: a uuid an earlier image used gets that
image's features from vLLM's caches, for another client's request. vLLM
computes the item's keys in ``ProcessorInputs.get_mm_hashes``; the plugin
wraps it (API server only) and, for a request that carries uuids:

* keys every uuid item that came with its data by content too: vLLM's own
  ``get_mm_hashes`` once more on the same inputs with those uuids left out,
  so the content key is exactly the one vLLM would have used, with the same
  model and factors, at the cost of keying the items (for a loaded image, a
  hash over its original bytes), under no observer (no media key counted
  twice, no EXIF event twice);
* remembers vLLM's key for the item (the uuid, scoped as vLLM scopes it)
  with that content key, in a bounded LRU (:class:`UuidIndex`);
* calls the same key with other content a **conflict**: counted, logged
  (``mm_uuid_conflict``), and by default refused with a ``ValueError``, which
  vLLM answers with a 400 (``MMOBS_VLLM_UUID_CONFLICTS=count`` only counts).

Items sent by uuid alone (their data left out) have nothing to check and
are counted as such. Requests without a uuid cost one attribute test. The
first content a key was seen with stays remembered (a conflict does not
replace it): that is what vLLM's caches hold under that key.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from blake3 import blake3

from mmobs.events import NULL_OBSERVER, observing
from mmobs.observability import tracing
from mmobs.observability.log_fields import safe_text
from mmobs.vllm.cache_drift.cache_attempt import request_id_now
from mmobs.vllm.startup_log import say, whole_number_env
from mmobs.vllm.uuid_checks.uuid_metrics import ConflictAction, UuidCheckMetrics, uuid_check_metrics

#: ``refuse`` (the default): a conflict is a 400; ``count``: counted and logged, answered as vLLM answers it.
CONFLICTS_ENV = "MMOBS_VLLM_UUID_CONFLICTS"
INDEX_ENTRIES_ENV = "MMOBS_VLLM_UUID_INDEX_ENTRIES"
INDEX_BYTES_ENV = "MMOBS_VLLM_UUID_INDEX_BYTES"
DEFAULT_ENTRIES = 65536
DEFAULT_BYTES = 32 * 1024 * 1024
#: One entry, as tracemalloc measures it in CPython 3.11: two 16-byte digests, a 16-character
#: string, a tuple and the ordered dict's node (tests/vllm/test_vllm_uuid_check.py holds it).
ENTRY_BYTES = 328
#: Characters of a uuid shown in the log and the error (a client's uuid may be any length).
UUID_CHARS = 64
KEY_CHARS = 16


class UuidConflictError(ValueError):
    """A uuid vLLM would key as an earlier item's, with other content (vLLM answers a ``ValueError`` with a 400)."""


def _digest(text: str) -> bytes:
    return blake3(text.encode("utf-8", "surrogatepass")).digest(16)


class UuidIndex:
    """vLLM's key of a uuid item -> the content it was first sent with: a thread-safe LRU of fixed-size entries.

    The key is stored as a 16-byte digest, the content as its digest and the
    first :data:`KEY_CHARS` characters of its key (for the log), so a client's
    long uuid costs no more than a short one; the capacity is the smaller of
    ``max_entries`` and ``max_bytes // ENTRY_BYTES``.
    """

    def __init__(self, max_entries: int = DEFAULT_ENTRIES, max_bytes: int = DEFAULT_BYTES) -> None:
        self.capacity = max(0, min(max_entries, max_bytes // ENTRY_BYTES))
        self._entries: OrderedDict[bytes, tuple[bytes, str]] = OrderedDict()
        self._lock = threading.Lock()

    def remember(self, vllm_key: str, content_key: str) -> str | None:
        """Remember ``content_key`` for ``vllm_key``; if it was seen with another, that one (shortened, for the log)."""
        key, content = _digest(vllm_key), _digest(content_key)
        with self._lock:
            previous = self._entries.get(key)
            if previous is not None:
                self._entries.move_to_end(key)
                return None if previous[0] == content else previous[1]
            if self.capacity:
                self._entries[key] = (content, content_key[:KEY_CHARS])
                while len(self._entries) > self.capacity:
                    self._entries.popitem(last=False)
            return None

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def nbytes(self) -> int:
        return len(self._entries) * ENTRY_BYTES


class ConflictReporter:
    """What both places that check uuids share: the index of first contents, the counters and the log event.

    The API server's check (:class:`UuidChecker`) and the engine core's
    (:class:`~mmobs.vllm.engine_items.uuid_rekey.EngineUuidCheck`) report a conflict alike, so one alert,
    one dashboard panel and one runbook read both.
    """

    def __init__(self, index: UuidIndex | None, metrics: UuidCheckMetrics | None, logger: Any) -> None:
        self.index = index if index is not None else UuidIndex()
        self.metrics = metrics if metrics is not None else uuid_check_metrics()
        self._logger = logger

    @property
    def log(self) -> Any:
        if self._logger is None:
            from mmobs.observability.logs import mmobs_logger

            self._logger = mmobs_logger()
        return self._logger

    def report(
        self, request_id: str, modality: str, uuid: str, previous: str, content_key: str, action: ConflictAction
    ) -> str:
        """Count one conflict by ``action`` and log it as ``mm_uuid_conflict``; the uuid as shown (cut, made safe)."""
        self.metrics.conflict[action].inc()
        shown = safe_text(uuid, UUID_CHARS)
        self.log.warning(
            "mm_uuid_conflict",
            request_id=safe_text(request_id, 128),
            modality=safe_text(modality, 32),
            uuid=shown,
            previous_content_key=previous,
            content_key=content_key[:KEY_CHARS],
            action=action,
        )
        return shown


class UuidChecker(ConflictReporter):
    """The index, the counters, the log events and the switch of one API server process."""

    def __init__(
        self,
        index: UuidIndex | None = None,
        *,
        refuse: bool = True,
        metrics: UuidCheckMetrics | None = None,
        logger: Any = None,
    ) -> None:
        super().__init__(index, metrics, logger)
        self.refuse = refuse
        self._warned: set[str] = set()

    def check(self, inputs: Any, hashes: dict[str, list[str]], rehash: Callable[[Any], dict[str, list[str]]]) -> None:
        """Check the uuid items of ``inputs`` (vLLM's ``ProcessorInputs``), whose keys vLLM computed as ``hashes``."""
        uuids: dict[str, list[str | None]] = {m: list(u) for m, u in (inputs.mm_uuid_items or {}).items()}
        with_data: list[tuple[str, int, str]] = []
        for modality, modality_uuids in uuids.items():
            items = inputs.mm_data_items.get(modality)
            data = items.get_all_items_for_hash() if items is not None else []
            for index, uuid in enumerate(modality_uuids):
                if uuid is None:
                    continue
                if index < len(data) and data[index] is not None:
                    with_data.append((modality, index, uuid))
                    modality_uuids[index] = None  # keyed by content in the second pass
                else:
                    self.metrics.item["uuid_only"].inc()
        if not with_data:
            return
        # A conflict's event goes on this span; the items' content keys are its children.
        with tracing.span("mmobs.uuid_check", {"mmobs.items": len(with_data)}) as live:
            with observing(NULL_OBSERVER):
                content = rehash(dataclasses.replace(inputs, mm_uuid_items=uuids))
            refusal: UuidConflictError | None = None
            conflicts = 0
            for modality, index, uuid in with_data:
                self.metrics.item["checked"].inc()
                previous = self.index.remember(hashes[modality][index], content[modality][index])
                if previous is not None:
                    conflicts += 1
                    error = self._conflict(modality, uuid, previous, content[modality][index])
                    refusal = refusal or error
            self.metrics.index_size(len(self.index), self.index.nbytes)
            if live is not None:
                live.set_attribute("mmobs.conflicts", conflicts)
            if refusal is not None:  # every item counted and logged first; the request refused once
                raise refusal

    def could_not_check(self, error: Exception) -> None:
        """The check itself failed (vLLM's keys stand, the request goes on): one warning per exception type."""
        kind = type(error).__name__
        if kind not in self._warned:
            self._warned.add(kind)
            say(logging.WARNING, "mmobs: a client media uuid could not be checked (%s: %s)", kind, safe_text(error))

    def _conflict(self, modality: str, uuid: str, previous: str, content_key: str) -> UuidConflictError | None:
        """Count and log one conflict; the error to refuse the request with (``None`` when only counting)."""
        action: ConflictAction = "refused" if self.refuse else "counted"
        shown = self.report(request_id_now() or "", modality, uuid, previous, content_key, action)
        if not self.refuse:
            return None
        return UuidConflictError(
            f"mm_uuid_conflict: the {modality} uuid {shown!r} was sent before with other content (content key "
            f"{previous}, this one {content_key[:KEY_CHARS]}), and the server would answer with the "
            f"earlier {modality}'s features. Give each distinct {modality} a uuid of its own, or send it without one."
        )


def get_mm_hashes(original: Callable[..., dict[str, list[str]]], checker: UuidChecker) -> Callable[..., Any]:
    """``ProcessorInputs.get_mm_hashes``: vLLM's keys, returned as they are, once the uuid items are checked."""

    @functools.wraps(original)
    def get_mm_hashes(self: Any, model_id: str, hash_algorithm: Any) -> dict[str, list[str]]:
        hashes = original(self, model_id, hash_algorithm)
        if self.mm_uuid_items:
            try:
                checker.check(self, hashes, lambda inputs: original(inputs, model_id, hash_algorithm))
            except UuidConflictError:
                raise
            except Exception as error:  # noqa: BLE001 - a check that cannot run must not fail vLLM's request
                checker.could_not_check(error)
        return hashes

    get_mm_hashes.checker = checker  # type: ignore[attr-defined]  # what the plugin's start-up line reports
    return get_mm_hashes


def conflicts_acted_on() -> bool:
    """``MMOBS_VLLM_UUID_CONFLICTS``: ``refuse`` (the default: acted on) or ``count``; anything else acts, with a warning.

    Acting on a conflict is a 400 in the API server and keying the item by its content in the engine core.
    """
    raw = os.environ.get(CONFLICTS_ENV, "refuse").strip().lower()
    if raw not in ("refuse", "count"):
        say(logging.WARNING, "mmobs: %s=%r is neither refuse nor count; refusing conflicts", CONFLICTS_ENV, raw)
    return raw != "count"


def index_from_environment() -> UuidIndex:
    """The index ``MMOBS_VLLM_UUID_INDEX_ENTRIES`` and ``MMOBS_VLLM_UUID_INDEX_BYTES`` ask for."""
    return UuidIndex(
        whole_number_env(INDEX_ENTRIES_ENV, DEFAULT_ENTRIES), whole_number_env(INDEX_BYTES_ENV, DEFAULT_BYTES)
    )


def checker_from_environment() -> UuidChecker:
    """The checker the switches ask for (read when vLLM loads the plugin)."""
    return UuidChecker(index_from_environment(), refuse=conflicts_acted_on())
