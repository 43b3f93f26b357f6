"""Section ``vllm-front-end``: what timing the multimodal front end's stages costs.

In process, with the real vLLM 0.33 (``.ci/install-vllm``) and the plugin
registered. Each hook wraps a stage that does nothing (so that a decode's own
noise, hundreds of microseconds, does not hide a microsecond) and runs with its
stage timing on and with it off (the hooks' one gate,
:func:`mmobs.vllm.front_end.stages.watched`, answering "not traffic"), interleaved in
the same rounds; the difference is what the timing adds, divided by the
observations it makes:

* the loader hook (``ImageMediaIO.load_bytes``'s) on a 64x48 JPEG's bytes (the
  decode: 1 observation);
* the data-URL hook (``MediaConnector._load_data_url``'s) around it (the
  base64 and the decode: 2);
* the HF processor hook around a model's method, on one image parsed by vLLM's
  own parser (seconds and items: 2);
* one bare observation into a bound histogram child (``FrontEndMetrics``).

The target: at most 1 us per observation on top of the stage. The running
server shows the rest (section ``vllm-server``: with and without mmobs).
"""

from __future__ import annotations

import base64
import time
import types
from typing import Any

import _harness as harness
from _common import Config, plain_jpeg
from prometheus_client import CollectorRegistry

TARGET_SECONDS = 1e-6


def run(cfg: Config, out: harness.Report) -> None:
    out("## The multimodal front end's stages timed (the loader, data-URL and processor hooks)")
    out()
    try:
        from vllm.multimodal.media.image import ImageMediaIO
        from vllm.multimodal.parse import MultiModalDataParser
        from vllm.multimodal.processing.processor import BaseMultiModalProcessor
    except ImportError:
        out("vLLM is not installed (`.ci/install-vllm`): skipped.")
        out()
        return
    from mmobs.vllm import loader_hooks, plugin
    from mmobs.vllm.front_end import stages as front_end
    from mmobs.vllm.front_end.front_end_metrics import FrontEndMetrics

    plugin.unregister()
    plugin.register()
    started = time.monotonic()
    watched = front_end.watched
    try:
        data = plain_jpeg((64, 48))
        url = "data:image/jpeg;base64," + base64.b64encode(data).decode()
        loaded = ImageMediaIO().load_bytes(data)
        load_bytes = loader_hooks.load_bytes(lambda loader, data: loaded, guard=False)
        data_url = loader_hooks.load_data_url(
            lambda connector, url, loader: load_bytes(loader, data), ImageMediaIO, guard=False
        )
        loader = ImageMediaIO()
        processor = _processor(BaseMultiModalProcessor)
        items = MultiModalDataParser().parse_mm_data({"image": [loaded.media]})
        fresh = FrontEndMetrics(CollectorRegistry())
        fresh.observe_decode("image", "jpeg", "decoded", 0.001)
        observe = fresh._bound["decode"]["image", "jpeg", "decoded"]
        hooks: dict[str, tuple[int, Any]] = {
            "loader hook (decode)": (1, lambda: load_bytes(loader, data)),
            "data-URL hook (base64 + decode)": (2, lambda: data_url(None, url, loader)),
            "HF processor hook (seconds + items)": (2, lambda: processor._apply_hf_processor_main(items, {})),
        }
        rounds = cfg.rounds * 3
        rows = []
        for label, (observations, call) in hooks.items():
            stats = harness.compare(
                {"timing off": call, "timing on": call},
                baseline="timing off",
                rounds=rounds,
                setups={"timing off": lambda: _gate(front_end, False), "timing on": lambda: _gate(front_end, watched)},
                clock=time.process_time,
            )
            _gate(front_end, watched)
            added = stats["timing on"].delta / observations
            rows.append(
                [
                    label,
                    harness.fmt_time(stats["timing off"].median),
                    harness.fmt_time(stats["timing on"].median),
                    str(observations),
                    harness.fmt_us(added),
                    harness.verdict(added <= TARGET_SECONDS),
                ]
            )
        bare = harness.compare({"observe": lambda: observe(0.001)}, baseline="observe", rounds=rounds)["observe"]
        rows.append(
            [
                "one observation, bound child",
                "",
                harness.fmt_time(bare.median),
                "1",
                harness.fmt_us(bare.median),
                harness.verdict(bare.median <= TARGET_SECONDS),
            ]
        )
    finally:
        _gate(front_end, watched)
        plugin.unregister()
    import vllm

    out(
        f"vLLM {vllm.__version__}. CPU time (`time.process_time`), {rounds} interleaved rounds, timing on and off "
        "paired per round; `added` is the median per-round difference divided by the observations. The target is "
        "at most 1 us per observation."
    )
    out()
    out(harness.table(["hook", "timing off", "timing on", "observations", "added per observation", "target"], rows))
    out()
    out(f"({time.monotonic() - started:.0f} s)")
    out()


def _gate(front_end: types.ModuleType, watched: Any) -> None:
    """The stage timing's gate: the real ``watched`` (timing on) or "never" (timing off)."""
    front_end.watched = watched if callable(watched) else (lambda: False)  # type: ignore[attr-defined]


def _processor(base: type) -> Any:
    """A model's processor whose own ``_apply_hf_processor_main`` does nothing: the hook's cost alone."""

    class NoOpProcessor(base):  # type: ignore[misc, valid-type]
        requires_tokenizer = False

        def _apply_hf_processor_main(self, mm_items: Any, hf_kwargs: Any) -> Any:
            return None

        def _get_mm_fields_config(self, *args: Any) -> Any:
            return {}

        def _get_prompt_updates(self, *args: Any) -> Any:
            return []

    from vllm.multimodal.parse import MultiModalDataParser

    return NoOpProcessor(types.SimpleNamespace(get_data_parser=MultiModalDataParser), dummy_inputs=None)
