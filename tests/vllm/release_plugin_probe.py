"""The plugin inside one vLLM release's own loader and hasher, in a child interpreter.

Run by ``tests/vllm/test_vllm_releases_plugin.py`` with ``sys.path`` starting at that release's
Python sources (``tests/support/vllm_releases.py``)::

    python tests/vllm/release_plugin_probe.py REQUEST.json REPORT.json

REQUEST names the image files. For each file, the report holds what vLLM alone does with it (its own
``ImageMediaIO().load_bytes`` then ``MultiModalHasher.hash_kwargs``: the key, or the exception) and,
after ``register()``, the same with the plugin, with the mmobs samples that moved and the events
mmobs logged. The plugin's start-up lines are reported too. ``MMOBS_VLLM_EXIF_FIX`` comes from the
environment, so one run with it and one without cover both behaviours.
"""

from __future__ import annotations

import inspect
import json
import logging
import sys
from pathlib import Path

import vllm
from vllm.multimodal.hasher import MultiModalHasher
from vllm.multimodal.media.image import ImageMediaIO

_TAKES_ALGORITHM = "algorithm" in inspect.signature(MultiModalHasher.hash_kwargs).parameters


def key(data: bytes) -> dict[str, str]:
    """vLLM's key of an image file, loaded as the OpenAI route loads it, or what it raised."""
    try:
        media = ImageMediaIO().load_bytes(data)
        if _TAKES_ALGORITHM:
            return {"key": MultiModalHasher.hash_kwargs("blake3", image=media)}
        return {"key": MultiModalHasher.hash_kwargs(image=media)}  # blake3: VLLM_MM_HASHER_ALGORITHM's default
    except Exception as error:  # the report says which
        return {"raised": type(error).__name__}


def samples() -> dict[str, float]:
    from prometheus_client import REGISTRY

    found: dict[str, float] = {}
    for family in REGISTRY.collect():
        for sample in family.samples:
            if sample.name.startswith("mmobs_") and sample.name.endswith("_total"):
                labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
                found[f"{sample.name}{{{labels}}}"] = sample.value
    return found


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def main(request_path: str, report_path: str) -> None:
    files = {name: Path(path).read_bytes() for name, path in json.loads(Path(request_path).read_text()).items()}
    alone = {name: key(data) for name, data in files.items()}

    from mmobs.vllm import plugin

    lines = Lines()
    logging.getLogger("vllm.mmobs").addHandler(lines)
    logging.getLogger("vllm.mmobs").setLevel(logging.INFO)
    plugin.register()
    start_up = list(lines.lines)
    with_plugin = {}
    for name, data in files.items():
        before, logged = samples(), len(lines.lines)
        found = key(data)
        after = samples()
        found["moved"] = {k: v - before.get(k, 0.0) for k, v in after.items() if v != before.get(k, 0.0)}
        found["logged"] = lines.lines[logged:]
        with_plugin[name] = found
    report = {
        "vllm": vllm.__version__,
        "vllm_file": vllm.__file__,
        "registered": plugin.registered(),
        "start_up": start_up,
        "alone": alone,
        "with_plugin": with_plugin,
    }
    Path(report_path).write_text(json.dumps(report))


if __name__ == "__main__":
    main(*sys.argv[1:])
