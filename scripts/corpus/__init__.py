"""The bad-input corpus: every malformed input mmobs must refuse (4xx) or key (200).

``build_corpus()`` returns a list of :class:`Case`; ``tests/service/test_corpus.py``
sends each one to a real ``mmobs serve`` (started with :data:`SERVE_ARGS`) and
loads every image case in-process too. Run ``python scripts/make_corpus.py
OUTDIR`` to write the inputs as files (plus ``index.json``) to look at them,
for example with ``mmobs inspect OUTDIR/images/<name>.jpg``.

Every input is built here from first principles (hand-written TIFF/EXIF
structures, PNG chunks, JPEG markers, RIFF chunks, patched headers) on top of
small images that Pillow encodes from a fixed seed, so the corpus does not
depend on files shipped elsewhere.

Expectations (``Case.expect``):

* ``("ok", fallback)``: 200; ``fallback`` is whether the tolerant EXIF ImageID
  read must swallow an exception (``exif_fallback`` in the response, one more
  ``mmobs_exif_fallback_total``).
* ``("error", status, code, reason)``: a refusal. ``code`` is the JSON error
  code (``bad_image``, ``invalid_json``...), ``reason`` the ``BadImageError``
  reason for ``bad_image`` and ``None`` otherwise. ``code`` is ``None`` only
  when the HTTP server itself (h11, under uvicorn) refuses the request before
  the application sees it: then the status must be a 4xx and the body is not
  mmobs's JSON.
* ``("not_5xx",)``: the answer cannot be observed or depends on how TCP
  delivers the bytes (a one-shot 100 KB header, an upload cut short): any
  status below 500, or no answer at all, passes, but the service's own
  ``mmobs_http_requests_total{status_class="5xx"}`` must not move either.

The EXIF expectations record what Pillow 13 does, path by path (see
``design.md``, "Pillow's EXIF traps", and the comment above
:data:`EXIF_EXPECT`): whether the fallback runs depends on whether the EXIF
transpose in the loader already consumed the exception (RGB PNG and WebP) or
the hasher meets it again on a fresh copy (JPEG, and any image the loader
converts). A change here is worth a look, not a silent update: it means the
installed Pillow parses EXIF differently.
"""

# One module per section: ``case`` (the Case type and the service limits),
# ``base`` (base images), ``tiff`` and ``exif`` (hand-built structures),
# ``headers`` (size surgery), ``image_cases`` (with ``exif_cases``, ``tiff_cases`` and
# ``image_expect``), ``costly`` (a package: inputs that cost more to decode than a plain
# image of their size), ``url_cases``, ``request_cases``, ``service_cases``,
# ``build`` and ``write``.

from .base import EXTENSIONS, MEDIA_TYPES, base_image, data_url, encode, noisy
from .build import build_corpus, one_image_of_each_class
from .case import (
    BODY_MAX_BYTES,
    IMAGE_MAX_BYTES,
    IMAGE_MAX_PIXELS,
    SERVE_ARGS,
    Case,
    bad,
    ok,
    refused,
)
from .exif import (
    EXIF_EXPECT,
    EXIF_PREFIX,
    EXIF_VARIANTS,
    PNG_SIGNATURE,
    exif_in,
    jpeg_with_exif,
    png_chunk,
    png_with_exif,
    riff,
    riff_chunks,
    webp_with_exif,
)
from .tiff import Entry, entry, raw_entry, tiff_bytes, tiff_image
from .write import main, write_corpus

__all__ = [
    "BODY_MAX_BYTES",
    "EXIF_EXPECT",
    "EXIF_PREFIX",
    "EXIF_VARIANTS",
    "EXTENSIONS",
    "IMAGE_MAX_BYTES",
    "IMAGE_MAX_PIXELS",
    "MEDIA_TYPES",
    "PNG_SIGNATURE",
    "SERVE_ARGS",
    "Case",
    "Entry",
    "bad",
    "base_image",
    "build_corpus",
    "data_url",
    "encode",
    "entry",
    "exif_in",
    "jpeg_with_exif",
    "main",
    "noisy",
    "ok",
    "one_image_of_each_class",
    "png_chunk",
    "png_with_exif",
    "raw_entry",
    "refused",
    "riff",
    "riff_chunks",
    "tiff_bytes",
    "tiff_image",
    "webp_with_exif",
    "write_corpus",
]
