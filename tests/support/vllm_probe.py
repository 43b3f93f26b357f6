"""Run inside a fresh process: load the plugin the way vLLM does, exercise vLLM, print JSON.

``python -m tests.support.vllm_probe`` prints one JSON document that
``tests/vllm/test_vllm_plugin.py`` asserts on. A subprocess, because the plugin
changes vLLM's modules for the whole process (the differential tests must see
vLLM untouched) and because vLLM's plugin loader runs once per process.

What vLLM swallows is counted here independently of the plugin, on twins:
each keyed image is loaded twice, identically, and the twin's ImageID read and
EXIF transpose are tried with reporting off. Pillow parses EXIF lazily and
statefully, so a twin in the same state raises exactly when the real read
does; the plugin's counters must then equal those counts.
"""

from __future__ import annotations

import io
import json
import os
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from PIL import Image, ImageOps

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.support import golden  # noqa: E402
from tests.support.images import (  # noqa: E402
    BAD_TIFF_HEADER,
    SHORT_TIFF_HEADER,
    encode,
    jpeg_bytes,
    jpeg_with_exif,
    noisy_image,
)

ALGORITHMS = ("blake3", "sha256", "sha512")
IMAGE_ID_TAG = 0x800D


def _raises(action: Callable[[], Any]) -> str | None:
    """The exception class ``action`` raises, with mmobs's label for struct.error, or None."""
    try:
        action()
    except Exception as error:
        return "struct.error" if type(error).__module__ == "struct" else type(error).__name__
    return None


def inputs() -> dict[str, bytes]:
    """Golden inputs plus malformed-EXIF JPEGs built here (two exception types)."""
    files = {path.name: path.read_bytes() for path in sorted((golden.GOLDEN_DIR / "inputs").iterdir())}
    files["built-bad-header.jpg"] = jpeg_with_exif(BAD_TIFF_HEADER, jpeg_bytes(seed=5))
    files["built-short-header.jpg"] = jpeg_with_exif(SHORT_TIFF_HEADER, jpeg_bytes(seed=6))
    files["rgba.webp"] = encode(noisy_image("RGBA", (9, 7)), "WEBP", lossless=True)
    return files


def key_everything(files: dict[str, bytes]) -> dict[str, Any]:
    """Every input through vLLM's loader and as a plain opened image, with every algorithm.

    Returns the keys and, from twins, how many ImageID reads and transposes
    will have raised (by exception label) while keying them.
    """
    from vllm.multimodal.hasher import MultiModalHasher
    from vllm.multimodal.media.image import ImageMediaIO

    from mmobs.events import observing

    keys: dict[str, str] = {}
    image_id: Counter[str] = Counter()
    transpose: Counter[str] = Counter()

    def twin_reads(twin: Image.Image) -> None:
        label = _raises(lambda: twin.getexif().get(IMAGE_ID_TAG))
        if label:
            image_id[label] += 1

    for name, data in files.items():
        for mode in ("RGB", None):
            for algorithm in ALGORITHMS:
                with observing(None):
                    label = _raises(lambda data=data: ImageOps.exif_transpose(Image.open(io.BytesIO(data))))
                    twin_reads(ImageMediaIO(image_mode=mode).load_bytes(data).media)
                if label:
                    transpose[label] += 1
                media = ImageMediaIO(image_mode=mode).load_bytes(data)
                keys[f"{name}|loader:{mode}|{algorithm}"] = MultiModalHasher.hash_kwargs(
                    algorithm, model_id="probe", image=media
                )
        with observing(None):
            twin = Image.open(io.BytesIO(data))
            twin.load()
            twin_reads(twin)
        opened = Image.open(io.BytesIO(data))
        opened.load()
        keys[f"{name}|plain|blake3"] = MultiModalHasher.hash_kwargs("blake3", image=opened)
    return {"keys": keys, "image_id_raises": dict(image_id), "transpose_raises": dict(transpose)}


def samples(prefix: str = "mmobs_") -> dict[str, float]:
    from prometheus_client import REGISTRY

    values: dict[str, float] = {}
    for family in REGISTRY.collect():
        for sample in family.samples:
            if sample.name.startswith(prefix) and not sample.name.endswith("_created"):
                labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
                values[f"{sample.name}{{{labels}}}"] = sample.value
    return values


@contextmanager
def captured_events() -> Iterator[list[dict[str, Any]]]:
    import structlog.testing

    with structlog.testing.capture_logs() as events:
        yield events


def run(step: Callable[[], Any]) -> dict[str, Any]:
    before = samples()
    with captured_events() as events:
        result = step()
    after = samples()
    delta = {name: after[name] - before.get(name, 0.0) for name in after if after[name] != before.get(name, 0.0)}
    return {
        "result": result,
        "delta": delta,
        "events": [
            {k: v for k, v in event.items() if isinstance(v, (str, int, float, bool, type(None)))} for event in events
        ],
    }


def refuse(data: bytes) -> str:
    """What vLLM's loader does with ``data``: "accepted", or the exception class it raises,
    marked "(ValueError)" when vLLM's API server would answer it with a 400."""
    from vllm.multimodal.media.image import ImageMediaIO

    try:
        ImageMediaIO().load_bytes(data)
    except Exception as error:
        return type(error).__name__ + (" (ValueError)" if isinstance(error, ValueError) else "")
    return "accepted"


def guard_inputs() -> dict[str, bytes]:
    """A costly input the guard refuses, and a pixel bomb vLLM itself lets escape as a 500."""
    sys.path.insert(0, str(ROOT / "scripts"))
    from corpus.costly import jpeg_exif_segment_flood
    from corpus.headers import png_with_size

    return {"exif-segment-flood": jpeg_exif_segment_flood(64 * 1024), "bomb": png_with_size(40000, 40000)}


def normalize_image_bindings(plugin: Any) -> dict[str, bool]:
    """Whether each module that uses vLLM's ``normalize_image`` now reaches the plugin's.

    The loader and parse imported it by name before the plugin ran; a model
    module (Molmo2's ``from vllm.multimodal.image import normalize_image``)
    imports it later: both must see the plugin's function.
    """
    import types

    import vllm.multimodal.image
    import vllm.multimodal.media.image
    import vllm.multimodal.parse

    from mmobs.vllm import loader_hooks

    later = types.ModuleType("later_model_module")
    exec("from vllm.multimodal.image import normalize_image", later.__dict__)
    modules = {
        "vllm.multimodal.image": vllm.multimodal.image,
        "vllm.multimodal.media.image": vllm.multimodal.media.image,
        "vllm.multimodal.parse": vllm.multimodal.parse,
        "a model module imported later": later,
    }
    return {name: module.normalize_image is loader_hooks.normalize_image for name, module in modules.items()}


def main() -> None:
    import logging

    from vllm.plugins import load_general_plugins

    import mmobs.vllm.plugin as plugin
    from mmobs.vllm import switches

    files = inputs()
    report: dict[str, Any] = {"env_plugin": os.environ.get(switches.PLUGIN_ENV)}
    first_warnings: list[str] = []

    class _First(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            first_warnings.append(record.getMessage())

    first = _First(logging.WARNING)
    logging.getLogger("vllm.mmobs").addHandler(first)
    load_general_plugins()
    load_general_plugins()  # vLLM may load plugins more than once: must stay idempotent
    plugin.register()
    logging.getLogger("vllm.mmobs").removeHandler(first)
    report["registered"] = plugin.registered()
    report["first_warnings"] = first_warnings
    report["cache_hooks_applied"] = sorted(
        r.name for r in plugin._applied if r.name in ("get_and_update_item", "process_outputs", "generate")
    )
    report["normalize_image_bindings"] = normalize_image_bindings(plugin)
    report["with_plugin"] = run(lambda: key_everything(files))
    report["refusal"] = run(lambda: refuse(b"definitely not an image"))
    costly = guard_inputs()
    report["unguarded"] = run(lambda: {name: refuse(data) for name, data in costly.items()})

    plugin.unregister()
    report["unregistered"] = not plugin.registered()
    report["without_plugin"] = run(lambda: key_everything(files))

    os.environ[switches.FAST_KEYS_ENV] = "1"
    plugin.register()
    report["fast_keys"] = run(lambda: key_everything(files))
    plugin.unregister()
    del os.environ[switches.FAST_KEYS_ENV]

    os.environ[switches.GUARD_ENV] = "1"
    plugin.register()
    report["guarded"] = run(lambda: {name: refuse(data) for name, data in costly.items()})
    report["guarded_keys"] = run(lambda: key_everything(files))
    plugin.unregister()
    del os.environ[switches.GUARD_ENV]

    os.environ[switches.PLUGIN_ENV] = "0"
    plugin.register()
    report["registered_when_off"] = plugin.registered()
    del os.environ[switches.PLUGIN_ENV]

    # A vLLM whose shape changed: the plugin declines with one warning and changes nothing.
    import vllm.multimodal.hasher as hasher

    warnings: list[str] = []

    class _Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            warnings.append(record.getMessage())

    logging.getLogger("vllm.mmobs").addHandler(_Collect(logging.WARNING))
    saved = hasher._get_hasher_factory
    del hasher._get_hasher_factory
    plugin.register()
    plugin.register()
    report["registered_when_misshapen"] = plugin.registered()
    report["misshapen_warnings"] = warnings
    hasher._get_hasher_factory = saved
    print(json.dumps(report))


if __name__ == "__main__":
    main()
