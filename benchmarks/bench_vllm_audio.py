"""What a re-sent audio clip costs vLLM's API server: its decode, its resampling and its key, in process.

vLLM keys an audio item from its resampled waveform, so a re-sent clip can only be keyed after its decode and its
resampling, as a video can only after its decode. Whether skipping that would pay, as it does for video, depends on
what it costs: this measures vLLM 0.33's own steps in this process, per clip, on the CPU clock:

* ``decode``: ``AudioMediaIO.load_bytes`` (vLLM's loader: soundfile, else PyAV), at the file's native rate;
* ``resample``: vLLM's ``MultiModalDataParser`` taking the waveform to 16 kHz mono (Whisper's, the usual audio
  model's), with PyAV's resampler (vLLM's default, torchaudio, is not in its CPU environment);
* ``key``: ``MultiModalHasher.hash_kwargs`` of the resampled waveform (blake3).

Clips: 10 s and 60 s of 44.1 kHz stereo, as WAV (PCM 16), FLAC and MP3 (what soundfile writes), a tone under
noise. Medians over the rounds.

    python benchmarks/bench_vllm_audio.py              # needs vLLM (.ci/install-vllm), soundfile and av
    python benchmarks/bench_vllm_audio.py --rounds 9
"""

from __future__ import annotations

import argparse
import functools
import io
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import _harness as harness
import numpy as np

SECONDS = (10, 60)
FORMATS = {"WAV": ("WAV", "PCM_16"), "FLAC": ("FLAC", "PCM_16"), "MP3": ("MP3", "MPEG_LAYER_III")}
RATE = 44_100
TARGET_RATE = 16_000


def clip(seconds: int, container: str, subtype: str) -> bytes:
    import soundfile

    t = np.arange(seconds * RATE) / RATE
    rng = np.random.default_rng(seconds)
    tone = 0.3 * np.sin(2 * np.pi * 440 * t)[:, None] + 0.05 * rng.standard_normal((len(t), 2))
    buffer = io.BytesIO()
    soundfile.write(buffer, tone.astype(np.float32), RATE, format=container, subtype=subtype)
    return buffer.getvalue()


def cpu(step: Callable[[], Any]) -> tuple[float, Any]:
    started = time.thread_time()
    result = step()
    return time.thread_time() - started, result


def measure(data: bytes, rounds: int) -> dict[str, float]:
    from vllm.multimodal.hasher import MultiModalHasher
    from vllm.multimodal.media.audio import AudioMediaIO
    from vllm.multimodal.parse import MultiModalDataParser

    parser = MultiModalDataParser(target_sr=TARGET_RATE, target_channels=1, audio_resample_method="pyav")
    steps: dict[str, list[float]] = {"decode": [], "resample": [], "key": []}
    for _ in range(rounds):
        seconds, decoded = cpu(functools.partial(AudioMediaIO().load_bytes, data))
        steps["decode"].append(seconds)
        seconds, items = cpu(functools.partial(parser.parse_mm_data, {"audio": [decoded]}))
        steps["resample"].append(seconds)
        key = functools.partial(MultiModalHasher.hash_kwargs, "blake3", model_id="m", audio=items["audio"].get(0))
        seconds, _ = cpu(key)
        steps["key"].append(seconds)
    return {name: statistics.median(values) for name, values in steps.items()}


def run(out: harness.Report, rounds: int) -> None:
    out("## A re-sent audio clip in vLLM's API server, step by step (vLLM 0.33 in process)")
    out()
    try:
        # Written before vLLM is imported: libsndfile's encoder crashes once PyAV's libraries are loaded.
        clips = {(s, name): clip(s, *FORMATS[name]) for s in SECONDS for name in FORMATS}
        import vllm.multimodal.media.audio  # noqa: F401
    except ImportError as error:
        out(f"Needs vLLM (`.ci/install-vllm`), soundfile and av ({error}): skipped.")
        out()
        return
    rows = []
    for (seconds, name), data in clips.items():
        steps = measure(data, rounds)
        rows.append(
            [f"{seconds} s {name} ({len(data) / 1e6:.1f} MB)"]
            + [harness.fmt_time(steps[step]) for step in ("decode", "resample", "key")]
            + [harness.fmt_time(sum(steps.values()))]
        )
    out(harness.table(["clip", "decode", "resample to 16 kHz", "key", "all"], rows))
    out()
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    out(f"Medians of {rounds} rounds, CPU time of this thread; load average at the end: {load}.")
    out()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--output", help="also write the report (Markdown) to this file")
    args = parser.parse_args(argv)
    out = harness.Report()
    out(f"# A re-sent audio clip's cost in vLLM's API server ({harness.now()})")
    out()
    command = sys.argv if argv is None else ["benchmarks/bench_vllm_audio.py", *argv]
    out(harness.machine_table(command))
    out()
    run(out, args.rounds)
    if args.output:
        Path(args.output).write_text(out.text(), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
