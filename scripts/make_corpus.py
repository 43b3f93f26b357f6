#!/usr/bin/env python
"""Write the bad-input corpus to a folder: ``python scripts/make_corpus.py OUTDIR``.

The corpus itself lives in the package :mod:`scripts.corpus` (one module per
section); this file is its command line, and re-exports the package so that
``import make_corpus`` (``scripts/`` on ``sys.path``, as ``scripts/fuzz.py``
does) keeps working.
"""

from __future__ import annotations

import sys
from pathlib import Path

_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from scripts.corpus import *  # noqa: E402, F403 - the corpus's public names
from scripts.corpus import __all__, main  # noqa: E402, F401

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
