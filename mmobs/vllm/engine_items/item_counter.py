"""Each multimodal item a request brings to vLLM's engine core: what its identifier is, and whether it is re-sent.

The engine core is where both of vLLM's front ends meet: the Python API server and the Rust one
(``vllm-rs``) each hand it an ``EngineCoreRequest`` whose ``mm_features`` carry, per item, its
modality, its identifier (the key its encoder cache and prefix cache use) and its processed tensors,
or ``None`` where the sender knows the engine holds them already. :func:`preprocess_add_request`
wraps the engine core's first look at a request and counts, before vLLM's receiver cache fills the
gaps:

* every item, by modality and by how its identifier was made (:func:`identifier_format`): the
  identifier the encoder cache and the prefix cache use, not ``mm_hash`` (the processor cache's key,
  which differs under the Rust front end for a client's uuid, and under LoRA);
* every item that came with its tensors although the engine core had seen its identifier before,
  and the tensor bytes it carried: the Python front end's sender cache spares the engine those,
  the Rust front end has none.

"Seen before" is a bounded index of identifiers (least recently seen forgotten first,
``MMOBS_VLLM_ENGINE_INDEX_ENTRIES``), so a re-sent item older than the index's memory counts as new.
The last :data:`RECENT_ITEMS` items are kept, as plain facts, for the metrics port's
``/debug/mm-items`` (what the front-end parity command reads).
"""

from __future__ import annotations

import collections
import functools
import hashlib
import logging
import math
import re
import threading
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from mmobs.vllm.cache_drift.drift import BoundedMap
from mmobs.vllm.engine_items.item_metrics import MODALITIES, EngineItemMetrics, KeyFormatLabel, engine_item_metrics
from mmobs.vllm.front_ends import FrontEnd
from mmobs.vllm.startup_log import say

if TYPE_CHECKING:
    from mmobs.vllm.engine_items.uuid_rekey import EngineUuidCheck

INDEX_ENTRIES_ENV = "MMOBS_VLLM_ENGINE_INDEX_ENTRIES"
#: About 200 bytes an entry: some 13 MB at capacity.
DEFAULT_INDEX_ENTRIES = 65_536
#: Items kept for ``/debug/mm-items``.
RECENT_ITEMS = 256
#: An identifier longer than this (a client's uuid) is remembered by its digest and shown cut.
_KEPT_CHARS = 128
_SMALL_TENSOR = 8
_HEX_KEY = re.compile(r"[0-9a-f]{64}")


def identifier_format(identifier: str, front_end: FrontEnd, mm_hash: str | None = None) -> KeyFormatLabel:
    """How an identifier was made, from its shape: a 64-digit blake3 hex digest is the front end's own key.

    vLLM's Python front end keys by content (:func:`mmobs.key_for_bytes`), the Rust one by the file's
    raw bytes (``key_for_bytes(data, front_end="rust")``); anything else is a client's uuid taken as it
    came. A client uuid the Python front end scoped with the request's processor kwargs is hashed there,
    and counts as ``content``. An identifier that is ``mm_hash`` behind a LoRA prefix (vLLM's Python
    front end with ``enable_tower_connector_lora``) counts as ``mm_hash`` would.
    """
    if mm_hash is not None and identifier.endswith(f":{mm_hash}"):
        identifier = mm_hash
    if _HEX_KEY.fullmatch(identifier) is None:
        return "client_uuid"
    return "raw_bytes" if front_end == "rust" else "content"


@dataclass(frozen=True, slots=True)
class ItemSeen:
    """One item as the engine core received it (for ``/debug/mm-items``)."""

    request_id: str
    modality: str
    #: The key the encoder cache and the prefix cache use.
    identifier: str
    #: The processor cache's key (the content's digest under the Rust front end), where it differs.
    mm_hash: str | None
    key_format: str
    offset: int | None
    length: int | None
    with_data: bool
    resent: bool
    tensor_bytes: int
    shapes: dict[str, list[int]]
    #: The values of the item's small tensors (Qwen2-VL's ``image_grid_thw``: how the image was turned and tiled).
    values: dict[str, list[Any]]

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _index_key(identifier: str) -> str:
    """What the index remembers an identifier by: itself, or the digest of one longer than a key (a client's uuid)."""
    return identifier if len(identifier) <= _KEPT_CHARS else hashlib.sha256(identifier.encode()).hexdigest()


class ItemCounter:
    """Counts each request's items into :class:`EngineItemMetrics`; one per engine core."""

    def __init__(self, front_end: FrontEnd, capacity: int, metrics: EngineItemMetrics | None = None) -> None:
        self.front_end = front_end
        self.metrics = engine_item_metrics() if metrics is None else metrics
        self.metrics.serving(front_end)
        #: The identifiers seen, least recently seen forgotten first (``capacity`` 0 remembers none).
        self.index: BoundedMap[str, None] = BoundedMap(capacity)
        self.recent: collections.deque[ItemSeen] = collections.deque(maxlen=RECENT_ITEMS)
        self._lock = threading.Lock()

    def count(self, request_id: str, features: Iterable[Any]) -> None:
        """Count a request's ``mm_features`` (vLLM's ``MultiModalFeatureSpec`` records)."""
        with self._lock:
            for feature in features:
                self.recent.append(self._count_one(request_id, feature))
            self.metrics.index_entries.set(len(self.index))

    def _count_one(self, request_id: str, feature: Any) -> ItemSeen:
        modality = feature.modality if feature.modality in MODALITIES else "other"
        identifier = str(feature.identifier)
        mm_hash = getattr(feature, "mm_hash", None)
        key_format = identifier_format(identifier, self.front_end, mm_hash)
        self.metrics.item[modality, key_format].inc()
        data = feature.data
        resent = self.index.put(_index_key(identifier), None) and data is not None
        shapes, values, nbytes = tensor_facts(data)
        if resent:
            self.metrics.resent[modality].inc()
            self.metrics.resent_size[modality].inc(nbytes)
        position = getattr(feature, "mm_position", None)
        return ItemSeen(
            request_id=str(request_id)[:_KEPT_CHARS],
            modality=modality,
            identifier=identifier[:_KEPT_CHARS],
            mm_hash=None if mm_hash is None or mm_hash == identifier else str(mm_hash)[:_KEPT_CHARS],
            key_format=key_format,
            offset=getattr(position, "offset", None),
            length=getattr(position, "length", None),
            with_data=data is not None,
            resent=resent,
            tensor_bytes=nbytes,
            shapes=shapes,
            values=values,
        )

    def recent_items(self) -> list[dict[str, Any]]:
        with self._lock:
            return [item.as_dict() for item in self.recent]


def tensor_facts(data: Any) -> tuple[dict[str, list[int]], dict[str, list[Any]], int]:
    """The shape of each field of a ``MultiModalKwargsItem``, the values of its small ones (at most
    :data:`_SMALL_TENSOR` elements), and the bytes of all its tensors (nothing for None)."""
    shapes: dict[str, list[int]] = {}
    values: dict[str, list[Any]] = {}
    if data is None or not hasattr(data, "items"):
        return shapes, values, 0
    total = 0
    for name, element in data.items():
        value = getattr(element, "data", element)
        shape = getattr(value, "shape", None)
        if shape is not None:
            shapes[str(name)] = [int(size) for size in shape]
            if 0 < math.prod(shapes[str(name)]) <= _SMALL_TENSOR and hasattr(value, "tolist"):
                values[str(name)] = value.tolist()
        total += _nbytes(value)
    return shapes, values, total


def _nbytes(value: Any) -> int:
    if isinstance(value, (list, tuple)):
        return sum(_nbytes(part) for part in value)
    if hasattr(value, "element_size") and hasattr(value, "numel"):  # a torch tensor
        return int(value.numel()) * int(value.element_size())
    return int(getattr(value, "nbytes", 0))


#: The engine core's counter, where the feature is on (the metrics port's ``/debug/mm-items`` reads it).
current: ItemCounter | None = None


def preprocess_add_request(
    original: Callable[..., Any], counter: ItemCounter, uuid_check: EngineUuidCheck | None = None
) -> Callable[..., Any]:
    """vLLM's ``EngineCore.preprocess_add_request``, the request's client uuids checked (``uuid_check``: the Rust
    front end's) and its items counted first, as the caches will key them; never raises into vLLM."""

    failed = threading.Event()

    @functools.wraps(original)
    def preprocess(self: Any, request: Any, *args: Any, **kwargs: Any) -> Any:
        features = getattr(request, "mm_features", None)
        if features:
            request_id = str(getattr(request, "request_id", ""))
            try:
                if uuid_check is not None:
                    uuid_check.check(request_id, features)
                counter.count(request_id, features)
            except Exception as error:  # noqa: BLE001 - counting must never cost vLLM a request
                if not failed.is_set():  # said once: the counts are incomplete from here on
                    failed.set()
                    say(logging.WARNING, "mmobs: a request's multimodal items could not be counted (%s: %s); "
                        "the engine's item counts are incomplete", type(error).__name__, error)  # fmt: skip
        return original(self, request, *args, **kwargs)

    preprocess.uuid_check = uuid_check  # type: ignore[attr-defined]  # what the start-up line reports
    return preprocess
