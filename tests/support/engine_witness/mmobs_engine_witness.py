"""A vLLM general plugin of the tests' own: what vLLM's scheduler received and what Pillow decoded, as JSON lines.

The tests' oracle for what a running vLLM did, sharing no code with mmobs:

* ``kind: "item"``, one line per multimodal item ``Scheduler.add_request`` receives: the ``Request``
  the engine core built (after its preprocessing, mmobs's wrapper included), each of its
  ``mm_features`` with the ``identifier`` the encoder cache and the prefix cache's extra keys use and
  the ``mm_hash`` the processor cache uses;
* ``kind: "decode"``, with ``MMOBS_TEST_DECODE_WITNESS=1``, one line per image Pillow decodes in any of
  vLLM's processes (its pixels read from the file: ``ImageFile.load`` entered with none yet), with the
  process id, format and size; and ``kind: "video_open"``, one line per container OpenCV opens
  (``cv2.VideoCapture`` made: vLLM's OpenCV decoder makes one per decode), with the process id, and
  ``kind: "video_frames"`` once that capture is dropped, with the frames read from it (``grab()`` calls).

A test server puts this folder on ``PYTHONPATH`` (vLLM finds the entry point in the ``.dist-info``
beside this file) and names the file to append to in ``MMOBS_TEST_ENGINE_WITNESS``; unset, the
plugin does nothing.
"""

from __future__ import annotations

import functools
import json
import os
import threading
from typing import Any

PATH_ENV = "MMOBS_TEST_ENGINE_WITNESS"
#: ``1``: Pillow's decodes are recorded too (a file write each, so only where a test reads them).
DECODES_ENV = "MMOBS_TEST_DECODE_WITNESS"


def _tensor_bytes(item: Any) -> int:
    """The bytes of an item's tensors (``MultiModalKwargsItem``: field name -> element with ``.data``)."""
    if item is None:
        return 0
    total = 0
    for element in item.values():
        tensors = element.data if isinstance(element.data, (list, tuple)) else [element.data]
        total += sum(int(t.numel()) * int(t.element_size()) for t in tensors if hasattr(t, "numel"))
    return total


def _item(request: Any, feature: Any) -> dict[str, Any]:
    return {
        "kind": "item",
        "pid": os.getpid(),
        "request_id": request.request_id,
        "prompt_tokens": request.num_prompt_tokens,
        "modality": feature.modality,
        "identifier": feature.identifier,
        "mm_hash": getattr(feature, "mm_hash", None),
        "offset": feature.mm_position.offset,
        "length": feature.mm_position.length,
        "with_data": feature.data is not None,
        "tensor_bytes": _tensor_bytes(feature.data),
    }


def register() -> None:
    path = os.environ.get(PATH_ENV)
    if not path:
        return
    try:
        from vllm.v1.core.sched.scheduler import Scheduler
    except ImportError:  # a vLLM without that scheduler: nothing to witness there
        return

    original = Scheduler.add_request
    if getattr(original, "witnessed", False):
        return
    lock = threading.Lock()

    def write(lines: list[dict[str, Any]]) -> None:
        with lock, open(path, "a", encoding="utf-8") as file:
            file.writelines(json.dumps(line) + "\n" for line in lines)

    @functools.wraps(original)
    def add_request(self: Any, request: Any) -> Any:
        try:  # a witness must never cost vLLM a request (an older release's records may lack a field)
            write([_item(request, feature) for feature in getattr(request, "mm_features", None) or ()])
        except Exception as error:
            write([{"kind": "error", "pid": os.getpid(), "error": repr(error)}])
        return original(self, request)

    add_request.witnessed = True  # type: ignore[attr-defined]
    Scheduler.add_request = add_request
    if os.environ.get(DECODES_ENV) == "1":
        _witness_decodes(write)


def _witness_decodes(write: Any) -> None:
    from PIL import ImageFile

    original = ImageFile.ImageFile.load

    @functools.wraps(original)
    def load(self: Any) -> Any:
        if getattr(self, "_im", None) is None and self.tile:
            write([{"kind": "decode", "pid": os.getpid(), "format": self.format, "size": list(self.size)}])
        return original(self)

    ImageFile.ImageFile.load = load
    try:
        import cv2
    except ImportError:  # no OpenCV: vLLM decodes no video here either
        return
    video_capture = cv2.VideoCapture

    def opened(*args: Any, **kwargs: Any) -> Any:
        write([{"kind": "video_open", "pid": os.getpid()}])
        return _CountedCapture(video_capture(*args, **kwargs), write)

    cv2.VideoCapture = opened


class _CountedCapture:
    """An OpenCV capture that, once dropped, writes how many frames were read from it (``kind: "video_frames"``).

    Every frame read is one ``grab()`` (a frame decoded), whether or not it is kept (``retrieve()``).
    """

    def __init__(self, capture: Any, write: Any) -> None:
        self._capture = capture
        self._write = write
        self._grabs = 0

    def grab(self) -> Any:
        self._grabs += 1
        return self._capture.grab()

    def read(self, *args: Any) -> Any:
        self._grabs += 1
        return self._capture.read(*args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._capture, name)

    def __del__(self) -> None:
        try:
            self._write([{"kind": "video_frames", "pid": os.getpid(), "grabs": self._grabs}])
        except Exception:  # at the interpreter's exit there may be nothing left to write with
            pass
