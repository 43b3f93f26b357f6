#!/usr/bin/env python
"""Fuzz the image loader and the hasher: load, then key, never anything but BadImageError.

Each execution takes one input, loads it with ``ImageMediaIO().load_bytes``
and, if it loaded, keys it twice: ``MultiModalHasher.hash_kwargs("blake3",
image=media)`` (the service's key, from the original bytes) and the same for
``media.media`` as a plain image (the key from the pixels). It also loads the
input keeping its decoded mode (``image_mode=None``) and keys those pixels,
which reaches the hasher's pixel code with every mode a decoder can produce.

Properties checked on every execution (a violation is a *finding*):

* ``load_bytes`` raises nothing but :class:`~mmobs.errors.BadImageError`, with a
  reason from the closed set, reported to the observer exactly once;
* hashing a loaded image raises nothing;
* every swallowed exception is counted: the exceptions that left Pillow's EXIF
  reading while keying (a spy on ``getexif`` and ``Exif.__getitem__``), the
  fallbacks the service would report (a
  :class:`~mmobs.events.RecordingObserver`), the ``ExifFallback`` events a
  counting observer (a ``HashObserver`` subclass) received and the movement of
  ``mmobs_exif_fallback_total`` in a private
  :class:`~mmobs.observability.instrument.Instrumentation` registry are the same number, at
  most one per key;
* the media key is the original-bytes key (a decoded image never carries a
  ``uuid.UUID`` ImageID), so a fallback cannot change it, and the pixel key
  equals the key of ``np.asarray(image)`` (vLLM's definition).

Inputs are whole files of every format (JPEG, PNG, WebP, GIF, TIFF, BMP) and
EXIF payloads wrapped on the fly into JPEG APP1, PNG eXIf (RGB and grayscale),
WebP EXIF chunks and PNG "Raw profile type exif" text. The first byte of an
input says which: below 0x80 the rest is a whole file; otherwise the rest is a
TIFF structure and ``byte & 0x7f`` picks its container (see ``CONTAINERS``).

Two engines:

* ``random`` (the default when atheris is missing, and the CI slice): a
  deterministic mutator seeded by ``--seed``: byte flips, interesting values,
  insertions, deletions, duplications, truncations, splices, and EXIF-structure
  aware mutations (IFD offsets and entry counts, entry tags, types, counts and
  value offsets, next-IFD links), with PNG CRCs repaired half the time. Inputs
  that reach a new outcome join the pool.
* ``atheris`` (coverage-guided, libFuzzer): Pillow's Python plugins and mmobs are
  instrumented; the seeds come from ``scripts/make_corpus.py``; a custom
  mutator mixes libFuzzer's mutations with the structure-aware ones.

Usage::

    python scripts/fuzz.py --engine random --seed 1 --runs 200000
    python scripts/fuzz.py --engine atheris --max-time 1800 --workdir /tmp/mmobs-fuzz

A finding is written to ``--workdir``/findings (the input and its traceback) and
printed; reproduce it with ``python scripts/fuzz.py --reproduce FILE``.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fuzzing import (
    CONTAINERS,
    EXIF_FLAG,
    FUZZ_MAX_PIXELS,
    TAGS,
    WHOLE_FILE,
    Harness,
    M,
    PropertyViolation,
    load_modules,
    materialize,
    mutate,
    reproduce,
    run_atheris,
    run_random,
    seed_inputs,
    tiff_mutation,
)

__all__ = [
    "CONTAINERS",
    "EXIF_FLAG",
    "TAGS",
    "Harness",
    "M",
    "PropertyViolation",
    "main",
    "materialize",
    "mutate",
    "run_random",
    "seed_inputs",
    "tiff_mutation",
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engine", choices=("auto", "random", "atheris"), default="auto")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--runs", type=int, default=None, help="stop after this many executions")
    parser.add_argument("--max-time", type=float, default=None, help="stop after this many seconds")
    parser.add_argument(
        "--workdir",
        default=str(Path(tempfile.gettempdir()) / "mmobs-fuzz"),
        help="findings, atheris corpus and stats go here (default: a mmobs-fuzz folder in the temp directory)",
    )
    parser.add_argument("--report-every", type=float, default=30.0)
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds one execution may take")
    parser.add_argument("--max-pixels", type=int, default=FUZZ_MAX_PIXELS)
    parser.add_argument("--max-len", type=int, default=20000, help="atheris: largest input")
    parser.add_argument("--rss-limit-mb", type=int, default=4096)
    parser.add_argument("--reproduce", type=Path, default=None, help="run one saved fuzz input and exit")
    parser.add_argument("--image", action="store_true", help="with --reproduce: the file is an image, not a fuzz input")
    args = parser.parse_args(argv)
    # Pillow logs what it skips in damaged files ("More samples per pixel..."): millions of lines.
    logging.getLogger("PIL").setLevel(logging.CRITICAL)

    if args.reproduce is not None:
        if args.image:
            load_modules()
            path = Path(args.workdir) / "reproduce.input"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(bytes([WHOLE_FILE]) + args.reproduce.read_bytes())
            return reproduce(path)
        return reproduce(args.reproduce)

    engine = args.engine
    if engine == "auto":
        try:
            import atheris  # noqa: F401
        except ImportError:
            engine = "random"
        else:
            engine = "atheris"
    if engine == "atheris":
        run_atheris(args)  # does not return
        return 0
    if args.runs is None and args.max_time is None:
        args.runs = 100_000
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    stats = run_random(
        args.seed,
        args.runs,
        args.max_time,
        findings_dir=workdir / "findings",
        report_every=args.report_every,
        timeout=args.timeout,
        harness=Harness(max_pixels=args.max_pixels),
        stats_file=workdir / f"random-seed{args.seed}-stats.json",
    )
    summary = stats.as_dict()
    summary["engine"], summary["seed"] = "random", args.seed
    (workdir / f"random-seed{args.seed}-stats.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps(summary, indent=1))
    signatures = Counter(finding["signature"] for finding in stats.findings)
    for signature, count in signatures.items():
        print(f"finding: {signature} x{count}")
    return 1 if stats.findings else 0


if __name__ == "__main__":
    sys.exit(main())
