"""Section ``vllm-uuid-check``: what checking client media uuids costs vLLM's key computation.

In process, with the real vLLM 0.33 (``.ci/install-vllm``) and the plugin
registered: ``ProcessorInputs.get_mm_hashes`` as vLLM's API server calls it,
for one loaded JPEG (0.5 and 4 MB), with and without a client uuid, wrapped
(mmobs) and unwrapped (vLLM alone, its own function from under the wrapper),
beside mmobs's no-decode key of the same bytes (``key_for_bytes``). The
target: the check adds at most the no-decode key's cost per uuid item, and
nothing to an item without a uuid.
"""

from __future__ import annotations

import time

import _harness as harness
from _common import Config, MiB, noisy_jpeg

MODEL = "bench-model"


def run(cfg: Config, out: harness.Report) -> None:
    out("## Client media uuids checked against their content (vLLM's `get_mm_hashes`)")
    out()
    try:
        from vllm.multimodal.media.image import ImageMediaIO
        from vllm.multimodal.parse import MultiModalDataParser, parse_mm_uuids
        from vllm.multimodal.processing.inputs import ProcessorInputs
    except ImportError:
        out("vLLM is not installed (`.ci/install-vllm`): skipped.")
        out()
        return
    from mmobs import key_for_bytes
    from mmobs.vllm import plugin

    plugin.unregister()
    plugin.register()
    started = time.monotonic()
    try:
        wrapped = ProcessorInputs.get_mm_hashes
        alone = wrapped.__wrapped__
        rows = []
        rounds = cfg.rounds * 3
        for label, target in (("0.5 MB", 512 * 1024), ("4 MB", 4 * MiB)):
            data, uuid = noisy_jpeg(target), f"u-{label}"
            media = ImageMediaIO().load_bytes(data)
            items = MultiModalDataParser().parse_mm_data({"image": [media]})
            with_uuid = ProcessorInputs(
                prompt=[1], mm_data_items=items, mm_uuid_items=parse_mm_uuids({"image": [uuid]})
            )
            without = ProcessorInputs(prompt=[1], mm_data_items=items)
            cases = {
                "vLLM alone, uuid": lambda i=with_uuid: alone(i, MODEL, "blake3"),
                "mmobs, uuid (checked)": lambda i=with_uuid: wrapped(i, MODEL, "blake3"),
                "vLLM alone, no uuid": lambda i=without: alone(i, MODEL, "blake3"),
                "mmobs, no uuid": lambda i=without: wrapped(i, MODEL, "blake3"),
                "no-decode key (key_for_bytes)": lambda d=data: key_for_bytes(d, model_id=MODEL),
            }
            assert wrapped(with_uuid, MODEL, "blake3") == alone(with_uuid, MODEL, "blake3") == {"image": [uuid]}
            assert wrapped(without, MODEL, "blake3") == alone(without, MODEL, "blake3")
            stats = harness.compare(cases, baseline="vLLM alone, uuid", rounds=rounds, clock=time.process_time)
            added = stats["mmobs, uuid (checked)"].median - stats["vLLM alone, uuid"].median
            no_decode = stats["no-decode key (key_for_bytes)"].median
            no_uuid_ratio = harness.compare(
                {k: cases[k] for k in ("vLLM alone, no uuid", "mmobs, no uuid")},
                baseline="vLLM alone, no uuid",
                rounds=rounds,
                clock=time.process_time,
            )["mmobs, no uuid"]
            rows.append(
                [
                    label,
                    harness.fmt_time(stats["vLLM alone, uuid"].median),
                    harness.fmt_time(stats["mmobs, uuid (checked)"].median),
                    harness.fmt_time(added),
                    harness.fmt_time(no_decode),
                    harness.fmt_ratio(added / no_decode),
                    harness.fmt_ratio(no_uuid_ratio.ratio),
                    harness.verdict(added <= no_decode * 1.1 and no_uuid_ratio.ratio <= 1.05),
                ]
            )
    finally:
        plugin.unregister()
    import vllm

    out(
        f"vLLM {vllm.__version__}. One loaded noise JPEG, CPU time (`time.process_time`), {rounds} interleaved rounds; keys checked equal "
        "to vLLM's own. `added` is what the check adds to an item with a uuid (keying it by content, under no "
        "observer); the target is at most the no-decode key's cost (10 % slack for noise) and no change for an "
        "item without a uuid (`no uuid, with/without` within 5 %)."
    )
    out()
    headers = [
        "JPEG",
        "vLLM alone, uuid",
        "mmobs, uuid",
        "added",
        "no-decode key",
        "added / no-decode key",
        "no uuid, with/without",
        "target",
    ]
    out(harness.table(headers, rows))
    out()
    out(f"({time.monotonic() - started:.0f} s)")
    out()
