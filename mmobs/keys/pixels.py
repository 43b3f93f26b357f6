"""The bytes ``np.asarray(image)`` would hold, without building that copy.

vLLM keys a plain PIL image by ``np.asarray(image)``, which first copies the
whole pixel buffer (12 MB for a 4 MP RGB image) and then hashes it. mmobs
feeds the digest the same bytes in two cheaper ways:

* **Zero-copy**, when Pillow stores the pixels exactly as NumPy would see
  them (``L``, ``P``, ``I;16``, ``I``, ``F``, ``RGBA``, ``CMYK``...) and the
  image sits in one memory block: the digest reads Pillow's own buffer,
  reached through Pillow's public Arrow C Data Interface export.
* **Streaming**, otherwise (``RGB`` is stored as 4 bytes a pixel; images over
  Pillow's 16 MiB block size are split into blocks): Pillow's raw encoder
  packs the pixels chunk by chunk into the digest, never more than one chunk
  held at a time.
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterator

from PIL import Image

#: Bytes per streamed chunk. Smaller chunks cost more in per-chunk overhead,
#: larger ones barely gain and raise the peak (docs/performance.md).
STREAM_CHUNK_BYTES = 256 * 1024


class _ArrowSchema(ctypes.Structure):
    pass


_ArrowSchema._fields_ = [
    ("format", ctypes.c_char_p),
    ("name", ctypes.c_char_p),
    ("metadata", ctypes.c_char_p),
    ("flags", ctypes.c_int64),
    ("n_children", ctypes.c_int64),
    ("children", ctypes.POINTER(ctypes.POINTER(_ArrowSchema))),
    ("dictionary", ctypes.c_void_p),
    ("release", ctypes.c_void_p),
    ("private_data", ctypes.c_void_p),
]


class _ArrowArray(ctypes.Structure):
    pass


_ArrowArray._fields_ = [
    ("length", ctypes.c_int64),
    ("null_count", ctypes.c_int64),
    ("offset", ctypes.c_int64),
    ("n_buffers", ctypes.c_int64),
    ("n_children", ctypes.c_int64),
    ("buffers", ctypes.POINTER(ctypes.c_void_p)),
    ("children", ctypes.POINTER(ctypes.POINTER(_ArrowArray))),
    ("dictionary", ctypes.c_void_p),
    ("release", ctypes.c_void_p),
    ("private_data", ctypes.c_void_p),
]

_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]

#: Arrow primitive format characters -> item size in bytes.
_ARROW_ITEM_SIZES = {b"c": 1, b"C": 1, b"s": 2, b"S": 2, b"i": 4, b"I": 4, b"f": 4, b"l": 8, b"L": 8, b"g": 8}


#: Modes whose pixels Pillow stores in another layout than NumPy's: "1" (NumPy sees 0/255
#: bytes), and the ones an export showed padded (RGB, LA...; learned, a closed set).
_PADDED_MODES: set[str] = {"1"}


def _zero_copy_view(image: Image.Image, nbytes: int) -> memoryview | None:
    """Pillow's pixel memory as a byte view, if it is exactly the NumPy layout.

    ``None`` when the image is split over several blocks, the layout differs
    (RGB's padding byte), or this Pillow has no Arrow export.
    """
    export = getattr(image, "__arrow_c_array__", None)
    if export is None or image.mode in _PADDED_MODES:
        return None
    try:
        schema_capsule, array_capsule = export()
    except (ValueError, OSError, RuntimeError):
        return None  # "Image rows are not contiguous in memory": several blocks
    schema = _ArrowSchema.from_address(_capsule_pointer(schema_capsule, b"arrow_schema"))
    array = _ArrowArray.from_address(_capsule_pointer(array_capsule, b"arrow_array"))
    # A fixed-size list (4-byte pixels) keeps its bytes in the child array.
    while array.n_children == 1 and schema.n_children == 1:
        schema, array = schema.children[0].contents, array.children[0].contents
    item_size = _ARROW_ITEM_SIZES.get(schema.format)
    if item_size is None or array.n_buffers < 2 or array.offset != 0 or array.null_count > 0:
        return None
    if array.length * item_size != nbytes:
        _PADDED_MODES.add(image.mode)  # Pillow pads this mode's pixels (RGB in 4 bytes): never ask again
        return None
    if not array.buffers[1]:
        return None
    buffer = (ctypes.c_ubyte * nbytes).from_address(array.buffers[1])
    # The view must keep the pixel memory alive for as long as anyone holds it
    # (chunks may outlive the caller's image): the buffer owns the export.
    buffer._owners = (image.im, schema_capsule, array_capsule)  # type: ignore[attr-defined]
    return memoryview(buffer).cast("B")


def pixel_chunks(image: Image.Image, rawmode: str, nbytes: int) -> Iterator[bytes | memoryview]:
    """Yield exactly the ``nbytes`` bytes of ``np.asarray(image)``."""
    if nbytes == 0:
        return
    image.load()
    view = _zero_copy_view(image, nbytes)
    if view is not None:
        yield view
        return
    yield from _encoded_chunks(image, rawmode, nbytes)


def _encoded_chunks(image: Image.Image, rawmode: str, nbytes: int) -> Iterator[bytes]:
    encoder = Image._getencoder(image.mode, "raw", rawmode)
    # The raw encoder needs room for at least one packed line (<= 4 bytes a pixel). No more than
    # the image: a buffer above malloc's mmap threshold costs a small image more than its pixels.
    bufsize = max(min(STREAM_CHUNK_BYTES, nbytes), image.width * 4)
    produced = 0
    status = 0
    try:
        encoder.setimage(image.im, (0, 0, *image.size))
        while True:
            _, status, data = encoder.encode(bufsize)
            if data:
                produced += len(data)
                yield data
            if status:
                break
    finally:
        encoder.cleanup()
    if status < 0 or produced != nbytes:
        raise RuntimeError(
            f"Pillow's raw encoder produced {produced} of {nbytes} bytes "
            f"(status {status}) for a {image.mode} image of size {image.size}"
        )
