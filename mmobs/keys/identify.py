"""The formats to try for a file, in vLLM's order: Pillow's identification, without the tries that must fail.

``Image.open`` walks its formats in order. For each it asks the plugin's
``accept`` function about the first 16 bytes and, when it accepts, builds the
plugin's image file object, whose ``_open`` may still raise ``SyntaxError``:
``Image.open`` catches that and tries the next format. For a JPEG that is 14
``accept`` calls and three image file objects built to fail (IM, IMT and
IPTC register no ``accept``, so Pillow tries them on every file that reaches
them), about 40 us: more than the structural checks and Pillow's JPEG header
parse together. This module gives ``Image.open`` only the formats that can
open the file, in the same order, so it returns what it would return over the
whole order, or fails as it would fail:

* **Formats whose ``accept`` refuses the prefix.** Pillow's own ``accept``
  functions read nothing but the 16 bytes they are given (and their plugin's
  constants, such as whether AVIF support is built in), so the formats that
  accept a prefix are worked out once per distinct prefix, allow-list and
  registry size (a bounded cache). A format whose ``accept`` is not Pillow's
  (a third-party plugin registered under a name vLLM allows), or answers a
  warning string, or raises, is always left to ``Image.open``.
* **Plugins without ``accept`` that cannot open the bytes.** Each of them
  starts ``_open`` by reading a few bytes, and raises ``SyntaxError`` when
  they cannot start its format, or hits an error that ``ImageFile`` turns
  into one (Pillow 13):

  * IM: a line feed in the first 100 bytes, and a first line (after any
    carriage returns) that starts with a letter, as its ``key: value`` lines do;
  * IMT: a line feed in the first 100 bytes, and a first line that starts with
    a lower-case letter or a space, as its ``key value`` lines do, or ``*``, a
    comment (else it finds no ``pixel`` line and has no mode);
  * IPTC: the first field's tag marker ``0x1C`` (five zero bytes read as no
    field, and then the missing mode is a ``KeyError``, made ``SyntaxError``);
  * PCD: ``PCD_`` at offset 2048.

  Such a plugin is left out only while it is the very class that was read
  (and a Pillow without one of them, as Pillow 15 will be without IM, has
  one fewer to skip).

``tests/keys/test_identify.py`` holds each test against the plugin itself and
every reading against ``Image.open`` over the whole order, so a Pillow that
changes one fails there, not in a key. The cache is keyed by the registry's
size: a plugin registered under a new name takes part at once; one that
replaces a plugin under a name already registered, after files were read,
takes part once :func:`clear_cache` is called.
"""

from __future__ import annotations

import importlib
import struct
from collections.abc import Callable
from typing import Any

from PIL import Image

from mmobs.keys.formats import VLLM_FORMATS


def _im_cannot(data: bytes) -> bool:
    head = data[:100]
    return b"\n" not in head or not head.lstrip(b"\r")[:1].isalpha()


def _imt_cannot(data: bytes) -> bool:
    head = data[:100]
    return b"\n" not in head or not (head[:1].islower() or head[:1] in (b" ", b"*"))


def _iptc_cannot(data: bytes) -> bool:
    return data[:1] != b"\x1c"


def _pcd_cannot(data: bytes) -> bool:
    return data[2048:2052] != b"PCD_"


def _plugin_class(module: str, name: str) -> type | None:
    """A Pillow plugin's image file class, or None where this Pillow has no such plugin (IM goes in Pillow 15)."""
    try:
        found = getattr(importlib.import_module(f"PIL.{module}"), name)
    except (ImportError, AttributeError):
        return None
    return found if isinstance(found, type) else None


_READ: dict[str, tuple[type | None, Callable[[bytes], bool]]] = {
    "IM": (_plugin_class("ImImagePlugin", "ImImageFile"), _im_cannot),
    "IMT": (_plugin_class("ImtImagePlugin", "ImtImageFile"), _imt_cannot),
    "IPTC": (_plugin_class("IptcImagePlugin", "IptcImageFile"), _iptc_cannot),
    "PCD": (_plugin_class("PcdImagePlugin", "PcdImageFile"), _pcd_cannot),
}
#: Per plugin without an ``accept`` (those this Pillow has): its class, and the
#: test of the bytes that is true when its ``_open`` must raise ``SyntaxError``.
CANNOT_OPEN: dict[str, tuple[type, Callable[[bytes], bool]]] = {
    name: (plugin, cannot) for name, (plugin, cannot) in _READ.items() if plugin is not None
}

_Checks = tuple[tuple[str, Callable[[bytes], bool]], ...]
_orders: dict[tuple[tuple[str, ...], bytes, frozenset[str], int], tuple[str, ...]] = {}
_active: dict[int, _Checks] = {}
_MAX_ORDERS = 1024  # distinct prefixes (a JPEG's varies with its first segment's length) x allow-lists
_CAUGHT = (SyntaxError, IndexError, TypeError, struct.error)  # what Image.open catches around a plugin


def identification_order(formats: tuple[str, ...] | None, data: bytes) -> tuple[str, ...] | None:
    """The formats ``Image.open`` must try for ``data``, in vLLM's order, then any other allowed.

    ``None`` (every format Pillow has, in Pillow's order) when ``formats`` is ``None``.
    """
    if formats is None:
        return None
    registry = Image.OPEN
    size = len(registry)
    checks = _active.get(size)
    if checks is None:
        checks = _active[size] = tuple(
            (name, cannot) for name, (plugin, cannot) in CANNOT_OPEN.items() if registry.get(name) == (plugin, None)
        )
    skipped = frozenset(name for name, cannot in checks if cannot(data))
    key = (formats, data[:16], skipped, size)
    order = _orders.get(key)
    if order is None:
        if len(_orders) >= _MAX_ORDERS:
            _orders.clear()
        order = _orders[key] = _order(formats, data[:16], skipped)
    return order


def clear_cache() -> None:
    """Forget every worked-out order (after replacing a registered plugin)."""
    _orders.clear()
    _active.clear()


def _order(formats: tuple[str, ...], prefix: bytes, skipped: frozenset[str]) -> tuple[str, ...]:
    registry = Image.OPEN
    listed = (*(f for f in VLLM_FORMATS if f in registry), *(f for f in formats if f not in VLLM_FORMATS))
    return tuple(name for name in listed if name not in skipped and _may_accept(registry.get(name), prefix))


def _may_accept(entry: tuple[Any, Any] | None, prefix: bytes) -> bool:
    """Whether ``Image.open`` could get past this format's ``accept`` with ``prefix``."""
    if entry is None:
        return True  # not registered yet: Image.open runs Image.init() and finds out
    accept = entry[1]
    if accept is None or not getattr(accept, "__module__", "").startswith("PIL."):
        return True
    try:
        result = accept(prefix)
    except _CAUGHT:
        return False
    except Exception:  # noqa: BLE001 - Image.open lets it propagate: let it
        return True
    return isinstance(result, str) or bool(result)
