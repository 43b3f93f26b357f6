"""Let a long-lived process give large freed buffers back to the system (glibc only).

glibc serves allocations above a threshold with ``mmap`` and unmaps them when
freed, but it raises that threshold each time such a buffer is freed (up to
32 MiB on 64-bit). After one large request body has come and gone, the next
ones are carved from the heap instead, and a heap fragmented by the small
objects around them is never trimmed: a service that reads 60 MiB bodies grew
by tens of megabytes per request and kept them. Fixing the threshold turns the
dynamic adjustment off, so every buffer above it is returned when freed: the
resident size goes back to where it was after each request.

A no-op (returning False) where the C library is not glibc.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8


def return_large_buffers(threshold: int = 128 * 1024, arenas: int | None = None) -> bool:
    """Map (and unmap on free) every allocation of ``threshold`` bytes or more; cap malloc arenas at ``arenas``."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    done = bool(mallopt(_M_MMAP_THRESHOLD, threshold) == 1)
    if arenas is not None:
        mallopt(_M_ARENA_MAX, arenas)
    return done
