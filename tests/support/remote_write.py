"""Samples into a real Prometheus through its remote-write receiver (stdlib only).

Prometheus's remote-write protocol 1.0 is a snappy-compressed protobuf
``WriteRequest``. Both are small enough to write by hand: the protobuf has four
message types (``WriteRequest``, ``TimeSeries``, ``Label``, ``Sample``), and a
snappy block may be a single literal, which every decoder accepts. Unlike
OpenMetrics backfilling, this carries staleness markers (a NaN with
Prometheus's own bit pattern), which promtool fixtures use.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

import httpx

#: Prometheus's staleness marker: a NaN with these bits (model/value.StaleNaN).
STALE_NAN_BITS = 0x7FF0000000000002


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (wire type 2)."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _sample(value: float | None, timestamp_ms: int) -> bytes:
    """``value`` None is the staleness marker."""
    bits = struct.pack("<Q", STALE_NAN_BITS) if value is None else struct.pack("<d", value)
    return _varint(1 << 3 | 1) + bits + _varint(2 << 3) + _varint(timestamp_ms)


def write_request(series: Iterable[tuple[dict[str, str], list[tuple[int, float | None]]]]) -> bytes:
    """The protobuf of a WriteRequest: (labels with ``__name__``, [(timestamp ms, value or None)])."""
    out = bytearray()
    for labels, samples in series:
        body = b"".join(
            _field(1, _field(1, name.encode()) + _field(2, value.encode())) for name, value in sorted(labels.items())
        )
        body += b"".join(_field(2, _sample(value, ts)) for ts, value in samples)
        out += _field(1, body)
    return bytes(out)


def snappy_block(data: bytes) -> bytes:
    """``data`` (not empty) as a snappy block of one literal (valid, uncompressed)."""
    length = len(data) - 1
    if length < 60:
        tag = bytes([length << 2])
    else:
        size = (length.bit_length() + 7) // 8
        tag = bytes([(59 + size) << 2]) + length.to_bytes(size, "little")
    return _varint(len(data)) + tag + data


def push(url: str, series: Iterable[tuple[dict[str, str], list[tuple[int, float | None]]]]) -> None:
    """POST the series to ``url``/api/v1/write (Prometheus started with --web.enable-remote-write-receiver)."""
    response = httpx.post(
        url + "/api/v1/write",
        content=snappy_block(write_request(series)),
        headers={
            "Content-Encoding": "snappy",
            "Content-Type": "application/x-protobuf",
            "X-Prometheus-Remote-Write-Version": "0.1.0",
        },
        timeout=30,
    )
    assert response.status_code == 204, (response.status_code, response.text)
