"""Writing the corpus out as files, and the ``make_corpus.py`` command line."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from .build import build_corpus
from .case import Case


def write_corpus(outdir: Path) -> list[Case]:
    cases = build_corpus()
    index = []
    for case in cases:
        if case.kind == "image":
            path = outdir / "images" / case.name
            data = case.payload
        elif case.kind == "url":
            path = outdir / "urls" / f"{case.name}.txt"
            data = case.payload.encode("utf-8", "surrogateescape")  # type: ignore[union-attr]
        else:
            path = outdir / "requests" / f"{case.name}.body"
            data = case.payload
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)  # type: ignore[arg-type]
        index.append({
            "name": case.name,
            "kind": case.kind,
            "file": str(path.relative_to(outdir)),
            "bytes": len(data),
            "expect": list(case.expect),
            "note": case.note,
            **({"content_type": case.content_type, "headers": {k: v[:80] for k, v in case.headers},
                "transport": case.transport, "path": case.path[:200], "method": case.method} if case.kind == "request" else {}),
        })  # fmt: skip
    (outdir / "index.json").write_text(json.dumps(index, indent=1) + "\n")
    return cases


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python scripts/make_corpus.py OUTDIR", file=sys.stderr)
        return 2
    outdir = Path(argv[0])
    cases = write_corpus(outdir)
    kinds = {kind: sum(case.kind == kind for case in cases) for kind in ("image", "url", "request")}
    print(f"wrote {len(cases)} cases to {outdir} ({', '.join(f'{n} {k}' for k, n in kinds.items())})")
    return 0
