"""The TIFF image cases: hand-built TIFF files, where the TIFF structure is both the image and its EXIF."""

from __future__ import annotations

from .exif import (
    _UUID,
)
from .tiff import (
    ASCII,
    BYTE,
    EXIF_IFD,
    IMAGE_DESCRIPTION,
    IMAGE_ID,
    LONG,
    ORIENTATION,
    RATIONAL,
    SHORT,
    SOFTWARE,
    UNDEFINED,
    XMP,
    Entry,
    entry,
    raw_entry,
    tiff_image,
)


def _tiff_cases() -> list[tuple[str, bytes, str]]:
    s = SHORT
    return [
        ("tiff-valid.tif", tiff_image(), "a hand-built 8x6 RGB TIFF (control)"),
        ("tiff-bad-magic.tif", b"II*\x01" + tiff_image()[4:], "a TIFF with a wrong version number"),
        ("tiff-ifd-offset-out-of-range.tif", tiff_image(ifd_offset=0x7FFFFFF0), "IFD0 past the end"),
        ("tiff-short-ifd.tif", tiff_image(count=40), "IFD0 declares 40 entries, holds 9"),
        ("tiff-huge-entry-count.tif", tiff_image(count=0xFFFF), "IFD0 declares 65535 entries"),
        ("tiff-ifd-self-loop.tif", tiff_image(next_ifd="self"), "IFD0 links to itself"),
        (
            "tiff-exif-ifd-self-loop.tif",
            tiff_image([raw_entry(EXIF_IFD, LONG, 1, 8 + 8 * 6 * 3)]),
            "the Exif sub-IFD is IFD0",
        ),
        (
            "tiff-exif-ifd-out-of-range.tif",
            tiff_image([raw_entry(EXIF_IFD, LONG, 1, 0xFFFFFF00)]),
            "the Exif sub-IFD past the end",
        ),
        (
            "tiff-strip-offset-out-of-range.tif",
            tiff_image(replace={273: raw_entry(273, LONG, 1, 0x7FFFFFF0)}),
            "pixels past the end",
        ),
        (
            "tiff-strip-bytes-huge.tif",
            tiff_image(replace={279: raw_entry(279, LONG, 1, 0x7FFFFFF0)}),
            "a strip of 2 GiB",
        ),
        ("tiff-width-ascii.tif", tiff_image(replace={256: entry(256, ASCII, "8")}), "ImageWidth as a string"),
        (
            "tiff-bits-per-sample-wrong-count.tif",
            tiff_image(replace={258: entry(258, s, 8)}),
            "one BitsPerSample for three samples",
        ),
        ("tiff-unknown-compression.tif", tiff_image(replace={259: entry(259, s, 60000)}), "compression 60000"),
        ("tiff-unknown-type.tif", tiff_image([Entry(SOFTWARE, 99, 4, raw=b"abcd")]), "a field of type 99"),
        (
            "tiff-value-offset-out-of-range.tif",
            tiff_image([raw_entry(IMAGE_DESCRIPTION, ASCII, 64, 0xFFFFFF00)]),
            "an ASCII value past the end",
        ),
        ("tiff-orientation-6.tif", tiff_image([entry(ORIENTATION, s, 6)]), "a real rotation"),
        (
            "tiff-orientation-6-exif-ifd-out-of-range.tif",
            tiff_image([entry(ORIENTATION, s, 6), raw_entry(EXIF_IFD, LONG, 1, 0xFFFFFF00)]),
            "a rotation and a broken sub-IFD",
        ),
        ("tiff-orientation-ascii.tif", tiff_image([entry(ORIENTATION, ASCII, "6")]), "Orientation as a string"),
        ("tiff-imageid-string.tif", tiff_image([entry(IMAGE_ID, ASCII, "not-a-uuid")]), "ImageID as a string"),
        ("tiff-imageid-int.tif", tiff_image([entry(IMAGE_ID, LONG, 12345)]), "ImageID as a LONG"),
        ("tiff-imageid-bytes.tif", tiff_image([entry(IMAGE_ID, UNDEFINED, _UUID)]), "ImageID as 16 bytes"),
        ("tiff-big-endian.tif", tiff_image(endian=">"), "a valid big-endian TIFF (control)"),
        # Found by the fuzzer (atheris): Pillow puts a TIFF's XMP tag (700) into info["xmp"] as
        # decoded, and getexif() runs a bytes regex over it when the EXIF has no Orientation:
        # TypeError unless the tag really is bytes. Without an Orientation tag, Pillow's own
        # TIFF load() calls getexif() and fails (refused, corrupt); with one, the file loads,
        # the loader hands the hasher a copy whose EXIF is empty, and the hasher's read raises.
        ("tiff-xmp-short.tif", tiff_image([entry(XMP, s, 2)]), "the XMP tag as a SHORT"),
        (
            "tiff-xmp-ascii-l.tif",
            tiff_image([entry(XMP, ASCII, 'tiff:Orientation="6"')], mode="L"),
            "the XMP tag as ASCII text, grayscale",
        ),
        (
            "tiff-xmp-short-with-orientation.tif",
            tiff_image([entry(ORIENTATION, s, 1), entry(XMP, s, 2)]),
            "the XMP tag as a SHORT next to Orientation 1 (the fuzzer's input, rebuilt)",
        ),
        (
            "tiff-xmp-ascii-with-orientation-l.tif",
            tiff_image([entry(ORIENTATION, s, 1), entry(XMP, ASCII, "x")], mode="L"),
            "the XMP tag as ASCII next to Orientation 1, grayscale",
        ),
        (
            "tiff-xmp-rational-with-orientation.tif",
            tiff_image([entry(ORIENTATION, s, 1), entry(XMP, RATIONAL, (1, 3))]),
            "the XMP tag as a RATIONAL next to Orientation 1",
        ),
        (
            "tiff-xmp-bytes-orientation-l.tif",
            tiff_image([entry(XMP, BYTE, *b'<x tiff:Orientation="6"/>')], mode="L"),
            "a well-formed XMP orientation in a grayscale TIFF (control)",
        ),
        ("tiff-endian-mismatch.tif", b"MM\x00*" + tiff_image()[4:], "big-endian marker, little-endian body"),
    ]
