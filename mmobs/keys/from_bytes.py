"""Keys at hashing speed: vLLM's key for image bytes, read from the header, no pixel decoded.

A cache-aware router must compute, for every image, the very key vLLM will
compute, before any replica sees the image. For an image loaded from bytes,
vLLM 0.33 keys the loader's media-with-bytes by the framed original bytes,
plus ``{"io_config", "data"}`` when its loader converted the image
(:class:`~mmobs.keys.writer.EncodedImage`). The decoded pixels contribute one
bit: whether ``convert_image_mode`` made a new image, which depends only on
the mode and the transparency (mode RGBA, LA or PA, or ``transparency`` in
``info``) of the image after opening, loading and the EXIF transpose. For the
formats in :data:`HEADER_FORMATS` both are final in the header, so the key is
the header plus one digest pass over the bytes.

Where the header cannot decide, the image is decoded by the loader
(``key_path="header_decoded"``), never guessed. Those cases, all found by
reading Pillow 13's plugins and checked by ``tests/keys/test_keys_vllm_*.py``
against the real vLLM:

* **Formats not in** :data:`HEADER_FORMATS` (ICO, CUR, ICNS, BLP, DDS, PSD,
  FITS, TGA, XPM, PCX... when a caller allows them): their plugins may set
  the mode while decoding (ICO, CUR and ICNS pick a sub-image and take its
  mode, often RGBA), or are not audited.
* **An RGB PNG with a ``tRNS`` chunk after the image data** (against the PNG
  spec, which puts it before IDAT), keyed for ``image_mode="RGB"``: Pillow
  reads the chunks after IDAT while decoding, so the transparency appears on
  load, and with it the compositing that puts ``io_config`` in the key. The
  chunk headers are walked (no data is read); any tRNS past the first
  IDAT/fdAT means decode. (For any other mode, or target, a late transparency
  cannot change whether the loader converts.)
* **No pixel data to decode** (no tile: a JPEG without a scan, a PNG without
  IDAT): the loader refuses it; decoding gets its exact refusal.
* **A conversion Pillow cannot make** from the header mode to ``image_mode``:
  the loader refuses it (``unsupported_mode``).

What was checked and needs no decode: JPEG and MPO (mode from SOF: L, RGB or
CMYK; never a ``transparency``), PNG otherwise (mode and tRNS before IDAT are
the header), GIF (the plugin changes the mode of later frames, RGB or RGBA,
but vLLM loads frame 0, whose mode and transparency the header already holds
under every ``LOADING_STRATEGY``), WebP and AVIF (mode from the container),
BMP/DIB and TIFF (mode from the header or IFD; TIFF's own in-place EXIF
transpose on load rotates, it never changes the mode). A decode that fails
half-way, which vLLM's tolerant transpose may swallow before its second
``load()``, leaves these modes as they were too. The EXIF transpose only
ever flips or rotates: the copy or transposed image takes the decoded image's
mode and a copy of its ``info``, and when it raises (malformed EXIF) the
untransposed image, of the same mode, is converted instead. The EXIF ImageID of bytes is
never a ``uuid.UUID``, so the key never comes from it and a malformed EXIF
block cannot change it: this path does not read the EXIF, and no EXIF fallback
can run (see :class:`~mmobs.keys.writer.EncodedImage`).

``verify`` decides what is checked: ``"header"`` (the default) checks what
the header shows (the loader's format allow-list, byte and pixel limits, a
parsable header) and decodes only in the cases above, so corrupt or truncated
pixel data still gets a key (the key vLLM would compute if it accepted the
image); ``"decode"`` runs the full loader as well, for callers who need the
loader's acceptance of the image and not only its key.

The image is opened as the loader opens it (:meth:`ImageMediaIO.open_header`:
its allow-list, in its order), so this path keys every image exactly as the
loader path does. Where the loader and vLLM would open the same bytes with two
different plugins (a crafted file that two formats claim), both mmobs paths
share the loader's reading.

Events: the same as the loader path (refusals through ``bad_image``, the key
source through ``media_keyed``, always ``original_bytes``, the same item
digest for the drift tracker), and ``key_path`` for the
``mmobs_key_paths_total`` counter.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal, get_args

from PIL import Image, ImageFile

from mmobs.errors import InvalidOptionError
from mmobs.events import KeyPath, KeyPathChosen, get_observer
from mmobs.keys.guard.png import png_chunks
from mmobs.keys.hashing import ALGORITHMS, hash_in_format, new_digest
from mmobs.keys.loader import ImageMediaIO, has_transparency
from mmobs.keys.raw_bytes import FrontEnd, check_front_end, raw_bytes_key
from mmobs.keys.refusals import reporting_refusals
from mmobs.keys.writer import EncodedImage

Verify = Literal["header", "decode"]
VERIFY_MODES: tuple[str, ...] = get_args(Verify)


@dataclass(frozen=True, slots=True)
class ImageKey:
    """A key and how it was reached.

    ``header_mode`` and ``size`` are the header's (the decoded image may be
    rotated by its EXIF orientation); ``decoded_because`` says why the header
    could not decide, for ``key_path="header_decoded"``.
    """

    key: str
    key_path: KeyPath
    format: str | None
    header_mode: str
    size: tuple[int, int]
    io_config: dict[str, Any] | None
    decoded_because: str | None = None


def key_for_bytes(
    data: bytes | bytearray | memoryview,
    algorithm: str = "blake3",
    image_mode: str | None = "RGB",
    rgba_background_color: Sequence[int] = (255, 255, 255),
    *,
    verify: Verify = "header",
    vllm_version: str | None = None,
    front_end: FrontEnd = "python",
    **other_kwargs: object,
) -> str:
    """vLLM's key for an image given as bytes, decoding no pixel where the header decides.

    Equal to ``MultiModalHasher.hash_kwargs(algorithm, image=ImageMediaIO(image_mode,
    rgba_background_color).load_bytes(data), **other_kwargs)`` for every image that
    loader accepts, with the loader's default limits. ``verify="header"`` (the
    default) refuses what the header shows is bad and keys the rest;
    ``verify="decode"`` also decodes, refusing what the loader refuses. See the
    module docstring for the cases that are decoded anyway. Use :func:`key_image`
    for other limits, or to know which path keyed the image. ``vllm_version``
    keys as that release does (its format, its loader's ``io_config``: see
    :mod:`mmobs.releases`); the default is the newest. ``front_end="rust"`` gives the
    identifier vLLM's Rust front end gives the same bytes (:mod:`mmobs.keys.raw_bytes`),
    after the same checks.

    Raises :class:`~mmobs.errors.BadImageError` for a refused image and
    :class:`~mmobs.errors.InvalidOptionError` (a ``ValueError``) for a bad option.
    """
    io = _loader(image_mode, rgba_background_color, vllm_version)
    return key_image(io, data, algorithm, verify=verify, front_end=front_end, **other_kwargs).key


def key_image(
    io: ImageMediaIO,
    data: bytes | bytearray | memoryview,
    algorithm: str = "blake3",
    *,
    verify: Verify = "header",
    front_end: FrontEnd = "python",
    **other_kwargs: object,
) -> ImageKey:
    """The key of ``data`` as loaded by ``io`` (its mode, background, limits and release), and how it was reached.

    ``front_end="rust"``: the identifier vLLM's Rust front end gives the bytes (:mod:`mmobs.keys.raw_bytes`), after
    the same checks; its ``io_config`` is always None (nothing but the bytes enters that key).
    """
    if algorithm not in ALGORITHMS:
        new_digest(algorithm)  # raises the ValueError that names the choices
    rust = check_front_end(front_end, algorithm, other_kwargs) == "rust"
    if verify not in VERIFY_MODES:
        raise InvalidOptionError("verify", f"verify must be one of {', '.join(VERIFY_MODES)}, not {verify!r}")
    if type(data) is not bytes:
        data = bytes(data)
    with reporting_refusals:
        opened = io.open_header(data)
    header_mode, size, fmt = opened.mode, opened.size, opened.format
    doubt = None if io.image_mode is None else _header_doubt(opened, data, io.image_mode)
    path: KeyPath
    if verify == "decode" or doubt is not None:
        io_config = io.decode(opened, data).io_config  # the same opened image; reports its own refusals
        path = "decode" if verify == "decode" else "header_decoded"
    else:
        io_config = io.io_config if io.converts(header_mode, has_transparency(opened)) else None
        path = "header"
    del opened  # WebP and AVIF headers hold a decoder and its canvas: free them before hashing
    if rust:
        io_config = None
        key = raw_bytes_key(data)
    else:
        key = hash_in_format(io.key_format, algorithm, dict(image=EncodedImage(data, io_config), **other_kwargs))
    get_observer().key_path(KeyPathChosen(path))
    return ImageKey(key, path, fmt, header_mode, size, io_config, doubt)


# -- when the header cannot decide ----------------------------------------------


def _header_doubt(image: ImageFile.ImageFile, data: bytes, image_mode: str) -> str | None:
    """Why the header cannot tell whether the loader converts ``image``, or None when it can."""
    check = _FORMAT_CHECKS.get(image.format or "")
    if check is None:
        return f"format {image.format}: its plugin is not known to keep the header's mode while decoding"
    doubt = check(image, data, image_mode)
    if doubt is not None:
        return doubt
    if not _can_convert(image.mode, image_mode, has_transparency(image)):
        return f"Pillow cannot convert mode {image.mode} to {image_mode}"
    return None


def _no_doubt(image: ImageFile.ImageFile, data: bytes, image_mode: str) -> str | None:
    return None


def _tiled(image: ImageFile.ImageFile, data: bytes, image_mode: str) -> str | None:
    """Formats whose header lists the pixel data to decode: none listed, nothing to decode."""
    return None if image.tile else "the header lists no pixel data"


def _png(image: ImageFile.ImageFile, data: bytes, image_mode: str) -> str | None:
    doubt = _tiled(image, data, image_mode)
    if doubt is None and image_mode == image.mode == "RGB" and not has_transparency(image):
        # The one case where transparency gained while decoding changes whether the loader converts.
        doubt = _png_late_transparency(data)
    return doubt


_IMAGE_DATA_CHUNKS = (b"IDAT", b"fdAT")


def _png_late_transparency(data: bytes) -> str | None:
    """A tRNS chunk after the first image-data chunk, which Pillow applies while decoding.

    Walks the chunk headers (:func:`~mmobs.keys.guard.png.png_chunks`: the pixel
    data is skipped, not read) as Pillow's reader does after IDAT, and stops where
    Pillow stops (IEND, or the end of the bytes). Any tRNS seen past the image
    data is a doubt, whether or not Pillow would accept that chunk.
    """
    in_data = False
    for _, kind, _, _ in png_chunks(data):
        if kind == b"IEND":
            break
        if kind in _IMAGE_DATA_CHUNKS:
            in_data = True
        elif in_data and kind == b"tRNS":
            return "a PNG tRNS chunk after the image data: Pillow adds the transparency while decoding"
    return None


#: Formats whose mode and transparency after decoding are the header's, each
#: with the check of its remaining doubts (see the module docstring).
_FORMAT_CHECKS: dict[str, Callable[[ImageFile.ImageFile, bytes, str], str | None]] = {
    "JPEG": _tiled,
    "MPO": _tiled,
    "PNG": _png,
    "GIF": _tiled,
    "BMP": _tiled,
    "DIB": _tiled,
    "TIFF": _tiled,
    "WEBP": _no_doubt,  # the tile is set while loading
    "AVIF": _tiled,
}
#: The formats keyed from the header alone (others are decoded when a conversion is possible).
HEADER_FORMATS: tuple[str, ...] = tuple(_FORMAT_CHECKS)


@lru_cache(maxsize=256)
def _can_convert(mode: str, image_mode: str, transparent: bool) -> bool:
    """Whether Pillow converts ``mode`` to ``image_mode`` the way the loader would (a 1x1 probe)."""
    try:
        probe = Image.new(mode, (1, 1))
        probe.convert("RGBA" if image_mode == "RGB" and transparent else image_mode)
    except Exception:  # noqa: BLE001 - ValueError, OSError...: any failure means "let the loader decide"
        return False
    return True


@lru_cache(maxsize=64)
def _cached_loader(
    image_mode: str | None, rgba_background_color: tuple[int, ...], vllm_version: str | None
) -> ImageMediaIO:
    return ImageMediaIO(image_mode, rgba_background_color, vllm_version=vllm_version)


def _loader(image_mode: str | None, rgba_background_color: Sequence[int], vllm_version: str | None) -> ImageMediaIO:
    """A loader with the default limits (validating the options), cached per option set."""
    if (
        isinstance(rgba_background_color, (tuple, list))
        and (image_mode is None or isinstance(image_mode, str))
        and (vllm_version is None or isinstance(vllm_version, str))
    ):
        return _cached_loader(image_mode, tuple(rgba_background_color), vllm_version)
    return ImageMediaIO(image_mode, rgba_background_color, vllm_version=vllm_version)  # let it name the problem
