"""The straightforward key: the baseline to beat.

This is how vLLM's ``MultiModalHasher`` keys a plain PIL image: build
``{"mode": image.mode, "data": np.asarray(image)}`` (plus the palette), which
copies every pixel into a new array, then feed the framed stream to the
digest. It is the repository's one plain reference implementation
(``tests/support/reference.py``), which shares no code with mmobs, so the benchmark
also checks that both produce the same key for every input it times.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.reference import ref_key


def naive_key(**kwargs: Any) -> str:
    """``hash_kwargs("blake3", **kwargs)`` the straightforward way."""
    return ref_key("blake3", **kwargs)
