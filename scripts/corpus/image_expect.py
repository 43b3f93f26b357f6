"""What the image cases that are not EXIF variants must get: expectations observed and reviewed one by one."""

from __future__ import annotations

from .case import bad, ok

#: Expectations of the other image cases, observed and reviewed one by one.
#: Classification notes: libwebp reports any damage (truncation included) as
#: "could not create decoder object", so WebP truncations are ``corrupt``; a PNG
#: ancillary chunk with a bad CRC makes Pillow's open raise SyntaxError, which
#: Image.open reports as unidentified. A TIFF's own directory is its EXIF, and Pillow's
#: TIFF load() reads it (and applies the orientation) itself: damage there is refused as
#: corrupt or tolerated with a warning, and the hasher, which gets a copy without the
#: directory, only meets what sits in ``info`` (the XMP cases).
EXTRA_EXPECT: dict[str, tuple] = {
    "exif-bad-tiff-header-after-idat.png": ok(False),
    "exif-short-ifd-after-idat.png": ok(False),
    "exif-bad-then-good-segments.jpg": ok(True),
    "exif-app1-length-past-end.jpg": bad("truncated"),
    "exif-chunk-bad-crc.png": bad("unidentified"),
    "exif-chunk-size-past-end.webp": bad("corrupt"),
    "exif-flag-without-chunk.webp": ok(False),
    "exif-bad-tiff-header-l.png": ok(True),
    "exif-bad-tiff-header-p.png": ok(True),
    "exif-bad-tiff-header-la.png": ok(False),
    "exif-bad-tiff-header-rgba.png": ok(False),
    "exif-short-tiff-header-l.png": ok(True),
    "exif-bad-tiff-header-rgba.webp": ok(False),
    "exif-bad-tiff-header-l.jpg": ok(True),
    "exif-bad-tiff-header-cmyk.jpg": ok(True),
    "raw-profile-exif-bad-hex.png": ok(False),
    "raw-profile-exif-bad-tiff.png": ok(False),
    "raw-profile-exif-bad-hex-l.png": ok(True),
    "raw-profile-exif-bad-tiff-l.png": ok(True),
    "mpf-bad-tiff-header.jpg": ok(False),
    "mpf-short-tiff-header.jpg": ok(False),
    "tiff-valid.tif": ok(False),
    "tiff-bad-magic.tif": bad("unidentified"),
    "tiff-ifd-offset-out-of-range.tif": bad("unidentified"),
    "tiff-short-ifd.tif": ok(False),
    "tiff-huge-entry-count.tif": ok(False),
    "tiff-ifd-self-loop.tif": ok(False),
    "tiff-exif-ifd-self-loop.tif": ok(False),
    "tiff-exif-ifd-out-of-range.tif": ok(False),
    "tiff-strip-offset-out-of-range.tif": bad("truncated"),
    "tiff-strip-bytes-huge.tif": ok(False),
    "tiff-width-ascii.tif": bad("corrupt"),
    "tiff-bits-per-sample-wrong-count.tif": ok(False),
    "tiff-unknown-compression.tif": bad("unidentified"),
    "tiff-unknown-type.tif": ok(False),
    "tiff-value-offset-out-of-range.tif": bad("unidentified"),
    "tiff-orientation-6.tif": ok(False),
    "tiff-orientation-6-exif-ifd-out-of-range.tif": ok(False),
    "tiff-orientation-ascii.tif": ok(False),
    "tiff-imageid-string.tif": ok(False),
    "tiff-imageid-int.tif": ok(False),
    "tiff-imageid-bytes.tif": ok(False),
    "tiff-big-endian.tif": ok(False),
    "tiff-endian-mismatch.tif": bad("unidentified"),
    "tiff-xmp-short.tif": ok(False),  # the XMP error comes after the pixels: counted, tolerated, as in vLLM
    "tiff-xmp-ascii-l.tif": ok(True),
    "tiff-xmp-short-with-orientation.tif": ok(True),
    "tiff-xmp-ascii-with-orientation-l.tif": ok(True),
    "tiff-xmp-rational-with-orientation.tif": ok(True),
    "tiff-xmp-bytes-orientation-l.tif": ok(False),
    "truncated-half.jpg": bad("truncated"),
    "truncated-header.jpg": bad("truncated"),
    "truncated-last-byte.jpg": bad("truncated"),
    "truncated-half.png": bad("truncated"),
    "truncated-header.png": bad("truncated"),
    "truncated-last-byte.png": ok(False),
    "truncated-half.webp": bad("corrupt"),
    "truncated-header.webp": bad("corrupt"),
    "truncated-last-byte.webp": bad("corrupt"),
    "truncated-half.gif": bad("truncated"),
    "truncated-header.gif": bad("unidentified"),
    "truncated-last-byte.gif": ok(False),
    "truncated-half.tif": bad("truncated"),
    "truncated-header.tif": bad("unidentified"),
    "truncated-last-byte.tif": bad("truncated"),
    "truncated-half.bmp": bad("truncated"),
    "truncated-header.bmp": bad("unidentified"),
    "truncated-last-byte.bmp": bad("truncated"),
    "bomb-40000x40000.png": bad("too_many_pixels"),
    "bomb-8000x7000.png": bad("too_many_pixels"),
    "bomb-100000000x1.png": bad("too_many_pixels"),
    "bomb-40000x40000.jpg": bad("too_many_pixels"),
    "bomb-10000x10000.jpg": bad("too_many_pixels"),
    "bomb-40000x40000.gif": bad("too_many_pixels"),
    "bomb-40000x40000.bmp": bad("too_many_pixels"),
    "bomb-40000x-40000.bmp": bad("too_many_pixels"),
    "bomb-40000x40000.tif": bad("too_many_pixels"),
    "bomb-16384x16384-vp8l.webp": bad("too_many_pixels"),
    "bomb-40000x40000-vp8x.webp": bad("too_many_pixels"),
    "bomb-8000x7000-vp8x.webp": bad("too_many_pixels"),  # the guard reads the VP8X canvas before libwebp refuses it
    "bomb-8000x7000-vp8l.webp": bad("too_many_pixels"),
    "zero-size.png": bad("unidentified"),
    "jpeg-soi-only.jpg": bad("unidentified"),
    "png-signature-only.png": bad("unidentified"),
}


def _extra(name: str) -> tuple:
    return EXTRA_EXPECT[name]
