"""JPEG: marker segments, EXIF segments, fill bytes and scans, counted before Pillow parses them.

Pillow's JPEG header parser is Python: it reads fill bytes and junk one byte
at a time, keeps every APPn/COM segment in ``applist`` and joins ``APP1 Exif``
segments with ``+=`` (quadratic in their number). After the first scan header
libjpeg takes over in C, but decodes a progressive image once per scan over
the whole coefficient buffer. This walk follows the same markers, so its
Python loop runs once per segment, scan or fill run, each bounded by a limit.

What it reads is what can cost. Up to the first scan header: every segment
header and fill run (Pillow's Python parser reads them). After it, for a
frame whose first scan is its only one (a sequential frame whose first scan
holds every component, as baseline encoders write): nothing. libjpeg reads
the rest in C, decodes that one scan (bounded by the pixels, checked from the
frame header) and refuses a second one (``JERR_EOI_EXPECTED``, Pillow's
"broken data stream"), so no count beyond that point bounds a cost, and the
entropy-coded data (all but a few hundred bytes of the file) is not read at
all. Only a frame that can have more scans (progressive, or a first scan
without every component) has its entropy-coded data searched for the next
marker (a compiled regular expression, about 3 GB/s; numpy's passes, tried,
were no faster here), so that every scan is counted.
"""

from __future__ import annotations

import re

from mmobs.keys.guard._common import check_pixels, too_costly
from mmobs.keys.guard.limits import DecodeLimits

#: Start-of-frame markers (SOF0-15 but DHT C4, JPG C8 and DAC CC).
_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
#: The non-differential, non-progressive frames (SOF0, 1, 3, 9, 11): one scan when it holds every component.
_SEQUENTIAL_SOF = frozenset((0xC0, 0xC1, 0xC3, 0xC9, 0xCB))
_FF_RUN = re.compile(rb"\xff+")
#: The next marker inside entropy-coded data: FF followed by anything but a
#: stuffed 00, a restart marker RST0-7 or another (fill) FF.
_NEXT_MARKER = re.compile(rb"\xff[^\x00\xd0-\xd7\xff]")
#: Markers without a length: TEM, RST0-7, SOI.
_STANDALONE = frozenset((0x01, *range(0xD0, 0xD9)))
_SOS, _EOI, _APP1, _COM = 0xDA, 0xD9, 0xE1, 0xFE
_EXIF = b"Exif\x00\x00"


def check_jpeg(data: bytes, limits: DecodeLimits, max_pixels: int | None) -> None:
    """Refuse a JPEG whose structure costs more than its pixels (``too_costly``) or is too large."""
    end = len(data)
    pos = 2  # after SOI
    segments = metadata_bytes = exif_bytes = fill = scans = 0
    frames: list[tuple[int, int]] = []  # (SOF marker, component count) of each frame header
    while pos < end:
        if data[pos] != 0xFF:  # junk between segments: Pillow reads it a byte at a time
            found = data.find(b"\xff", pos)
            nxt = end if found < 0 else found
            fill += nxt - pos
            _check_fill(fill, limits)
            pos = nxt
            continue
        run = _FF_RUN.match(data, pos)
        assert run is not None
        marker_at = run.end()
        fill += marker_at - pos - 1  # every FF but the one that starts the marker
        _check_fill(fill, limits)
        if marker_at >= end:
            return
        marker = data[marker_at]
        pos = marker_at + 1
        if marker == 0x00 or marker in _STANDALONE:  # 00: an escaped FF outside a scan, skipped like junk
            fill += marker == 0x00
            continue
        if marker == _EOI:
            return
        if pos + 2 > end:
            return  # cut inside the segment length: Pillow calls it truncated
        length = (data[pos] << 8) | data[pos + 1]
        body, after = pos + 2, pos + length
        if length < 2 or after > end:
            return  # a damaged or cut segment: Pillow refuses it, cheaply
        if marker == _SOS:
            scans += 1
            if scans > limits.max_jpeg_scans:
                raise too_costly(
                    f"the JPEG has more than {limits.max_jpeg_scans} scans (libjpeg decodes the whole image "
                    "once per progressive scan; encoders write at most about 10)",
                    "re-encode it as a baseline or standard progressive JPEG",
                )
            if scans == 1 and length > 2 and _only_scan(frames, data[body]):
                return  # libjpeg reads the rest in C and refuses a second scan: nothing after it costs
            next_marker = _NEXT_MARKER.search(data, after)  # about 3 GB/s: only frames that can have more scans
            if next_marker is None:
                return
            pos = next_marker.start()
            continue
        segments += 1
        metadata_bytes += length
        if segments > limits.max_metadata_segments:
            raise too_costly(
                f"the JPEG has more than {limits.max_metadata_segments} marker segments (APPn, COM, tables)",
                "re-save it without the extra metadata segments",
            )
        if metadata_bytes > limits.max_metadata_bytes:
            raise too_costly(
                f"the JPEG carries more than {limits.max_metadata_bytes} bytes of marker segments (metadata)",
                "re-save it without the embedded metadata",
            )
        if marker == _APP1 and data.startswith(_EXIF, body):
            exif_bytes += length - 2 - len(_EXIF)
            if exif_bytes > limits.max_exif_bytes:
                raise too_costly(
                    f"the JPEG's EXIF segments hold more than {limits.max_exif_bytes} bytes "
                    "(one standard APP1 segment holds at most 65,527)",
                    "re-save it with a standard EXIF block, or without EXIF",
                )
        elif marker in _SOF and length >= 7:
            height = (data[body + 1] << 8) | data[body + 2]
            width = (data[body + 3] << 8) | data[body + 4]
            check_pixels(width, height, max_pixels)
            frames.append((marker, data[body + 5] if length >= 8 else 0))
        pos = after


def _only_scan(frames: list[tuple[int, int]], scan_components: int) -> bool:
    """Whether the first scan, of ``scan_components`` components, is the frame's only one.

    libjpeg expects more scans exactly when the frame is progressive or the first
    scan leaves out a component (``has_multiple_scans``); anything unusual (no
    frame header, two of them, a differential frame) counts as "maybe more".
    """
    if len(frames) != 1:
        return False
    kind, components = frames[0]
    return kind in _SEQUENTIAL_SOF and 0 < components == scan_components


def _check_fill(fill: int, limits: DecodeLimits) -> None:
    if fill > limits.max_jpeg_fill_bytes:
        raise too_costly(
            f"the JPEG has more than {limits.max_jpeg_fill_bytes} fill or junk bytes between its segments",
            "re-encode it (encoders write none)",
        )
